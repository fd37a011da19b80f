"""A Hypothesis state machine over the direct stream's planning on a fake cluster."""

import logging

from hypothesis.stateful import RuleBasedStateMachine

from kafka_direct.dstream import direct_kafka_input_dstream
from tests.fakes.fake_cluster import FakeCluster


class PlanningMachine(RuleBasedStateMachine):
    """Each batch's KafkaRDD is its list of ranges (no Spark); the library's logs quiet.

    Subclasses stop their stream in ``teardown`` before calling this one's.
    """

    def __init__(self):
        super().__init__()
        self._saved_rdd = direct_kafka_input_dstream.kafka_rdd
        direct_kafka_input_dstream.kafka_rdd = self._rdd
        #: The groups of each grouped batch's KafkaRDD (a stream with minOffsetsPerTask).
        self.groups = []
        logging.getLogger("kafka_direct").setLevel(logging.ERROR)
        self.cluster = FakeCluster()

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
        direct_kafka_input_dstream.kafka_rdd = self._saved_rdd
        logging.getLogger("kafka_direct").setLevel(logging.NOTSET)
