"""Every record exactly once across batches of a stream over many topics.

A model cluster whose topics come and go (deleted, created again with as many or fewer
partitions, one swapped for another of the same size), grow partitions and records; the
stream (Subscribe or SubscribePattern, with or without the group, rate limits) runs batches and
restarts from its checkpointed batches. The partition layout, the listing's partitions
and the batch's ranges are kept between batches: a stale one would skip or repeat records.

Checked: no record is read twice; after a final drain every record of a live log is read.
"""

from itertools import count

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kafka_direct import ConsumerStrategies, TopicPartition
from tests.dstream.planning_machine import PlanningMachine
from tests.fakes.fake_cluster import make_stream

NAMES = ["a0", "a1", "a2", "a3"]
PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "auto.offset.reset": "earliest"}


class MultiTopicModel(PlanningMachine):
    def __init__(self):
        super().__init__()
        self.ids = {}  # tp -> record ids at each offset of its live log
        self.fresh = count()
        self.times = count(1)
        self.read = []
        self.stream = None

    def teardown(self):
        if self.stream is not None:
            self.stream.stop()
        super().teardown()

    def _make(self, topic, partitions):
        self.cluster.create(topic, partitions)
        for p in range(partitions):
            self.ids[TopicPartition(topic, p)] = []

    def _new_stream(self):
        group = self.kind.endswith("group")
        if self.kind.startswith("pattern"):
            strategy = ConsumerStrategies.SubscribePattern(r"a\d", PARAMS,
                                                           groupManagement=group)
        else:
            strategy = ConsumerStrategies.Subscribe(NAMES[:2], PARAMS, groupManagement=group)
        conf = {"spark.streaming.kafka.rebalanceWaitMs": "0",
                "spark.streaming.kafka.maxRetries": "0",
                "spark.streaming.kafka.failOnDataLoss": "false"}
        if self.rate:
            conf["spark.streaming.kafka.maxRatePerPartition"] = str(self.rate)
        if self.total:
            conf["spark.streaming.kafka.maxRecordsPerBatch"] = str(self.total)
        return make_stream(self.cluster, strategy, conf)

    @initialize(kind=st.sampled_from(["pattern", "plain", "pattern-group", "plain-group"]),
                rate=st.sampled_from([0, 0, 2, 5]),
                total=st.sampled_from([0, 0, 3, 7]), sizes=st.lists(st.integers(1, 3),
                                                                    min_size=2, max_size=2))
    def start(self, kind, rate, total, sizes):
        self.kind, self.rate, self.total = kind, rate, total
        for topic, n in zip(NAMES[:2], sizes, strict=True):
            self._make(topic, n)
        self.stream = self._new_stream()
        self.stream.start()

    def live(self):
        return [TopicPartition(t, p) for t, logs in self.cluster.topics.items()
                for p in range(len(logs))]

    @rule(i=st.integers(0, 50), n=st.integers(1, 5))
    def produce(self, i, n):
        tps = self.live()
        if tps:
            tp = tps[i % len(tps)]
            self.cluster.produce(tp, n)
            self.ids[tp].extend(next(self.fresh) for _ in range(n))

    @rule()
    def batch(self):
        time = next(self.times) * 1000
        ranges = self.stream.compute(time)
        for r in ranges:
            tp = r.topicPartition()
            assert r.untilOffset <= len(self.ids[tp]), (r, len(self.ids[tp]))
            self.read.extend(self.ids[tp][r.fromOffset:r.untilOffset])
        self.stream.onBatchCompleted(time)
        assert len(self.read) == len(set(self.read)), "a record read twice"

    # Topics whose logs are replaced: the stream looks before they get records again (a
    # new log grown past the old position cannot be told apart from the old one).
    @precondition(lambda self: len(self.cluster.topics) > 0)
    @rule(i=st.integers(0, 3), fewer=st.booleans())
    def recreate(self, i, fewer):
        topic = sorted(self.cluster.topics)[i % len(self.cluster.topics)]
        n = len(self.cluster.topics[topic])
        for tp in [tp for tp in self.ids if tp.topic == topic]:
            del self.ids[tp]
        self._make(topic, max(1, n - 1) if fewer else n)
        self.batch()

    @precondition(lambda self: len(self.cluster.topics) > 1)
    @rule(i=st.integers(0, 3))
    def swap(self, i):
        """One topic deleted and another of the same size created (the counts' total and
        the number of topics unchanged)."""
        topic = sorted(self.cluster.topics)[i % len(self.cluster.topics)]
        absent = [t for t in NAMES if t not in self.cluster.topics]
        if not absent:
            return
        n = len(self.cluster.topics[topic])
        self.cluster.delete(topic)
        for tp in [tp for tp in self.ids if tp.topic == topic]:
            del self.ids[tp]
        self._make(absent[0], n)
        self.batch()

    @precondition(lambda self: len(self.cluster.topics) > 0)
    @rule(i=st.integers(0, 3))
    def add_partition(self, i):
        topic = sorted(self.cluster.topics)[i % len(self.cluster.topics)]
        if len(self.cluster.topics[topic]) < 5:
            self.cluster.add_partitions(topic, 1)
            self.ids[TopicPartition(topic, len(self.cluster.topics[topic]) - 1)] = []
            self.batch()

    def restartable(self):
        # A Subscribe stream refuses to start while one of its topics is missing.
        return self.kind.startswith("pattern") or all(
            t in self.cluster.topics for t in NAMES[:2])

    @precondition(restartable)
    @rule()
    def restart(self):
        old = self.stream
        old.stop()
        state = old.checkpointState()
        self.stream = self._new_stream()
        self.stream.restoreCheckpointState(state)
        self.stream.start()

    def drain(self):
        self.rate = self.total = 0
        if self.restartable():
            self.restart()
            self.batch()
        else:  # the limits stay: enough batches read everything (at most 150 records)
            for _ in range(60):
                self.batch()

    def check_all_read(self):
        read = set(self.read)
        readable = self.live() if self.kind.startswith("pattern") else [
            tp for tp in self.live() if tp.topic in NAMES[:2]]
        missing = {tp: [i for i in self.ids[tp] if i not in read] for tp in readable}
        assert not any(missing.values()), missing


def test_every_record_once_over_topics_that_come_and_go():
    class Checked(MultiTopicModel):
        def teardown(self):
            try:
                if self.stream is not None:
                    self.drain()
                    self.check_all_read()
            finally:
                super().teardown()

    run_state_machine_as_test(Checked, settings=settings(
        max_examples=120, stateful_step_count=50, deadline=None,
        suppress_health_check=list(HealthCheck)))
