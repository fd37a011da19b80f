"""OffsetRange.many against the constructor, on any values (Hypothesis).

``many`` promises the same ranges and the same errors as building each range with the
constructor: the same type of error with the same message, or the same ranges.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_direct import OffsetRange
from kafka_direct.conf_values import MAX_OFFSET

EDGES = [0, 1, -1, 2**31 - 1, 2**31, MAX_OFFSET, MAX_OFFSET + 1, -(2**63)]
ANY_INT = st.one_of(st.sampled_from(EDGES), st.integers(-5, 2**64))
VALUES = st.one_of(ANY_INT, st.booleans(), st.floats(allow_nan=False, max_value=1e20),
                   st.builds(np.int64, st.integers(0, 100)), st.none())
TOPICS = st.one_of(st.text(max_size=5), st.binary(max_size=3), st.none(), st.integers(),
                   st.lists(st.text(max_size=2), max_size=2), st.dictionaries(
                       st.text(max_size=1), st.integers(), max_size=1))


def _outcome(build):
    try:
        return "ok", build()
    except Exception as error:  # the outcome compared: type and message
        return type(error).__name__, str(error)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(TOPICS, VALUES, VALUES, VALUES), min_size=1, max_size=4))
def test_many_gives_what_the_constructor_gives(rows):
    topics, partitions, froms, untils = (list(column) for column in zip(*rows, strict=True))
    assert _outcome(lambda: OffsetRange.many(topics, partitions, froms, untils)) == \
        _outcome(lambda: [OffsetRange(*row) for row in rows])


@pytest.mark.parametrize("topic", [["t"], {"t": 1}, {"t"}])
def test_an_unhashable_topic_gets_the_constructors_configuration_error(topic):
    expected = _outcome(lambda: OffsetRange(topic, 0, 0, 1))
    assert expected[0] == "ConfigurationError"
    assert _outcome(lambda: OffsetRange.many(["good", topic], [0, 0], [0, 0], [1, 1])) == \
        expected


class _OwnRange(OffsetRange):
    """A user's range class (OffsetRange is public and not final)."""

    __slots__ = ()


def test_many_on_a_subclass_builds_instances_of_the_subclass():
    # The constructor path (taken when a value needs the full check) builds _OwnRange; the
    # checked-at-once path builds plain OffsetRange, unequal to the subclass's ranges.
    built = _OwnRange.many(["t", "u"], [0, 1], [0, 2], [1, 3])
    assert [type(r) for r in built] == [_OwnRange, _OwnRange]
    assert built == [_OwnRange("t", 0, 0, 1), _OwnRange("u", 1, 2, 3)]
