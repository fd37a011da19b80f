"""A direct write's claims: each (topic, partition) of its rows with its first and last offset."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.row_offsets import RowOffsets, ranges_of


def _grouped(rows):
    """What Arrow's group_by says of the rows: the reference."""
    table = pa.table({"t": pa.array([r[0] for r in rows], pa.string()),
                      "p": pa.array([r[1] for r in rows], pa.int32()),
                      "o": pa.array([r[2] for r in rows], pa.int64())})
    grouped = table.group_by(["t", "p"]).aggregate([("o", "min"), ("o", "max"),
                                                    ("o", "count")])
    return sorted(((t, p), low, high, n) for t, p, low, high, n in zip(
        *(grouped.column(c).to_pylist() for c in ("t", "p", "o_min", "o_max", "o_count")),
        strict=True))


def _columns(rows):
    return (pa.array([r[0] for r in rows], pa.string()),
            pa.array([r[1] for r in rows], pa.int32()),
            pa.array([r[2] for r in rows], pa.int64()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5),
                          st.integers(0, 10**12)), max_size=60),
       st.booleans())
def test_the_ranges_of_any_rows_are_what_arrows_group_by_says(rows, oneTopic):
    # One topic goes the numpy way, several Arrow's group_by: both must agree with it.
    if oneTopic:
        rows = [("a", p, o) for _, p, o in rows]
    assert sorted(ranges_of(*_columns(rows))) == _grouped(rows)


def test_batches_add_up_per_partition_and_rows_without_coordinates_are_refused():
    seen = RowOffsets((2, 0, 1))
    for rows in ([("t", 1, 7), ("t", 0, 3), ("t", 1, 5)], [("t", 1, 9), ("t", 0, 4)]):
        topics, partitions, offsets = _columns(rows)
        seen.observe(pa.record_batch([partitions, offsets, topics], names=["p", "o", "t"]))
    assert [(c.topic, c.partition, c.fromOffset, c.untilOffset, c.rows)
            for c in seen.claims()] == [("t", 0, 3, 5, 2), ("t", 1, 5, 10, 3)]
    missing = pa.record_batch([pa.array([0], pa.int32()), pa.array([None], pa.int64()),
                               pa.array(["t"])], names=["p", "o", "t"])
    with pytest.raises(ConfigurationError, match="no topic, partition or offset"):
        seen.observe(missing)
