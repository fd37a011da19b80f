r"""Arrow record batches as COPY's CSV, encoded in Arrow's C++ writer.

Spark hands a Python sink's tasks their rows as Arrow record batches, and the native reader
gives a KafkaRDD's records as Arrow batches too; :class:`CsvStream` turns them into one
``COPY ... FROM STDIN WITH (FORMAT csv)`` stream without a Python loop per value for the
common types (:func:`copy_batches` runs that COPY). What PostgreSQL's CSV input needs and
Arrow's writer does not give is converted column by column first:

* binary -> ``\x``-hex text (bytea's hex input), vectorised with numpy; into a ``bytea``
  column (or a domain over it: :func:`bytea_columns_of` asks the target's catalog), the
  value as it is when every byte of the column is printable ASCII other than the backslash
  (bytea's escape input reads such a text back byte for byte). Only bytea reads both forms
  as the same bytes: into a text or json column, a value's form must not depend on the
  other values of its batch;
* timestamps with a time zone -> UTC (written with ``+0000``: an instant stays that
  instant in a ``timestamptz`` column, and is its UTC wall time in a ``timestamp`` one);
* arrays, structs and maps -> JSON text (for ``json``/``jsonb`` columns), with non-finite
  floats as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, bytes as ``\x``-hex,
  dates and times in ISO format, decimals as text;
* intervals (durations) -> ``<n> microseconds``; the null type -> text.

NULL is an empty unquoted field and an empty string a quoted one (``""``), which is
PostgreSQL's CSV convention, so both survive.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from kafka_direct.postgres.catalog import bytea_columns

__all__ = ["CsvStream", "bytea_columns_of", "copy_batches", "copy_ready", "encode_batch"]

_HEX_DIGITS = b"0123456789abcdef"


def _hex_table() -> Any:
    """Byte -> its two hex digits as one little-endian uint16 (high digit first in memory)."""
    import numpy as np

    return np.array([_HEX_DIGITS[b >> 4] | (_HEX_DIGITS[b & 15] << 8) for b in range(256)],
                    dtype="<u2")


_table: Any = None


def _as_text(array: Any) -> Any:
    r"""A binary Arrow array as its own text, when bytea's input reads that text back.

    PostgreSQL's bytea input takes a text without a backslash as its bytes, one for one
    (its escape format: only a backslash starts an escape, and ``\x`` the hex format). A
    column whose every byte is printable ASCII other than the backslash (text payloads:
    JSON, CSV, logs) is then sent as it is: half the bytes of its hex form, for Arrow's
    writer to write and for PostgreSQL to parse, and no hex pass. None for any other
    column (it goes hex).
    """
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_binary(array.type)
    count = len(array)
    if array.buffers()[1] is None:  # no offsets: no value
        return array.cast(pa.large_string() if large else pa.string())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)[
        array.offset:array.offset + count + 1]
    data = array.buffers()[2]
    first, last = (int(offsets[0]), int(offsets[-1])) if count else (0, 0)
    if data is not None and last > first:
        body = np.frombuffer(data, dtype=np.uint8)[first:last]
        # Printable ASCII is 0x20-0x7e: below 0x20 wraps past 0x7e once 0x20 is taken off.
        if int((body - np.uint8(0x20)).max()) > 0x7e - 0x20 or bool((body == 0x5c).any()):
            return None
    return array.cast(pa.large_string() if large else pa.string())


def _hex_binary(array: Any) -> Any:
    r"""A binary Arrow array as ``\x``-hex large strings (NULLs stay NULL).

    The digits of all values come from one table lookup over the data buffer (each value's
    digits stay where its bytes were, twice as wide); Arrow's C++ kernel adds the prefix.
    """
    global _table
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from kafka_direct.arrow_values import constant

    if _table is None:
        _table = _hex_table()
    if pa.types.is_fixed_size_binary(array.type):
        array = array.cast(pa.binary())
    count = len(array)
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=width)[
        array.offset:array.offset + count + 1].astype(np.int64)
    data = array.buffers()[2]
    first, last = int(offsets[0]), int(offsets[-1])
    body = (np.frombuffer(data, dtype=np.uint8)[first:last] if data is not None and last > first
            else np.empty(0, dtype=np.uint8))
    digits = _table[body].view(np.uint8)
    bare = pa.LargeStringArray.from_buffers(count, pa.py_buffer(2 * (offsets - first)),
                                            pa.py_buffer(digits))
    # Constants built from bytes: pa.scalar would import pandas into the task's worker.
    hexed = pc.binary_join_element_wise(constant("\\x", pa.large_string()), bare,
                                        constant("", pa.large_string()))
    if array.null_count:
        hexed = pc.if_else(pc.is_valid(array), hexed, constant(None, pa.large_string()))
    return hexed


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return f"{value // datetime.timedelta(microseconds=1)} microseconds"
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _nested(value: Any, arrow_type: Any) -> Any:
    """A nested value as JSON data: maps (lists of pairs in Python) become objects."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {str(_json_value(_nested(k, arrow_type.key_type))):
                _nested(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        return {arrow_type.field(i).name: _nested(value.get(arrow_type.field(i).name),
                                                  arrow_type.field(i).type)
                for i in range(arrow_type.num_fields)}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) \
            or pa.types.is_fixed_size_list(arrow_type):
        return [_nested(v, arrow_type.value_type) for v in value]
    return _json_value(value)


def _as_json(array: Any) -> Any:
    import pyarrow as pa

    texts = [None if value is None else
             json.dumps(_nested(value, array.type), separators=(",", ":"), allow_nan=False)
             for value in array.to_pylist()]
    return pa.array(texts, pa.large_string())


def _column(array: Any, bytea: bool = False) -> Any:
    """One column as the CSV writer and PostgreSQL's CSV input both take it.

    ``bytea``: the column's target is a bytea column (its own text may go for binary).
    """
    import pyarrow as pa

    kind = array.type
    if pa.types.is_fixed_size_binary(kind):
        return _column(array.cast(pa.binary()), bytea)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        text = _as_text(array) if bytea else None
        return _hex_binary(array) if text is None else text
    if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz != "UTC":
        return array.cast(pa.timestamp(kind.unit, tz="UTC"))
    if pa.types.is_nested(kind):
        return _as_json(array)
    if pa.types.is_duration(kind):
        return pa.array([None if v is None else _json_value(v) for v in array.to_pylist()],
                        pa.large_string())
    if pa.types.is_null(kind):
        return array.cast(pa.string())
    if pa.types.is_dictionary(kind):
        return _column(array.dictionary_decode(), bytea)
    return array


def copy_ready(batch: Any, bytea_columns: Collection[int] = ()) -> Any:
    """``batch`` with every column in a form :func:`encode_batch` can write.

    ``bytea_columns``: the indices of the columns whose target is a bytea column.
    """
    import pyarrow as pa

    columns = [_column(batch.column(i), i in bytea_columns) for i in range(batch.num_columns)]
    return pa.RecordBatch.from_arrays(columns, names=[f"c{i}" for i in range(len(columns))])


def encode_batch(batch: Any, bytea_columns: Collection[int] = ()) -> bytes:
    """One record batch as CSV rows for ``COPY ... WITH (FORMAT csv)``, no header.

    ``bytea_columns``: the indices of the columns whose target is a bytea column (see
    :func:`bytea_columns_of`); binary columns elsewhere go as hex.
    """
    import pyarrow as pa
    import pyarrow.csv as csv

    if batch.num_rows == 0:
        return b""
    sink = pa.BufferOutputStream()
    csv.write_csv(copy_ready(batch, bytea_columns), sink,
                  csv.WriteOptions(include_header=False, quoting_style="needed"))
    return bytes(sink.getvalue().to_pybytes())


class CsvStream:
    """A file-like object over record batches, for ``cursor.copy_expert``.

    Encodes one batch at a time, so memory holds one batch's CSV, whatever the task's size.

    Args:
        batches: The rows, as Arrow record batches (read lazily).
        bytea_columns: The indices of the columns whose target is a bytea column
            (:func:`bytea_columns_of`); settable until the first read.

    Attributes:
        rows: Rows encoded so far (all of them once the COPY has read to the end).
        failure: What the batches raised, or None. The database driver reports an error in
            ``read()`` as a failed COPY of its own; the caller raises this one instead
            (:func:`copy_batches` does), so a reader's typed error keeps its type.
    """

    def __init__(self, batches: Iterable[Any], bytea_columns: Collection[int] = ()) -> None:
        self._batches: Iterator[Any] = iter(batches)
        self.bytea_columns = frozenset(bytea_columns)
        self._pending = memoryview(b"")
        self.rows = 0
        self.failure: BaseException | None = None

    def read(self, size: int = -1) -> bytes:
        """The next at most ``size`` bytes (everything left of one batch for -1)."""
        while not len(self._pending):
            try:
                batch = next(self._batches, None)
            except BaseException as error:
                self.failure = error
                raise
            if batch is None:
                return b""
            self.rows += batch.num_rows
            self._pending = memoryview(encode_batch(batch, self.bytea_columns))
        if size is None or size < 0 or size >= len(self._pending):
            chunk, self._pending = self._pending, memoryview(b"")
        else:
            chunk, self._pending = self._pending[:size], self._pending[size:]
        return bytes(chunk)

    def readline(self, size: int = -1) -> bytes:
        """Not line-based: COPY reads blocks; here for file-like completeness."""
        return self.read(size)


def copy_batches(cursor: Any, table: Any, columns: Sequence[str], batches: Iterable[Any],
                 chunk_rows: int = 10_000, chunk_bytes: int = 32 << 20) -> int:
    """COPY record batches into ``table`` on ``cursor``; returns how many rows were sent.

    As ``sinks.postgres_writer.copy_rows`` does with rows: the batches are taken in chunks
    of about ``chunk_rows`` rows (or ``chunk_bytes``), each sent by a COPY of its own. So
    the reading of the batches (a Kafka read, its waits) happens between statements, never
    inside one: a ``statement_timeout`` bounds each COPY, not the read; and memory holds
    one chunk, whatever the range's size. A trigger may skip rows: what PostgreSQL stores
    is its business, as with any COPY.

    Args:
        cursor: A psycopg2 cursor, in the caller's transaction.
        table: The target (a ``psycopg2.sql`` identifier).
        columns: The target's columns, one per batch column, in the batches' order.
        batches: Arrow record batches (read lazily).
        chunk_rows: Rows per COPY, about (whole batches are sent).
        chunk_bytes: Arrow bytes per COPY, about.

    Raises:
        BaseException: What ``batches`` raised (a reader's typed error), as it was; the
            caller's transaction must then roll back.
        psycopg2.Error: A COPY failed (the caller's transaction is then aborted).
    """
    from psycopg2 import sql

    statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
        table, sql.SQL(", ").join(sql.Identifier(c) for c in columns)).as_string(cursor)
    bytea = bytea_columns_of(cursor, table.as_string(cursor), columns)
    sent = 0
    pending: list[Any] = []
    rows = size = 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= chunk_rows or size >= chunk_bytes:
            sent += _copy_chunk(cursor, statement, pending, bytea)
            pending, rows, size = [], 0, 0
    if pending:
        sent += _copy_chunk(cursor, statement, pending, bytea)
    return sent


def bytea_columns_of(cursor: Any, table: str, columns: Sequence[str] | None = None
                     ) -> frozenset[int]:
    """The indices in ``columns`` of the target's bytea columns (domains over bytea too).

    The catalog's answer (:func:`~kafka_direct.postgres.catalog.bytea_columns`), asked
    once in the cursor's transaction.

    Args:
        cursor: A psycopg2 cursor.
        table: The target as SQL text, quoted as needed (``"schema"."table"``), as
            ``regclass`` reads it.
        columns: The columns the COPY names, in its order; None for all the table's, in
            their order.
    """
    order, bytea = bytea_columns(cursor, table)
    names = order if columns is None else list(columns)
    return frozenset(index for index, name in enumerate(names) if name in bytea)


def _copy_chunk(cursor: Any, statement: str, batches: list[Any],
                bytea_columns: Collection[int]) -> int:
    stream = CsvStream(batches, bytea_columns)
    try:
        cursor.copy_expert(statement, stream, size=1 << 20)
    except Exception:
        if stream.failure is not None:
            raise stream.failure from None  # not the driver's "error in .read() call"
        raise
    return stream.rows
