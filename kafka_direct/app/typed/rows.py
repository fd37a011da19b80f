"""A record as a staged row: a row to write, a key to delete, or a dead letter.

:class:`RowBuilder` decodes each record's key and value (:mod:`.formats`), fits every field
to its column (:mod:`.columns`) and says what the record is:

* ``ROW``: the Kafka coordinates, the key's and the value's fields, converted for their
  columns: existing columns' types first, else the schema's type, ``--columns``, or the type
  inferred from the first value a task sees (widened when a later value needs it:
  ``bigint`` then ``double precision``);
* ``DELETE``: a tombstone with ``--on-tombstone delete``: its key columns only;
* a primitive key (``--key-format string``...) is one column (:mod:`.keys`), and a value
  field of its name must agree with it;
* ``BAD``: a record that cannot be a row (``--on-bad-record dead-letter``), with the reason;
  with ``fail`` it raises :class:`~kafka_direct.errors.BadRecordError` instead;
* ``TRUNCATE``: a Debezium truncate event with ``--on-truncate truncate`` (no fields);
* ``None``: skipped (a tombstone with ``--on-tombstone ignore``, a Debezium message).

With ``--envelope debezium`` the key and value are unwrapped first (:mod:`.envelope`): the
``after`` image is the row, a ``d`` event a delete of the key, and a column Debezium could
not read (an unchanged TOASTed value) is kept: its name goes with the row (``KEEP``).

A field of a schema (Avro, JSON Schema) whose type does not fit its existing column widens
it when a wider type holds both (``integer`` to ``bigint``, ``varchar(n)`` to ``text``...:
the commit alters the column); any other change raises
:class:`~kafka_direct.errors.SchemaChangeError`: every record of that schema would fail.

:func:`latest_per_key` is the rule the commit applies in SQL, in Python: of several
records of one key, the one with the highest offset wins.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_direct.app.typed.columns import (
    convert,
    converter,
    fits,
    infer_type,
    widens,
    widest,
)
from kafka_direct.app.typed.envelope import KEEP, EnvelopeReader
from kafka_direct.app.typed.formats import DecodeError, SchemaTexts, decoders
from kafka_direct.app.typed.keys import KEY_TYPES, PrimitiveKey
from kafka_direct.app.typed.options import (
    COORDINATES,
    RESERVED_PREFIX,
    TypedOptions,
)
from kafka_direct.errors import BadRecordError, SchemaChangeError
from kafka_direct.postgres.catalog import NAME_LIMIT

__all__ = ["BAD", "DELETE", "ROW", "TRUNCATE", "ColumnInfo", "RowBuilder", "latest_per_key"]

ROW = "r"
DELETE = "d"
BAD = "x"
TRUNCATE = "t"

#: (type, fromSchema, topic, partition, offset of the first record that had it)
ColumnInfo = tuple[str, bool, str, int, int]


class _BadRecordError(Exception):
    """A record that cannot be a row; the message is the reason."""


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise _BadRecordError("a field has an empty name")
    if name in COORDINATES:
        raise _BadRecordError(
            f"field {name!r} has the name of a Kafka coordinates column (topic, "
            "kafka_partition, kafka_offset), which the job fills itself")
    if name.startswith(RESERVED_PREFIX):
        raise _BadRecordError(f"field {name!r} starts with {RESERVED_PREFIX!r}, the job's "
                              "own prefix")
    if "\x00" in name:
        raise _BadRecordError("a field name holds a NUL character")
    if len(name.encode("utf-8")) > NAME_LIMIT:
        raise _BadRecordError(f"field name {name[:20]!r}... is longer than PostgreSQL's "
                              f"{NAME_LIMIT}-byte names")


class RowBuilder:
    """Turns records into staged rows for one table (see the module).

    Args:
        options: The record options.
        target: ``schema.table``, for messages.
        existing: The table's columns and their types (None: no table yet).
        schemas: Avro schema texts by id, given by the driver (others are fetched).
    """

    def __init__(self, options: TypedOptions, target: str,
                 existing: Mapping[str, str] | None, schemas: SchemaTexts | None = None
                 ) -> None:
        self.options = options
        self.target = target
        self.existing = dict(existing or {})
        self.keyDecoder, self.valueDecoder = decoders(options, schemas)
        #: A primitive key (``--key-format string``...): read as its one column's value.
        self.primitiveKey: PrimitiveKey | None = None
        if options.keyColumn is not None:
            column = options.keyColumn
            self.primitiveKey = PrimitiveKey(
                options.keyFormat, column, self.existing.get(column)
                or dict(options.columns).get(column) or KEY_TYPES[options.keyFormat])
        #: Columns the task's rows carry that the table does not have yet.
        self.new: dict[str, ColumnInfo] = {}
        #: Every column the task's rows carry, in the order first seen.
        self.columns: dict[str, None] = {}
        #: (column, schema type) -> (column type, value type or None for any, converter).
        self._settled: dict[tuple[str, str | None], tuple[str, type | None,
                                                           Callable[[Any], Any]]] = {}
        self.tombstone = options.onTombstone
        self.keyColumns = options.keyColumns
        self.deadLetter = options.onBadRecord == "dead-letter"
        self.metadata = options.timestampColumn is not None or bool(options.headerColumns)
        self.envelope = (EnvelopeReader(options.onTruncate)
                         if options.envelope == "debezium" else None)
        #: Columns some rows keep (Debezium's unavailable values).
        self.kept: dict[str, None] = {}

    def __repr__(self) -> str:
        return f"RowBuilder({self.target})"

    @property
    def fetched(self) -> dict[int, tuple[str, ...]]:
        """Schemas the decoders had to ask the registry for (not given)."""
        return {**self.keyDecoder.fetched, **self.valueDecoder.fetched}

    def build(self, topic: str, partition: int, offset: int, key: bytes | None,
              value: bytes | None, timestamp: Any = None, headers: Any = None
              ) -> tuple[str, dict[str, Any] | str] | None:
        """What the record is: ``(ROW|DELETE, columns)``, ``(BAD, reason)`` or None (skip).

        ``timestamp`` and ``headers`` fill ``--timestamp-column`` and ``--header-columns``
        (:mod:`.metadata`): ms since the epoch or a datetime; (name, bytes) pairs or the
        source's ``{key, value}`` structs.

        Raises:
            BadRecordError: The record cannot be a row and bad records fail the batch.
            SchemaChangeError: A schema's field no longer fits its column.
            SchemaRegistryError: The registry failed.
        """
        tombstone = value is None
        if tombstone and self.tombstone == "ignore":
            return None
        try:
            kind, row = self._fields(topic, partition, offset, key, value, tombstone)
            if self.metadata and kind is not None and kind != TRUNCATE:
                self._metadata(row, (topic, partition, offset), timestamp, headers)
        except _BadRecordError as bad:
            if not self.deadLetter:
                cause = str(bad)
                raise BadRecordError(
                    f"record {topic}-{partition} at offset {offset} cannot be a row of "
                    f"{self.target}: {cause}. Nothing of the batch was written; fix the "
                    "producer, or run with --on-bad-record dead-letter to set such "
                    "records aside", topic=topic, partition=partition, offset=offset,
                    cause=cause) from None
            return BAD, str(bad)
        return None if kind is None else (kind, row)

    def _fields(self, topic: str, partition: int, offset: int, key: bytes | None,
                value: bytes | None, tombstone: bool) -> tuple[str | None, dict[str, Any]]:
        valueTypes: Mapping[str, str]
        keyFields: dict[str, Any]
        keyTypes: Mapping[str, str]
        primitive = self.primitiveKey
        kind: str | None = DELETE if tombstone and self.tombstone == "delete" else ROW
        kept: tuple[str, ...] = ()
        try:
            if primitive is not None:
                try:
                    keyFields = {primitive.column: primitive.read(key)}
                except ValueError as error:
                    raise _BadRecordError(str(error)) from None
                keyTypes, keySchema = {primitive.column: primitive.columnType}, True
            else:
                keyFields, keyTypes, keySchema = self.keyDecoder.decode(key, topic)
            if tombstone:
                valueFields, valueTypes, valueSchema = (
                    ({"value": None}, {}, True) if self.valueDecoder.kind == "raw" else
                    ({}, {}, True))
            else:
                valueFields, valueTypes, valueSchema = self.valueDecoder.decode(value, topic)
            if self.envelope is not None:
                keyFields, keyTypes, keySchema = self.envelope.key(
                    keyFields, keyTypes, keySchema, self.keyDecoder.lastSchema)
                if not tombstone:
                    op, valueFields, valueTypes, valueSchema, kept = self.envelope.value(
                        valueFields, valueTypes, valueSchema, self.valueDecoder.lastSchema)
                    if op == "skip":
                        return None, {}
                    if op == "t":
                        return TRUNCATE, {}
                    kind = DELETE if op == "d" else ROW
        except DecodeError as error:
            raise _BadRecordError(str(error)) from None
        for part, other, fields in (("key", "value", valueFields),
                                    ("value", "key", keyFields)):
            decoder = self.keyDecoder if part == "key" else self.valueDecoder
            if decoder.kind == "raw" and part in fields:
                raise _BadRecordError(
                    f"the {other} has a field {part!r}, the name of the raw {part}'s column "
                    f"(bytea): rename the field, or read the {part} with --{part}-format "
                    "json, avro or json-schema")
        row: dict[str, Any] = {}
        where = (topic, partition, offset)
        pending: dict[str, ColumnInfo] = {}  # columns this record adds or widens, if good
        for name, raw in keyFields.items():
            row[name] = self._column(name, raw, keyTypes.get(name), keySchema, where, pending)
        for name, raw in valueFields.items():
            if primitive is not None and name == primitive.column:
                # One column: the key's value is the row's, and the field must agree.
                if row[name] is None and name in self.keyColumns:
                    raise _BadRecordError(f"key column {name!r} is null (a null key)")
                if not primitive.agrees(row[name], raw):
                    raise _BadRecordError(
                        f"the key gives column {name!r} a value that the value's field "
                        f"{name!r} contradicts (the key decides the row; fix the producer)")
                continue
            converted = self._column(name, raw, valueTypes.get(name), valueSchema, where,
                                     pending)
            if name in row and row[name] != converted and row[name] is not None:
                raise _BadRecordError(f"the key's field {name!r} and the value's differ")
            if name not in row or converted is not None:
                row[name] = converted
        for name in self.keyColumns:
            if name in COORDINATES:
                continue
            if name not in row:
                raise _BadRecordError(
                    f"key column {name!r} is not a field of the "
                    f"{'key' if tombstone or kind == DELETE else 'record'}" + (
                        " (a tombstone has no value: --on-tombstone ignore skips it)"
                        if tombstone and self.tombstone == "row" else ""))
            if row[name] is None:
                raise _BadRecordError(f"key column {name!r} is null")
        self.new.update(pending)
        for name in row:
            if name in self.existing or name in self.new:  # a null of no type yet: not yet
                self.columns.setdefault(name, None)
        if kept:
            kept = tuple(k for k in kept if k not in self.keyColumns)
            row[KEEP] = json.dumps(kept)
            self.kept.update(dict.fromkeys(kept))
        return kind, row

    def _metadata(self, row: dict[str, Any], where: tuple[str, int, int], timestamp: Any,
                  headers: Any) -> None:
        """Add the record's timestamp and header columns to ``row``."""
        from kafka_direct.app.typed.metadata import metadata_values

        try:
            values = metadata_values(self.options.timestampColumn, self.options.headerColumns,
                                     timestamp, headers)
        except ValueError as error:
            raise _BadRecordError(str(error)) from None
        pending: dict[str, ColumnInfo] = {}
        for name, kind, raw in values:
            if name in row:
                raise _BadRecordError(
                    f"the record has a field {name!r}, the name of the column the job fills "
                    "from its " + ("timestamp" if name == self.options.timestampColumn
                                   else "header of that name") + ": rename one of them")
            row[name] = self._column(name, raw, kind, True, where, pending)
        self.new.update(pending)
        for name, _, _ in values:
            if name in self.existing or name in self.new:
                self.columns.setdefault(name, None)

    def _column(self, name: str, raw: Any, schemaType: str | None, fromSchema: bool,
                where: tuple[str, int, int], pending: dict[str, ColumnInfo]) -> Any:
        """``raw`` converted for column ``name``; a column new to the table into ``pending``."""
        settled = self._settled.get((name, schemaType))
        if settled is not None and (settled[1] is None or type(raw) is settled[1]):
            try:
                return settled[2](raw)  # a column whose type this value cannot change
            except ValueError as error:
                raise _BadRecordError(f"field {name!r}: {error} (column type "
                                      f"{settled[0]})") from None
        return self._slowColumn(name, raw, schemaType, fromSchema, where, pending)

    def _settle(self, name: str, schemaType: str | None, kind: str,
                valueType: type | None) -> None:
        """Remember that ``name``'s values (of ``valueType``; None: any) go to ``kind``."""
        if name in self.columns:  # its name is checked
            self._settled[(name, schemaType)] = (kind, valueType, converter(kind))

    def _slowColumn(self, name: str, raw: Any, schemaType: str | None, fromSchema: bool,
                    where: tuple[str, int, int], pending: dict[str, ColumnInfo]) -> Any:
        if name not in self.columns:
            _check_name(name)
        column = self.existing.get(name)
        if column is not None:
            if fromSchema and schemaType is not None and not fits(column, schemaType):
                return self._convert(name, self._widen(name, column, schemaType, where,
                                                       pending), raw)
            self._settle(name, schemaType, column, None)
            return self._convert(name, column, raw)
        known = pending.get(name) or self.new.get(name)
        wanted = schemaType or infer_type(raw)
        if known is None:
            if wanted is None:
                return None  # a null of a field with no type yet: no column for it yet
            pending[name] = (wanted, fromSchema, *where)
            return self._convert(name, wanted, raw)
        kind = known[0]
        if wanted is not None and wanted != kind and not fits(kind, wanted):
            joined = widest(kind, wanted)
            if joined is None:
                if fromSchema:
                    raise SchemaChangeError(
                        f"field {name!r} has type {kind} in the record at {known[2]}-"
                        f"{known[3]} offset {known[4]} and type {wanted} at {where[0]}-"
                        f"{where[1]} offset {where[2]}; no column type holds both. Give "
                        f"the column a type by hand (ALTER TABLE {self.target} ADD COLUMN "
                        f"{name} ...) or fix the schema", table=self.target, field=name,
                        columnType=kind, newType=wanted, topic=where[0],
                        partition=where[1], offset=where[2])
                return self._convert(name, kind, raw)  # a bad record: the value says why
            pending[name] = (joined, known[1] and fromSchema, *known[2:])
            kind = joined
        elif name not in pending and raw is not None and (fromSchema or wanted == kind):
            # Values of this type (a schema's: any) leave the column's type as it is.
            self._settle(name, schemaType, kind, None if fromSchema else type(raw))
        return self._convert(name, kind, raw)

    def _widen(self, name: str, column: str, schemaType: str, where: tuple[str, int, int],
               pending: dict[str, ColumnInfo]) -> str:
        """The wider type an existing column takes for a schema's field (into ``pending``).

        The commit alters the column in the batch's transaction (:func:`~kafka_direct.app.
        typed.columns.widens`); the values are converted for the wider type meanwhile.

        Raises:
            SchemaChangeError: No widening of the column holds the field's type.
        """
        known = pending.get(name) or self.new.get(name)
        if known is not None and fits(known[0], schemaType):
            return known[0]
        wanted = schemaType if known is None else widest(known[0], schemaType)
        if wanted is None or not widens(column, wanted):
            raise SchemaChangeError(
                f"field {name!r} of {where[0]}-{where[1]} at offset {where[2]} now has "
                f"type {schemaType}, which column {name} of {self.target} (type "
                f"{column}) cannot hold, and no widening of the column would (a change of "
                f"kind, or a narrower type). Change the column (ALTER TABLE {self.target} "
                f"ALTER COLUMN {name} TYPE {schemaType}) or the schema, then run the job "
                "again: it resumes at this batch", table=self.target, field=name,
                columnType=column, newType=schemaType, topic=where[0],
                partition=where[1], offset=where[2])
        pending[name] = (wanted, True, *(known[2:] if known is not None else where))
        return wanted

    @staticmethod
    def _convert(name: str, kind: str, raw: Any) -> Any:
        try:
            return convert(kind, raw)
        except ValueError as error:
            raise _BadRecordError(f"field {name!r}: {error} (column type {kind})") from None


def latest_per_key(rows: Iterable[tuple[tuple[Any, ...], int, int, Any]]
                   ) -> dict[tuple[Any, ...], Any]:
    """Of ``(key, partition, offset, row)`` items, each key's row of the highest offset.

    Ties across partitions (one key in two partitions of a batch: Kafka orders a key only
    within its partition) go to the higher partition, as in the commit's SQL.
    """
    best: dict[tuple[Any, ...], tuple[int, int, Any]] = {}
    for key, partition, offset, row in rows:
        held = best.get(key)
        if held is None or (offset, partition) > (held[0], held[1]):
            best[key] = (offset, partition, row)
    return {key: row for key, (_, _, row) in best.items()}
