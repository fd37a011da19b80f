"""The structured job's processes (JVM, fork server, Python workers) end with it."""

import os
import signal
import time
import uuid

import pytest

from tests.app.test_ingest_signals import _Job


def _marked(mark):
    """Processes whose environment holds ``mark`` (the job's and every one it started)."""
    found = []
    needle = f"KAFKA_DIRECT_TEST_MARK={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                if stat.read().split(") ")[1].startswith("Z"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found.append((int(entry), cmdline.read().replace(b"\0", b" ")[:160]))
        except OSError:
            continue
    return found


def _none_left(mark, seconds=30):
    deadline = time.monotonic() + seconds
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _marked(mark)


@pytest.mark.slow
@pytest.mark.parametrize("sent", [signal.SIGKILL, signal.SIGTERM])
def test_no_process_of_the_structured_job_outlives_it(kafka, kafka_topic, postgres, pg_schema,
                                                      sent, monkeypatch):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        kafka.produce(topic, [f"e-{p}-{i}".encode() for i in range(2000)], partition=p)
    mark = uuid.uuid4().hex
    monkeypatch.setenv("KAFKA_DIRECT_TEST_MARK", mark)
    job = _Job(["--api", "structured", "--bootstrap-servers", kafka.bootstrap_servers,
                "--dsn", postgres.dsn, "--topic", topic, "--schema", pg_schema,
                "--group", "leftovers", "--batch-interval", "0.5",
                "--max-rate-per-partition", "100"])
    try:
        job.wait_for_batches(2)
        # The driver, its JVM, the fork server and Spark's Python processes forked from it.
        running = _marked(mark)
        assert any(b"fork_server" in command for _, command in running), running
        assert len(running) > 3, running
        job.process.send_signal(sent)
        job.finish()
        assert _none_left(mark) == []
    finally:
        for pid, _ in _marked(mark):
            os.kill(pid, signal.SIGKILL)
