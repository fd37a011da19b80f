"""The ingest job's record options: formats, key columns, tombstones, bad records.

:func:`add_arguments` declares them on the ``ingest`` sub-command; :func:`options_from_args`
checks them together and returns :class:`TypedOptions`. Every combination that cannot work
is a :class:`~kafka_direct.errors.ConfigurationError` naming the flag and the fix, found
before anything starts. The Schema Registry's settings and client are :mod:`.schema_registry`'s.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka_direct.app.typed.keys import KEY_TYPES, PRIMITIVE_FORMATS, key_fits
from kafka_direct.app.typed.schema_registry import (
    RegistrySettings,
    registry_client,
    registry_settings,
)
from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.catalog import NAME_LIMIT

# RegistrySettings and registry_client live in .schema_registry; named here as well, as
# this module's API named them before (TypedOptions.registry is a RegistrySettings).
__all__ = ["BAD_RECORD_POLICIES", "COORDINATES", "ENVELOPES", "FORMATS", "KEY_FORMATS",
           "REGISTRY_FORMATS", "RESERVED_PREFIX", "TOMBSTONE_POLICIES", "TRUNCATE_POLICIES",
           "RegistrySettings", "TypedOptions",
           "add_arguments", "check_column_name", "options_from_args", "parse_columns",
           "registry_client"]

#: Record formats of keys and values.
FORMATS = ("raw", "json", "avro", "json-schema", "protobuf")
#: Key formats: those, and the primitive ones of Kafka's serializers (:mod:`.keys`).
KEY_FORMATS = (*FORMATS, *PRIMITIVE_FORMATS)
#: The formats whose records name their schema in a Schema Registry (Confluent's wire format).
REGISTRY_FORMATS = ("avro", "json-schema", "protobuf")
#: What a record with a null value (a tombstone) does: ``row`` writes it as a row (its value
#: columns NULL: the raw job's behaviour), ``delete`` deletes its key's row, ``ignore``
#: skips it.
TOMBSTONE_POLICIES = ("row", "delete", "ignore")
#: ``--envelope``: ``debezium`` reads Debezium's change events (:mod:`.envelope`).
ENVELOPES = ("none", "debezium")
#: What a Debezium truncate event does: ``fail`` (a bad record naming ``--on-truncate``),
#: ``truncate`` (delete the topic's rows in the batch's transaction) or ``ignore``.
TRUNCATE_POLICIES = ("fail", "truncate", "ignore")
#: What a record that cannot be a row does.
BAD_RECORD_POLICIES = ("fail", "dead-letter")
#: The Kafka coordinates every row keeps.
COORDINATES = ("topic", "kafka_partition", "kafka_offset")
#: Column names starting with this are the job's own (staging).
RESERVED_PREFIX = "kafka_direct_"


def check_column_name(name: str, flag: str) -> str:
    """``name`` if it can be a column name the job writes; ConfigurationError naming ``flag``.

    Raises:
        ConfigurationError: An empty name, one longer than PostgreSQL's 63 bytes, one with a
            NUL character, or one starting with the job's own ``kafka_direct_`` prefix.
    """
    if not name or not name.strip():
        raise ConfigurationError(f"{flag}: a column name is empty")
    if len(name.encode("utf-8")) > NAME_LIMIT:
        raise ConfigurationError(f"{flag}: column name {name!r} is longer than PostgreSQL's "
                                 f"{NAME_LIMIT}-byte names")
    if "\x00" in name:
        raise ConfigurationError(f"{flag}: a column name holds a NUL character")
    if name.startswith(RESERVED_PREFIX):
        raise ConfigurationError(f"{flag}: column names starting with {RESERVED_PREFIX!r} "
                                 "are the job's own; rename the column")
    return name


def parse_columns(text: str) -> tuple[tuple[str, str], ...]:
    """``name:type,name:type`` -> ((name, PostgreSQL type), ...), types checked.

    Commas inside parentheses belong to the type (``amount:numeric(12,2)``).

    Raises:
        ConfigurationError: A piece that is not ``name:type``, a name given twice, or a
            type the job cannot write (the message lists the ones it can).
    """
    from kafka_direct.app.typed.columns import normalise_type, split_types

    pieces = split_types(text)
    declared: dict[str, str] = {}
    for piece in (p.strip() for p in pieces):
        name, separator, kind = piece.partition(":")
        if not separator or not name.strip() or not kind.strip():
            raise ConfigurationError(
                f"--columns must be name:type pairs separated by commas (e.g. "
                f"id:bigint,amount:numeric(12,2),ts:timestamptz), got {piece!r}")
        name = check_column_name(name.strip(), "--columns")
        if name in declared:
            raise ConfigurationError(f"--columns names {name!r} twice")
        if name in COORDINATES:
            raise ConfigurationError(f"--columns: {name!r} is a Kafka coordinates column the "
                                     "job fills itself; drop it")
        declared[name] = normalise_type(kind.strip(), "--columns")
    return tuple(declared.items())


def _check_envelope(envelope: str, onTruncate: str, valueFormat: str, keyFormat: str,
                  keyColumns: Sequence[str], onTombstone: str) -> None:
    """Refuse record options that cannot read Debezium events (before anything starts).

    Raises:
        ConfigurationError: Naming the option at fault and the fix.
    """
    for flag, value, allowed in (("--envelope", envelope, ENVELOPES),
                                 ("--on-truncate", onTruncate, TRUNCATE_POLICIES)):
        if value not in allowed:
            raise ConfigurationError(f"{flag} must be one of {', '.join(allowed)}, got "
                                     f"{value!r}", setting=flag)
    if envelope == "none":
        if onTruncate != "fail":
            raise ConfigurationError("--on-truncate is for --envelope debezium (truncate "
                                     "events); drop it, or add --envelope debezium",
                                     setting="--on-truncate")
        return
    if valueFormat not in ("json", "avro"):
        raise ConfigurationError(
            f"--envelope debezium reads Debezium's JSON (with or without schemas.enable) or "
            f"Avro values, not --value-format {valueFormat}: add --value-format json or "
            "--value-format avro", setting="--envelope")
    if keyFormat not in ("json", "avro"):
        raise ConfigurationError(
            f"--envelope debezium upserts and deletes by the event's key, a struct of the "
            f"table's primary key columns, which --key-format {keyFormat} cannot read: add "
            "--key-format json or --key-format avro (as the connector's key.converter)",
            setting="--envelope")
    if not keyColumns:
        raise ConfigurationError(
            "--envelope debezium upserts on the table's primary key: give --key-columns "
            "with the fields of Debezium's key (e.g. --key-columns id)", setting="--envelope")
    if onTombstone == "row":
        raise ConfigurationError(
            "--on-tombstone row: with --envelope debezium a tombstone follows a delete and "
            "is no row; use --on-tombstone delete (the default here) or ignore",
            setting="--on-tombstone")


@dataclass(frozen=True, slots=True)
class TypedOptions:
    """How the ingest job turns records into rows (see the README's ingest section).

    Attributes:
        valueFormat: ``raw`` (a ``value bytea`` column), ``json``, ``avro``,
            ``json-schema`` or ``protobuf`` (the value's top-level fields as columns; the
            last three in Confluent's wire format, their schema in a Schema Registry).
        keyFormat: The same for the key (``raw``: a ``key bytea`` column), or a primitive
            format of Kafka's serializers (``string``, ``long``, ``int``, ``short``,
            ``double``, ``float``, ``bytes``, ``uuid``: one column, see :attr:`keyColumn`).
        registry: The Schema Registry (needed for ``avro`` and ``json-schema``), or None.
        keyColumns: Upsert on these columns (a later record of a key replaces the row);
            empty: append every record.
        onTombstone: ``row`` (default: a row with NULL value columns), ``delete`` (delete
            the key's row; needs ``keyColumns``) or ``ignore``.
        onBadRecord: ``fail`` (stop with BadRecordError, nothing of the batch written) or
            ``dead-letter`` (the raw record and the reason into the dead-letter table).
        deadLetterTable: The dead-letter table (default ``<table>_dead_letter``).
        columns: Declared column types for JSON fields, as (name, PostgreSQL type) pairs;
            other fields' types are inferred from the first records that carry them.
        timestampColumn: A ``timestamptz`` column holding each record's Kafka timestamp
            (:mod:`.metadata`), or None.
        headerColumns: (header name, PostgreSQL type) pairs: each header's value as a
            column of that name (:mod:`.metadata`).
        envelope: ``none``, or ``debezium``: values are Debezium change events
            (:mod:`.envelope`).
        onTruncate: A Debezium truncate event: ``fail`` (a bad record), ``truncate`` or
            ``ignore``.
    """

    valueFormat: str = "raw"
    keyFormat: str = "raw"
    registry: RegistrySettings | None = None
    keyColumns: tuple[str, ...] = ()
    onTombstone: str = "row"
    onBadRecord: str = "fail"
    deadLetterTable: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    timestampColumn: str | None = None
    headerColumns: tuple[tuple[str, str], ...] = ()
    envelope: str = "none"
    onTruncate: str = "fail"

    def __post_init__(self) -> None:
        from kafka_direct.app.typed.metadata import check_metadata_columns

        check_metadata_columns(self.timestampColumn, self.headerColumns, self.columns,
                               (*COORDINATES, "key", "value"), check_column_name)
        for flag, value, allowed in (("--value-format", self.valueFormat, FORMATS),
                                     ("--key-format", self.keyFormat, KEY_FORMATS),
                                     ("--on-tombstone", self.onTombstone, TOMBSTONE_POLICIES),
                                     ("--on-bad-record", self.onBadRecord,
                                      BAD_RECORD_POLICIES)):
            if value not in allowed:
                raise ConfigurationError(f"{flag} must be one of {', '.join(allowed)}, got "
                                         f"{value!r}")
        for flag, value in (("--value-format", self.valueFormat),
                            ("--key-format", self.keyFormat)):
            if value == "protobuf":
                from kafka_direct.app.typed.protobuf import require_protobuf

                require_protobuf(flag)
        registered = [(f, v) for f, v in (("--value-format", self.valueFormat),
                                          ("--key-format", self.keyFormat))
                      if v in REGISTRY_FORMATS]
        if registered and self.registry is None:
            flag, kind = registered[0]
            raise ConfigurationError(
                f"{flag} {kind} needs --schema-registry URL: such records name their "
                "schema by its id in a Confluent-compatible Schema Registry")
        if self.registry is not None and not registered:
            raise ConfigurationError(
                "--schema-registry is for --value-format/--key-format avro, json-schema or "
                "protobuf; "
                "drop it or choose one of those formats")
        for name in self.keyColumns:
            check_column_name(name, "--key-columns")
        if len(set(self.keyColumns)) != len(self.keyColumns):
            raise ConfigurationError(f"--key-columns names a column twice: "
                                     f"{list(self.keyColumns)}")
        if self.keyColumns and self.valueFormat == "raw" and self.keyFormat == "raw":
            unknown = [k for k in self.keyColumns if k not in ("key", *COORDINATES)]
            if unknown:
                raise ConfigurationError(
                    f"--key-columns {','.join(unknown)}: with --key-format raw and "
                    "--value-format raw the columns are topic, kafka_partition, "
                    "kafka_offset, key and value (bytea). Use --key-columns key (a mirror "
                    "of the key's latest value), or --key-format/--value-format json, avro "
                    "or json-schema "
                    "to get the records' fields as columns")
        _check_envelope(self.envelope, self.onTruncate, self.valueFormat, self.keyFormat,
                      self.keyColumns, self.onTombstone)
        if self.onTombstone == "delete" and not self.keyColumns:
            raise ConfigurationError(
                "--on-tombstone delete deletes the row of the tombstone's key: give "
                "--key-columns (the columns that identify a row, from the key), e.g. "
                "--key-columns id")
        self._check_key()
        if self.deadLetterTable is not None:
            if self.onBadRecord != "dead-letter":
                raise ConfigurationError("--dead-letter-table is for --on-bad-record "
                                         "dead-letter; add that, or drop the table")
            check_column_name(self.deadLetterTable, "--dead-letter-table")
        if self.columns and "json" not in (self.valueFormat, self.keyFormat) and any(
                name != self.keyColumn for name, _ in self.columns):
            raise ConfigurationError(
                "--columns declares the types of JSON fields: it needs --value-format json "
                "or --key-format json (Avro and JSON Schema records carry their types in "
                "their schema)")

    def _check_key(self) -> None:
        """Key columns the key format cannot supply, refused before anything starts."""
        names = [k for k in self.keyColumns if k not in COORDINATES]
        if self.keyFormat in PRIMITIVE_FORMATS:
            if len(names) > 1:
                raise ConfigurationError(
                    f"--key-columns {','.join(self.keyColumns)}: a {self.keyFormat} key is "
                    "one column (--key-columns id: the key itself is column id; the "
                    "coordinates topic, kafka_partition, kafka_offset may join it). Name "
                    "one column, or read keys with several fields with --key-format json, "
                    "avro or json-schema")
            column = self.keyColumn
            if column == "value" and self.valueFormat == "raw":
                raise ConfigurationError(
                    "--key-columns value: the raw value's column is named value; name the "
                    "key's column otherwise (e.g. --key-columns id)")
            declared = dict(self.columns).get(column or "")
            if declared is not None and not key_fits(self.keyFormat, declared):
                raise ConfigurationError(
                    f"--columns {column}:{declared}: a {self.keyFormat} key cannot be read "
                    f"as {declared}; declare a type that holds it (its own is "
                    f"{KEY_TYPES[self.keyFormat]}), or drop the declaration")
        if self.onTombstone != "delete":
            return
        if not names:
            raise ConfigurationError(
                f"--on-tombstone delete deletes the row of the tombstone's key, but "
                f"--key-columns {','.join(self.keyColumns)} names no column of the key "
                "(the coordinates are the tombstone's own): add the key's column, e.g. "
                "--key-columns key for a raw key, or id with --key-format string")
        if self.keyFormat == "raw" and names != ["key"]:
            missing = [k for k in names if k != "key"]
            raise ConfigurationError(
                f"--key-columns {','.join(missing)} with --on-tombstone delete: a "
                f"tombstone has no value, so its key must supply {', '.join(missing)}, and "
                "--key-format raw gives one column, key (bytea). If the key is the id as "
                "text (str(id)), add --key-format string (the key is then column "
                f"{missing[0]}; long, int, short, double, float for Kafka's number "
                "serializers); if it is a JSON object, --key-format json; or mirror the "
                "raw key with --key-columns key")

    @property
    def keyColumn(self) -> str | None:
        """The column of a primitive key: ``--key-columns``' one name, else ``key``.

        None when the key format is not primitive (its fields are columns by name).
        """
        if self.keyFormat not in PRIMITIVE_FORMATS:
            return None
        names = [k for k in self.keyColumns if k not in COORDINATES]
        return names[0] if names else "key"

    def __repr__(self) -> str:
        return (f"TypedOptions(value={self.valueFormat}, key={self.keyFormat}, "
                f"keyColumns={list(self.keyColumns)}, onTombstone={self.onTombstone}, "
                f"onBadRecord={self.onBadRecord}, envelope={self.envelope}, "
                f"registry={self.registry!r})")

    @property
    def active(self) -> bool:
        """Whether the job needs the typed writer (anything beyond raw appends)."""
        return (self.valueFormat != "raw" or self.keyFormat != "raw" or bool(self.keyColumns)
                or self.onTombstone != "row" or self.onBadRecord != "fail"
                or bool(self.columns) or self.timestampColumn is not None
                or bool(self.headerColumns) or self.envelope != "none")

    def dead_letter_table(self, table: str) -> str | None:
        """The dead-letter table of ``table`` (None without ``dead-letter``).

        ``--dead-letter-table``, else ``<table>_dead_letter``; when that is longer than
        PostgreSQL's 63 bytes, ``<table, cut to 42 bytes>_<8 hex digits of its
        SHA-256>_dead_letter`` (cutting the suffix instead made a 63-byte table its own
        dead-letter table, and two long tables share one).
        """
        if self.onBadRecord != "dead-letter":
            return None
        if self.deadLetterTable:
            return self.deadLetterTable
        name = f"{table}_dead_letter"
        if len(name.encode("utf-8")) <= NAME_LIMIT:
            return name
        import hashlib

        digest = hashlib.sha256(table.encode("utf-8")).hexdigest()[:8]
        suffix = f"_{digest}_dead_letter"
        room = NAME_LIMIT - len(suffix)
        # Cut whole characters: a multi-byte one cut in two is no name.
        head = table.encode("utf-8")[:room].decode("utf-8", "ignore")
        return head + suffix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``ingest`` sub-command's record options (one argument group)."""
    records = parser.add_argument_group(
        "records", "how records become rows (default: raw bytes in key and value columns)")
    records.add_argument("--value-format", choices=FORMATS, default="raw",
                         help="raw: a value bytea column (default); json: the value's "
                              "top-level fields as columns; avro, json-schema, protobuf: the "
                              "same, the schema from --schema-registry")
    records.add_argument("--key-format", choices=KEY_FORMATS, default="raw",
                         help="the same for the key (raw: a key bytea column); or one "
                              "column written by Kafka's serializers: string (UTF-8), long, "
                              "int, short (big-endian), double, float (IEEE 754), bytes, "
                              "uuid; --key-columns names it")
    records.add_argument("--schema-registry", metavar="URL", default=None,
                         help="a Confluent-compatible Schema Registry (needed for avro, "
                              "json-schema and protobuf)")
    records.add_argument("--schema-registry-auth", metavar="USER:PASSWORD", default=None,
                         help="basic auth for the registry; env:NAME reads it from a variable "
                              "(keep passwords off the command line)")
    records.add_argument("--schema-registry-param", metavar="KEY=VALUE", action="append",
                         default=[],
                         help="one SchemaRegistryClient setting (repeatable), e.g. "
                              "ssl.ca.location=/ca.pem or basic.auth.user.info=env:NAME; "
                              "VALUE env:NAME reads a variable")
    records.add_argument("--columns", metavar="NAME:TYPE,...", default=None,
                         help="PostgreSQL types of JSON fields (e.g. id:bigint,"
                              "amount:numeric(12,2),ts:timestamptz); other fields' types "
                              "are inferred from the first records carrying them")
    records.add_argument("--key-columns", metavar="A,B", default=None,
                         help="upsert on these columns: a later record of a key replaces its "
                              "row (within a batch too, in offset order); with a primitive "
                              "--key-format, the one name is the key's column")
    records.add_argument("--on-tombstone", choices=TOMBSTONE_POLICIES, default=None,
                         help="a record with a null value: row (default: written, value "
                              "columns NULL), delete (delete its key's row; needs "
                              "--key-columns; the default with --envelope debezium) or "
                              "ignore")
    records.add_argument("--on-bad-record", choices=BAD_RECORD_POLICIES, default="fail",
                         help="a record that cannot be a row: fail (default: stop, nothing of "
                              "the batch written) or dead-letter (into the dead-letter table, "
                              "in the batch's transaction)")
    records.add_argument("--dead-letter-table", default=None,
                         help="the dead-letter table (default <table>_dead_letter)")
    records.add_argument("--timestamp-column", metavar="NAME", default=None,
                         help="a timestamptz column holding each record's Kafka timestamp "
                              "(CreateTime or LogAppendTime, as the topic keeps it)")
    records.add_argument("--header-columns", metavar="NAME[:TYPE],...", default=None,
                         help="record headers as columns of their names (default type text: "
                              "the header's bytes as UTF-8; bytea keeps them; other types "
                              "parse the text); a missing header is NULL, a repeated one's "
                              "last value wins")
    records.add_argument("--envelope", choices=ENVELOPES, default="none",
                         help="debezium: values are Debezium change events (JSON with or "
                              "without schemas.enable, or Avro): c/r/u upsert the after "
                              "image on --key-columns, d deletes the key's row")
    records.add_argument("--on-truncate", choices=TRUNCATE_POLICIES, default=None,
                         help="a Debezium truncate event: fail (default: a bad record), "
                              "truncate (delete the topic's rows in the batch's "
                              "transaction) or ignore")


def _names(text: str | None, flag: str) -> tuple[str, ...]:
    if text is None:
        return ()
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise ConfigurationError(f"{flag} must be column names separated by commas, got "
                                 f"{text!r}")
    return names


def options_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> TypedOptions:
    """The checked record options of the parsed ``ingest`` arguments.

    Raises:
        ConfigurationError: A combination that cannot work, named with its flag and fix.
    """
    from kafka_direct.app.typed.metadata import parse_header_columns

    columns = getattr(args, "columns", None)
    envelope = getattr(args, "envelope", None) or "none"
    onTombstone = getattr(args, "on_tombstone", None) or (
        "delete" if envelope == "debezium" else "row")
    options = TypedOptions(
        valueFormat=getattr(args, "value_format", "raw"),
        keyFormat=getattr(args, "key_format", "raw"),
        registry=registry_settings(args, environ),
        keyColumns=_names(getattr(args, "key_columns", None), "--key-columns"),
        onTombstone=onTombstone,
        onBadRecord=getattr(args, "on_bad_record", "fail"),
        deadLetterTable=getattr(args, "dead_letter_table", None),
        columns=parse_columns(columns) if columns is not None else (),
        timestampColumn=getattr(args, "timestamp_column", None),
        headerColumns=parse_header_columns(getattr(args, "header_columns", None)),
        envelope=envelope, onTruncate=getattr(args, "on_truncate", None) or "fail")
    if options.active and getattr(args, "sink", "transactional") != "transactional":
        raise ConfigurationError(
            f"--sink {args.sink} writes raw records only; typed rows, --key-columns, "
            "--on-tombstone and dead letters are written with the offsets in one transaction "
            "per batch: drop --sink (transactional is the default)")
    return options

