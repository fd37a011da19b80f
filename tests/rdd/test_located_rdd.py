"""located_rdd: one element per partition, in order, with Spark preferred locations, built in
a few JVM calls whatever the number of partitions (a batch's planning on a cluster)."""

from __future__ import annotations

import gc
import threading

import pytest

from kafka_direct import OffsetRange
from kafka_direct.rdd import spark_support
from kafka_direct.rdd.spark_support import located_rdd


def _preferred(rdd, step: int = 1) -> list[list[str]]:
    """Every ``step``-th partition's preferred locations, as the JVM RDD reports them."""
    jrdd = (rdd._prev_jrdd if hasattr(rdd, "_prev_jrdd") else rdd._jrdd).rdd()
    found = []
    partitions = jrdd.partitions()
    for index in range(0, len(partitions), step):
        locations = jrdd.preferredLocations(partitions[index])
        found.append([str(locations.apply(i)) for i in range(locations.size())])
    return found


def _ranges(n: int) -> list[OffsetRange]:
    return [OffsetRange(f"topic-{i % 7}", i, i, 2 * i + 1) for i in range(n)]


class _Calls:
    """Counts the commands this thread sends to the JVM, less proxies' releases.

    A collection in the counted window (in this thread or another) releases other tests'
    proxies too: hundreds of commands in a whole suite's run, none of them the call's.
    """

    def __init__(self, sc, monkeypatch) -> None:
        self.count = 0
        client = sc._gateway._gateway_client
        send = client.send_command
        caller = threading.get_ident()

        def counted(command, *args, **kwargs):
            if threading.get_ident() == caller and not command.startswith("m\n"):
                self.count += 1
            return send(command, *args, **kwargs)

        monkeypatch.setattr(client, "send_command", counted)


@pytest.mark.parametrize("shape", ["every one", "runs", "none"])
def test_each_partition_holds_its_element_with_its_locations(spark, shape):
    ranges = _ranges(40)
    if shape == "every one":
        locations = [[f"executor_host{i % 3}_{i % 3}"] for i in range(40)]
    elif shape == "runs":  # some partitions with no preference, then some with one
        locations = [[] if i < 10 or 25 <= i < 30 else [f"host{i % 4}"] for i in range(40)]
    else:
        locations = [[] for _ in range(40)]
    rdd = located_rdd(spark, ranges, locations)
    assert rdd.getNumPartitions() == 40
    assert rdd.glom().collect() == [[r] for r in ranges]
    assert _preferred(rdd) == locations


def test_a_thousand_partitions_take_as_many_jvm_calls_as_ten(spark, monkeypatch):
    # One Py4J call per element (a Tuple2, a Seq of hosts) cost 8-9 s for a thousand
    # partitions: every batch's planning on a cluster with executors.
    counts = []
    for n in (10, 1000):
        ranges = _ranges(n)
        locations = [[f"executor_host{i % 5}_{i % 5}"] for i in range(n)]
        # Earlier tests' JVM proxies, collected in the counted window, would each send a
        # command of their own (hundreds, seen in a whole suite's run): collected before.
        gc.collect()
        calls = _Calls(spark, monkeypatch)
        rdd = located_rdd(spark, ranges, locations)
        counts.append(calls.count)
        monkeypatch.undo()
    # Py4J also sends a command when a JVM object's proxy is collected: a few, not 1,000s.
    assert counts[1] < counts[0] + 20 and counts[1] < 120, counts
    assert _preferred(rdd, 250) == locations[::250]
    assert rdd.getNumPartitions() == 1000


def test_many_runs_or_unsplittable_hosts_still_place_every_partition(spark):
    ranges = _ranges(40)
    alternating = [[f"h{i}"] if i % 2 else [] for i in range(40)]  # 40 runs
    rdd = located_rdd(spark, ranges, alternating)
    assert rdd.glom().collect() == [[r] for r in ranges]
    assert _preferred(rdd) == alternating
    odd_hosts = [["a\nb"] for _ in range(3)]
    rdd = located_rdd(spark, ranges[:3], odd_hosts)
    assert rdd.collect() == ranges[:3] and _preferred(rdd) == odd_hosts


def test_runs_are_consecutive_partitions_with_as_many_locations():
    assert spark_support._runs([[], [], ["a"], ["b"], [], ["c", "d"]]) == [
        (0, 2, 0), (2, 4, 1), (4, 5, 0), (5, 6, 2)]
    with pytest.raises(ValueError, match="2 elements but 1 location"):
        located_rdd(None, [1, 2], [["a"]])


def test_no_elements_is_an_empty_rdd(spark):
    assert located_rdd(spark, [], []).collect() == []
