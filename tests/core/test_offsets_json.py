"""One codec for offsets as JSON: the source's offset log and the offset link share its rules."""

import pytest

from kafka_direct import ConfigurationError, TopicPartition
from kafka_direct.offsets_json import (
    normalise_offsets,
    offsets_from_json,
    offsets_json,
    offsets_to_json,
)
from kafka_direct.sql.link.source_side import SourceLink

# Spellings of partition 7 other than "7": the link once took "007" and 7 where the
# source refused them, so one partition could be stored under two keys.
OTHER_SPELLINGS = ["007", "07", " 7", "+7", "7 ", "\u0667", "\u00b2"]


@pytest.mark.parametrize("key", [*OTHER_SPELLINGS, 7, True, None])
def test_a_partition_has_one_spelling_everywhere(key):
    data = {"t": {key: 1}}
    with pytest.raises(ConfigurationError, match="not a partition number"):
        offsets_from_json(data)
    with pytest.raises(ConfigurationError, match="not a partition number"):
        normalise_offsets(data, "a plan's start")
    with pytest.raises(ConfigurationError, match="not a partition number"):
        offsets_json(data)


@pytest.mark.parametrize("offset", [-1, True, 1.0, "5", None, 2**63])
def test_an_offset_is_an_int_from_0_to_2_63_minus_1_everywhere(offset):
    data = {"t": {"0": offset}}
    for read in (offsets_from_json, lambda d: normalise_offsets(d, "stored offsets")):
        with pytest.raises(ConfigurationError, match="integer >= 0"):
            read(data)


def test_the_canonical_spelling_reads_the_same_on_both_sides():
    data = {"b": {"10": 1, "2": 2**63 - 1}, "a": {"0": 0}}
    assert normalise_offsets(data, "x") == offsets_to_json(offsets_from_json(data))
    assert list(normalise_offsets(data, "x")) == ["a", "b"]
    assert list(normalise_offsets(data, "x")["b"]) == ["2", "10"]
    assert offsets_json(data) == '{"a":{"0":0},"b":{"2":9223372036854775807,"10":1}}'
    assert offsets_from_json(data)[TopicPartition("b", 10)] == 1


def test_the_link_refuses_what_the_source_refuses_before_touching_the_database():
    link = SourceLink("host=nowhere.invalid connect_timeout=1", "store")
    with pytest.raises(ConfigurationError, match="not a partition number"):
        link.record_plan({"t": {"007": 1}}, {"t": {"007": 2}})
