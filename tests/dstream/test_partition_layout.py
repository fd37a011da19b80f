"""A batch's input description in layout order, against the general one, range by range.

Differential: :meth:`PartitionLayout.describe` (one ``%`` formatting of a template kept per
layout) writes the text :func:`describe_ranges` writes for the same ranges, whatever the
topics' names hold (a ``%`` or a brace included), the offsets' sizes, and the layout's
changes from batch to batch.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_direct.dstream.direct_kafka_input_dstream import describe_ranges
from kafka_direct.dstream.partition_layout import PartitionLayout
from kafka_direct.offset_range import OffsetRange
from kafka_direct.topic_partition import TopicPartition

_TOPICS = st.text(st.sampled_from("ab%d{}s.-_\t"), min_size=1, max_size=6)
_OFFSETS = st.integers(0, 2**63 - 2)  # room for the second batch's one more


def _ranges(layout, offsets):
    froms = [min(pair) for pair in offsets]
    untils = [max(pair) for pair in offsets]
    return froms, untils, OffsetRange.many(layout.topics, layout.numbers, froms, untils)


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(
    st.dictionaries(st.tuples(_TOPICS, st.integers(0, 50)), st.tuples(_OFFSETS, _OFFSETS),
                    max_size=30),
    min_size=1, max_size=4))
def test_the_layouts_description_is_the_general_one(batches):
    layout = PartitionLayout()
    for batch in batches:
        ends = {TopicPartition(topic, partition): 0 for topic, partition in batch}
        layout.arrange(ends)
        offsets = [batch[(tp.topic, tp.partition)] for tp in layout.partitions]
        froms, untils, ranges = _ranges(layout, offsets)
        assert layout.describe(froms, untils) == describe_ranges(ranges)
        # Asked again (the template kept), with other offsets of the same partitions.
        shifted = [until + 1 for until in untils]
        assert layout.describe(untils, shifted) == describe_ranges(
            OffsetRange.many(layout.topics, layout.numbers, untils, shifted))


def test_a_thousand_partitions_describe_as_the_general_one():
    layout = PartitionLayout()
    layout.arrange({TopicPartition(f"scale-{t}", p): 0 for t in range(10) for p in range(100)})
    froms = [p * 7919 % 1000003 for p in range(1000)]
    untils = [f + p % 5 for p, f in enumerate(froms)]
    froms, untils, ranges = _ranges(layout, list(zip(froms, untils, strict=True)))
    assert layout.describe(froms, untils) == describe_ranges(ranges)


def test_offsets_not_of_the_layouts_length_are_refused():
    layout = PartitionLayout()
    layout.arrange({TopicPartition("t", 0): 0, TopicPartition("t", 1): 0})
    with pytest.raises(ValueError, match="layout of 2 partitions"):
        layout.describe([1], [2])
    assert layout.describe([1, 2], [3, 4]) == ("topic: t\tpartition: 0\toffsets: 1 to 3\n"
                                               "topic: t\tpartition: 1\toffsets: 2 to 4")
