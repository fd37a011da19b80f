"""The source's topic lifecycle over a model cluster: deleted, re-created and shrunk logs.

Spark's Kafka source is the model: a partition that disappears is data loss (fail, or with
``failOnDataLoss=false`` warn and drop it, so a re-created topic is read from offset 0);
under ``Trigger.AvailableNow`` a target partition that disappears or ends below the target
is reported too. A transient metadata gap (a partial listing) is not data loss.
"""

import json
import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct import DataLossError, TopicPartition
from kafka_direct.task_errors import CarriedTaskError
from tests.sql.source.test_source_stream_reader import (
    FakeClock,
    FakeLink,
    cluster_with,
    make_reader,
    ranges_of,
    typed,
)

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
U0 = TopicPartition("u", 0)


def two_topics():
    cluster = cluster_with()  # t: 2 partitions of 10 records
    cluster.create("u", 1)
    cluster.produce(U0, 6)
    return cluster


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# -- defect 5: a deleted topic --------------------------------------------------------------

@pytest.mark.parametrize("subscription", [
    {"subscribe": "t,u"},
    {"subscribePattern": "t|u"},
    {"assign": '{"t": [0, 1], "u": [0]}'},
])
def test_a_deleted_topic_is_data_loss_naming_topic_partition_and_fix(subscription):
    cluster = two_topics()
    start = {"t": {"0": 10, "1": 4}, "u": {"0": 6}}
    cluster.delete("t")
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster, **subscription).latestOffset(start, ReadAllAvailable())
    error = typed(raised)
    assert isinstance(error, DataLossError)
    assert (error.topic, error.partition, error.fromOffset) == ("t", 0, 10)
    assert "does not exist" in str(error) and "failOnDataLoss=false" in str(error)


def test_a_deleted_topic_without_fail_on_data_loss_is_dropped_and_comes_back_from_zero(caplog):
    cluster = two_topics()
    link = FakeLink()
    reader = make_reader(cluster, link=link, subscribe="t,u", failOnDataLoss="false")
    start = {"t": {"0": 10, "1": 4}, "u": {"0": 6}}
    cluster.delete("t")
    cluster.produce(U0, 2)
    with caplog.at_level(logging.WARNING):
        end = reader.latestOffset(start, ReadAllAvailable())
    # The offsets (and so the offset log) no longer hold the lost partitions.
    assert json.dumps(end) == json.dumps({"u": {"0": 8}})
    assert any("t-0" in m and "does not exist" in m for m in warnings_of(caplog))
    assert ranges_of(reader, start, end) == [("u", 0, 6, 8)]
    assert link.plans == [({"u": {"0": 6}}, {"u": {"0": 8}})]
    # Still gone at the next trigger: nothing to run, nothing to warn about again.
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    # Re-created and refilled beyond the old positions: the new logs are new partitions,
    # read from offset 0 (not from 10 and 4, which would skip their first records).
    cluster.create("t", 2)
    cluster.produce(T0, 15)
    cluster.produce(T1, 3)
    after = reader.latestOffset(end, ReadAllAvailable())
    assert after == {"t": {"0": 15, "1": 3}, "u": {"0": 8}}
    assert ranges_of(reader, end, after) == [("t", 0, 0, 15), ("t", 1, 0, 3)]
    # A batch replayed from the offset log (a new reader, the logged offsets) plans the same.
    replay = make_reader(cluster, subscribe="t,u", failOnDataLoss="false")
    assert ranges_of(replay, start, end) == [("u", 0, 6, 8)]
    assert ranges_of(replay, end, after) == [("t", 0, 0, 15), ("t", 1, 0, 3)]


def test_the_only_topic_deleted_leaves_empty_offsets_and_a_re_creation_starts_at_zero():
    cluster = cluster_with(partitions=1)
    reader = make_reader(cluster, failOnDataLoss="false")
    start = {"t": {"0": 10}}
    cluster.delete("t")
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {}
    cluster.create("t", 1)
    cluster.produce(T0, 12)
    assert reader.latestOffset(end, ReadAllAvailable()) == {"t": {"0": 12}}


def test_a_lost_topic_is_dropped_even_when_min_offsets_would_delay_the_batch():
    cluster = two_topics()
    clock = FakeClock()
    reader = make_reader(cluster, clock=clock, subscribe="t,u", failOnDataLoss="false",
                         minOffsetsPerTrigger=100, maxTriggerDelay="1h")
    first = reader.latestOffset({"t": {"0": 10, "1": 10}, "u": {"0": 5}},
                                reader.getDefaultReadLimit())  # the first batch never waits
    assert first == {"t": {"0": 10, "1": 10}, "u": {"0": 6}}
    cluster.produce(U0, 1)
    clock.ms += 1
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) == first  # 1 < 100
    cluster.delete("t")
    # The drop must reach the offset log now: waiting could let the topic come back and
    # refill past the old positions unnoticed.
    assert reader.latestOffset(first, reader.getDefaultReadLimit()) == {"u": {"0": 7}}


def test_a_transient_metadata_gap_is_not_data_loss(caplog):
    cluster = two_topics()
    start = {"t": {"0": 3, "1": 4}, "u": {"0": 2}}
    cluster.hidden.add("t")  # the answer left the topic out: no error, positions kept
    end = make_reader(cluster, subscribe="t,u").latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 3, "1": 4}, "u": {"0": 6}}
    cluster.hidden.clear()
    cluster.visible_partitions["t"] = 1  # a partial listing
    with caplog.at_level(logging.INFO):
        end = make_reader(cluster, subscribe="t,u").latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 4}, "u": {"0": 6}}
    assert any("t-1" in r.getMessage() and "keeps its position" in r.getMessage()
               for r in caplog.records)


def test_a_re_created_topic_whose_log_ends_below_the_position_is_data_loss():
    # The case offsets can tell: the new log ends below the position (see behind()).
    cluster = cluster_with(partitions=1)
    cluster.recreate("t")
    cluster.produce(T0, 4)
    with pytest.raises(CarriedTaskError) as raised:
        make_reader(cluster).latestOffset({"t": {"0": 10}}, ReadAllAvailable())
    assert isinstance(typed(raised), DataLossError)


# -- defect 7: Trigger.AvailableNow ---------------------------------------------------------

def available_now(cluster, **options):
    reader = make_reader(cluster, maxOffsetsPerTrigger=7, startingOffsets="earliest",
                         **options)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    return reader, start


def test_available_now_fails_when_a_target_partition_disappears():
    cluster = cluster_with()
    reader, start = available_now(cluster)
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first == {"t": {"0": 4, "1": 3}}
    cluster.delete("t")
    with pytest.raises(CarriedTaskError) as raised:
        reader.latestOffset(first, reader.getDefaultReadLimit())
    error = typed(raised)
    assert isinstance(error, DataLossError) and error.topic == "t"
    assert "failOnDataLoss=false" in str(error)


def test_available_now_without_fail_on_data_loss_goes_on_with_what_exists(caplog):
    cluster = cluster_with()
    cluster.create("u", 1)
    cluster.produce(U0, 5)
    reader, start = available_now(cluster, subscribe="t,u", failOnDataLoss="false")
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    cluster.delete("t")
    with caplog.at_level(logging.WARNING):
        end = reader.latestOffset(first, reader.getDefaultReadLimit())
    assert "t" not in end
    assert any("does not exist" in m for m in warnings_of(caplog))
    while True:  # the run ends with what exists
        following = reader.latestOffset(end, reader.getDefaultReadLimit())
        if following == end:
            break
        end = following
    assert end == {"u": {"0": 5}}


def test_available_now_fails_when_a_log_ends_below_the_target():
    cluster = cluster_with()
    reader, start = available_now(cluster)
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first == {"t": {"0": 4, "1": 3}}
    cluster.truncate(T0, 6)  # above the position 4, below the target 10
    with pytest.raises(CarriedTaskError) as raised:
        reader.latestOffset(first, reader.getDefaultReadLimit())
    error = typed(raised)
    assert isinstance(error, DataLossError)
    assert (error.topic, error.partition, error.logEndOffset) == ("t", 0, 6)
    assert "Trigger.AvailableNow" in str(error) and "failOnDataLoss=false" in str(error)


def test_available_now_without_fail_on_data_loss_reads_up_to_the_shrunk_end(caplog):
    cluster = cluster_with()
    reader, start = available_now(cluster, failOnDataLoss="false")
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    cluster.truncate(T0, 6)
    seen = []
    end = first
    with caplog.at_level(logging.WARNING):
        while True:
            following = reader.latestOffset(end, reader.getDefaultReadLimit())
            if following == end:
                break
            seen += ranges_of(reader, end, following)
            end = following
    assert end == {"t": {"0": 6, "1": 10}}
    assert all(until <= 6 for topic, p, _, until in seen if p == 0)
    assert sum("below the Trigger.AvailableNow target" in m for m in warnings_of(caplog)) == 1
