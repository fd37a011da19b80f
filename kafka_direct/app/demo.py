"""``kafka-direct demo``: exactly-once ingestion, shown under a hard crash.

1. Produce sample events into a topic (the embedded broker unless ``--bootstrap-servers``).
2. Run the ingest job (``kafka-direct ingest``) in a process of its own, its per-batch
   progress lines shown as they come.
3. Kill it with SIGKILL at a random moment — in the middle of reading, writing or
   committing — and start it again; it resumes from the offsets stored with the rows.
4. Check the table against the log and print a verified summary: rows == events produced,
   no duplicate, every event present, stored offsets == log end.

With the transactional sink the demo's table has no unique key on purpose: only the
offsets committed in the rows' transactions keep records from being written twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, TextIO

from kafka_direct.app.ingest_arguments import DSN_ENV
from kafka_direct.app.ingest_command import produce_samples, services
from kafka_direct.app.ingest_table import check_table, ensure_table
from kafka_direct.errors import ConfigurationError, ServiceError
from kafka_direct.redaction import redact_text
from kafka_direct.topic_partition import TopicPartition

__all__ = ["DemoOptions", "DemoResult", "run_demo", "split_stop_block"]


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What the demo does.

    Attributes:
        events: How many events to produce.
        partitions: Partitions of the demo topic.
        topic: Topic name.
        batchInterval: Seconds per batch of the ingest job.
        maxRatePerPartition: Records per second per partition (spreads the events over
            several batches, so the kill lands mid-stream).
        sink: ``transactional`` or ``idempotent``.
        kills: How many times the job is killed before it may finish.
        seed: Seed of the random kill moments (None: different every run).
        bootstrapServers: An existing broker; None starts the embedded one.
        dsn: An existing PostgreSQL; None starts the embedded one (never shown by repr).
        master: Spark master of the ingest job.
        recreateTopic: Delete and recreate ``topic`` when it exists on a cluster the demo
            did not start (refused otherwise; the embedded broker's topic always is).
    """

    events: int = 20_000
    partitions: int = 3
    topic: str = "kafka-direct-demo"
    batchInterval: float = 1.0
    maxRatePerPartition: int = 1_000
    sink: str = "transactional"
    kills: int = 1
    seed: int | None = None
    bootstrapServers: str | None = None
    dsn: str | None = field(default=None, repr=False)
    master: str = "local[2]"
    recreateTopic: bool = False

    def __repr__(self) -> str:
        from kafka_direct.app.dsn_check import scrub

        shown = {f.name: repr(getattr(self, f.name)) for f in fields(self)}
        shown["dsn"] = "None" if self.dsn is None else repr(scrub(self.dsn, self.dsn))
        return f"DemoOptions({', '.join(f'{k}={v}' for k, v in shown.items())})"


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo verified."""

    produced: int
    rows: int
    distinctEvents: int
    duplicates: int
    kills: int
    caughtUp: bool
    #: The exit code of a run of the job that failed (0: none did).
    jobExitCode: int = 0

    @property
    def ok(self) -> bool:
        """Every event exactly once, and the offsets at the log end."""
        return (self.rows == self.produced == self.distinctEvents and not self.duplicates
                and self.caughtUp)


def _prepare_table(dsn: str, table: str, sink: str) -> None:
    """A fresh table and no stored offsets for the demo's group (named after the table)."""
    import psycopg2
    from psycopg2 import sql

    from offsets.postgres_offset_store import PostgresOffsetStore

    store = PostgresOffsetStore(dsn)
    store.ensure_schema()
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
            cursor.execute("DELETE FROM kafka_offsets WHERE group_id = %s", (table,))
            if sink == "transactional":  # no key: only the offsets prevent duplicates
                cursor.execute(sql.SQL("CREATE TABLE {} (topic text, kafka_partition integer, "
                                       "kafka_offset bigint, key bytea, value bytea)").format(
                    sql.Identifier(table)))
    finally:
        connection.close()
    if sink != "transactional":
        ensure_table(dsn, "public", table)


def _distinct_events(dsn: str, table: str) -> int:
    import psycopg2
    from psycopg2 import sql

    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql.SQL("SELECT count(DISTINCT convert_from(value, 'UTF8')::json "
                                   "->> 'id') FROM {}").format(sql.Identifier(table)))
            return int(cursor.fetchone()[0])
    finally:
        connection.close()


def _recreate_topic(kafka: Any, topic: str, partitions: int) -> None:
    """Delete ``topic`` if it exists (and wait until it is gone), then create it afresh."""
    from kafka_direct.testing.process import wait_for

    admin = kafka.admin()  # alive until the deletion's answer arrives: librdkafka needs it
    if topic in admin.list_topics(timeout=10).topics:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
        if not wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 30):
            raise ServiceError(f"topic {topic} was deleted but is still listed after 30 s",
                               service="kafka", log_tail="")
    deadline = time.monotonic() + 30
    while True:
        try:
            kafka.create_topic(topic, partitions)
            return
        except Exception:
            # A broker may still be finishing the deletion: creating fails for a moment.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class _Job:
    """One run of the ingest job in a child process, its lines copied to ``out``."""

    def __init__(self, argv: list[str], out: TextIO, label: str, dsn: str) -> None:
        # The DSN goes by the environment: a command line is visible to every user.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", DSN_ENV: dsn}
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        self.batches = threading.Event()
        self.tail: list[str] = []
        self._reader = threading.Thread(target=self._copy, args=(out, label), daemon=True)
        self._reader.start()

    def _copy(self, out: TextIO, label: str) -> None:
        for line in self.process.stdout or ():
            self.tail = ([*self.tail, line])[-40:]
            if line.startswith("batch "):
                self.batches.set()
                out.write(f"  {label} | {line}")
                out.flush()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float | None = None) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code


def split_stop_block(lines: list[str]) -> tuple[list[str], list[str]]:
    """A failed run's last lines: those before its stop block, and the block.

    The block (:func:`kafka_direct.app.stops.stop_block`) starts at the last line the job
    starts with ``kafka-direct ingest stopped:``; without one, every line comes before.
    """
    starts = [i for i, line in enumerate(lines)
              if line.startswith("kafka-direct ingest stopped: ")]
    if not starts:
        return list(lines), []
    return list(lines[:starts[-1]]), list(lines[starts[-1]:])


def run_demo(options: DemoOptions, out: TextIO, err: TextIO | None = None) -> DemoResult:
    """Run the demo, writing its report to ``out``.

    A run of the job that fails has its stop block written to ``err`` (None: stderr), and
    its exit code in the result.
    """
    chooser = random.Random(options.seed)
    with services(options.bootstrapServers, options.dsn) as (kafka, dsn):
        out.write(f"kafka: {kafka.bootstrap_servers}\n")
        if options.bootstrapServers and not options.recreateTopic and \
                options.topic in kafka.admin().list_topics(timeout=10).topics:
            raise ConfigurationError(
                f"topic {options.topic!r} exists on {options.bootstrapServers}; the demo "
                "deletes and recreates its topic: pass --recreate-topic to allow that, or "
                "choose another --topic")
        _recreate_topic(kafka, options.topic, options.partitions)
        _prepare_table(dsn, "demo_events", options.sink)
        produced = produce_samples(kafka, options.topic, options.events, out)
        out.write(f"produced {produced} events into {options.topic} "
                  f"({options.partitions} partitions)\n")
        argv = [sys.executable, "-m", "kafka_direct.app.cli", "ingest",
                "--bootstrap-servers", kafka.bootstrap_servers,
                "--topic", options.topic, "--group", "demo_events", "--table", "demo_events",
                "--batch-interval", str(options.batchInterval),
                "--max-rate-per-partition", str(options.maxRatePerPartition),
                "--sink", options.sink, "--stop-after-idle", "1", "--master", options.master]
        kills = 0
        run = 1
        while True:
            out.write(f"starting the ingest job (run {run})\n")
            job = _Job(argv, out, f"run {run}", dsn)
            if kills < options.kills:
                job.batches.wait(300)
                # Somewhere in the rest of the ingestion: reading, writing or committing.
                expected = options.events / (options.partitions * options.maxRatePerPartition)
                moment = chooser.uniform(0.0, max(0.3, 0.8 * (expected - options.batchInterval)))
                try:
                    code = job.wait(moment)
                except subprocess.TimeoutExpired:
                    job.kill()
                    kills += 1
                    rows = check_table(dsn, "public", "demo_events", "demo_events", {}).rows
                    out.write(f"killed the ingest job with SIGKILL {moment:.2f} s after its "
                              f"first batch, with {rows} of {produced} rows written\n")
                    run += 1
                    continue
            else:
                code = job.wait()
            if code != 0:
                before, block = split_stop_block(job.tail)
                out.write("".join(redact_text(line) for line in before))
                out.write(f"FAILED: the ingest job exited with code {code}\n")
                out.flush()
                (err or sys.stderr).write("".join(redact_text(line) for line in block))
                return DemoResult(produced, 0, 0, 0, kills, False, jobExitCode=code)
            break
        partitions = kafka.end_offsets(options.topic, range(options.partitions))
        ends = {TopicPartition(options.topic, p): high for p, (_, high) in partitions.items()}
        check = check_table(dsn, "public", "demo_events", "demo_events", ends)
        distinct = _distinct_events(dsn, "demo_events")
        result = DemoResult(produced, check.rows, distinct, check.duplicates, kills,
                            check.caughtUp)
        out.write(f"\nsummary: {produced} events produced; the job was killed {kills} "
                  f"time(s) and restarted\n")
        out.write(f"  table demo_events: {check.rows} rows, {distinct} distinct events, "
                  f"{check.duplicates} duplicates, {produced - distinct} missing\n")
        out.write("  stored offsets == log end for every partition\n" if check.caughtUp else
                  f"  stored offsets {json.dumps({str(k): v for k, v in check.stored.items()})}"
                  f" != log end\n")
        out.write("OK: every event exactly once\n" if result.ok else "FAILED\n")
        return result
