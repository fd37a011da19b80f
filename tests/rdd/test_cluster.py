"""KafkaRDD on a local-cluster Spark: real separate executor processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_direct import TopicPartition
from kafka_direct.rdd.location_strategy import ExecutorLocation

pytestmark = pytest.mark.cluster


def test_ranges_are_read_in_separate_executors_on_their_preferred_locations(kafka,
                                                                             kafka_topic):
    topic = kafka_topic(partitions=4)
    for p in range(4):
        kafka.produce(topic, [b"x"] * 20, partition=p)
    script = Path(__file__).with_name("cluster_job.py")
    repo = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, str(script), kafka.bootstrap_servers, topic, "4"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=repo)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT "):])
    executors = sorted(ExecutorLocation(h, i) for h, i in report["executors"])
    assert len(executors) == 2
    first, second = report["runs"]
    # PreferConsistent: each range's preferred executor is the stable-hash choice, and the
    # same in both batches.
    for p in range(4):
        expected = executors[TopicPartition(topic, p).stableHash() % 2].taskLocation()
        assert first["preferred"][p] == second["preferred"][p] == f"List({expected})"
    # Tasks ran in Python workers of the executors, not in the driver process.
    executor_of = {}
    for run in (first, second):
        for index, _pid, daemon_pid, offsets in run["tasks"]:
            assert offsets == list(range(20))
            assert daemon_pid != report["driver_pid"]
            executor_of.setdefault(index, set()).add(daemon_pid)
    used = set().union(*executor_of.values())
    assert len(used) == len(set(first["preferred"]))  # one executor per preferred location
    # ranges that prefer the same executor ran on that same executor, in both batches
    by_preference = {}
    for index in range(4):
        by_preference.setdefault(first["preferred"][index], set()).update(executor_of[index])
    assert all(len(daemons) == 1 for daemons in by_preference.values())
    assert report["fixed_preferred"].startswith(f"List(executor_{executors[0].host}_")
