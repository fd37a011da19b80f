"""`kafka-direct ingest --api structured --available-now` against real services.

Under ``Trigger.AvailableNow`` the query reads what the topics held when it started and then
ends by itself. Whatever stops it (a signal, SIGKILL, the end), every record produced
before a run's start is in the table once after the runs that follow; records produced
after a run's start are left for the next one.
"""

import signal
import sys
import time

import pytest

from kafka_direct.app.structured_ingest import stored_offsets
from tests.app.test_ingest_signals import _Job, table_matches

PARTITIONS = 2
PER_PARTITION = 1200


def _argv(kafka, postgres, topic, schema, group, *extra):
    return ["--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
            "--topic", topic, "--schema", schema, "--group", group, "--api", "structured",
            "--available-now", "--batch-interval", "0.5", "--max-rate-per-partition", "100",
            "--first-batch-records", "0", *extra]


def _table_matches_stored_offsets(dsn, schema, group, topic):
    """Rows per partition are exactly the offsets [0, stored) the query's link stored."""
    return table_matches(dsn, schema, topic, stored_offsets(dsn, schema, group))


def _fill(kafka, topic, start=0, count=PER_PARTITION):
    for p in range(PARTITIONS):
        kafka.produce(topic, [f"e-{p}-{i}".encode() for i in range(start, start + count)],
                      partition=p)


def test_sigterm_under_available_now_stops_after_the_running_batch(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # 24 batches of 100 records: a stop asked after the second must not wait for the rest.
    topic = kafka_topic(partitions=PARTITIONS)
    _fill(kafka, topic)
    argv = _argv(kafka, postgres, topic, pg_schema, "now-term")
    job = _Job(argv)
    job.wait_for_batches(2)
    job.process.send_signal(signal.SIGTERM)
    code, out = job.finish(timeout=300)
    assert code == 0, out[-3000:]
    assert "stopped on SIGTERM after the running batch" in out, out[-3000:]
    # The query is stopped between triggers, its source paused: nothing was interrupted
    # (a stop in the next batch's planning left the source's process a broken pipe).
    assert not any(word in out for word in ("Traceback", "EOFError", "BrokenPipeError",
                                            "Aborting commit")), out[-3000:]
    # The job looks at its query every 0.2 s: a batch or two of 100 records may end
    # before the look that sees the stop; the rest of the 24 must not run.
    after = out[out.index("SIGTERM: stopping after the running batch"):]
    assert len([line for line in after.splitlines() if line.startswith("batch ")]) <= 4, \
        out[-3000:]
    stopped = _table_matches_stored_offsets(postgres.dsn, pg_schema, "now-term", topic)
    assert 0 < sum(stopped.values()) < PARTITIONS * PER_PARTITION, stopped
    # The rest, once.
    done = job_host.run(["ingest", *argv])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"table {pg_schema}.kafka_events: {PARTITIONS * PER_PARTITION} rows, 0 duplicates" \
        in done.stdout, done.stdout[-3000:]


@pytest.mark.slow  # a fault run: kills a real process (docs/testing.md)
@pytest.mark.parametrize("checkpoint", [False, True])
def test_sigkill_mid_run_and_a_rerun_under_available_now_lose_and_repeat_nothing(
        kafka, kafka_topic, postgres, pg_schema, job_host, scratch, checkpoint):
    topic = kafka_topic(partitions=PARTITIONS)
    _fill(kafka, topic)
    extra = ["--checkpoint-dir", str(scratch / "checkpoint")] if checkpoint else []
    argv = _argv(kafka, postgres, topic, pg_schema, "now-kill", *extra)
    job = _Job(argv)
    job.wait_for_batches(3)
    job.process.send_signal(signal.SIGKILL)
    job.finish(timeout=120)
    # Rows a killed batch's tasks wrote may be in the table beyond the stored offsets (the
    # sink's claims): the rerun settles them.
    killed = stored_offsets(postgres.dsn, pg_schema, "now-kill")
    assert 0 < sum(killed.values()) < PARTITIONS * PER_PARTITION, killed
    # Produced after the kill, before the rerun starts: the rerun reads these too.
    _fill(kafka, topic, PER_PARTITION, 100)
    done = job_host.run(["ingest", *argv])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    total = PARTITIONS * (PER_PARTITION + 100)
    assert f"table {pg_schema}.kafka_events: {total} rows, 0 duplicates" in done.stdout, \
        done.stdout[-3000:]
    assert "stored offsets == log end" in done.stdout
    assert sum(_table_matches_stored_offsets(postgres.dsn, pg_schema, "now-kill",
                                             topic).values()) == total


def test_records_produced_after_the_start_wait_for_the_next_run(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # 12 batches of 100 records: the later records come while ten of them are still to run.
    before = PER_PARTITION // 2
    topic = kafka_topic(partitions=PARTITIONS)
    _fill(kafka, topic, count=before)
    argv = _argv(kafka, postgres, topic, pg_schema, "now-later")
    job = _Job(argv)
    job.wait_for_batches(2)
    _fill(kafka, topic, before, 300)  # after the start: not this run's
    code, out = job.finish(timeout=300)
    assert code == 0, out[-3000:]
    assert f"table {pg_schema}.kafka_events: {PARTITIONS * before} rows, 0 duplicates" \
        in out, out[-3000:]
    first = _table_matches_stored_offsets(postgres.dsn, pg_schema, "now-later", topic)
    assert first == {p: before for p in range(PARTITIONS)}, first
    done = job_host.run(["ingest", *argv])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    total = PARTITIONS * (before + 300)
    assert f"table {pg_schema}.kafka_events: {total} rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout


def test_an_empty_topic_under_available_now_ends_at_once(kafka, kafka_topic, postgres,
                                                         pg_schema, job_host):
    topic = kafka_topic(partitions=PARTITIONS)
    started = time.monotonic()
    done = job_host.run(["ingest", *_argv(kafka, postgres, topic, pg_schema, "now-empty")])
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"table {pg_schema}.kafka_events: 0 rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout, done.stdout[-3000:]
    print("empty topic run took", took, file=sys.stderr)


def test_a_pattern_with_a_table_per_topic_under_available_now(kafka, kafka_topic, postgres,
                                                              pg_schema, job_host):
    first = kafka_topic(partitions=1)
    second = kafka_topic(partitions=2)
    kafka.produce(first, [b"a"] * 30)
    for p in range(2):
        kafka.produce(second, [b"b"] * 20, partition=p)
    done = job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--pattern", f"({first}|{second})", "--schema", pg_schema, "--group", "now-pattern",
         "--api", "structured", "--available-now", "--table", "{topic}",
         "--batch-interval", "0.5", "--max-rate-per-partition", "20"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "rows, 0 duplicates" in done.stdout, done.stdout[-3000:]
    print(done.stdout[-3000:], file=sys.stderr)
    assert "stored offsets == log end" in done.stdout, done.stdout[-3000:]


@pytest.mark.slow  # as test_ingest_command's typed stops, under AvailableNow
def test_a_failing_run_under_available_now_ends_with_its_typed_error(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"v"] * 5)
    argv = ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
            "--topic", topic, "--schema", pg_schema, "--api", "structured", "--available-now"]
    first = job_host.run(argv)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    kafka.produce(topic, [b"w"] * 5)
    kafka.delete_records(topic, 0, 10)
    done = job_host.run(argv, process=True)
    assert done.returncode == 73, done.stdout[-2000:] + done.stderr[-2000:]
    assert "kafka-direct ingest stopped: DataLossError: " in done.stderr, done.stderr[-3000:]


def test_a_run_with_nothing_new_then_one_with_new_records_under_available_now(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # The second run's query has no batch at all (its start is its target): the third,
    # another new query, still takes the offset store over.
    topic = kafka_topic(partitions=PARTITIONS)
    _fill(kafka, topic, 0, 30)
    argv = ["ingest", *_argv(kafka, postgres, topic, pg_schema, "now-again")]
    for produced, total, extra in ((0, 60, ()), (0, 60, ()), (30, 120, ()),
                                   (30, 180, ("--max-rate-per-partition", "0"))):
        if produced:
            _fill(kafka, topic, 1000, produced)
        done = job_host.run([*argv, *extra])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"table {pg_schema}.kafka_events: {total} rows, 0 duplicates" in done.stdout, \
            done.stdout[-3000:]
        assert "stored offsets == log end" in done.stdout


@pytest.mark.slow  # as test_ingest_command's typed stops, under AvailableNow
def test_a_bad_record_under_available_now_stops_with_its_typed_error(
        kafka, kafka_topic, postgres, pg_schema, job_host):
    # The sink's error this time (the typed rows' decoding, in the write tasks).
    topic = kafka_topic()
    kafka.produce(topic, [b'{"id": 1}', b'{"id": 2}', b"not json", b'{"id": 4}'])
    done = job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--topic", topic, "--schema", pg_schema, "--table", "typed", "--api", "structured",
         "--available-now", "--value-format", "json", "--on-bad-record", "fail"],
        process=True)
    assert done.returncode == 65, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kafka-direct ingest stopped: BadRecordError: " in done.stderr, done.stderr[-3000:]
    assert f"topic {topic}, partition 0, offset 2" in done.stderr
    assert "Traceback" not in done.stderr
