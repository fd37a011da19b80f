"""A batch waits for partitions only where waiting can help (injected clock, fake cluster).

At start the stream waits for the group's first assignment (``driverTimeoutMs``). Later, a
batch waits (``rebalanceWaitMs``) only for partitions it already reads that a rebalance
hides. With nothing to wait for (a pattern matching no topic, a topic without partitions
yet, every known partition's topic deleted) a batch is empty at once, not 30 s late.
"""

import pytest

from kafka_direct import ConsumerStrategies, TopicPartition
from tests.fakes.fake_cluster import FakeCluster, make_stream, stub_rdds

PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "auto.offset.reset": "earliest"}
T0 = TopicPartition("t", 0)


class FakeClock:
    """Monotonic seconds that pass only when slept."""

    def __init__(self):
        self.time = 1000.0
        self.slept = 0.0

    def now(self):
        return self.time

    def sleep(self, seconds):
        self.time += seconds
        self.slept += seconds

    def lap(self):
        slept, self.slept = self.slept, 0.0
        return slept


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch):
    stub_rdds(monkeypatch)


@pytest.fixture
def cluster():
    return FakeCluster()


def test_a_pattern_matching_nothing_waits_at_start_only(cluster):
    clock = FakeClock()
    stream = make_stream(cluster, ConsumerStrategies.SubscribePattern("orders-.*", PARAMS),
                         waitClock=clock)
    stream.start()
    assert clock.lap() == pytest.approx(30.0, abs=0.1)  # driverTimeoutMs: the first assignment
    for batch in (1000, 2000, 3000):
        assert stream.compute(batch) == []
        assert clock.lap() == 0.0  # an empty batch, at once
    cluster.create("orders-eu", 1)
    cluster.produce(TopicPartition("orders-eu", 0), 4)
    assert [(r.topic, r.fromOffset, r.untilOffset) for r in stream.compute(4000)] == [
        ("orders-eu", 0, 4)]
    assert clock.lap() == 0.0


def test_a_topic_without_partitions_yet_gives_prompt_empty_batches(cluster):
    cluster.create("t", 1)
    cluster.visible_partitions["t"] = 0  # created, its partitions not in metadata yet
    clock = FakeClock()
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(["t"], PARAMS),
                         {"spark.streaming.kafka.driverTimeoutMs": "5000"}, waitClock=clock)
    stream.start()
    assert clock.lap() == pytest.approx(5.0, abs=0.1)
    assert stream.compute(1000) == [] and clock.lap() == 0.0
    del cluster.visible_partitions["t"]
    cluster.produce(T0, 2)
    assert [(r.fromOffset, r.untilOffset) for r in stream.compute(2000)] == [(0, 2)]
    assert clock.lap() == 0.0


def test_known_partitions_of_a_deleted_topic_are_not_waited_for_every_batch(cluster):
    cluster.create("t", 1)
    cluster.produce(T0, 3)
    clock = FakeClock()
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(["t"], PARAMS),
                         {"spark.streaming.kafka.rebalanceWaitMs": "10000"}, waitClock=clock)
    stream.start()
    assert clock.lap() == 0.0  # assigned at once: no wait
    assert [(r.fromOffset, r.untilOffset) for r in stream.compute(1000)] == [(0, 3)]
    cluster.hidden.add("t")
    assert stream.compute(2000) == []
    assert clock.lap() == pytest.approx(10.0, abs=0.1)  # a rebalance may be hiding it
    assert stream.compute(3000) == [] and clock.lap() == 0.0  # already absent: no wait
    assert stream.currentOffsets[T0] == 3  # its position is kept


def test_a_known_partition_a_rebalance_hides_is_still_waited_for(cluster):
    cluster.create("t", 1)
    clock = FakeClock()
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(["t"], PARAMS),
                         {"spark.streaming.kafka.rebalanceWaitMs": "2000"}, waitClock=clock)
    stream.start()
    cluster.hidden.add("t")
    original = clock.sleep

    def rebalance_settles(seconds):  # the assignment comes back after 0.5 s
        original(seconds)
        if clock.slept >= 0.5:
            cluster.hidden.discard("t")

    clock.sleep = rebalance_settles
    cluster.produce(T0, 1)
    assert [(r.fromOffset, r.untilOffset) for r in stream.compute(1000)] == [(0, 1)]
    assert clock.lap() == pytest.approx(0.5, abs=0.06)
