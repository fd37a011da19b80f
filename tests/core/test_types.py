import pickle

import pytest

from kafka_direct import ConfigurationError, ConsumerRecord, OffsetRange, TopicPartition
from kafka_direct.topic_partition import java_string_hash


def test_java_string_hash_matches_the_jvm():
    # Values of String.hashCode() printed by a JVM (jshell).
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("events-topic-with-a-long-name") == -677631397  # wraps to int32
    assert java_string_hash("\u00e9\u20ac") == 15587  # non-ASCII
    assert java_string_hash("\U0001F600x") == 54959989  # a surrogate pair: two code units


def test_topic_partition_stable_hash_is_kafkas_hash_code():
    # Kafka: 31 * (31 + partition) + topic.hashCode()
    assert TopicPartition("t", 0).stableHash() == 31 * 31 + ord("t")
    assert TopicPartition("hello", 3).stableHash() == 31 * 34 + 99162322


def test_topic_partition_is_hashable_ordered_and_validated():
    assert {TopicPartition("a", 1), TopicPartition("a", 1)} == {TopicPartition("a", 1)}
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]) == [
        TopicPartition("a", 1), TopicPartition("a", 2), TopicPartition("b", 0)]
    assert str(TopicPartition("a", 1)) == "a-1"
    with pytest.raises(ConfigurationError, match="non-empty"):
        TopicPartition("", 0)
    with pytest.raises(ConfigurationError, match=">= 0"):
        TopicPartition("a", -1)
    with pytest.raises(ConfigurationError, match="must be an int"):
        TopicPartition("a", "0")


def test_offset_range_is_half_open_and_validated():
    r = OffsetRange("t", 2, 10, 15)
    assert r.count() == 5
    assert r.topicPartition() == TopicPartition("t", 2)
    assert OffsetRange("t", 0, 7, 7).count() == 0
    assert OffsetRange.create(TopicPartition("t", 2), 10, 15) == r
    assert str(r) == "OffsetRange(topic: 't', partition: 2, range: [10 -> 15])"
    with pytest.raises(ConfigurationError, match="fromOffset 5 > untilOffset 4") as info:
        OffsetRange("t", 0, 5, 4)
    assert info.value.topic == "t" and info.value.fromOffset == 5
    with pytest.raises(ConfigurationError, match="fromOffset"):
        OffsetRange("t", 0, -1, 4)
    with pytest.raises(ConfigurationError, match="untilOffset"):
        OffsetRange("t", 0, 0, 1.5)
    with pytest.raises(AttributeError):
        r.fromOffset = 3  # frozen


def test_value_types_pickle_round_trip():
    r = OffsetRange("t", 1, 0, 9)
    assert pickle.loads(pickle.dumps(r)) == r
    record = ConsumerRecord("t", 1, 5, 1700000000000, 0, b"k", b"v", (("h", b"1"),))
    assert pickle.loads(pickle.dumps(record)) == record
    assert record.value == b"v" and record.headers == (("h", b"1"),)
