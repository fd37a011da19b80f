"""The source's offsets as JSON: one stable text per set of offsets, strict parsing."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_direct import ConfigurationError, TopicPartition
from kafka_direct.offsets_json import offsets_from_json, offsets_to_json
from kafka_direct.sql.source.offsets import (
    parse_assign,
    parse_offsets_option,
    parse_timestamps_option,
)

topics = st.text(alphabet="abcXYZ._-019", min_size=1, max_size=6)
offset_maps = st.dictionaries(
    st.builds(TopicPartition, topics, st.integers(0, 2**31 - 1)),
    st.integers(0, 2**63 - 1), max_size=12)


def test_partitions_sort_numerically_and_topics_by_name():
    offsets = {TopicPartition("b", 10): 1, TopicPartition("b", 2): 2,
               TopicPartition("a", 1): 3}
    assert json.dumps(offsets_to_json(offsets)) == '{"a": {"1": 3}, "b": {"2": 2, "10": 1}}'


@given(offset_maps, st.randoms())
def test_the_text_does_not_depend_on_the_order_offsets_came_in(offsets, random):
    items = list(offsets.items())
    random.shuffle(items)
    assert json.dumps(offsets_to_json(dict(items))) == json.dumps(offsets_to_json(offsets))


@given(offset_maps)
def test_round_trip_through_the_offset_log_text(offsets):
    text = json.dumps(offsets_to_json(offsets))
    assert offsets_from_json(json.loads(text)) == offsets
    # What the engine hands back is written again as the same text.
    assert json.dumps(offsets_to_json(offsets_from_json(json.loads(text)))) == text


@pytest.mark.parametrize("data, fragment", [
    ([], "JSON object of topics"),
    ({"": {"0": 1}}, "JSON object of topics"),
    ({"t": [1, 2]}, "must map partitions"),
    ({"t": {"x": 1}}, "not a partition number"),
    ({"t": {"01": 1}}, "not a partition number"),
    ({"t": {"-1": 1}}, "not a partition number"),
    ({"t": {"2147483648": 1}}, "not a partition number"),
    ({"t": {"0": -1}}, "integer >= 0"),
    ({"t": {"0": True}}, "integer >= 0"),
    ({"t": {"0": 1.5}}, "integer >= 0"),
    ({"t": {"0": "5"}}, "integer >= 0"),
    ({"t": {"0": 2**63}}, "integer >= 0"),
])
def test_offsets_that_are_not_offsets_are_refused(data, fragment):
    with pytest.raises(ConfigurationError, match=fragment):
        offsets_from_json(data, "the batch's start offset")


def test_option_offsets_take_earliest_and_latest_where_allowed():
    text = '{"t": {"0": 5, "1": -1, "2": -2}}'
    assert parse_offsets_option("startingOffsets", text) == ({
        TopicPartition("t", 0): 5, TopicPartition("t", 1): -1, TopicPartition("t", 2): -2}, {})
    with pytest.raises(ConfigurationError, match=r"t-1 can't be latest \(-1\) for batch"):
        parse_offsets_option("startingOffsets", text, allow_latest=False)
    with pytest.raises(ConfigurationError, match=r"t-2 can't be earliest \(-2\) for batch"):
        parse_offsets_option("endingOffsets", text, allow_earliest=False)


@pytest.mark.parametrize("text, fragment", [
    ('{"t": {"0": -3}}', "-2 \\(earliest\\) or -1 \\(latest\\)"),
    ("{'t': {'0': 1}}", "'startingOffsets' is not valid JSON"),
    ('{"t": 5}', "must map partitions to offsets"),
    ("[" * 100000, "not valid JSON"),
])
def test_bad_option_offsets_name_the_option(text, fragment):
    with pytest.raises(ConfigurationError, match=fragment):
        parse_offsets_option("startingOffsets", text)


def test_assign_is_sorted_and_deduplicated():
    assert parse_assign('{"b": [1, 0, 1], "a": [3]}') == (
        TopicPartition("a", 3), TopicPartition("b", 0), TopicPartition("b", 1))


@pytest.mark.parametrize("text, fragment", [
    ("{}", "names no partition"),
    ('{"t": []}', "names no partition"),
    ('{"t": 0}', "list of partition numbers"),
    ('{"t": [true]}', "not a partition number"),
    ('{"t": [-1]}', "not a partition number"),
    ('{"t": ["0"]}', "not a partition number"),
    ("t:0", "not valid JSON"),
])
def test_bad_assign_is_refused_with_an_example(text, fragment):
    with pytest.raises(ConfigurationError, match=fragment) as raised:
        parse_assign(text)
    assert "assign" in str(raised.value)


def test_timestamps_must_be_epoch_milliseconds():
    assert parse_timestamps_option("startingOffsetsByTimestamp", '{"t": {"0": 0}}') == {
        TopicPartition("t", 0): 0}
    for bad in ('{"t": {"0": -1}}', '{"t": {"0": 1.5}}', '{"t": {"0": null}}'):
        with pytest.raises(ConfigurationError, match="epoch milliseconds"):
            parse_timestamps_option("startingOffsetsByTimestamp", bad)


def test_a_topic_may_be_placed_as_a_whole_as_in_spark_4():
    offsets, topics = parse_offsets_option(
        "startingOffsets", '{"a": "eArLiEst", "b": {"0": 23}, "c": "LATEST"}')
    assert offsets == {TopicPartition("b", 0): 23} and topics == {"a": -2, "c": -1}
    with pytest.raises(ConfigurationError, match="topic 'c' can't be LATEST for batch"):
        parse_offsets_option("startingOffsets", '{"c": "LATEST"}', allow_latest=False)
    with pytest.raises(ConfigurationError, match="must map partitions to offsets, or be"):
        parse_offsets_option("startingOffsets", '{"c": "soonest"}')
