"""``kafka-direct ingest``: the ingest job from the command line, with embedded services.

With ``--bootstrap-servers`` and ``--dsn`` (or ``KAFKA_DIRECT_PG_DSN``) it runs against your
Kafka and PostgreSQL until stopped (Ctrl-C stops it after the running batch). Without them
it starts the embedded broker and PostgreSQL (kept under ``--state-dir`` when given, so a
second run resumes), produces ``--sample-events`` into the topic and stops once the stream
is idle: the whole job on a fresh machine in one command. It ends with a summary: rows in
the table, duplicates, and the stored offsets against the log end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from kafka_direct.app.ingest_job import IngestOptions, check_table, run_ingest
from kafka_direct.topic_partition import TopicPartition

__all__ = ["add_arguments", "produce_samples", "run_ingest_command", "sample_events",
           "services"]

DEFAULT_TOPIC = "kafka-direct-events"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``ingest`` sub-command's options."""
    parser.add_argument("--bootstrap-servers", default=None,
                        help="Kafka brokers (default: start an embedded broker)")
    parser.add_argument("--topic", action="append", dest="topics", default=None,
                        help=f"topic to read (repeatable; default {DEFAULT_TOPIC} with the "
                             "embedded broker)")
    parser.add_argument("--pattern", default=None,
                        help="read every topic matching this regular expression instead")
    parser.add_argument("--group", default="kafka-direct-ingest",
                        help="consumer group the offsets are stored under")
    parser.add_argument("--dsn", default=os.environ.get("KAFKA_DIRECT_PG_DSN"),
                        help="libpq connection string (default: $KAFKA_DIRECT_PG_DSN, else an "
                             "embedded PostgreSQL)")
    parser.add_argument("--table", default="kafka_events", help="target table")
    parser.add_argument("--schema", default="public", help="schema of the tables")
    parser.add_argument("--batch-interval", type=float, default=2.0, help="seconds per batch")
    parser.add_argument("--max-rate-per-partition", type=int, default=0,
                        help="records per second per partition (0: no limit)")
    parser.add_argument("--backpressure", action="store_true", help="PID backpressure")
    parser.add_argument("--sink", choices=("transactional", "idempotent"),
                        default="transactional", help="how rows and offsets are written")
    parser.add_argument("--starting-offsets", default="earliest",
                        help='where partitions without stored offsets start: earliest, latest '
                             'or JSON {"topic": {"0": 42}}')
    parser.add_argument("--stop-after-idle", type=int, default=None,
                        help="stop after this many empty batches in a row (default: never, "
                             "1 with the embedded broker)")
    parser.add_argument("--sample-events", type=int, default=None,
                        help="produce this many sample events first (default 10000 with the "
                             "embedded broker, else 0)")
    parser.add_argument("--partitions", type=int, default=3,
                        help="partitions of a topic the job creates")
    parser.add_argument("--state-dir", default=None,
                        help="keep the embedded services' data here (a rerun resumes)")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--ui-port", type=int, default=None,
                        help="serve the streaming statistics page and /metrics on 127.0.0.1 "
                             "at this port (0: any free port)")


def sample_events(count: int, start: int = 0) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of ``count`` JSON sample events, ids from ``start``."""
    now = int(time.time() * 1000)
    for i in range(start, start + count):
        user = f"user-{i % 97}"
        yield user.encode(), json.dumps({"id": i, "user": user, "amount": (i * 37) % 1000,
                                         "ts": now + i}).encode()


def produce_samples(kafka: Any, topic: str, count: int, out: TextIO) -> int:
    """Produce ``count`` sample events into ``topic`` with a progress bar; returns how many."""
    from kafka_direct.app.progress import ProgressBar

    produced = 0
    step = max(1, count // 20)
    with ProgressBar(count, "producing", out) as bar:
        for start in range(0, count, step):
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
    from kafka_direct.testing.kafka import EmbeddedKafka, ExternalKafka
    from kafka_direct.testing.postgres import EmbeddedPostgres

    state = Path(stateDir) if stateDir else None
    with contextlib.ExitStack() as stack:
        if bootstrapServers:
            kafka: Any = ExternalKafka(bootstrapServers).start()
        else:
            kafka = stack.enter_context(EmbeddedKafka(
                data_dir=state / "kafka" if state else None))
        if dsn is None:
            dsn = stack.enter_context(EmbeddedPostgres(
                data_dir=state / "postgres" if state else None)).dsn
        yield kafka, dsn


def run_ingest_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``kafka-direct ingest``; returns the exit code."""
    from kafka_direct.errors import KafkaDirectError

    embedded = not args.bootstrap_servers
    topics = tuple(args.topics or (() if args.pattern else (DEFAULT_TOPIC,)))
    options = IngestOptions(
        topics=topics, pattern=args.pattern, group=args.group, table=args.table,
        schema=args.schema, batchInterval=args.batch_interval,
        maxRatePerPartition=args.max_rate_per_partition, backpressure=args.backpressure,
        sink=args.sink, startingOffsets=args.starting_offsets,
        stopAfterIdleBatches=(args.stop_after_idle if args.stop_after_idle is not None
                              else 1 if embedded else 0), master=args.master,
        uiPort=args.ui_port)
    samples = args.sample_events if args.sample_events is not None else (
        10_000 if embedded else 0)
    with services(args.bootstrap_servers, args.dsn, args.state_dir) as (kafka, dsn):
        out.write(f"kafka: {kafka.bootstrap_servers}\n")
        existing = kafka.admin().list_topics(timeout=10).topics
        for topic in topics:
            if topic not in existing:
                kafka.create_topic(topic, args.partitions)
        if samples:
            produced = produce_samples(kafka, topics[0], samples, out)
            out.write(f"produced {produced} sample events into {topics[0]}\n")
        out.flush()
        try:
            result = run_ingest(options, kafka.bootstrap_servers, dsn, out)
        except KafkaDirectError as error:
            out.write(f"kafka-direct ingest stopped: {type(error).__name__}: {error}\n"
                      "run it again to resume from the stored offsets\n")
            return 1
        ends: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in result.offsets} | set(topics)):
            count = len(kafka.admin().list_topics(topic, timeout=10).topics[topic].partitions)
            for p, (_, high) in kafka.end_offsets(topic, range(count)).items():
                ends[TopicPartition(topic, p)] = high
        check = check_table(dsn, options.schema, options.table, options.group, ends)
        out.write(f"{result.batches} batches, {result.records} records read, "
                  f"{result.rowsWritten} rows written\n")
        out.write(f"table {options.schema}.{options.table}: {check.rows} rows, "
                  f"{check.duplicates} duplicates\n")
        behind = {str(tp): (check.stored.get(tp), end) for tp, end in sorted(ends.items())
                  if check.stored.get(tp) != end}
        out.write("stored offsets == log end\n" if check.caughtUp else
                  f"stored offsets behind the log end (stored, end): {behind}\n")
    return 0
