"""A typed stop of ``kafka-direct ingest`` is one short block on stderr and an exit code.

Run as a process, as a user runs it: what reaches the terminal is the block (what happened,
where, what to do), never Spark's Java stack, a Python traceback or the marker errors cross
from executors with; ``--verbose`` shows the details. Both APIs.
"""

import subprocess
import sys

import pytest

from kafka_direct.app.stops import EXIT_CODES

APIS = ["dstream", "structured"]
NOISE = ("Traceback", "at org.apache", "at java.", "Py4JJavaError", "kafka-direct-error:",
         "py4j", "ERROR Executor", "WARN TaskSetManager")


def run(kafka, postgres, topic, schema, api, *extra, verbose=False):
    argv = [sys.executable, "-m", "kafka_direct.app.cli", *(["-v"] if verbose else []),
            "ingest", "--bootstrap-servers",
            kafka.bootstrap_servers, "--dsn", postgres.dsn, "--topic", topic, "--schema",
            schema, "--table", "typed", "--batch-interval", "0.5", "--stop-after-idle", "1",
            "--api", api, "--group", f"g-{topic}", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=280)


@pytest.mark.parametrize("api", APIS)
def test_a_bad_record_stops_with_one_short_block_and_its_exit_code(
        kafka, kafka_topic, postgres, pg_schema, api):
    topic = kafka_topic()
    kafka.produce(topic, [b'{"id": 1}', b'{"id": 2}', b"not json", b'{"id": 4}'])
    done = run(kafka, postgres, topic, pg_schema, api, "--value-format", "json",
               "--on-bad-record", "fail")
    shown = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == EXIT_CODES["BadRecordError"] == 65, shown
    block = done.stderr.strip().splitlines()
    assert 3 <= len(block) <= 8, shown
    assert block[0].startswith("kafka-direct ingest stopped: BadRecordError: "), shown
    assert f"topic {topic}, partition 0, offset 2" in done.stderr, shown
    assert "not JSON" in done.stderr, shown
    assert any(line.startswith("what to do: ") for line in block), shown
    assert "--on-bad-record dead-letter" in done.stderr, shown
    for noise in NOISE:
        assert noise not in done.stderr, (noise, shown)
        assert noise not in done.stdout, (noise, shown)


@pytest.mark.slow  # another job process per API (20-55 s each); the quiet stop is the default's
@pytest.mark.parametrize("api", APIS)
def test_verbose_shows_the_details(kafka, kafka_topic, postgres, pg_schema, api):
    topic = kafka_topic()
    kafka.produce(topic, [b"not json"])
    done = run(kafka, postgres, topic, pg_schema, api, "--value-format", "json", verbose=True)
    assert done.returncode == 65, done.stderr[-3000:]
    assert "Traceback" in done.stderr and "BadRecordError" in done.stderr
    assert "kafka-direct ingest stopped: BadRecordError: " in done.stderr


def test_the_demo_shows_a_failed_runs_block_apart_from_its_batches():
    from kafka_direct.app.demo import split_stop_block

    lines = ["batch 1\n", "kafka-direct ingest stopped: BadRecordError: x\n", "where: y\n",
             "what to do: z\n", "exit code 65: w\n"]
    assert split_stop_block(lines) == (lines[:1], lines[1:])
    assert split_stop_block(lines[:1]) == (lines[:1], [])
