"""A Hypothesis state machine over the direct stream's planning on a fake cluster."""

import logging

from hypothesis.stateful import RuleBasedStateMachine

from kafka_direct.dstream import direct_kafka_batches
from kafka_direct.rdd import kept_parent
from kafka_direct.rdd.kept_parent import KeptParent
from tests.fakes.fake_cluster import FakeCluster


class _Parent:
    """A kept parent without Spark: its elements, and a batch's function over them."""

    def __init__(self, elements):
        self.elements = list(elements)

    def mapPartitionsWithIndex(self, at, preservesPartitioning):
        return self, at


def _over_kept_parent(ranges_rdd, made, settings, groups=None):
    """A batch's RDD over a kept parent: its ranges, once each task's range is checked."""
    parent, at = ranges_rdd
    # Task i reads the range (grouped: the group) its function gives for the parent's
    # element i: exactly range (group) i of the batch, whichever batch made the parent.
    read = [next(at(i, iter([element]))) for i, element in enumerate(parent.elements)]
    if groups is None:
        assert read == [(r.topic, r.partition, r.fromOffset, r.untilOffset) for r in made]
        return list(made)
    assert read == [[(r.topic, r.partition, r.fromOffset, r.untilOffset) for r in group]
                    for group in groups]
    return list(made)


class PlanningMachine(RuleBasedStateMachine):
    """Each batch's KafkaRDD is its list of ranges (no Spark); the library's logs quiet.

    Subclasses stop their stream in ``teardown`` before calling this one's.
    """

    def __init__(self):
        super().__init__()
        self._saved_rdd = direct_kafka_batches.kafka_rdd
        direct_kafka_batches.kafka_rdd = self._rdd
        self._saved_kept = (kept_parent.located_rdd, kept_parent.KafkaRDD,
                            KeptParent.__dict__["locations"])
        kept_parent.located_rdd = lambda sc, elements, locations: _Parent(elements)
        kept_parent.KafkaRDD = self._over_kept_parent
        KeptParent.locations = staticmethod(
            lambda sc, partitions, strategy, leaders: [[]] * len(partitions))
        #: The groups of each grouped batch's KafkaRDD (a stream with minOffsetsPerTask).
        self.groups = []
        logging.getLogger("kafka_direct").setLevel(logging.ERROR)
        self.cluster = FakeCluster()

    def _over_kept_parent(self, ranges_rdd, made, settings, groups=None):
        """A batch's RDD over a kept parent; a grouped one's groups checked as in _rdd."""
        if groups is not None:
            self._rdd(None, made, groups=groups)
        return _over_kept_parent(ranges_rdd, made, settings, groups)

    def _rdd(self, sc, ranges, settings=None, strategy=None, leaders=None, groups=None):
        """A batch's ranges; its groups, when grouped, checked as a KafkaRDD takes them."""
        if groups is not None:
            # The ranges cut in order, none lost or twice, at most one per partition: what
            # a grouped task reads and a sink writes in one transaction.
            assert [r for group in groups for r in group] == list(ranges)
            assert all(groups)
            assert len({r.topicPartition() for r in ranges}) == len(ranges)
            self.groups.append(groups)
        return list(ranges)

    def teardown(self):
        direct_kafka_batches.kafka_rdd = self._saved_rdd
        kept_parent.located_rdd, kept_parent.KafkaRDD, KeptParent.locations = self._saved_kept
        logging.getLogger("kafka_direct").setLevel(logging.NOTSET)
