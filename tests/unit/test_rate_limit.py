"""The clamp and rate split, against Spark's DirectKafkaInputDStream formulas."""

from kafka_direct import TopicPartition
from kafka_direct.per_partition_config import DefaultPerPartitionConfig, PerPartitionConfig
from kafka_direct.rate_limit import clamp, maxMessagesPerPartition, prorate_total

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def spark_max_messages(latest, current, max_rate, min_rate, secs, rate):
    """Spark 3's maxMessagesPerPartition, transcribed, with Scala's arithmetic."""
    if rate is not None and rate > 0:
        lag = {tp: max(latest[tp] - current[tp], 0) for tp in latest}
        total = sum(lag.values())
        effective = {}
        for tp, partition_lag in lag.items():
            backpressure = partition_lag / float(total) * rate
            effective[tp] = min(backpressure, max_rate[tp]) if max_rate[tp] > 0 else backpressure
    else:
        effective = {tp: float(max_rate[tp]) for tp in latest}
    if sum(effective.values()) > 0:
        return {tp: max(int(secs * limit), min_rate[tp]) for tp, limit in effective.items()}
    return None


class Config(PerPartitionConfig):
    def __init__(self, max_rate, min_rate):
        self.max_rate, self.min_rate = max_rate, min_rate

    def maxRatePerPartition(self, tp):
        return self.max_rate[tp]

    def minRatePerPartition(self, tp):
        return self.min_rate[tp]


CASES = [
    # latest, current, max rates, min rates, batch seconds, backpressure rate
    ({A: 1000, B: 500, C: 10}, {A: 0, B: 400, C: 10}, {A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 1},
     2.0, None),
    ({A: 1000, B: 500, C: 10}, {A: 0, B: 400, C: 10}, {A: 100, B: 30, C: 5}, {A: 1, B: 1, C: 1},
     2.0, None),
    ({A: 1000, B: 500, C: 10}, {A: 0, B: 400, C: 10}, {A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 1},
     1.0, 300.0),
    ({A: 1000, B: 500, C: 13}, {A: 0, B: 400, C: 10}, {A: 100, B: 0, C: 0}, {A: 5, B: 1, C: 50},
     0.5, 2000.0),
    ({A: 7, B: 9}, {A: 0, B: 0}, {A: 0, B: 0}, {A: 1, B: 1}, 1.0, 3.0),
]


def test_max_messages_per_partition_matches_spark():
    for latest, current, max_rate, min_rate, secs, rate in CASES:
        ours = maxMessagesPerPartition(latest, current, Config(max_rate, min_rate), secs, rate)
        assert ours == spark_max_messages(latest, current, max_rate, min_rate, secs, rate)


def test_clamp_never_passes_the_end_nor_goes_back():
    latest, current = {A: 1000, B: 500, C: 10}, {A: 0, B: 400, C: 10}
    config = Config({A: 100, B: 30, C: 5}, {A: 1, B: 1, C: 1})
    assert clamp(latest, current, config, 2.0) == {A: 200, B: 460, C: 10}
    assert clamp(latest, current, Config({A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 1}), 2.0) == latest
    # backpressure splits 300 records/s by lag: A 1000 of 1100, B 100 of 1100
    assert clamp(latest, current, Config({A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 1}), 1.0,
                 300.0) == {A: 272, B: 427, C: 10}


def test_min_rate_floors_limits_and_zero_lag_divides_nothing():
    config = Config({A: 0.1, B: 0.1}, {A: 10, B: 10})
    assert clamp({A: 100, B: 5}, {A: 0, B: 0}, config, 1.0) == {A: 10, B: 5}
    config = Config({A: 0, B: 0}, {A: 1, B: 1})
    assert maxMessagesPerPartition({A: 5, B: 9}, {A: 5, B: 9}, config, 1.0, 500.0) is None
    assert clamp({A: 5, B: 9}, {A: 5, B: 9}, config, 1.0, 500.0) == {A: 5, B: 9}


def test_total_cap_is_split_by_lag_exactly():
    ends = prorate_total({A: 1000, B: 300, C: 3}, {A: 0, B: 0, C: 0}, 100)
    assert sum(ends.values()) == 100
    assert ends[A] > ends[B] > ends[C] >= 0
    assert prorate_total({A: 10, B: 10}, {A: 0, B: 5}, 100) == {A: 10, B: 10}
    assert clamp({A: 1000, B: 1000}, {A: 0, B: 0}, Config({A: 0, B: 0}, {A: 1, B: 1}), 1.0,
                 None, maxTotal=11) in ({A: 6, B: 5}, {A: 5, B: 6})


def test_default_config_reads_spark_settings_and_overrides():
    config = DefaultPerPartitionConfig({"spark.streaming.kafka.maxRatePerPartition": "50"},
                                       maxRates={A: 7}, minRates={B: 3})
    assert config.maxRatePerPartition(A) == 7 and config.maxRatePerPartition(B) == 50
    assert config.minRatePerPartition(A) == 1 and config.minRatePerPartition(B) == 3
