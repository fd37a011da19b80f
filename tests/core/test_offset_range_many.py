"""OffsetRange.many: a batch's ranges checked at once, with the constructor's own errors."""

import pytest

from kafka_direct import ConfigurationError, OffsetRange
from kafka_direct.conf_values import MAX_OFFSET


def test_many_builds_what_the_constructor_builds():
    ranges = OffsetRange.many(["a", "a", "b"], [0, 1, 0], [0, 5, MAX_OFFSET],
                              [3, 5, MAX_OFFSET])
    assert ranges == [OffsetRange("a", 0, 0, 3), OffsetRange("a", 1, 5, 5),
                      OffsetRange("b", 0, MAX_OFFSET, MAX_OFFSET)]
    assert [hash(r) for r in ranges] == [hash(OffsetRange("a", 0, 0, 3)),
                                         hash(OffsetRange("a", 1, 5, 5)),
                                         hash(OffsetRange("b", 0, MAX_OFFSET, MAX_OFFSET))]
    with pytest.raises(AttributeError):  # still frozen
        ranges[0].untilOffset = 9  # type: ignore[misc]
    assert OffsetRange.many([], [], [], []) == []


@pytest.mark.parametrize(("topics", "partitions", "froms", "untils", "message"), [
    (["a", ""], [0, 0], [0, 0], [1, 1], "non-empty string"),
    (["a", "b"], [0, -1], [0, 0], [1, 1], "partition must be >= 0"),
    (["a", "b"], [0, True], [0, 0], [1, 1], "partition must be an int"),
    (["a", "b"], [0, 0], [0, 4], [1, 3], "fromOffset 4 > untilOffset 3"),
    (["a", "b"], [0, 0], [0, -2], [1, 3], "fromOffset"),
    (["a", "b"], [0, 0], [0, 0], [1, MAX_OFFSET + 1], "untilOffset"),
    (["a", "b"], [0, 0], [0, 1.0], [1, 3], "fromOffset"),
])
def test_a_bad_range_among_many_raises_the_constructors_error(topics, partitions, froms,
                                                               untils, message):
    with pytest.raises(ConfigurationError, match=message):
        OffsetRange.many(topics, partitions, froms, untils)


def test_lists_of_different_lengths_are_refused():
    with pytest.raises(ConfigurationError, match="as many"):
        OffsetRange.many(["a"], [0, 1], [0], [1])
