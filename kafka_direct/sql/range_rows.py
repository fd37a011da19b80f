"""Offset ranges as rows: what the source emits and the sink reads with ``emit=offsetRanges``.

A streaming query that only moves records from Kafka into a table pays, in Spark's JVM, for
every record twice: the source's Arrow batches become rows, and the rows become the sink's
Arrow batches again. With the source option ``emit=offsetRanges`` the source's tasks hand on
the offset ranges the batch planned instead of their records, one row per range
(``topic``, ``partition``, ``fromOffset``, ``untilOffset``, Spark's ``OffsetRange``), and the
``kafka-direct-postgres`` sink's task reads those ranges itself with the same reader
and COPYs them with their claims (:mod:`kafka_direct.sql.sink.range_reads`): per range, not
per record, is then what crosses the JVM.

Each range is still a plan in the query's offset log before its batch runs; a retried task
gets the same rows and reads the same records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import OffsetRange

__all__ = ["EMIT_MODES", "RANGE_COLUMNS", "is_range_schema", "range_batch", "range_schema",
           "ranges_of"]

#: The source's ``emit`` values: its records (Spark's Kafka schema), or the offset ranges.
EMIT_MODES = ("records", "offsetRanges")
#: The columns of a DataFrame of offset ranges, in order.
RANGE_COLUMNS = ("topic", "partition", "fromOffset", "untilOffset")

_ARROW_SCHEMA = pa.schema([pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
                           pa.field("fromOffset", pa.int64()),
                           pa.field("untilOffset", pa.int64())])


def range_schema() -> Any:
    """The StructType of a DataFrame of offset ranges (one row per planned range)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType([StructField("topic", StringType(), True),
                       StructField("partition", IntegerType(), True),
                       StructField("fromOffset", LongType(), True),
                       StructField("untilOffset", LongType(), True)])


def is_range_schema(fields: Sequence[tuple[str, Any]]) -> bool:
    """Whether a DataFrame's ``(name, Spark type)`` fields are those of offset ranges."""
    if tuple(name for name, _ in fields) != RANGE_COLUMNS:
        return False
    wanted = {f.name: f.dataType for f in range_schema().fields}
    return all(dataType == wanted[name] for name, dataType in fields)


def range_batch(offsetRanges: Iterable[OffsetRange]) -> Any:
    """``offsetRanges`` as one ``pyarrow.RecordBatch`` of the range schema, in order."""
    ranges = list(offsetRanges)
    return pa.RecordBatch.from_arrays(
        [pa.array([r.topic for r in ranges], pa.string()),
         pa.array([r.partition for r in ranges], pa.int32()),
         pa.array([r.fromOffset for r in ranges], pa.int64()),
         pa.array([r.untilOffset for r in ranges], pa.int64())], schema=_ARROW_SCHEMA)


def ranges_of(batches: Iterable[Any]) -> Iterator[OffsetRange]:
    """The offset ranges in ``batches`` (Arrow record batches, or Spark ``Row``s), in order.

    Raises:
        ConfigurationError: A row that is not an offset range (a null, a negative offset,
            ``untilOffset`` below ``fromOffset``, an empty topic): the DataFrame was not the
            ``kafka-direct`` source's ``emit=offsetRanges`` output as it came.
    """
    for batch in batches:
        if isinstance(batch, (pa.RecordBatch, pa.Table)):
            names = tuple(batch.schema.names)
            if names != RANGE_COLUMNS:
                raise ConfigurationError(
                    f"the sink reads offset ranges, but its rows have the columns "
                    f"{list(names)}, not {list(RANGE_COLUMNS)}: write the kafka-direct "
                    "source's emit=offsetRanges output as it comes", setting="emit")
            rows: Iterable[Sequence[Any]] = zip(*(batch.column(i).to_pylist()
                                                  for i in range(4)), strict=True)
        else:
            rows = (batch,)
        for row in rows:
            yield _offset_range(row)


def _offset_range(row: Sequence[Any]) -> OffsetRange:
    if len(row) != len(RANGE_COLUMNS):
        raise ConfigurationError(
            f"the sink got a row of {len(row)} values, which is no offset range (topic, "
            "partition, fromOffset, untilOffset); write the kafka-direct source's "
            "emit=offsetRanges output as it comes, without changing its rows", setting="emit")
    topic, partition, fromOffset, untilOffset = (row[0], row[1], row[2], row[3])
    if (not isinstance(topic, str) or not topic or not isinstance(partition, int)
            or not isinstance(fromOffset, int) or not isinstance(untilOffset, int)
            or partition < 0 or fromOffset < 0 or untilOffset < fromOffset):
        raise ConfigurationError(
            f"the sink got a row that is no offset range: topic={topic!r}, partition="
            f"{partition!r}, fromOffset={fromOffset!r}, untilOffset={untilOffset!r}; write "
            "the kafka-direct source's emit=offsetRanges output as it comes, without changing "
            "its rows", setting="emit")
    return OffsetRange(topic, partition, fromOffset, untilOffset)
