"""Ctrl-C and SIGTERM stop a real `kafka-direct ingest` after the running batch.

The job runs in a process of its own, rate-limited so the stream spans many batches. Mid-
stream it gets SIGINT the way a terminal sends it (to its whole process group), then, in a
second run, SIGTERM the way ``kill`` sends it (to the process). After each stop PostgreSQL
must hold exactly the records below the stored offsets: every one of them once, none beyond.
A third run then reads the rest: every record exactly once in the end. (No signal reaches
that one: it runs in the job host, tests/app/job_host.py, and spares a JVM's start.)
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

from kafka_direct.app.ingest_table import check_table
from kafka_direct.topic_partition import TopicPartition

RECORDS = 2400
PARTITIONS = 2


class _Job:
    """`kafka-direct ingest` in its own session, its output collected line by line."""

    def __init__(self, argv):
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "kafka_direct.app.cli", "ingest", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def written_batches(self):
        return sum(1 for line in list(self.lines)
                   if line.startswith("batch ") and not re.search(r"written 0\b", line))

    def wait_for_batches(self, count, timeout=180):
        deadline = time.monotonic() + timeout
        while self.written_batches() < count:
            assert self.process.poll() is None, "".join(self.lines)[-3000:]
            assert time.monotonic() < deadline, "".join(self.lines)[-3000:]
            time.sleep(0.05)

    def finish(self, timeout=120):
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code, "".join(self.lines)


def _nothing_started_after_the_stop(out, name):
    """After the signal's log line: at most the running batch wrote; queued ones did not run."""
    after = out[out.index(f"{name}: stopping after the running batch"):]
    batches = [line for line in after.splitlines() if line.startswith("batch ")]
    wrote = [i for i, line in enumerate(batches) if "not run: stopping" not in line]
    # The running batch, and one that ended just before the signal but logged after it.
    assert len(wrote) <= 2 and wrote == list(range(len(wrote))), batches


def _table_matches_stored_offsets(dsn, schema, group, topic):
    """Rows per partition are exactly the offsets [0, stored); returns the stored offsets."""
    partitions = {TopicPartition(topic, p): 0 for p in range(PARTITIONS)}
    return table_matches(dsn, schema, topic,
                         check_table(dsn, schema, "kafka_events", group, partitions).stored)


def table_matches(dsn, schema, topic, stored):
    """Rows per partition are exactly the offsets [0, stored); returns them by partition."""
    import psycopg2

    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(f'SELECT kafka_partition, count(*), count(DISTINCT kafka_offset), '
                           f'min(kafka_offset), max(kafka_offset) FROM "{schema}".kafka_events '
                           f'WHERE topic = %s GROUP BY kafka_partition', (topic,))
            rows = {p: (n, distinct, low, high) for p, n, distinct, low, high in cursor}
    finally:
        connection.close()
    for p in range(PARTITIONS):
        end = stored.get(TopicPartition(topic, p), 0)
        expected = (end, end, 0, end - 1) if end else None
        assert rows.get(p) == expected, (p, rows, stored)
    return {p: stored.get(TopicPartition(topic, p), 0) for p in range(PARTITIONS)}


def test_sigint_and_sigterm_stop_after_the_running_batch_without_loss_or_duplicate(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    topic = kafka_topic(partitions=PARTITIONS)
    for p in range(PARTITIONS):
        kafka.produce(topic, [f"event-{p}-{i}".encode() for i in range(RECORDS // PARTITIONS)],
                      partition=p)
    argv = ["--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
            "--topic", topic, "--schema", pg_schema, "--group", "signals",
            "--batch-interval", "0.5", "--max-rate-per-partition", "100"]

    # A terminal's Ctrl-C reaches the whole foreground process group.
    first = _Job(argv)
    first.wait_for_batches(2)
    os.killpg(first.process.pid, signal.SIGINT)
    code, out = first.finish()
    assert code == 0, out[-3000:]
    assert "stopped on SIGINT after the running batch" in out, out[-3000:]
    assert "Traceback" not in out
    _nothing_started_after_the_stop(out, "SIGINT")
    afterInt = _table_matches_stored_offsets(postgres.dsn, pg_schema, "signals", topic)
    assert 0 < sum(afterInt.values()) < RECORDS, afterInt  # stopped mid-stream

    # kill (a service manager's stop) sends SIGTERM to the process.
    second = _Job(argv)
    second.wait_for_batches(2)
    second.process.send_signal(signal.SIGTERM)
    code, out = second.finish()
    assert code == 0, out[-3000:]
    assert "stopped on SIGTERM after the running batch" in out, out[-3000:]
    _nothing_started_after_the_stop(out, "SIGTERM")
    afterTerm = _table_matches_stored_offsets(postgres.dsn, pg_schema, "signals", topic)
    assert sum(afterInt.values()) < sum(afterTerm.values()) < RECORDS, (afterInt, afterTerm)

    # The rest, once: nothing was lost or written twice by the two stops.
    last = job_host.run(["ingest", *argv[:-2], "--stop-after-idle", "1"])
    code, out = last.returncode, last.stdout + last.stderr
    assert code == 0, out[-3000:]
    assert f"table {pg_schema}.kafka_events: {RECORDS} rows, 0 duplicates" in out, out[-3000:]
    assert "stored offsets == log end" in out
    assert sum(_table_matches_stored_offsets(postgres.dsn, pg_schema, "signals",
                                             topic).values()) == RECORDS
