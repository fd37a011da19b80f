"""``kafka-direct ingest``: the ingest job from the command line, on real or embedded services.

With ``--bootstrap-servers`` and ``--dsn`` (or ``KAFKA_DIRECT_PG_DSN``, ``--dsn-file``) it
runs against your Kafka and PostgreSQL until stopped; it never creates a topic there unless
told to (``--create-topics``), so a mistyped name fails before anything is written. Without
them it starts the embedded broker and PostgreSQL (kept under ``--state-dir`` when given,
so a second run resumes), produces ``--sample-events`` into the topic and stops once the
stream is idle: the whole job on a fresh machine in one command. The first Ctrl-C or
SIGTERM stops it after the running batch, a second one at once. It ends with a summary:
rows in the table, duplicates, and the stored offsets against the log end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from kafka_direct.app.ingest_arguments import (
    DEFAULT_TOPIC,
    IngestSettings,
    add_arguments,
    describe,
    settings_from_args,
)
from kafka_direct.app.ingest_job import run_ingest
from kafka_direct.app.ingest_options import IngestResult, spark_context_arguments
from kafka_direct.app.ingest_table import check_table
from kafka_direct.app.interrupts import TwoStageInterrupt
from kafka_direct.app.kafka_cluster import KafkaCluster
from kafka_direct.app.stops import exit_code, stop_block
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.routing import TableRoute
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["DEFAULT_TOPIC", "add_arguments", "produce_samples", "run_ingest_command",
           "sample_events", "services", "stop_dead_letters"]

logger = logging.getLogger(__name__)


def sample_events(count: int, start: int = 0) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of ``count`` JSON sample events, ids from ``start``."""
    now = int(time.time() * 1000)
    for i in range(start, start + count):
        user = f"user-{i % 97}"
        yield user.encode(), json.dumps({"id": i, "user": user, "amount": (i * 37) % 1000,
                                         "ts": now + i}).encode()


def produce_samples(kafka: Any, topic: str, count: int, out: TextIO,
                    stopRequested: threading.Event | None = None) -> int:
    """Produce ``count`` sample events into ``topic`` with a progress bar; returns how many.

    Stops early, between chunks, once ``stopRequested`` is set.
    """
    from kafka_direct.app.progress import ProgressBar

    produced = 0
    step = max(1, count // 20)
    with ProgressBar(count, "producing", out) as bar:
        for start in range(0, count, step):
            if stopRequested is not None and stopRequested.is_set():
                break
            keys, values = zip(*sample_events(min(step, count - start), start), strict=True)
            produced += kafka.produce(topic, values, keys=keys)
            bar.update(produced)
    return produced


@contextlib.contextmanager
def services(bootstrapServers: str | None, dsn: str | None,
             stateDir: str | Path | None = None) -> Iterator[tuple[Any, str]]:
    """Yield (Kafka service, DSN): the given ones, or embedded ones started for the block.

    Args:
        bootstrapServers: An existing broker, or None to start the embedded one.
        dsn: An existing PostgreSQL, or None to start the embedded one.
        stateDir: Keep the embedded services' data here (None: temporary).
    """
    from kafka_direct.testing.broker_choice import local_kafka
    from kafka_direct.testing.kafka import ExternalKafka
    from kafka_direct.testing.postgres import EmbeddedPostgres

    state = Path(stateDir) if stateDir else None
    with contextlib.ExitStack() as stack:
        if bootstrapServers:
            kafka: Any = ExternalKafka(bootstrapServers).start()
        else:
            kafka = stack.enter_context(local_kafka(
                data_dir=state / "kafka" if state else None))
        if dsn is None:
            dsn = stack.enter_context(EmbeddedPostgres(
                data_dir=state / "postgres" if state else None)).dsn
        yield kafka, dsn


def _embedded(settings: IngestSettings, stack: contextlib.ExitStack) -> tuple[KafkaCluster, str]:
    """The cluster and DSN to use, starting the embedded services the settings lack."""
    from kafka_direct.testing.broker_choice import local_kafka
    from kafka_direct.testing.postgres import EmbeddedPostgres

    state = settings.stateDir
    bootstrap = settings.bootstrapServers
    if bootstrap is None:
        bootstrap = stack.enter_context(local_kafka(
            data_dir=state / "kafka" if state else None)).bootstrap_servers
    dsn = settings.dsn
    if dsn is None:
        dsn = stack.enter_context(EmbeddedPostgres(
            data_dir=state / "postgres" if state else None)).dsn
    return KafkaCluster({**settings.kafkaParams, "bootstrap.servers": bootstrap}), dsn


def stop_dead_letters(records: TypedOptions | None, table: str, error: BaseException
                      ) -> str | None:
    """The dead-letter table a stop's block names (None: the job keeps no dead letters).

    With a table per topic (``--table '{topic}'``), the stopping record's topic's own, or
    None when the error names no topic.
    """
    if records is None:
        return None
    route = TableRoute(table)
    if not route.perTopic:
        return records.dead_letter_table(table)
    topic = getattr(error, "topic", None)
    return route.dead_letter_table(records, topic) if isinstance(topic, str) else None


def _check_starting_partitions(options: Any, cluster: KafkaCluster) -> None:
    """Refuse starting offsets for partitions their (existing) topic does not have."""
    _, explicit = options.starting
    if not explicit:
        return
    counts = cluster.topics()
    missing = sorted(str(tp) for tp in explicit
                     if tp.topic in counts and tp.partition >= counts[tp.topic])
    if missing:
        raise ConfigurationError(
            f"--starting-offsets names partitions that do not exist: {missing} (partitions "
            "are numbered from 0 to the topic's partition count - 1)")


def _prepare_topics(settings: IngestSettings, cluster: KafkaCluster, err: TextIO) -> None:
    """Create, or insist on, the topics; warn when a pattern matches none yet."""
    options = settings.options
    if options.topics:
        if settings.createTopics:
            replication = 1 if settings.bootstrapServers is None else -1
            created = cluster.create_topics(options.topics, settings.partitions, replication)
            for topic in created:
                err.write(f"kafka-direct ingest: created topic {topic} "
                          f"({settings.partitions} partitions)\n")
        else:
            cluster.require_topics(options.topics)
        _check_starting_partitions(options, cluster)
        return
    _check_starting_partitions(options, cluster)
    pattern = re.compile(options.pattern or "")
    if not any(pattern.fullmatch(t) for t in cluster.topics() if not t.startswith("__")):
        err.write(f"kafka-direct ingest: warning: no topic matches the pattern "
                  f"{options.pattern!r} yet; the job reads matching topics once they exist "
                  "(batches until then read nothing and count as idle)\n")


def _summary(settings: IngestSettings, cluster: KafkaCluster, dsn: str, result: Any,
             out: TextIO) -> None:
    options = settings.options
    counts = cluster.topics()
    ends: dict[TopicPartition, int] = {}
    for topic in sorted({tp.topic for tp in result.offsets} | set(options.topics)):
        for p, (_, high) in cluster.end_offsets(topic, range(counts.get(topic, 0))).items():
            ends[TopicPartition(topic, p)] = high
    route = TableRoute(options.table)
    tables = sorted(set(route.tables({tp.topic for tp in ends}).values())) \
        if route.perTopic else [options.table]
    out.write(f"{result.batches} batches, {result.records} records read, "
              f"{result.rowsWritten} rows written\n")
    check = None
    for table in tables:
        if route.perTopic and not _table_exists(dsn, options.schema, table):
            continue  # a pattern's topic with no record yet: no table yet
        check = check_table(dsn, options.schema, table, options.group, ends,
                            stored=result.offsets if options.api == "structured" else None)
        out.write(f"table {options.schema}.{table}: {check.rows} rows, "
                  f"{check.duplicates} duplicates\n")
    stored = check.stored if check is not None else (
        result.offsets if options.api == "structured" else _stored(dsn, options, ends))
    caughtUp = stored == ends
    behind = {str(tp): (stored.get(tp), end) for tp, end in sorted(ends.items())
              if stored.get(tp) != end}
    out.write("stored offsets == log end\n" if caughtUp else
              f"stored offsets behind the log end (stored, end): {behind}\n")


def _table_exists(dsn: str, schema: str, table: str) -> bool:
    from kafka_direct.postgres.connection import connect

    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(format('%%I.%%I', %s, %s)) IS NOT NULL",
                           (schema, table))
            return bool(cursor.fetchone()[0])
    finally:
        connection.close()


def _stored(dsn: str, options: Any, ends: Mapping[TopicPartition, int]
            ) -> dict[TopicPartition, int]:
    from offsets.postgres_offset_store import PostgresOffsetStore

    return dict(PostgresOffsetStore(dsn, schema=options.schema).load(
        options.group, {tp.topic for tp in ends}))


#: How long the command waits, before it returns, for its JVM to exit (then it goes on: the
#: JVM's input is closed, so it ends by itself).
_JVM_EXIT_WAIT_S = 10.0


def _end_jvm(stack: contextlib.ExitStack) -> None:
    """End the job's JVM now that its context has stopped; waited for at ``stack``'s end.

    Else it would exit only once this process does, and only then run Spark's shutdown
    hooks (its temporary folders removed, 0.1-0.5 s): now that happens beside the summary.
    """
    from kafka_direct.runtime.spark import end_jvm

    process = end_jvm()
    if process is not None:
        stack.callback(_await_exit, process)


def _await_exit(process: Any) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=_JVM_EXIT_WAIT_S)


def run_ingest_command(args: argparse.Namespace, out: TextIO, err: TextIO | None = None
                       ) -> int:
    """Run ``kafka-direct ingest``; returns the exit code.

    Every mistake that needs no service is found before anything starts; then the given
    database and cluster are checked, then embedded services start for what was not given.

    Raises:
        KafkaDirectError: A mistake in the options (ConfigurationError), an unreachable
            service or a missing topic, found before the stream started.
        KeyboardInterrupt: A second signal stopped the job at once.
    """
    from kafka_direct.app.dsn_check import check_dsn
    from kafka_direct.errors import KafkaDirectError

    err = err or sys.stderr
    settings = settings_from_args(args)
    logger.info("ingest settings: %s", describe(settings))
    options = settings.options
    with TwoStageInterrupt() as signals, contextlib.ExitStack() as stack:
        # Spark's JVM starts meanwhile: the services are checked (or started) and the
        # topics prepared in the seconds it takes.
        from kafka_direct.runtime.spark import launch_ahead

        stack.enter_context(launch_ahead(**spark_context_arguments(options, True)))
        if settings.dsn is not None:
            check_dsn(settings.dsn, settings.dsnSource)
        if settings.bootstrapServers is not None:
            given = KafkaCluster({**settings.kafkaParams,
                                  "bootstrap.servers": settings.bootstrapServers})
            given.check()
            _prepare_topics(settings, given, err)  # before any embedded service starts
        cluster, dsn = _embedded(settings, stack)
        out.write(f"kafka: {cluster.bootstrap_servers}\n")
        if settings.bootstrapServers is None:
            _prepare_topics(settings, cluster, err)
        if settings.sampleEvents:
            produced = produce_samples(cluster, options.topics[0], settings.sampleEvents, out,
                                       signals.requested)
            out.write(f"produced {produced} sample events into {options.topics[0]}\n")
        out.flush()
        result = IngestResult()
        try:
            if options.api == "structured":
                from kafka_direct.app.structured_ingest import run_structured_ingest

                run_structured_ingest(
                    options, cluster.bootstrap_servers, dsn, out,
                    kafkaParams=settings.kafkaParams, signals=signals, result=result,
                    checkpointDir=settings.checkpointDir, records=settings.records)
            else:
                run_ingest(options, cluster.bootstrap_servers, dsn, out,
                           kafkaParams=settings.kafkaParams, signals=signals, result=result,
                           records=settings.records)
        except KafkaDirectError as error:
            if isinstance(error, ConfigurationError) and not result.batches:
                raise  # a mistake in the options, found before any batch ran: exit 2
            logger.info("ingest stopped", exc_info=True)  # the details, with --verbose
            out.flush()
            deadLetters = stop_dead_letters(settings.records, options.table, error)
            err.write(stop_block("ingest", error, deadLetters and
                                 f"{options.schema}.{deadLetters}"))
            err.flush()
            return exit_code(error)
        finally:
            _end_jvm(stack)
        if signals.signal_name is not None:
            out.write(f"stopped on {signals.signal_name} after the running batch"
                      + (f"; {result.batchesNotRun} queued batch(es) not run, the next run "
                         "reads them" if result.batchesNotRun else "") + "\n")
        _summary(settings, cluster, dsn, result, out)
    return 0
