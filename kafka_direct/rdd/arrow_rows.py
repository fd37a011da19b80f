"""Kafka messages as Arrow record batches with the schema of Spark's Kafka source.

A Python data source may hand Spark rows as tuples, which PySpark then converts value by
value in Python, or as ``pyarrow.RecordBatch``es, which go to the JVM as they are. Building
the columns directly from the consumer's messages is several times cheaper than the tuple
conversion (8x and more in ``bench/structured.py``), so the source yields record batches.

Columns: ``key`` and ``value`` (binary, null when absent), ``topic`` (string), ``partition``
(int), ``offset`` (long), ``timestamp`` (UTC; null when the record has none),
``timestampType`` (Kafka's numbering: 0 create time, 1 log append time, -1 none) and, with
``includeHeaders``, ``headers`` (array of (key string, value binary); null when the record
has no header, as Spark's source).

Kafka's timestamps are milliseconds in an int64, Spark's microseconds in an int64: a record
whose milliseconds times 1000 leave the int64 range (a producer that wrote nanoseconds) is a
:class:`~kafka_direct.errors.RecordError` naming it, as Spark's source fails on it
(``Math.multiplyExact``), never a timestamp wrapped around.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import pyarrow as pa

from kafka_direct.arrow_values import constant
from kafka_direct.errors import RecordError
from kafka_direct.rdd.kafka_schema import (
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    timestamp_error,
)

__all__ = ["ChunkBatchBuilder", "RangesBatchBuilder", "RecordBatchBuilder", "arrow_schema",
           "source_schema"]

_first = itemgetter(0)
_second = itemgetter(1)


def source_schema(includeHeaders: bool, columns: Sequence[str] | None = None) -> Any:
    """The source's StructType: Spark's Kafka source columns, ``headers`` only if asked.

    Args:
        includeHeaders: Whether the rows have ``headers`` (last, as Spark's source).
        columns: Only these columns, in this order (see
            :func:`~kafka_direct.rdd.kafka_schema.select_columns`); None: all of them.
    """
    from pyspark.sql.types import StructType

    from kafka_direct.rdd.kafka_schema import kafka_source_schema

    full = kafka_source_schema()
    if columns is not None:
        return StructType([full[name] for name in columns])
    return full if includeHeaders else StructType(full.fields[:7])


def arrow_schema(includeHeaders: bool, columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema Spark expects of the source's record batches (exactly)."""
    return _arrow_schema(includeHeaders, None if columns is None else tuple(columns))


@functools.lru_cache(maxsize=64)
def _arrow_schema(includeHeaders: bool, columns: tuple[str, ...] | None) -> pa.Schema:
    # Asked by every range's builder (twice: its columns', and the full schema's types):
    # converted from Spark's types once per worker.
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(includeHeaders, columns), timezone="UTC")


class _PartitionBatches:
    """What both builders share: one partition's schema, columns and constant columns."""

    def __init__(self, topic: str, partition: int, includeHeaders: bool,
                 columns: Sequence[str] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.schema = arrow_schema(includeHeaders, columns)
        #: The columns built, in order; the others never are (column pruning).
        self.columns = tuple(self.schema.names)
        self.includeHeaders = "headers" in self.columns
        full = arrow_schema(True)
        self._timestamp = full.field("timestamp").type
        self._headers = full.field("headers").type if self.includeHeaders else None
        # Built from bytes: pa.scalar would import pandas into the task's worker.
        self._topic = constant(topic, pa.string())
        self._partition = constant(partition, pa.int32())

    def _batch(self, made: dict[str, Any]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([made[name] for name in self.columns],
                                          schema=self.schema)


class RecordBatchBuilder(_PartitionBatches):
    """Turns lists of one partition's confluent-kafka messages into record batches.

    Args:
        topic: The messages' topic.
        partition: The messages' partition.
        includeHeaders: Whether to build the ``headers`` column.
        columns: Only these columns, in this order (None: all of the schema's).
    """


    def build(self, messages: Sequence[Any]) -> pa.RecordBatch:
        """One record batch of ``messages`` (records only: no error messages).

        ``messages`` are records of this builder's partition in increasing offset order, as
        a consumer delivers them: the offsets column relies on it (see below). Only the
        builder's columns are made; a timestamp Spark cannot hold fails only a read that
        has the ``timestamp`` column.
        """
        count = len(messages)
        if count == 0:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        # map() over the message type's methods calls them from C: about twice as fast as a
        # comprehension, which runs a Python step per record and column. Every call a
        # record saves counts: these calls are most of a task's Python time.
        kind = type(messages[0])
        wanted = self.columns
        made: dict[str, Any] = {}
        if "timestamp" in wanted or "timestampType" in wanted:
            made.update(self._stamps(messages, kind, count))
        if "key" in wanted:
            keys = list(map(kind.key, messages))
            # Keyless records are common: a null column without converting the Nones.
            made["key"] = (pa.nulls(count, pa.binary()) if keys.count(None) == count
                           else pa.array(keys, pa.binary()))
        if "value" in wanted:
            made["value"] = pa.array(list(map(kind.value, messages)), pa.binary())
        if "topic" in wanted:
            made["topic"] = self._topics(count)
        if "partition" in wanted:
            made["partition"] = self._partitions(count)
        if "offset" in wanted:
            made["offset"] = self._offsets(messages, kind, count)
        if self._headers is not None:
            headers = [h if h else None for h in map(kind.headers, messages)]
            made["headers"] = pa.array(headers, self._headers)
        return self._batch(made)

    def _topics(self, count: int) -> pa.Array:
        return pa.repeat(self._topic, count)

    def _partitions(self, count: int) -> pa.Array:
        return pa.repeat(self._partition, count)

    def _stamps(self, messages: Sequence[Any], kind: Any, count: int) -> dict[str, Any]:
        """The ``timestamp`` and ``timestampType`` columns (checked when ``timestamp`` is read)."""
        import pyarrow.compute as pc  # not at the top: the driver's processes need none

        stamps = list(map(kind.timestamp, messages))
        # Not zip(*pairs): with thousands of arguments it is ten times slower.
        millis = pa.array(list(map(_second, stamps)), pa.int64())
        kinds = list(map(_first, stamps))
        first_kind = kinds[0]
        if "timestamp" in self.columns and (first_kind != 0 or kinds.count(0) != count):
            # One vectorised pass per batch; only a failed check looks at records one by one.
            # A record without a timestamp has -1 here, always in range.
            bounds = pc.min_max(millis)
            if (bounds["min"].as_py() < MIN_TIMESTAMP_MS
                    or bounds["max"].as_py() > MAX_TIMESTAMP_MS):
                raise self._out_of_range(messages, millis)
        if kinds.count(first_kind) == count:
            # The common case, one timestamp type throughout: two constant columns instead
            # of a converted list.
            types = pa.repeat(pa.scalar(first_kind - 1, pa.int32()), count)
            if "timestamp" not in self.columns:
                stamp_column = None
            elif first_kind == 0:
                stamp_column = pa.nulls(count, self._timestamp)
            else:
                stamp_column = pc.multiply(millis, 1000).cast(self._timestamp)
        else:
            # confluent-kafka's kind 0 is "no timestamp" (the value is then -1): a null
            # here. Its kinds 1 (create) and 2 (log append) are Kafka's 0 and 1.
            missing = pa.array([k == 0 for k in kinds], pa.bool_())
            millis = pc.if_else(missing, pa.scalar(None, pa.int64()), millis)
            stamp_column = (pc.multiply(millis, 1000).cast(self._timestamp)
                            if "timestamp" in self.columns else None)
            types = pc.subtract(pa.array(kinds, pa.int32()), pa.scalar(1, pa.int32()))
        return {"timestamp": stamp_column, "timestampType": types}

    def _out_of_range(self, messages: Sequence[Any], millis: pa.Array) -> RecordError:
        """The error of the first record whose timestamp Spark cannot hold.

        Only called when the batch's bounds are out of range, so there is such a record
        (records without a timestamp hold -1, always in range).
        """
        import pyarrow.compute as pc

        outside = pc.or_(pc.less(millis, MIN_TIMESTAMP_MS),
                         pc.greater(millis, MAX_TIMESTAMP_MS))
        row = pc.index(outside, True).as_py()
        topic, partition = self._partition_of(row)
        return timestamp_error(topic, partition, messages[row].offset(), millis[row].as_py())

    def _partition_of(self, row: int) -> tuple[str, int]:
        """The topic and partition of the batch's ``row``."""
        return self.topic, self.partition

    def _offsets(self, messages: Sequence[Any], kind: Any, count: int) -> pa.Array:
        """The offsets column: computed when the offsets have no gap, else read one by one.

        A partition's offsets only grow, so first and last ``count - 1`` apart means the
        offsets are exactly ``first, first + 1, ...`` (no transaction marker or compacted
        record between): no call per record is needed.
        """
        import pyarrow.compute as pc

        first = messages[0].offset()
        if messages[-1].offset() - first == count - 1:
            return pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count),
                                     start=pa.scalar(first - 1, pa.int64()))
        return pa.array(list(map(kind.offset, messages)), pa.int64())


class RangesBatchBuilder(RecordBatchBuilder):
    """Turns the messages of several partitions' ranges into one record batch.

    A task that reads many small ranges in one fetch session hands Spark one batch for many
    ranges rather than a batch of a few rows per range: a record batch's fixed cost (its
    columns' checks and arrays here, its handling in Spark) is paid once. The rows keep the
    order of the ranges given, each range's in offset order.

    Args:
        includeHeaders: Whether to build the ``headers`` column.
        columns: Only these columns, in this order (None: all of the schema's).
    """

    def __init__(self, includeHeaders: bool, columns: Sequence[str] | None = None) -> None:
        super().__init__("", 0, includeHeaders, columns)
        self._parts: list[tuple[str, int, int]] = []

    def build_ranges(self, parts: Sequence[tuple[str, int, Sequence[Any]]]
                     ) -> pa.RecordBatch:
        """One record batch of ``(topic, partition, messages)`` parts, in their order.

        Each part's messages are records of its partition in increasing offset order.
        """
        self._parts = [(topic, partition, len(messages)) for topic, partition, messages in parts]
        joined: list[Any] = []
        for _, _, messages in parts:
            joined.extend(messages)
        try:
            return self.build(joined)
        finally:
            self._parts = []

    def _topics(self, count: int) -> pa.Array:
        topics: list[str] = []
        for topic, _, size in self._parts:
            topics.extend([topic] * size)
        return pa.array(topics, pa.string())

    def _partitions(self, count: int) -> pa.Array:
        partitions: list[int] = []
        for _, partition, size in self._parts:
            partitions.extend([partition] * size)
        return pa.array(partitions, pa.int32())

    def _offsets(self, messages: Sequence[Any], kind: Any, count: int) -> pa.Array:
        # Offsets of several partitions: never computed from the first and the last.
        return pa.array(list(map(kind.offset, messages)), pa.int64())

    def _partition_of(self, row: int) -> tuple[str, int]:
        for topic, partition, size in self._parts:
            if row < size:
                return topic, partition
            row -= size
        return self.topic, self.partition


class ChunkBatchBuilder(_PartitionBatches):
    """Turns the native reader's chunks into record batches, wrapping its buffers.

    The chunk's bytes become the arrays' buffers as they are (no copy); only the constant
    ``topic`` and ``partition`` columns are made here. Same schema and values as
    :class:`RecordBatchBuilder`.

    Args:
        topic: The chunks' topic.
        partition: The chunks' partition.
        includeHeaders: Whether to build the ``headers`` column (the chunks must carry it).
        columns: Only these columns, in this order (None: all of the schema's); the chunks
            must carry their buffers (:attr:`native_columns`).
    """


    def build(self, chunk: Any) -> pa.RecordBatch:
        """One record batch of a :class:`~kafka_direct.client.columnar.Chunk`.

        Raises:
            RecordError: A record's timestamp does not fit Spark's (the chunk's
                ``badIndex``, found by the reader against this module's bounds).
        """
        from kafka_direct.client import columnar as c

        count, b = chunk.count, chunk.buffers
        wrap = pa.py_buffer
        if chunk.badIndex >= 0 and "timestamp" in self.columns:
            offset = int.from_bytes(b[c.OFFSETS][8 * chunk.badIndex:8 * chunk.badIndex + 8],
                                    "little", signed=True)
            raise timestamp_error(self.topic, self.partition, offset, chunk.badMillis)

        def validity(index: int) -> Any:
            return None if b[index] is None else wrap(b[index])

        wanted = self.columns
        made: dict[str, Any] = {}
        if "key" in wanted:
            made["key"] = pa.Array.from_buffers(pa.binary(), count, [
                validity(c.KEY_VALID), wrap(b[c.KEY_OFFSETS]), wrap(b[c.KEY_DATA])])
        if "value" in wanted:
            made["value"] = pa.Array.from_buffers(pa.binary(), count, [
                validity(c.VALUE_VALID), wrap(b[c.VALUE_OFFSETS]), wrap(b[c.VALUE_DATA])])
        if "topic" in wanted:
            made["topic"] = pa.repeat(self._topic, count)
        if "partition" in wanted:
            made["partition"] = pa.repeat(self._partition, count)
        if "offset" in wanted:
            made["offset"] = pa.Array.from_buffers(pa.int64(), count, [None, wrap(b[c.OFFSETS])])
        if "timestamp" in wanted:
            made["timestamp"] = pa.Array.from_buffers(self._timestamp, count, [
                validity(c.STAMPS_VALID), wrap(b[c.STAMPS])])
        if "timestampType" in wanted:
            made["timestampType"] = pa.Array.from_buffers(pa.int32(), count,
                                                          [None, wrap(b[c.TYPES])])
        if self._headers is not None:
            total = len(b[c.HKEY_OFFSETS]) // 4 - 1
            entry = self._headers.value_type
            pairs = pa.StructArray.from_arrays([
                pa.Array.from_buffers(pa.string(), total, [
                    None, wrap(b[c.HKEY_OFFSETS]), wrap(b[c.HKEY_DATA])]),
                pa.Array.from_buffers(pa.binary(), total, [
                    validity(c.HVALUE_VALID), wrap(b[c.HVALUE_OFFSETS]),
                    wrap(b[c.HVALUE_DATA])]),
            ], fields=list(entry))
            made["headers"] = pa.Array.from_buffers(
                self._headers, count, [validity(c.HEADER_VALID), wrap(b[c.HEADER_OFFSETS])],
                children=[pairs])
        return self._batch(made)

    @property
    def native_columns(self) -> int:
        """The columns the native reader copies, as its mask (see ``_columnar.c``)."""
        from kafka_direct.client import columnar as c

        return ((c.WANT_KEY if "key" in self.columns else 0)
                | (c.WANT_VALUE if "value" in self.columns else 0)
                | (c.WANT_HEADERS if self.includeHeaders else 0))
