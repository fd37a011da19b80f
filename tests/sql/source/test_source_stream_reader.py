"""The stream reader's driver side over a model cluster: the Source contract, exactly."""

import json
import logging
import os
import pickle
import shutil
import tempfile
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from kafka_direct import ConfigurationError, DataLossError, TopicPartition
from kafka_direct.errors import UnknownTopicOrPartitionError
from kafka_direct.offsets_json import offsets_from_json, offsets_to_json
from kafka_direct.sql.source.metadata import SourceMetadata
from kafka_direct.sql.source.options import parse_source_options
from kafka_direct.sql.source.planning import KafkaInputPartition
from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader
from kafka_direct.task_errors import CarriedTaskError, carried_error
from tests.fakes.fake_cluster import FakeCluster, FakeDriverConsumer

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class TimedDriver(FakeDriverConsumer):
    """Answers offsetsForTimes from per-partition record timestamps (ms = 1000 * offset)."""

    def offsetsForTimes(self, timestamps):
        found = {}
        for tp, ms in timestamps.items():
            log = self.cluster.log(tp)
            offset = max(log.start, -(-ms // 1000))
            found[tp] = offset if offset < log.stable else log.stable
        return found


class FakeLink:
    store = "fake-store"

    def __init__(self, committed=None):
        self.stored = committed
        self.plans = []
        self.resets = []
        self.released = False
        self.fail = None

    def committed(self):
        return self.stored

    def stored_on_held_session(self):
        return self.stored

    def record_plan(self, start, end, resets=None):
        if self.fail is not None:
            raise self.fail
        self.plans.append((start, end))
        self.resets.append(resets)
        return len(self.plans)

    def release(self):
        self.released = True


class FakeClock:
    def __init__(self):
        self.ms = 5_000_000.0

    def __call__(self):
        return self.ms


def cluster_with(partitions=2, records=10):
    cluster = FakeCluster()
    cluster.create("t", partitions)
    for p in range(partitions):
        cluster.produce(TopicPartition("t", p), records)
    return cluster


def make_reader(cluster, link=None, clock=None, drivers=None, **options):
    raw = {"kafka.bootstrap.servers": "fake:1", "subscribe": "t"}
    raw.update({k.replace("__", "."): str(v) for k, v in options.items()})
    if "assign" in raw or "subscribePattern" in raw:
        raw.pop("subscribe")
    parsed = parse_source_options(raw, streaming=True, check_client=False)
    made = drivers if drivers is not None else []

    def factory(params):
        made.append(TimedDriver(cluster, params))
        return made[-1]

    return KafkaDirectStreamReader(parsed, link, SourceMetadata(parsed, factory),
                                   clockMs=clock)


def typed(raised):
    assert isinstance(raised.value, CarriedTaskError)
    return carried_error(raised.value)


def ranges_of(reader, start, end):
    return [(r.topic, r.partition, r.fromOffset, r.untilOffset)
            for p in reader.partitions(start, end) for r in p.offsetRanges]


# -- initialOffset --------------------------------------------------------------------------

def test_a_new_query_starts_where_startingOffsets_says():
    cluster = cluster_with()
    cluster.log(T1).start = 4
    assert make_reader(cluster).initialOffset() == {"t": {"0": 10, "1": 10}}
    assert make_reader(cluster, startingOffsets="earliest").initialOffset() == {
        "t": {"0": 0, "1": 4}}
    assert make_reader(cluster, startingOffsets='{"t": {"0": 3, "1": -2}}').initialOffset() \
        == {"t": {"0": 3, "1": 4}}
    assert make_reader(cluster, startingOffsets='{"t": {"0": -1, "1": 7}}').initialOffset() \
        == {"t": {"0": 10, "1": 7}}


@pytest.mark.parametrize("starting, fragment", [
    ('{"t": {"0": 3}}', "misses t-1"),
    ('{"t": {"0": 3, "1": 3, "5": 1}}', "it names t-5, which the source does not read. "),
    ('{"t": {"0": 3, "5": 1}}', "it names t-5, which the source does not read; it misses t-1"),
    ('{"u": {"0": 1}, "t": {"0": 1, "1": 1}}', "names u-0"),
    ('{"t": {"0": 11, "1": 0}}', "offset 11 of t-0 is beyond its end offset 10"),
    ('{"t": "earliest", "u": "latest"}', "names topics u, which the source does not read"),
])
def test_json_starting_offsets_must_fit_the_partitions(starting, fragment):
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster_with(), startingOffsets=starting).initialOffset()
    error = typed(raised)
    assert isinstance(error, ConfigurationError) and fragment in str(error)


def test_topic_level_starting_offsets_place_every_partition_of_the_topic():
    cluster = cluster_with(partitions=2)
    cluster.create("u", 2)
    for p in range(2):
        cluster.produce(TopicPartition("u", p), 4)
    reader = make_reader(cluster, subscribe="t,u",
                         startingOffsets='{"t": "Latest", "u": {"0": 1, "1": -2}}')
    assert reader.initialOffset() == {"t": {"0": 10, "1": 10}, "u": {"0": 1, "1": 0}}
    whole = make_reader(cluster, subscribe="t", startingOffsets='{"t": "earliest"}')
    assert whole.initialOffset() == {"t": {"0": 0, "1": 0}}


def test_timestamps_find_the_first_record_at_or_after_them():
    cluster = cluster_with()
    assert make_reader(cluster, startingTimestamp=3500).initialOffset() == {
        "t": {"0": 4, "1": 4}}
    by_partition = '{"t": {"0": 0, "1": 9000}}'
    assert make_reader(cluster, startingOffsetsByTimestamp=by_partition).initialOffset() == {
        "t": {"0": 0, "1": 9}}
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster, startingTimestamp=99_000).initialOffset()
    assert "no record of t-0, t-1 has a timestamp at or after 99000" in str(typed(raised))
    late = make_reader(cluster, startingTimestamp=99_000,
                       startingOffsetsByTimestampStrategy="latest")
    assert late.initialOffset() == {"t": {"0": 10, "1": 10}}


def test_assign_checks_the_partitions_exist():
    cluster = cluster_with()
    reader = make_reader(cluster, assign='{"t": [1]}', startingOffsets="earliest")
    assert reader.initialOffset() == {"t": {"1": 0}}
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster, assign='{"t": [0, 7]}').initialOffset()
    assert "names t-7, which the cluster does not have" in str(typed(raised))


def test_an_offset_store_decides_the_start_before_startingOffsets():
    cluster = cluster_with(partitions=3)
    link = FakeLink({"t": {"0": 4}, "gone": {"0": 9}})
    reader = make_reader(cluster, link=link, startingOffsets="latest")
    # t-0 from the store; a topic the query does not read is dropped. Partitions the store
    # lacks are new to the query: left out, read from offset 0 (never at "latest", which
    # would skip records the store records as read once the next batch commits).
    start = reader.initialOffset()
    assert start == {"t": {"0": 4}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 10, "1": 10, "2": 10}}
    assert ranges_of(reader, start, {"t": {"0": 10, "1": 10, "2": 10}}) == [
        ("t", 0, 4, 10), ("t", 1, 0, 10), ("t", 2, 0, 10)]
    # An empty store: the options decide.
    assert make_reader(cluster, link=FakeLink(None)).initialOffset() == {
        "t": {"0": 10, "1": 10, "2": 10}}


@pytest.mark.parametrize("starting", [
    "latest", '{"t": {"0": 7, "1": 7}}', '{"t": {"0": -1, "1": -2}}'])
def test_a_partition_added_while_a_linked_query_was_down_is_read_from_offset_zero(starting):
    # The query first ran on t-0 and t-1 (JSON naming exactly those); the store has both.
    # t-2 was added and written while it was down; the checkpoint is lost.
    cluster = cluster_with(partitions=3)
    reader = make_reader(cluster, link=FakeLink({"t": {"0": 8, "1": 9}}),
                         startingOffsets=starting)
    start = reader.initialOffset()  # JSON no longer checked against the store's partitions
    assert start == {"t": {"0": 8, "1": 9}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ranges_of(reader, start, end) == [("t", 0, 8, 10), ("t", 1, 9, 10), ("t", 2, 0, 10)]


def test_a_by_timestamp_start_does_not_apply_once_the_store_has_offsets():
    cluster = cluster_with(partitions=2)
    reader = make_reader(cluster, link=FakeLink({"t": {"0": 3}}),
                         startingOffsetsByTimestamp='{"t": {"0": 5000}}')
    start = reader.initialOffset()
    assert start == {"t": {"0": 3}}
    assert ranges_of(reader, start, reader.latestOffset(start, ReadAllAvailable())) == [
        ("t", 0, 3, 10), ("t", 1, 0, 10)]


def test_a_partition_new_to_the_store_that_lost_its_first_records_is_data_loss():
    cluster = cluster_with(partitions=2)
    cluster.log(T1).start = 4
    reader = make_reader(cluster, link=FakeLink({"t": {"0": 3}}))
    start = reader.initialOffset()
    with pytest.raises(CarriedTaskError) as raised:
        reader.latestOffset(start, ReadAllAvailable())
    error = typed(raised)
    assert isinstance(error, DataLossError) and (error.topic, error.partition) == ("t", 1)


def test_a_store_beyond_a_truncated_log_is_data_loss():
    cluster = cluster_with()
    cluster.truncate(T0, 5)
    cluster.log(T0).start = 2
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster, link=FakeLink({"t": {"0": 8, "1": 3}})).initialOffset()
    error = typed(raised)
    assert isinstance(error, DataLossError)
    assert (error.topic, error.partition, error.fromOffset, error.logStartOffset) == (
        "t", 0, 8, 2)
    lenient = make_reader(cluster, link=FakeLink({"t": {"0": 8, "1": 3}}),
                          failOnDataLoss="false")
    assert lenient.initialOffset() == {"t": {"0": 2, "1": 3}}


# -- latestOffset: admission control --------------------------------------------------------

def test_max_offsets_per_trigger_is_the_default_limit_shared_by_lag():
    cluster = cluster_with()
    cluster.produce(T1, 30)  # t-0 has 10 new, t-1 40
    reader = make_reader(cluster, maxOffsetsPerTrigger=10)
    start = {"t": {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"t": {"0": 2, "1": 8}}
    assert ranges_of(reader, start, end) == [("t", 0, 0, 2), ("t", 1, 0, 8)]
    # Trigger.Once and friends: everything available, whatever the options say.
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 10, "1": 40}}
    assert reader.reportLatestOffset() == {"t": {"0": 10, "1": 40}}


def test_the_per_partition_cap_follows_the_partitions_of_each_trigger():
    cluster = cluster_with(partitions=1, records=100)
    reader = make_reader(cluster, subscribePattern="t", maxOffsetsPerPartitionPerTrigger=10)
    limit = reader.getDefaultReadLimit()
    assert not isinstance(limit, ReadAllAvailable)
    end = reader.latestOffset({"t": {"0": 0}}, limit)
    assert end == {"t": {"0": 10}}
    cluster.add_partitions("t", 2)
    for p in (1, 2):
        cluster.produce(TopicPartition("t", p), 100)
    end = reader.latestOffset(end, limit)
    assert sum(end["t"].values()) == 10 + 30
    # With maxOffsetsPerTrigger too, the smaller cap wins.
    both = make_reader(cluster, subscribePattern="t", maxOffsetsPerTrigger=12,
                       maxOffsetsPerPartitionPerTrigger=10)
    start = {"t": {"0": 0, "1": 0, "2": 0}}
    assert sum(both.latestOffset(start, both.getDefaultReadLimit())["t"].values()) == 12
    # Trigger.Once: everything available, as for maxOffsetsPerTrigger.
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 100,
                                                                     "2": 100}}


def test_the_first_batch_of_a_run_is_capped_apart_and_the_later_ones_as_before():
    # maxOffsetsFirstTrigger: the run's first batch pays for the query's start, a small one
    # commits sooner; its end goes to the offset log like any other's.
    cluster = cluster_with(partitions=2, records=100)
    reader = make_reader(cluster, maxOffsetsPerPartitionPerTrigger=30,
                         maxOffsetsFirstTrigger=10)
    limit = reader.getDefaultReadLimit()
    start = {"t": {"0": 0, "1": 0}}
    first = reader.latestOffset(start, limit)
    assert first == {"t": {"0": 5, "1": 5}}
    second = reader.latestOffset(first, limit)
    assert second == {"t": {"0": 35, "1": 35}}
    # Alone, it caps the first batch and leaves the rest unlimited.
    alone = make_reader(cluster, maxOffsetsFirstTrigger=4)
    limit = alone.getDefaultReadLimit()
    assert not isinstance(limit, ReadAllAvailable)
    first = alone.latestOffset(start, limit)
    assert sum(first["t"].values()) == 4
    assert alone.latestOffset(first, limit) == {"t": {"0": 100, "1": 100}}
    # Trigger.Once reads everything, as with the other caps.
    once = make_reader(cluster, maxOffsetsFirstTrigger=4)
    assert once.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 100}}


def test_a_first_trigger_with_nothing_new_leaves_the_cap_for_the_first_real_batch():
    cluster = cluster_with(partitions=1, records=0)
    reader = make_reader(cluster, maxOffsetsFirstTrigger=3)
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 0}}
    cluster.produce(T0, 10)
    first = reader.latestOffset({"t": {"0": 0}}, limit)
    assert first == {"t": {"0": 3}}
    assert reader.latestOffset(first, limit) == {"t": {"0": 10}}


def test_the_first_trigger_cap_must_be_positive():
    with pytest.raises(ConfigurationError, match="maxOffsetsFirstTrigger"):
        make_reader(cluster_with(), maxOffsetsFirstTrigger=0)


def test_no_new_offsets_returns_the_start_itself():
    reader = make_reader(cluster_with())
    start = {"t": {"1": 10, "0": 10}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert json.dumps(end) == json.dumps({"t": {"0": 10, "1": 10}})
    assert reader.partitions(start, end) == []


@pytest.mark.parametrize("limit", [ReadAllAvailable(), ReadMaxRows(4)])
def test_the_latest_offsets_are_written_as_json_once_a_trigger(monkeypatch, limit):
    # Spark asks reportLatestOffset right after latestOffset, for the query's progress:
    # when the batch's end is the latest offsets (everything admitted), the JSON just
    # written for the end answers it (1,000 partitions' offsets written again cost 1 ms).
    import kafka_direct.sql.source.parsed_offsets as parsed_module
    import kafka_direct.sql.source.stream_reader as reader_module

    cluster = cluster_with()
    reader = make_reader(cluster, maxOffsetsPerTrigger=4)
    start = {"t": {"0": 10, "1": 10}}
    cluster.produce(T0, 3)
    cluster.produce(T1, 1)
    written = []
    for module in (reader_module, parsed_module):
        monkeypatch.setattr(module, "offsets_to_json",
                            lambda offsets, _real=offsets_to_json: written.append(1)
                            or _real(offsets))
    end = reader.latestOffset(start, limit)
    latest = reader.reportLatestOffset()
    assert end == {"t": {"0": 13, "1": 11}}
    assert latest == {"t": {"0": 13, "1": 11}}
    assert len(written) == 1
    # Capped below the latest: both written, each its own.
    cluster.produce(T0, 9)
    written.clear()
    end = reader.latestOffset(end, limit)
    assert reader.reportLatestOffset() == {"t": {"0": 22, "1": 11}}
    assert end == ({"t": {"0": 22, "1": 11}} if isinstance(limit, ReadAllAvailable)
                   else {"t": {"0": 17, "1": 11}})
    assert len(written) == (1 if isinstance(limit, ReadAllAvailable) else 2)
    assert reader.reportLatestOffset() == {"t": {"0": 22, "1": 11}}


def test_min_offsets_wait_for_enough_or_for_max_trigger_delay():
    cluster = cluster_with(partitions=1, records=0)
    clock = FakeClock()
    reader = make_reader(cluster, clock=clock, minOffsetsPerTrigger=5, maxTriggerDelay="10s")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(5)
    cluster.produce(T0, 1)
    first = reader.latestOffset({"t": {"0": 0}}, limit)
    assert first == {"t": {"0": 1}}  # the first batch never waits
    cluster.produce(T0, 3)
    clock.ms += 9_000
    assert reader.latestOffset(first, limit) == first  # 3 < 5, 9 s < 10 s: wait
    cluster.produce(T0, 2)
    assert reader.latestOffset(first, limit) == {"t": {"0": 6}}  # 5 now
    cluster.produce(T0, 1)
    clock.ms += 9_999
    assert reader.latestOffset({"t": {"0": 6}}, limit) == {"t": {"0": 6}}
    clock.ms += 1
    assert reader.latestOffset({"t": {"0": 6}}, limit) == {"t": {"0": 7}}  # the delay


def test_min_and_max_together():
    cluster = cluster_with(partitions=1, records=0)
    clock = FakeClock()
    reader = make_reader(cluster, clock=clock, minOffsetsPerTrigger=3,
                         maxOffsetsPerTrigger=4, maxTriggerDelay="1m")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(4)
    cluster.produce(T0, 10)
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 4}}
    assert reader.latestOffset({"t": {"0": 4}}, limit) == {"t": {"0": 8}}
    assert reader.latestOffset({"t": {"0": 8}}, limit) == {"t": {"0": 8}}  # 2 < 3


def test_new_partitions_are_read_from_offset_zero():
    cluster = cluster_with()
    reader = make_reader(cluster)
    start = reader.initialOffset()
    cluster.add_partitions("t", 1)
    cluster.produce(T2, 5)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 10, "2": 5}}
    assert ranges_of(reader, start, end) == [("t", 2, 0, 5)]


def test_a_new_partition_that_lost_its_first_records_is_data_loss(caplog):
    cluster = cluster_with()
    start = {"t": {"0": 10, "1": 10}}
    cluster.add_partitions("t", 1)
    cluster.produce(T2, 5)
    cluster.log(T2).start = 3
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster).latestOffset(start, ReadAllAvailable())
    error = typed(raised)
    assert isinstance(error, DataLossError) and (error.partition, error.logStartOffset) == (2, 3)
    with caplog.at_level(logging.WARNING):
        end = make_reader(cluster, failOnDataLoss="false").latestOffset(
            start, ReadAllAvailable())
    assert end["t"]["2"] == 5  # the task skips [0, 3) with a warning of its own
    assert any("offsets [0, 3) were lost" in r.getMessage() for r in caplog.records)


def test_a_partition_missing_from_the_metadata_keeps_its_position():
    cluster = cluster_with()
    cluster.visible_partitions["t"] = 1
    reader = make_reader(cluster)
    start = {"t": {"0": 3, "1": 4}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 4}}


def test_a_truncated_log_is_data_loss_or_a_restart_from_its_log_start():
    cluster = cluster_with()
    cluster.truncate(T0, 6)
    cluster.log(T0).start = 1
    start = {"t": {"0": 9, "1": 2}}
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster).latestOffset(start, ReadAllAvailable())
    error = typed(raised)
    assert isinstance(error, DataLossError)
    assert (error.fromOffset, error.logStartOffset, error.logEndOffset) == (9, 1, 6)
    assert "failOnDataLoss=false" in str(error)
    link = FakeLink()
    reader = make_reader(cluster, link=link, failOnDataLoss="false")
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 1, "1": 10}}
    assert ranges_of(reader, start, end) == [("t", 1, 2, 10)]
    # The plan leaves out the partition that went back; the next batch reads the new log.
    assert link.plans == [({"t": {"1": 2}}, {"t": {"1": 10}})]
    assert ranges_of(reader, end, reader.latestOffset(end, ReadAllAvailable())) == [
        ("t", 0, 1, 6)]


def test_an_open_transaction_holds_a_partition_at_its_position():
    cluster = cluster_with(partitions=1)
    cluster.produce(T0, 2)  # end 12
    cluster.log(T0).open_at = 8  # stable end 8, below a position another run reached
    end = make_reader(cluster).latestOffset({"t": {"0": 10}}, ReadAllAvailable())
    assert end == {"t": {"0": 10}}


def test_pattern_subscriptions_pick_up_new_topics_from_offset_zero():
    cluster = cluster_with()
    cluster.create("other", 1)
    cluster.produce(TopicPartition("other", 0), 3)
    reader = make_reader(cluster, subscribePattern=r"t|t\d+", startingOffsets="earliest")
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    cluster.create("t7", 1)
    cluster.produce(TopicPartition("t7", 0), 2)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 10}, "t7": {"0": 2}}


# -- Trigger.AvailableNow -------------------------------------------------------------------

def test_available_now_reads_up_to_the_offsets_of_its_start_and_ends():
    cluster = cluster_with()
    reader = make_reader(cluster, maxOffsetsPerTrigger=7, startingOffsets="earliest")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    cluster.produce(T0, 100)
    cluster.add_partitions("t", 1)
    cluster.produce(T2, 5)
    seen, batches = Counter(), 0
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        for topic, partition, begin, until in ranges_of(reader, start, end):
            seen.update((topic, partition, o) for o in range(begin, until))
        start, batches = end, batches + 1
    assert start == {"t": {"0": 10, "1": 10}}
    assert sorted(seen) == [("t", p, o) for p in range(2) for o in range(10)]
    assert set(seen.values()) == {1} and batches == 3


def test_a_paused_source_admits_nothing_until_its_file_is_gone(tmp_path):
    # A graceful stop creates the file, waits for the running batch, then stops the query:
    # no trigger after it admits offsets, so none starts a batch the stop would interrupt.
    cluster = cluster_with()
    pause = tmp_path / "pause"
    reader = make_reader(cluster, maxOffsetsPerTrigger=8, pauseFile=str(pause))
    start = {"t": {"0": 0, "1": 0}}
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first == {"t": {"0": 4, "1": 4}}
    pause.touch()
    for limit in (reader.getDefaultReadLimit(), ReadAllAvailable()):
        assert reader.latestOffset(first, limit) is first
    # Under AvailableNow the unchanged start ends the query: the rest waits for a next run.
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) is first
    pause.unlink()
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) == {"t": {"0": 8, "1": 8}}


def test_the_pause_file_option_is_for_streams_and_not_empty(tmp_path):
    with pytest.raises(ConfigurationError, match="'pauseFile' is empty"):
        parse_source_options({"kafka.bootstrap.servers": "k:1", "subscribe": "t",
                              "pauseFile": " "}, streaming=True, check_client=False)
    with pytest.raises(ConfigurationError, match="'pauseFile' pauses a streaming query"):
        parse_source_options({"kafka.bootstrap.servers": "k:1", "subscribe": "t",
                              "pauseFile": str(tmp_path / "p")}, streaming=False,
                             check_client=False)
    # Spark's planner process runs elsewhere than the caller: a relative path would name
    # another file there; a directory would pause the source for good.
    with pytest.raises(ConfigurationError, match="'pauseFile' must be an absolute path"):
        parse_source_options({"kafka.bootstrap.servers": "k:1", "subscribe": "t",
                              "pauseFile": "pause"}, streaming=True, check_client=False)
    with pytest.raises(ConfigurationError, match="'pauseFile' names a directory"):
        parse_source_options({"kafka.bootstrap.servers": "k:1", "subscribe": "t",
                              "pauseFile": str(tmp_path)}, streaming=True,
                             check_client=False)


def test_a_pause_is_logged_when_it_starts_and_when_it_ends(tmp_path, caplog):
    pause = tmp_path / "pause"
    reader = make_reader(cluster_with(), pauseFile=str(pause))
    start = {"t": {"0": 0, "1": 0}}
    with caplog.at_level(logging.INFO, logger="kafka_direct.sql.source.stream_reader"):
        reader.latestOffset(start, ReadAllAvailable())
        pause.touch()
        for _ in range(3):
            reader.latestOffset(start, ReadAllAvailable())
        pause.unlink()
        reader.latestOffset(start, ReadAllAvailable())
    said = [r.getMessage() for r in caplog.records if "pauseFile" in r.getMessage()]
    assert len(said) == 2 and "paused" in said[0] and "resumed" in said[1], said


def test_available_now_names_a_missing_assigned_partition_at_once():
    reader = make_reader(cluster_with(), assign='{"t": [0, 5]}')
    with pytest.raises(CarriedTaskError) as raised:
        reader.prepareForTriggerAvailableNow()
    error = typed(raised)
    assert isinstance(error, UnknownTopicOrPartitionError) and "t-5" in str(error)


# -- partitions, commit, stop, pickling ------------------------------------------------------

def test_the_plan_is_recorded_before_partitions_return():
    cluster = cluster_with()
    link = FakeLink()
    reader = make_reader(cluster, link=link, minPartitions=4)
    start = {"t": {"0": 2}}  # t-1 is new in this batch
    end = {"t": {"0": 10, "1": 10}}
    parts = reader.partitions(start, end)
    assert all(isinstance(p, KafkaInputPartition) for p in parts) and len(parts) == 4
    assert link.plans == [({"t": {"0": 2, "1": 0}}, {"t": {"0": 10, "1": 10}})]
    link.fail = RuntimeError("the store is down")
    with pytest.raises(RuntimeError, match="the store is down"):
        reader.partitions(start, end)


def test_commits_to_the_group_only_inform(caplog):
    cluster = cluster_with()
    plain = make_reader(cluster)
    plain.commit({"t": {"0": 5}})
    assert cluster.committed == {}
    reader = make_reader(cluster, commitOffsetsToGroup="true", kafka__group__id="monitor")
    reader.commit({"t": {"0": 5, "1": 7}})
    assert cluster.committed == {("monitor", T0): 5, ("monitor", T1): 7}
    # A batch planned from a start means the batches up to it completed: the last batch
    # of a run reaches the group even though the engine never calls commit for it.
    reader.latestOffset({"t": {"0": 8, "1": 9}}, ReadAllAvailable())
    assert cluster.committed == {("monitor", T0): 8, ("monitor", T1): 9}
    reader.latestOffset({"t": {"0": 8, "1": 9}}, ReadAllAvailable())
    assert len(cluster.commit_log) == 2  # unchanged offsets are not committed again
    cluster.fail_commits = True
    with caplog.at_level(logging.WARNING):
        reader.commit({"t": {"0": 6}})  # no exception: monitoring only
    assert any("for monitoring failed" in r.getMessage() for r in caplog.records)
    cluster.fail_commits = False
    reader.commit({"t": {"0": 9, "1": 9}})
    reader.stop()  # a run's end reaches the group before the consumer closes
    assert cluster.committed == {("monitor", T0): 9, ("monitor", T1): 9}


def test_without_group_commits_commit_does_not_read_the_offsets(monkeypatch, caplog):
    # The engine hands every batch's end to commit; only commitOffsetsToGroup uses it, so
    # without it the offsets are not read (1,000 partitions' JSON, every trigger).
    reader = make_reader(cluster_with())
    reads = []
    real = reader.codec.read
    monkeypatch.setattr(reader.codec, "read", lambda *args: reads.append(args) or real(*args))
    with caplog.at_level(logging.WARNING):
        reader.commit({"t": {"0": 5, "1": 7}})
        reader.commit("not offsets")
    assert reads == [] and not caplog.records


def test_a_new_querys_first_trigger_commits_nothing_to_the_group():
    # Where the query starts, nothing was read: the group has nothing to learn, and on a
    # fresh cluster its first commit creates Kafka's offsets topic, seconds before the
    # first batch could start. The first batch's end is committed as any batch's.
    cluster = cluster_with(partitions=2, records=10)
    reader = make_reader(cluster, commitOffsetsToGroup="true", kafka__group__id="monitor",
                         startingOffsets="earliest")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert cluster.commit_log == []
    reader.commit(end)
    assert cluster.committed == {("monitor", T0): 10, ("monitor", T1): 10}
    # A run resuming from a checkpoint commits where it resumes (its last batch's end may
    # not have reached the group when the previous run stopped).
    again = make_reader(cluster, commitOffsetsToGroup="true", kafka__group__id="monitor")
    again.latestOffset({"t": {"0": 4, "1": 4}}, ReadAllAvailable())
    assert cluster.committed == {("monitor", T0): 4, ("monitor", T1): 4}


def test_stop_closes_the_consumer_and_lets_go_of_the_store():
    drivers = []
    link = FakeLink()
    reader = make_reader(cluster_with(), link=link, drivers=drivers)
    reader.stop()
    assert drivers == [] and link.released  # no consumer was ever needed
    reader.initialOffset()
    reader.stop()
    assert len(drivers) == 1 and drivers[0].closed


def test_executors_get_the_read_settings_without_driver_state():
    cluster = cluster_with()
    link = FakeLink()
    reader = make_reader(cluster, link=link, minOffsetsPerTrigger=3,
                         kafka__sasl__password="s3cret", kafka__group__id="g")
    reader.initialOffset()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._metadata is None and copy._delay is None
    # The offset store's link goes: read tasks bind their batch's plan with it.
    assert isinstance(copy._link, FakeLink)
    assert copy.settings.read.params["group.id"] == "spark-executor-g"
    assert copy.settings.read.params["enable.auto.commit"] is False
    assert copy.settings.read.params["auto.offset.reset"] == "error"
    assert reader._metadata is not None  # the driver's reader keeps its own
    assert "s3cret" not in repr(copy.options) and "s3cret" not in repr(copy.settings)


def test_read_of_a_placeholder_partition_reads_nothing():
    from pyspark.sql.datasource import InputPartition

    reader = make_reader(cluster_with())
    assert list(reader.read(InputPartition(None))) == []


def test_offsets_that_are_not_ours_fail_clearly():
    reader = make_reader(cluster_with())
    with pytest.raises(CarriedTaskError) as raised:
        reader.latestOffset({"t": {"0": "x"}}, ReadAllAvailable())
    assert "the batch's start offset" in str(typed(raised))


# -- the contract over random histories -----------------------------------------------------

class SourceContract(RuleBasedStateMachine):
    """Batches planned by the reader read every produced offset exactly once.

    Records arrive, partitions are added, the query restarts from its offset log (a new
    reader, the same offsets), the source is paused and resumed (its ``pauseFile``) and
    batches run under random limits; at the end a last ReadAllAvailable batch drains the
    rest.
    """

    @initialize(partitions=st.integers(1, 3), maxRows=st.one_of(st.none(), st.integers(1, 30)),
                minPartitions=st.one_of(st.none(), st.integers(1, 6)))
    def setup(self, partitions, maxRows, minPartitions):
        self.cluster = cluster_with(partitions=partitions, records=0)
        self.pauseDir = tempfile.mkdtemp(prefix="kafka-direct-pause-")
        self.pause = os.path.join(self.pauseDir, "pause")
        self.options = {"startingOffsets": "earliest", "pauseFile": self.pause}
        if maxRows is not None:
            self.options["maxOffsetsPerTrigger"] = maxRows
        if minPartitions is not None:
            self.options["minPartitions"] = minPartitions
        self.maxRows = maxRows
        self.reader = make_reader(self.cluster, **self.options)
        self.start = self.reader.initialOffset()
        self.read = Counter()

    @rule(partition=st.integers(0, 5), count=st.integers(1, 40))
    def produce(self, partition, count):
        logs = self.cluster.topics["t"]
        self.cluster.produce(TopicPartition("t", partition % len(logs)), count)

    @rule()
    def add_partition(self):
        if len(self.cluster.topics["t"]) < 6:
            self.cluster.add_partitions("t", 1)

    @rule()
    def restart(self):
        self.reader.stop()
        self.reader = make_reader(self.cluster, **self.options)
        self.start = json.loads(json.dumps(self.start))  # through the offset log's text

    @rule(paused=st.booleans())
    def pause_or_resume(self, paused):
        if paused:
            open(self.pause, "a").close()
        elif os.path.exists(self.pause):
            os.unlink(self.pause)

    @rule(all_available=st.booleans())
    def batch(self, all_available):
        limit = ReadAllAvailable() if all_available else self.reader.getDefaultReadLimit()
        end = self.reader.latestOffset(self.start, limit)
        if os.path.exists(self.pause):  # paused: no batch, whatever the limit
            assert end is self.start
            return
        assert json.dumps(end) == json.dumps(offsets_to_json(offsets_from_json(end)))
        begin, finish = offsets_from_json(self.start), offsets_from_json(end)
        latest = {TopicPartition("t", p): log.end
                  for p, log in enumerate(self.cluster.topics["t"])}
        for tp, until in finish.items():
            assert begin.get(tp, 0) <= until <= latest[tp]
        moved = sum(until - begin.get(tp, 0) for tp, until in finish.items())
        if self.maxRows is not None and not all_available:
            assert moved <= self.maxRows
        for part in self.reader.partitions(self.start, end):
            for r in part.offsetRanges:
                self.read.update((r.partition, o) for o in range(r.fromOffset, r.untilOffset))
        self.start = end

    @invariant()
    def nothing_read_twice(self):
        if hasattr(self, "read"):
            assert all(count == 1 for count in self.read.values())

    def teardown(self):
        if not hasattr(self, "reader"):
            return
        self.pause_or_resume(paused=False)
        shutil.rmtree(self.pauseDir, ignore_errors=True)
        self.batch(all_available=True)
        produced = {(p, o) for p, log in enumerate(self.cluster.topics["t"])
                    for o in range(log.end)}
        assert set(self.read) == produced


TestSourceContract = SourceContract.TestCase
TestSourceContract.settings = settings(max_examples=60, stateful_step_count=25,
                                       deadline=None)


# -- a checkpoint behind (or ahead of) its offset store -------------------------------------


def test_a_checkpoint_behind_the_store_catches_up_with_one_batch_that_reads_nothing():
    cluster = cluster_with(partitions=2, records=20)
    # The checkpoint's query stopped at 4/6; another run (no checkpoint) moved the store on.
    link = FakeLink({"t": {"0": 12, "1": 6}})
    reader = make_reader(cluster, link=link, maxOffsetsPerTrigger=5)
    start = {"t": {"0": 4, "1": 6}}
    end = reader.latestOffset(start, ReadMaxRows(5))
    assert end == {"t": {"0": 12, "1": 6}}  # exactly at the store, beyond the limit
    # Read nothing (the rows are committed): one empty task binds the plan for the sink.
    assert ranges_of(reader, start, end) == [("t", 0, 12, 12)]
    # Its plan reads nothing (it starts where it ends, at the store).
    assert link.plans == [({"t": {"0": 12, "1": 6}}, {"t": {"0": 12, "1": 6}})]
    # From there on, batches chain onto the store as usual.
    assert reader.latestOffset(end, ReadMaxRows(5)) != end
    assert ranges_of(reader, end, {"t": {"0": 14, "1": 9}}) == [("t", 0, 12, 14),
                                                                 ("t", 1, 6, 9)]


def test_a_store_behind_the_checkpoint_is_left_to_the_sink_to_refuse_with_its_cause():
    cluster = cluster_with(partitions=2, records=20)
    link = FakeLink({"t": {"0": 2, "1": 9}})  # restored from an older backup for t-0
    reader = make_reader(cluster, link=link)
    start = {"t": {"0": 4, "1": 6}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 20, "1": 20}}  # no catch-up: the sink names the cause


def test_a_store_in_step_with_the_checkpoint_changes_nothing():
    cluster = cluster_with(partitions=1, records=20)
    reader = make_reader(cluster, link=FakeLink({"t": {"0": 4}}), maxOffsetsPerTrigger=3)
    assert reader.latestOffset({"t": {"0": 4}}, ReadMaxRows(3)) == {"t": {"0": 7}}


def test_a_linked_query_marks_where_data_loss_moved_a_partition_for_the_sink():
    cluster = cluster_with(partitions=2, records=10)
    link = FakeLink({"t": {"0": 8, "1": 10}})
    reader = make_reader(cluster, link=link, failOnDataLoss="false")
    cluster.recreate("t")  # the topic came back empty, then got 3 records per partition
    for p in range(2):
        cluster.produce(TopicPartition("t", p), 3)
    start = {"t": {"0": 0, "1": 0}}  # where the lost partitions start again
    assert ranges_of(reader, start, {"t": {"0": 3, "1": 3}}) == [("t", 0, 0, 3), ("t", 1, 0, 3)]
    assert link.resets[-1] == {"t": {"0": 0, "1": 0}}
    # A start apart from the store while the log still holds the stored offset is no data
    # loss: not marked (the sink refuses it, naming its cause).
    for p in range(2):
        cluster.produce(TopicPartition("t", p), 10)
    ranges_of(reader, {"t": {"0": 2, "1": 3}}, {"t": {"0": 4, "1": 4}})
    assert link.resets[-1] is None


def test_a_topic_seen_deleted_then_back_with_a_longer_log_is_marked_for_the_sink():
    cluster = cluster_with(partitions=1, records=12)
    link = FakeLink({"t": {"0": 12}})
    reader = make_reader(cluster, link=link, failOnDataLoss="false")
    cluster.delete("t")
    start = reader.latestOffset({"t": {"0": 12}}, ReadAllAvailable())
    assert start == {}  # the lost partition left the offsets
    cluster.create("t", 1)
    cluster.produce(T0, 20)  # the new log outgrew the stored offset
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ranges_of(reader, start, end) == [("t", 0, 0, 20)]
    assert link.resets[-1] == {"t": {"0": 0}}
    # Ending exactly at the old offset, it is read too (never taken for stored records).
    assert ranges_of(reader, start, {"t": {"0": 12}}) == [("t", 0, 0, 12)]
    assert link.resets[-1] == {"t": {"0": 0}}


def test_a_checkpoint_at_offset_zero_of_a_partition_catches_up_too():
    cluster = cluster_with(partitions=2, records=20)
    link = FakeLink({"t": {"0": 15, "1": 5}})
    reader = make_reader(cluster, link=link)
    start = {"t": {"0": 10, "1": 0}}  # the checkpoint knew t-1 while it was empty
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 15, "1": 5}}
    assert ranges_of(reader, start, end) == [("t", 0, 15, 15)]  # one empty task


class _DeletedMidTrigger(TimedDriver):
    """The metadata answer lags a deletion: the first listing still shows the topic, whose
    offsets questions then fail as an unknown partition (what librdkafka answers)."""

    listings = 0

    def listTopics(self, topics):
        type(self).listings += 1
        if type(self).listings == 1:
            from kafka_direct.client.topic_metadata import TopicListing

            return TopicListing({"t": 2}, frozenset())
        return super().listTopics(topics)

    def latestOffsets(self, partitions):
        from confluent_kafka import KafkaError, KafkaException

        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Unknown partition"))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_between_its_listing_and_its_offsets_is_data_loss(fail_on_data_loss):
    cluster = cluster_with(partitions=2, records=10)
    cluster.delete("t")
    _DeletedMidTrigger.listings = 0
    raw = {"kafka.bootstrap.servers": "fake:1", "subscribe": "t",
           "fetchOffset.retryIntervalMs": "1",
           "failOnDataLoss": "true" if fail_on_data_loss else "false"}
    parsed = parse_source_options(raw, streaming=True, check_client=False)
    reader = KafkaDirectStreamReader(
        parsed, None, SourceMetadata(parsed, lambda params: _DeletedMidTrigger(cluster, params)))
    if fail_on_data_loss:
        with pytest.raises(Exception) as raised:
            reader.latestOffset({"t": {"0": 5, "1": 5}}, ReadAllAvailable())
        error = typed(raised)
        assert isinstance(error, DataLossError), error
        assert (error.topic, error.partition, error.fromOffset) == ("t", 0, 5)
    else:
        # The lost partitions leave the offsets, as when the first listing saw the deletion.
        assert reader.latestOffset({"t": {"0": 5, "1": 5}}, ReadAllAvailable()) == {}


# -- the pause (pauseFile) and the rest of a trigger ----------------------------------------


def test_a_paused_trigger_still_commits_the_last_batch_end_to_the_group(tmp_path):
    # The engine commits a batch's end (``commit``) only as the next batch begins; the
    # trigger's start covers a run's last batch. A graceful stop pauses the source after
    # the running batch: the group must still learn where the run stopped.
    cluster = cluster_with(partitions=2, records=10)
    pause = tmp_path / "pause"
    reader = make_reader(cluster, commitOffsetsToGroup="true", kafka__group__id="monitor",
                         startingOffsets="earliest", maxOffsetsPerTrigger=8,
                         pauseFile=str(pause))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"t": {"0": 4, "1": 4}}
    pause.touch()
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) is end
    assert cluster.committed == {("monitor", T0): 4, ("monitor", T1): 4}


def test_a_paused_first_trigger_leaves_the_first_trigger_cap_for_the_first_batch(tmp_path):
    cluster = cluster_with(partitions=1, records=10)
    pause = tmp_path / "pause"
    pause.touch()
    reader = make_reader(cluster, maxOffsetsFirstTrigger=3, pauseFile=str(pause))
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset({"t": {"0": 0}}, limit) == {"t": {"0": 0}}
    pause.unlink()
    first = reader.latestOffset({"t": {"0": 0}}, limit)
    assert first == {"t": {"0": 3}}
    assert reader.latestOffset(first, limit) == {"t": {"0": 10}}


def test_a_paused_first_trigger_leaves_the_store_catch_up_to_the_first_batch(tmp_path):
    cluster = cluster_with(partitions=2, records=20)
    link = FakeLink({"t": {"0": 12, "1": 6}})
    pause = tmp_path / "pause"
    pause.touch()
    reader = make_reader(cluster, link=link, maxOffsetsPerTrigger=5, pauseFile=str(pause))
    start = {"t": {"0": 4, "1": 6}}
    assert reader.latestOffset(start, ReadMaxRows(5)) == start
    assert link.plans == []
    pause.unlink()
    assert reader.latestOffset(start, ReadMaxRows(5)) == {"t": {"0": 12, "1": 6}}


def test_a_paused_trigger_leaves_the_trigger_delay_clock_alone(tmp_path):
    cluster = cluster_with(partitions=1, records=0)
    clock = FakeClock()
    pause = tmp_path / "pause"
    reader = make_reader(cluster, clock=clock, minOffsetsPerTrigger=5, maxTriggerDelay="10s",
                         pauseFile=str(pause))
    limit = reader.getDefaultReadLimit()
    cluster.produce(T0, 1)
    first = reader.latestOffset({"t": {"0": 0}}, limit)
    assert first == {"t": {"0": 1}}
    cluster.produce(T0, 2)
    pause.touch()
    clock.ms += 9_000
    assert reader.latestOffset(first, limit) is first
    pause.unlink()
    assert reader.latestOffset(first, limit) == first  # 2 < 5, 9 s < 10 s: still waits
    clock.ms += 1_000
    assert reader.latestOffset(first, limit) == {"t": {"0": 3}}  # the delay, from the batch


def test_a_paused_available_now_keeps_its_target_and_a_pattern_its_new_topics(tmp_path):
    cluster = cluster_with()
    pause = tmp_path / "pause"
    reader = make_reader(cluster, subscribePattern=r"t|t\d+", startingOffsets="earliest",
                         maxOffsetsPerTrigger=8, pauseFile=str(pause))
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    cluster.create("t7", 1)
    cluster.produce(TopicPartition("t7", 0), 2)
    cluster.produce(T0, 50)
    pause.touch()
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) is first
    pause.unlink()
    end = first
    while True:
        nxt = reader.latestOffset(end, reader.getDefaultReadLimit())
        if nxt == end:
            break
        end = nxt
    assert end == {"t": {"0": 10, "1": 10}}

