"""Debezium's change events (``--envelope debezium``): an event as a row, a delete or a truncate.

A Debezium connector writes one event per changed row: the key is a struct of the table's
primary key columns, the value an envelope ``{before, after, source, op, ts_ms, ...}``.
:class:`EnvelopeReader` unwraps the key and value that :mod:`.formats` decoded:

* ``op`` ``c`` (insert), ``r`` (snapshot read) and ``u`` (update): the ``after`` image is the
  row, upserted on the key's fields;
* ``d``: a delete of the key's row (a primary key change is a ``d`` of the old key and a
  ``c`` of the new one: a delete and an upsert); the tombstone after it is the job's
  ``--on-tombstone`` (``delete`` by default with this envelope: a no-op after the ``d``,
  and the delete itself on a compacted topic that has lost the ``d``);
* ``t``: a truncate of the table (``--on-truncate``: ``fail`` by default, ``truncate`` to
  apply it in the batch's transaction, ``ignore``);
* ``m`` (a logical decoding message, no row): skipped.

Formats: JSON with ``schemas.enable`` (``{"schema": ..., "payload": ...}``, the columns'
types from the Connect schema), JSON without it (types inferred, or ``--columns``), and Avro
from a Schema Registry (types from the writer schema's ``connect.name`` and logical types).
Debezium's semantic types become PostgreSQL's own: ``io.debezium.time.Date`` a ``date``,
``MicroTimestamp`` a ``timestamp``, ``ZonedTimestamp`` a ``timestamptz``, Connect's
``Decimal`` a ``numeric(p,s)``, ``VariableScaleDecimal`` a ``numeric``, ``io.debezium.data.
Json`` a ``jsonb`` ... (:data:`SEMANTIC_TYPES`).

A TOASTed column that an update left unchanged comes as Debezium's placeholder
``__debezium_unavailable_value`` (with ``REPLICA IDENTITY DEFAULT``): such a column is
*kept* (:data:`KEEP`): the commit writes the value it had, from an earlier record of the
key in the batch or from the target (:func:`fill_kept`).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka_direct.app.typed.columns import JsonText
from kafka_direct.app.typed.formats import DecodeError, avro_type

__all__ = ["KEEP", "PLACEHOLDER", "SEMANTIC_TYPES", "EnvelopeReader", "after_truncates",
           "apply_truncates", "avro_column", "avro_columns", "connect_column",
           "connect_columns", "fill_kept", "truncated"]

#: Debezium's default ``unavailable.value.placeholder``.
PLACEHOLDER = "__debezium_unavailable_value"
#: The staging column naming a row's kept columns (a JSON array), and the row's field for it.
KEEP = "kafka_direct_keep"

_PLACEHOLDER_BYTES = PLACEHOLDER.encode()
_PLACEHOLDER_BASE64 = base64.b64encode(_PLACEHOLDER_BYTES).decode()
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DAY = datetime.date(1970, 1, 1)

Converter = Callable[[Any], Any] | None
Columns = dict[str, tuple[str, Converter]]


def _bad(reason: str) -> Exception:
    return DecodeError(reason)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"a Debezium time value is {type(value).__name__}, not an integer")
    return value


def _days(value: Any) -> Any:
    if isinstance(value, datetime.date):
        return value
    return _EPOCH_DAY + datetime.timedelta(days=_integer(value))


def _time_of(perSecond: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, datetime.time):
            return value
        micros = _integer(value) * 1_000_000 // perSecond
        if not 0 <= micros < 86_400_000_000:
            raise _bad("a Debezium time of day is out of 00:00 to 24:00")
        return (_EPOCH + datetime.timedelta(microseconds=micros)).time()
    return convert


def _instant(perSecond: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, datetime.datetime):
            return value
        try:
            return _EPOCH + datetime.timedelta(microseconds=_integer(value) * 1_000_000
                                               // perSecond)
        except OverflowError:
            raise _bad("a Debezium timestamp is out of Python's range (years 1 to "
                       "9999)") from None
    return convert


def _zoned(value: Any) -> Any:
    if isinstance(value, datetime.datetime) or not isinstance(value, str):
        return value
    text = value.replace("Z", "+00:00")
    head, dot, tail = text.partition(".")
    if dot:  # Debezium writes up to nine fraction digits; Python reads six
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = f"{head}.{tail[:min(digits, 6)]}{tail[digits:]}"
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        raise _bad("a Debezium ZonedTimestamp is not an ISO 8601 timestamp") from None


def _bytes(value: Any) -> Any:
    if isinstance(value, str):  # JSON carries bytes in base64
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _bad("a bytes field is not base64") from None
    return value


def _decimal(scale: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, decimal.Decimal):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return decimal.Decimal(repr(value))  # decimal.format=NUMERIC
        unscaled = _bytes(value)
        if not isinstance(unscaled, bytes):
            raise _bad("a Decimal field is neither bytes nor a number")
        return decimal.Decimal(int.from_bytes(unscaled, "big", signed=True)).scaleb(-scale)
    return convert


def _variable_decimal(value: Any) -> Any:
    if isinstance(value, decimal.Decimal) or value is None:
        return value
    if not isinstance(value, dict) or "scale" not in value or "value" not in value:
        raise _bad("a VariableScaleDecimal is not a struct of scale and value")
    return _decimal(_integer(value["scale"]))(value["value"])


def _json_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        json.loads(value)
    except (ValueError, RecursionError):
        raise _bad("an io.debezium.data.Json field is not JSON") from None
    return JsonText(value)


def _micro_duration(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{_integer(value)} microseconds"


#: Connect schema names -> (PostgreSQL type, conversion of the field's value).
SEMANTIC_TYPES: dict[str, tuple[str, Converter]] = {
    "io.debezium.time.Date": ("date", _days),
    "org.apache.kafka.connect.data.Date": ("date", _days),
    "io.debezium.time.Time": ("time", _time_of(1_000)),
    "org.apache.kafka.connect.data.Time": ("time", _time_of(1_000)),
    "io.debezium.time.MicroTime": ("time", _time_of(1_000_000)),
    "io.debezium.time.NanoTime": ("time", _time_of(1_000_000_000)),
    "io.debezium.time.Timestamp": ("timestamp", _instant(1_000)),
    "org.apache.kafka.connect.data.Timestamp": ("timestamp", _instant(1_000)),
    "io.debezium.time.MicroTimestamp": ("timestamp", _instant(1_000_000)),
    "io.debezium.time.NanoTimestamp": ("timestamp", _instant(1_000_000_000)),
    "io.debezium.time.ZonedTimestamp": ("timestamptz", _zoned),
    "io.debezium.time.ZonedTime": ("time with time zone", None),
    "io.debezium.time.MicroDuration": ("interval", _micro_duration),
    "io.debezium.time.Year": ("integer", None),
    "io.debezium.data.Json": ("jsonb", _json_text),
    "io.debezium.data.Uuid": ("uuid", None),
    "io.debezium.data.VariableScaleDecimal": ("numeric", _variable_decimal),
}
_CONNECT_TYPES: dict[str, tuple[str, Converter]] = {
    "int8": ("smallint", None), "int16": ("smallint", None), "int32": ("integer", None),
    "int64": ("bigint", None), "float32": ("real", None), "float64": ("double precision", None),
    "boolean": ("boolean", None), "string": ("text", None), "bytes": ("bytea", _bytes),
    "array": ("jsonb", None), "map": ("jsonb", None), "struct": ("jsonb", None)}


def _decimal_column(parameters: Mapping[str, Any]) -> tuple[str, Converter]:
    scale = int(parameters.get("scale", 0))
    precision = parameters.get("connect.decimal.precision")
    kind = f"numeric({int(precision)},{scale})" if precision is not None else "numeric"
    return kind, _decimal(scale)


def connect_column(schema: Mapping[str, Any]) -> tuple[str, Converter]:
    """The column type and value conversion of one field of a Connect (JSON) schema."""
    name = schema.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        return _decimal_column(schema.get("parameters") or {})
    if name in SEMANTIC_TYPES:
        return SEMANTIC_TYPES[name]
    return _CONNECT_TYPES.get(str(schema.get("type")), ("jsonb", None))


def connect_columns(schema: Any) -> Columns:
    """The columns of a Connect struct schema (``{"type": "struct", "fields": [...]}``)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("fields"), list):
        raise _bad("a Debezium struct's schema has no fields")
    return {str(f["field"]): connect_column(f) for f in schema["fields"]
            if isinstance(f, dict) and "field" in f}


def avro_column(schema: Any, named: Mapping[str, Any]) -> tuple[str, Converter]:
    """The column type and value conversion of one field of an Avro writer schema."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return avro_column(branches[0], named)
        return avro_type(schema, named), None
    if isinstance(schema, dict):
        name = schema.get("connect.name")
        if name == "org.apache.kafka.connect.data.Decimal":
            parameters = dict(schema.get("connect.parameters") or {})
            parameters.setdefault("scale", schema.get("scale", 0))
            return _decimal_column(parameters)
        if name in SEMANTIC_TYPES:
            return SEMANTIC_TYPES[str(name)]
    return avro_type(schema, named), None


def avro_columns(schema: Any) -> Columns:
    """The columns of a (parsed) Avro record schema, by the fields' Connect names."""
    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        raise _bad("a Debezium struct's Avro schema is not a record")
    named = schema.get("__named_schemas") or {}
    return {str(f["name"]): avro_column(f["type"], named) for f in schema["fields"]}


def _after_schema(fields: Sequence[Any], field: str,
                  named: Mapping[str, Any] | None = None) -> Any:
    """The ``after`` (``field``) struct's schema in an envelope's Connect or Avro fields."""
    for candidate in fields:
        if isinstance(candidate, dict) and field in (candidate.get("field"),
                                                     candidate.get("name")):
            inner = candidate.get("type")
            if named is None:  # Connect: the field is the struct's schema
                return candidate
            branches = inner if isinstance(inner, list) else [inner]
            for branch in branches:  # Avro: ["null", record or the name of one]
                branch = named.get(branch, branch) if isinstance(branch, str) else branch
                if isinstance(branch, dict) and branch.get("type") in ("record", "error"):
                    return branch
            return None
    return None


def _unavailable(value: Any) -> bool:
    if isinstance(value, str):
        return value in (PLACEHOLDER, _PLACEHOLDER_BASE64)
    if isinstance(value, bytes):
        return value == _PLACEHOLDER_BYTES
    if isinstance(value, list):
        return len(value) == 1 and _unavailable(value[0])
    return False


class EnvelopeReader:
    """Unwraps decoded Debezium keys and values (see the module).

    Args:
        onTruncate: ``fail``, ``truncate`` or ``ignore``.
    """

    def __init__(self, onTruncate: str) -> None:
        self.onTruncate = onTruncate
        self._avro: dict[int, Columns] = {}  # by id of the parsed schema (cached by formats)

    def __repr__(self) -> str:
        return f"EnvelopeReader(onTruncate={self.onTruncate})"

    def _avro_columns(self, parsed: Any, field: str | None) -> Columns:
        found = self._avro.get(id(parsed) if field is None else -id(parsed))
        if found is None:
            schema = parsed if field is None else _after_schema(
                parsed.get("fields") or (), field, parsed.get("__named_schemas") or {})
            if schema is not None:
                schema = {**schema, "__named_schemas": parsed.get("__named_schemas") or {}}
            found = avro_columns(schema) if schema is not None else {}
            self._avro[id(parsed) if field is None else -id(parsed)] = found
        return found

    @staticmethod
    def _typed(fields: Mapping[str, Any], columns: Columns
               ) -> tuple[dict[str, Any], dict[str, str], tuple[str, ...]]:
        """Fields converted by their columns; (values, types, kept: the placeholders')."""
        values: dict[str, Any] = {}
        kept: list[str] = []
        for name, raw in fields.items():
            if raw is not None and _unavailable(raw):
                kept.append(name)
                values[name] = None
                continue
            column = columns.get(name)
            values[name] = (column[1](raw) if column is not None and column[1] is not None
                            and raw is not None else raw)
        return values, {n: c[0] for n, c in columns.items()}, tuple(kept)

    def key(self, fields: dict[str, Any], types: Mapping[str, str], fromSchema: bool,
            parsed: Any) -> tuple[dict[str, Any], Mapping[str, str], bool]:
        """The key's fields (the primary key columns), unwrapped and typed.

        Raises:
            DecodeError: Not a Debezium key.
        """
        if _wrapped(fields):
            payload = fields["payload"]
            if payload is None:
                return {}, types, True
            if not isinstance(payload, dict):
                raise _bad("the key's payload is not a struct of primary key columns")
            values, typed, _ = self._typed(payload, connect_columns(fields["schema"]))
            return values, typed, True
        if parsed is not None and fromSchema:
            values, typed, _ = self._typed(fields, self._avro_columns(parsed, None))
            return values, typed, True
        return fields, types, fromSchema

    def value(self, fields: dict[str, Any], types: Mapping[str, str], fromSchema: bool,
              parsed: Any) -> tuple[str, dict[str, Any], Mapping[str, str], bool,
                                    tuple[str, ...]]:
        """``(op, row fields, their types, fromSchema, kept)`` of an event's value.

        ``op`` is ``c`` (write the row: ``c``, ``r``, ``u``), ``d`` (delete the key's row),
        ``t`` (truncate) or ``skip`` (a message, or a truncate with ``--on-truncate
        ignore``).

        Raises:
            DecodeError: Not a Debezium event, or a truncate with ``--on-truncate fail``.
        """
        if _wrapped(fields):
            payload = fields["payload"]
            if not isinstance(payload, dict):
                raise _bad("the value's payload is not a Debezium envelope (a struct)")
            schema = fields["schema"]
            columns = connect_columns(_after_schema(
                schema.get("fields") or () if isinstance(schema, dict) else (), "after"))
            event, fromSchema = payload, True
        elif parsed is not None and fromSchema:
            columns = self._avro_columns(parsed, "after")
            event = fields
        else:
            columns = {n: (t, None) for n, t in types.items()}
            event = fields
        op = event.get("op")
        if op in ("c", "r", "u"):
            after = event.get("after")
            if not isinstance(after, dict):
                raise _bad(f"a Debezium {op!r} event has no after image")
            values, typed, kept = self._typed(after, columns)
            return "c", values, typed, fromSchema, kept
        if op == "d":
            return "d", {}, {}, fromSchema, ()
        if op == "t":
            if self.onTruncate == "fail":
                raise _bad("a Debezium truncate event: run with --on-truncate truncate to "
                           "empty the table (in the batch's transaction) or --on-truncate "
                           "ignore to skip such events")
            return ("t" if self.onTruncate == "truncate" else "skip"), {}, {}, fromSchema, ()
        if op == "m":
            return "skip", {}, {}, fromSchema, ()
        if "op" not in event:
            raise _bad("the value is not a Debezium change event (no op field); is the "
                       "connector's value.converter the one --value-format reads, and no "
                       "ExtractNewRecordState transform set?")
        raise _bad(f"a Debezium event has the unknown op {str(op)[:10]!r}")


def _wrapped(fields: Mapping[str, Any]) -> bool:
    """Whether JSON fields are Connect's ``{"schema": ..., "payload": ...}`` (schemas.enable)."""
    return len(fields) == 2 and "schema" in fields and "payload" in fields


def truncated(truncates: Sequence[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    """The last truncate's offset per (topic, partition)."""
    last: dict[tuple[str, int], int] = {}
    for topic, partition, offset in truncates:
        where = (topic, partition)
        last[where] = max(offset, last.get(where, offset))
    return last


def after_truncates(last: Mapping[tuple[str, int], int]) -> Any:
    """SQL: a staged row is not before its partition's last truncate of the batch."""
    from psycopg2 import sql

    values = sql.SQL(", ").join(sql.SQL("({}, {}, {})").format(
        sql.Literal(t), sql.Literal(p), sql.Literal(o)) for (t, p), o in sorted(last.items()))
    return sql.SQL("NOT EXISTS (SELECT 1 FROM (VALUES ") + values + sql.SQL(
        ") AS kafka_direct_truncate (tt, tp, tofs) WHERE tt = topic AND tp = kafka_partition "
        "AND kafka_offset < tofs)")


def apply_truncates(cursor: Any, goal: Any, last: Mapping[tuple[str, int], int]) -> int:
    """Delete the rows of the truncated topics (in the caller's transaction); rows deleted.

    The rows' ``topic`` column says which topic wrote them, so a table fed by several
    topics loses only the truncated one's rows.
    """
    from psycopg2 import sql

    cursor.execute(sql.SQL("DELETE FROM {} WHERE topic = ANY(%s)").format(goal),
                   (sorted({topic for topic, _ in last}),))
    return int(cursor.rowcount)


def fill_kept(cursor: Any, latest: Any, goal: Any, keys: Sequence[str], kept: Sequence[str],
              staged: Any) -> None:
    """Kept columns of each key's latest row: the value before it (batch, else target).

    Args:
        cursor: In the batch's transaction.
        latest: The temporary table of each key's latest staged record.
        goal: The target table.
        keys: The key columns.
        kept: The columns some staged rows keep (Debezium's placeholder).
        staged: SQL selecting the batch's staged rows (kind, keep, coordinates, fields).
    """
    from psycopg2 import sql

    def same(left: str, right: str) -> Any:
        return sql.SQL(" AND ").join(sql.SQL("{}.{} = {}.{}").format(
            sql.Identifier(left), sql.Identifier(k), sql.Identifier(right), sql.Identifier(k))
            for k in keys)

    keyList = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
    for name in kept:
        column, marker = sql.Identifier(name), sql.Literal(name)
        keeps = sql.SQL("l.{}::jsonb ? {}").format(sql.Identifier(KEEP), marker)
        cursor.execute(sql.SQL("UPDATE {} AS l SET {} = t.{} FROM {} AS t WHERE ").format(
            latest, column, column, goal) + same("t", "l") + sql.SQL(" AND ") + keeps)
        cursor.execute(sql.SQL(
            "UPDATE {} AS l SET {} = b.{} FROM (SELECT DISTINCT ON ({}) * FROM (").format(
            latest, column, column, keyList) + staged + sql.SQL(
            ") AS s WHERE s.kafka_direct_kind = 'r' AND NOT coalesce(s.{}::jsonb ? {}, false) "
            "ORDER BY {}, kafka_offset DESC, kafka_partition DESC) AS b WHERE ").format(
            sql.Identifier(KEEP), marker, keyList) + same("b", "l") + sql.SQL(
            " AND ") + keeps + sql.SQL(" AND (b.kafka_offset, b.kafka_partition) < "
                                       "(l.kafka_offset, l.kafka_partition)"))
