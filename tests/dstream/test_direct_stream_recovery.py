"""A killed driver recovers from its checkpoint and regenerates identical ranges."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

APP = Path(__file__).with_name("direct_recovery_app.py")


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def parse(lines):
    started, done = {}, {}
    for line in lines:
        kind, batch, rest = line.split(" ", 2)
        ranges = json.loads(rest.rsplit(" ", 1)[0] if kind == "done" else rest)
        (started if kind == "start" else done)[int(batch)] = ranges
    return started, done


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
def test_killed_driver_regenerates_the_interrupted_batch_with_identical_ranges(
        kafka, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        kafka.produce(topic, [b"x"] * 200, partition=p)
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    args = [sys.executable, str(APP), kafka.bootstrap_servers, topic, str(tmp_path / "cp"),
            str(out)]
    first = subprocess.Popen([*args, "60"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: out.exists() and out.read_text().count("done") >= 3, 90)
        wait_for(lambda: out.read_text().splitlines()[-1].startswith("start"), 30)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    before = out.read_text().splitlines()
    started_before, _ = parse(before)
    interrupted = int(before[-1].split()[1])
    second = subprocess.run([*args, "5"], env=env, capture_output=True, text=True,
                            timeout=180)
    assert second.returncode == 0, second.stderr[-3000:]
    after = out.read_text().splitlines()[len(before):]
    _, done_after = parse(after)
    assert done_after[interrupted] == started_before[interrupted]  # the same ranges again
    _, done = parse(out.read_text().splitlines())
    ends = {}
    for batch in sorted(done):
        for partition, start, end in done[batch]:
            assert start == ends.get(partition, 0)  # contiguous: nothing lost or repeated
            ends[partition] = end
