"""A direct stream app recovered from its checkpoint after its code changed.

The first run is stopped (gracefully, or killed), the code changes, and the second run
recovers from the checkpoint and reads on to the end. Every record must reach the sink of
its own topic exactly once (a batch run again after the kill is taken once: the sink keys
its writes by batch time, and the batch must have the very same ranges).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

APP = Path(__file__).with_name("checkpoint_code_change_app.py")
RECORDS = 100  # per partition
PARTITIONS = 2


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def sinks(output):
    """``{sink: {batch: entry}}``; a batch written twice must have had the same ranges."""
    found = {}
    for line in output.read_text().splitlines():
        _, sink, batch, entry = line.split(" ", 3)
        entry = json.loads(entry)
        previous = found.setdefault(sink, {}).setdefault(int(batch), entry)
        assert previous["ranges"] == entry["ranges"], f"{sink} batch {batch} changed"
    return found


def assert_exactly_once(found, sink, topic):
    records = [tuple(r) for entry in found[sink].values() for r in entry["records"]]
    assert {r[0] for r in records} == {topic}, f"sink {sink} got records of other topics"
    assert len(records) == len(set(records)), f"sink {sink} got records twice"
    assert sorted(records) == [(topic, p, o) for p in range(PARTITIONS)
                               for o in range(RECORDS)]


def produce(kafka, topic):
    for p in range(PARTITIONS):
        kafka.produce(topic, [b"x"] * RECORDS, partition=p)


def app(kafka, topic_a, topic_b, tmp_path, variant, end, seconds):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    return [sys.executable, str(APP), kafka.bootstrap_servers, topic_a, topic_b,
            str(tmp_path / "cp"), str(tmp_path / "out.txt"), variant, str(end),
            str(seconds)], env


def run_to_the_end(kafka, topic_a, topic_b, tmp_path, variant):
    args, env = app(kafka, topic_a, topic_b, tmp_path, variant, RECORDS, 120)
    run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_stream_added_before_the_kafka_stream(kafka, kafka_topic, tmp_path):
    topic_a, topic_b = kafka_topic(partitions=PARTITIONS), kafka_topic(partitions=PARTITIONS)
    produce(kafka, topic_a)
    args, env = app(kafka, topic_a, topic_b, tmp_path, "a", 0, 2)
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    first_records = sum(len(e["records"]) for e in sinks(tmp_path / "out.txt")["A"].values())
    assert 0 < first_records < RECORDS * PARTITIONS  # stopped half-way
    run_to_the_end(kafka, topic_a, topic_b, tmp_path, "const+a")
    assert_exactly_once(sinks(tmp_path / "out.txt"), "A", topic_a)


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_two_kafka_streams_swapped_after_a_kill(kafka, kafka_topic, tmp_path):
    topic_a, topic_b = kafka_topic(partitions=PARTITIONS), kafka_topic(partitions=PARTITIONS)
    produce(kafka, topic_a)
    produce(kafka, topic_b)
    out = tmp_path / "out.txt"
    args, env = app(kafka, topic_a, topic_b, tmp_path, "ab", 0, 60)
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: out.exists() and all(
            out.read_text().count(f"done {sink} ") >= 2 for sink in "AB"), 120)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    found = sinks(out)
    assert sum(len(e["records"]) for e in found["A"].values()) < RECORDS * PARTITIONS
    run_to_the_end(kafka, topic_a, topic_b, tmp_path, "ba")
    found = sinks(out)
    assert_exactly_once(found, "A", topic_a)
    assert_exactly_once(found, "B", topic_b)
