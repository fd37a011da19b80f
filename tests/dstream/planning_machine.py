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
        direct_kafka_input_dstream.kafka_rdd = lambda sc, ranges, *args: list(ranges)
        logging.getLogger("kafka_direct").setLevel(logging.ERROR)
        self.cluster = FakeCluster()

    def teardown(self):
        direct_kafka_input_dstream.kafka_rdd = self._saved_rdd
        logging.getLogger("kafka_direct").setLevel(logging.NOTSET)
