"""The clamp and rate split, against Spark's DirectKafkaInputDStream formulas."""

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kafka_direct import ConfigurationError, TopicPartition
from kafka_direct.dstream.per_partition_config import DefaultPerPartitionConfig, PerPartitionConfig
from kafka_direct.dstream.rate_limit import clamp, maxMessagesPerPartition
from kafka_direct.offset_range import prorate_by_lag

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
    ends = prorate_by_lag({A: 1000, B: 300, C: 3}, {A: 0, B: 0, C: 0}, 100)
    assert sum(ends.values()) == 100
    assert ends[A] > ends[B] > ends[C] >= 0
    assert prorate_by_lag({A: 10, B: 10}, {A: 0, B: 5}, 100) == {A: 10, B: 10}
    assert clamp({A: 1000, B: 1000}, {A: 0, B: 0}, Config({A: 0, B: 0}, {A: 1, B: 1}), 1.0,
                 None, maxTotal=11) in ({A: 6, B: 5}, {A: 5, B: 6})


def test_default_config_reads_spark_settings_and_overrides():
    config = DefaultPerPartitionConfig({"spark.streaming.kafka.maxRatePerPartition": "50"},
                                       maxRates={A: 7}, minRates={B: 3})
    assert config.maxRatePerPartition(A) == 7 and config.maxRatePerPartition(B) == 50
    assert config.minRatePerPartition(A) == 1 and config.minRatePerPartition(B) == 3


def test_a_partition_without_a_maximum_is_not_throttled_by_another_ones_maximum():
    # Only A has a maximum rate; B and C have none (0): they read to their ends. Spark
    # floors B and C at minRatePerPartition records per batch here, which throttles them.
    latest, current = {A: 1000, B: 500, C: 13}, {A: 0, B: 400, C: 10}
    config = DefaultPerPartitionConfig({}, maxRates={A: 10.0})
    assert clamp(latest, current, config, 2.0) == {A: 20, B: 500, C: 13}
    limits = maxMessagesPerPartition(latest, current, config, 2.0, None)
    assert limits == {A: 20}  # only the partitions under a limit are named
    max_rate, min_rate = {A: 10.0, B: 0, C: 0}, {A: 1, B: 1, C: 1}
    spark = spark_max_messages(latest, current, max_rate, min_rate, 2.0, None)
    assert spark == {A: 20, B: 1, C: 1}  # the behaviour deliberately not copied
    assert limits == {tp: n for tp, n in spark.items() if max_rate[tp] > 0}


PARTITIONS = [TopicPartition("t", p) for p in range(6)]
partition_case = st.fixed_dictionaries({
    "position": st.integers(0, 10**9),
    "lag": st.integers(0, 10**6),
    "max_rate": st.one_of(st.just(0.0), st.floats(0.01, 10**5)),
    "min_rate": st.integers(1, 1000),
})


@settings(max_examples=400, deadline=None)
@given(st.lists(partition_case, min_size=1, max_size=len(PARTITIONS)),
       st.floats(0.05, 60.0), st.one_of(st.none(), st.floats(0.0, 10**6)),
       st.one_of(st.just(0), st.integers(1, 10**6)))
# A positive estimate so small that every lag share underflows to 0.0: still a limit.
@example([{"position": 0, "lag": 2, "max_rate": 0.0, "min_rate": 1}] * 2, 1.0, 5e-324, 0)
def test_clamp_properties(cases, secs, estimate, cap):
    tps = PARTITIONS[:len(cases)]
    current = {tp: c["position"] for tp, c in zip(tps, cases, strict=True)}
    latest = {tp: c["position"] + c["lag"] for tp, c in zip(tps, cases, strict=True)}
    max_rate = {tp: c["max_rate"] for tp, c in zip(tps, cases, strict=True)}
    min_rate = {tp: c["min_rate"] for tp, c in zip(tps, cases, strict=True)}
    config = Config(max_rate, min_rate)
    uncapped = clamp(latest, current, config, secs, estimate)
    ends = clamp(latest, current, config, secs, estimate, cap)
    backpressure = estimate is not None and estimate > 0
    total_lag = sum(latest[tp] - current[tp] for tp in tps)
    for tp in tps:
        lag, read = latest[tp] - current[tp], uncapped[tp] - current[tp]
        assert current[tp] <= ends[tp] <= latest[tp]  # never back, never beyond the end
        assert current[tp] <= uncapped[tp] <= latest[tp]
        if not backpressure and max_rate[tp] == 0:
            assert uncapped[tp] == latest[tp]  # 0 = no limit, whatever other partitions say
        if max_rate[tp] > 0:  # at most rate * seconds, but at least the minimum
            assert read <= max(secs * max_rate[tp], min_rate[tp])
            assert read >= min(lag, min_rate[tp])
        if backpressure and total_lag > 0:  # the estimate shared by lag, floored at the min
            share = lag / total_lag * estimate
            assert read <= max(secs * share * (1 + 1e-9), min_rate[tp])
            assert read >= min(lag, min_rate[tp])
    read_uncapped = sum(uncapped[tp] - current[tp] for tp in tps)
    read_capped = sum(ends[tp] - current[tp] for tp in tps)
    if cap == 0:
        assert ends == uncapped
    else:  # the cap is honoured exactly and split in proportion to the (limited) lag
        assert read_capped == min(cap, read_uncapped)
        if read_uncapped > cap:
            for tp in tps:
                exact = (uncapped[tp] - current[tp]) * cap / read_uncapped
                assert math.floor(exact) <= ends[tp] - current[tp] <= math.ceil(exact)


def test_default_config_rejects_overrides_it_cannot_honour():
    with pytest.raises(ConfigurationError, match="maxRates"):
        DefaultPerPartitionConfig({}, maxRates={A: -1})
    with pytest.raises(ConfigurationError, match="minRates"):
        DefaultPerPartitionConfig({}, minRates={A: 0})
    with pytest.raises(ConfigurationError, match="TopicPartition"):
        DefaultPerPartitionConfig({}, maxRates={"t-0": 5})


def test_the_direct_streams_total_cap_is_exact_beyond_floating_point():
    # maxRecordsPerBatch is split with the source's exact integer split: lags beyond 2**53
    # never read more than the cap (floating point shares overshot it by 2 here).
    config = Config({A: 0, B: 0}, {A: 1, B: 1})
    ends = clamp({A: 2**60 + 1, B: 3}, {A: 0, B: 0}, config, 1.0, None, maxTotal=2**60 + 1)
    assert sum(ends.values()) == 2**60 + 1


class _Rates(dict):
    """A mapping of maximum rates that answers from elsewhere (a lookup of its own)."""

    def get(self, key, default=None):
        return 5.0


@pytest.mark.parametrize("patch", ["instance method", "rates mapping", "subclass",
                                   "another object's method"])
def test_a_maximum_set_any_way_limits_the_batch(patch):
    # Planning skips asking each partition only for the library's own configurations with
    # no maximum; a maximum given on the instance, by a mapping of one's own or by a
    # subclass is asked and kept.
    class Slower(DefaultPerPartitionConfig):
        def maxRatePerPartition(self, topicPartition):
            return 5.0

    config = Slower({}) if patch == "subclass" else DefaultPerPartitionConfig({})
    if patch == "instance method":
        config.maxRatePerPartition = lambda tp: 5.0
    elif patch == "rates mapping":
        config.maxRates = _Rates()
    elif patch == "another object's method":
        limited = DefaultPerPartitionConfig({"spark.streaming.kafka.maxRatePerPartition": "5"})
        config.maxRatePerPartition = limited.maxRatePerPartition
    ends = clamp({A: 1000, B: 1000}, {A: 0, B: 0}, config, 2.0, None)
    assert ends == {A: 10, B: 10}
    assert clamp({A: 1000, B: 1000}, {A: 0, B: 0}, DefaultPerPartitionConfig({}), 2.0,
                 None) == {A: 1000, B: 1000}
