import pytest

from kafka_direct import ConfigurationError, LocationStrategies, TopicPartition
from kafka_direct.rdd.location_strategy import ExecutorLocation, preferred_locations

EXECS = [ExecutorLocation("h2", "1"), ExecutorLocation("h1", "0"), ExecutorLocation("h1", "2")]
TPS = [TopicPartition("t", p) for p in range(12)]


def test_prefer_consistent_spreads_stably_over_live_executors():
    first = preferred_locations(LocationStrategies.PreferConsistent(), TPS, EXECS)
    again = preferred_locations(LocationStrategies.PreferConsistent(), TPS, list(reversed(EXECS)))
    assert first == again  # executor order does not matter
    assert all(len(locs) == 1 for locs in first)
    used = {locs[0] for locs in first}
    assert used == {e.taskLocation() for e in EXECS}
    ordered = sorted(EXECS)
    for tp, locs in zip(TPS, first, strict=True):
        assert locs == [ordered[tp.stableHash() % 3].taskLocation()]


def test_no_live_executor_means_no_preference():
    assert preferred_locations(LocationStrategies.PreferConsistent(), TPS[:2], []) == [[], []]


def test_prefer_fixed_uses_live_hosts_only():
    strategy = LocationStrategies.PreferFixed({TPS[0]: "h2", TPS[1]: "dead-host"})
    locs = preferred_locations(strategy, TPS[:3], EXECS)
    assert locs[0] == ["executor_h2_1"]
    consistent = preferred_locations(LocationStrategies.PreferConsistent(), TPS[:3], EXECS)
    assert locs[1] == consistent[1]  # a dead host is never named
    assert locs[2] == consistent[2]


def test_prefer_fixed_validates_its_map():
    with pytest.raises(ConfigurationError, match="TopicPartition"):
        LocationStrategies.PreferFixed({("t", 0): "h"})
    with pytest.raises(ConfigurationError, match="non-empty"):
        LocationStrategies.PreferFixed({TPS[0]: ""})
    fixed = LocationStrategies.PreferFixed({TPS[0]: "h"})
    assert fixed == LocationStrategies.PreferFixed({TPS[0]: "h"})
    assert hash(fixed) == hash(LocationStrategies.PreferFixed({TPS[0]: "h"}))


def test_prefer_brokers_needs_leaders():
    with pytest.raises(ConfigurationError, match="PreferFixed"):
        preferred_locations(LocationStrategies.PreferBrokers(), TPS[:1], EXECS)
    locs = preferred_locations(LocationStrategies.PreferBrokers(), TPS[:1], EXECS,
                               leaders={TPS[0]: "h1"})
    assert locs[0][0].startswith("executor_h1_")
