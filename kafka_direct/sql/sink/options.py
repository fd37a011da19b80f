"""The options of the ``kafka-direct-postgres`` sink, checked before anything runs.

The options (``dsn``, ``password``, ``table``, ``schema``, ``columns``, ``mode``,
``keyColumns``, ``offsetColumns``, ``createTable``, ``stagingSchema``, ``statementTimeoutMs``,
``staleStagingMinutes``, the offset link's ``offsetStore.*`` and ``microBatch.queryId`` /
``microBatch.batchId``) are described, with their defaults, in the sink's table in
docs/configuration.md, which tests/architecture/test_docs.py keeps in step with
:data:`KNOWN_OPTIONS`.

Option names are case-insensitive (Spark lowercases them). :class:`SinkOptions` never shows
the DSN or the password: not in its repr, not in an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.catalog import NAME_LIMIT
from kafka_direct.postgres.connection import Database
from kafka_direct.sql.link.tables import LINK_OPTIONS, StoreRef
from kafka_direct.sql.sink.range_reads import READ_OPTIONS, RangeReads

__all__ = ["KNOWN_OPTIONS", "MODES", "SinkOptions", "parse_options", "resolve_mode"]

#: The sink's write modes.
MODES = ("append", "update", "complete")
_ALIASES = {"upsert": "update", "overwrite": "complete", "replace": "complete"}
_KNOWN = {"dsn", "password", "table", "schema", "columns", "mode", "keycolumns", "offsetcolumns",
          "createtable", "stagingschema", "statementtimeoutms", "stalestagingminutes",
          "microbatch.queryid", "microbatch.batchid",
          # Set by Spark itself (writeStream's checkpointLocation, queryName, path).
          "checkpointlocation", "path", "queryname"}
#: Every option the sink accepts by name, lower case as Spark hands them over.
#: (And ``kafka.*``, the librdkafka properties of a sink that reads offset ranges.)
KNOWN_OPTIONS = frozenset(_KNOWN | LINK_OPTIONS | READ_OPTIONS)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's checked options (described in docs/configuration.md).

    Attributes:
        database: Where to connect (never shown).
        table: The target table's name.
        schema: The target's schema.
        columns: Target columns, one per DataFrame column, in the DataFrame's order.
        mode: ``append``, ``update`` or ``complete``.
        keyColumns: The upsert key (``update`` only).
        createTable: Create a missing target.
        stagingSchema: Schema of the staging tables and the commit records.
        statementTimeoutMs: ``statement_timeout`` of the sink's transactions, or None.
        staleStagingMinutes: Age after which unclaimed staged rows are dropped.
        link: The offset store the commits keep the source's offsets in, or None.
        microBatch: ``(query id, batch id)`` when a batch write is a streaming query's
            micro-batch (``foreachBatch``): committed once per pair. None otherwise.
        offsetColumns: The target columns holding each row's Kafka topic, partition and
            offset: given, tasks write their rows straight into the target and claim their
            offsets (:mod:`kafka_direct.postgres.direct_write`) instead of staging them.
        reads: How tasks read the records of the offset ranges their rows name, when the
            DataFrame holds offset ranges (:mod:`kafka_direct.sql.sink.range_reads`):
            ``columns`` are then one per record column. None: the rows are written.
    """

    database: Database = field(repr=False)
    table: str
    schema: str = "public"
    columns: tuple[str, ...] = ()
    mode: str = "append"
    keyColumns: tuple[str, ...] = ()
    createTable: bool = False
    stagingSchema: str = "public"
    statementTimeoutMs: int | None = None
    staleStagingMinutes: int = 1440
    link: StoreRef | None = None
    microBatch: tuple[str, int] | None = None
    offsetColumns: tuple[str, ...] = ()
    reads: RangeReads | None = None

    def __post_init__(self) -> None:
        if self.microBatch is not None:
            queryId, batchId = self.microBatch
            if not isinstance(queryId, str) or not queryId.strip() or queryId.startswith(
                    "write:"):
                raise ConfigurationError(
                    f"option microBatch.queryId must be the streaming query's id, got "
                    f"{queryId!r}", setting="microBatch.queryId")
            if isinstance(batchId, bool) or not isinstance(batchId, int) or batchId < 0:
                raise ConfigurationError(
                    f"option microBatch.batchId must be the micro-batch's id (a whole number "
                    f">= 0), got {batchId!r}", setting="microBatch.batchId")
        for name, value in (("table", self.table), ("schema", self.schema),
                            ("stagingSchema", self.stagingSchema)):
            _check_name(name, value)
        if not self.columns:
            raise ConfigurationError("the sink needs at least one column to write",
                                     setting="columns")
        for column in self.columns:
            _check_name("columns", column)
        if len(set(self.columns)) != len(self.columns):
            doubled = sorted({c for c in self.columns if self.columns.count(c) > 1})
            raise ConfigurationError(
                f"columns name {doubled} more than once: give each DataFrame column its own "
                "target column", setting="columns", value=list(self.columns))
        if self.mode not in MODES:
            raise ConfigurationError(
                f"mode {self.mode!r} is unknown: use one of {list(MODES)}", setting="mode",
                value=self.mode)
        if self.mode != "append" and self.reads is not None:
            # Before the modes' own checks: their fixes (keyColumns...) would not help.
            raise ConfigurationError(
                f"a sink reading offset ranges writes each record straight into the target, "
                f"for mode=append; mode={self.mode} needs the records as rows: use the "
                "source's emit=records (its default)", setting="mode", value=self.mode)
        if self.mode == "update":
            if not self.keyColumns:
                raise ConfigurationError(
                    "mode 'update' upserts on a key: give option keyColumns (comma-separated "
                    "target columns with a unique constraint)", setting="keyColumns")
            missing = [k for k in self.keyColumns if k not in self.columns]
            if missing:
                raise ConfigurationError(
                    f"keyColumns {missing} are not among the written columns "
                    f"{list(self.columns)}: name columns the DataFrame writes",
                    setting="keyColumns", value=list(self.keyColumns))
            if len(set(self.keyColumns)) != len(self.keyColumns):
                raise ConfigurationError(f"keyColumns name a column twice: "
                                         f"{list(self.keyColumns)}", setting="keyColumns")
        elif self.keyColumns:
            raise ConfigurationError(
                f"keyColumns are for mode 'update' (upserts); this sink's mode is "
                f"{self.mode!r}: drop keyColumns or set mode=update", setting="keyColumns")
        if self.reads is not None and not self.offsetColumns:
            raise ConfigurationError(
                "a sink reading offset ranges writes each record straight into the target "
                "and claims its offsets: give option offsetColumns (the target columns of "
                "the records' topic, partition and offset)", setting="offsetColumns")
        if self.offsetColumns:
            self._check_direct()
        if self.statementTimeoutMs is not None and self.statementTimeoutMs <= 0:
            raise ConfigurationError("statementTimeoutMs must be a positive number of "
                                     "milliseconds", setting="statementTimeoutMs")
        if self.staleStagingMinutes <= 0:
            raise ConfigurationError("staleStagingMinutes must be a positive number of "
                                     "minutes", setting="staleStagingMinutes")

    def _check_direct(self) -> None:
        """Direct writes: three written columns and a mode that allows them."""
        if len(self.offsetColumns) != 3 or len(set(self.offsetColumns)) != 3:
            raise ConfigurationError(
                f"option offsetColumns names the three target columns holding each row's "
                f"Kafka topic, partition and offset, in that order; got "
                f"{list(self.offsetColumns)}", setting="offsetColumns",
                value=list(self.offsetColumns))
        missing = [c for c in self.offsetColumns if c not in self.columns]
        if missing:
            raise ConfigurationError(
                f"offsetColumns {missing} are not among the written columns "
                f"{list(self.columns)}: write the source's topic, partition and offset "
                "columns", setting="offsetColumns", value=list(self.offsetColumns))
        if self.mode != "append":
            raise ConfigurationError(
                f"offsetColumns writes rows straight into the target, for mode=append; "
                f"mode={self.mode} stages them, so that the commit applies the whole batch "
                "at once (each key's latest record across tasks, or the table replaced): "
                "drop offsetColumns", setting="offsetColumns", value=list(self.offsetColumns))

    @property
    def direct(self) -> bool:
        """Whether tasks write straight into the target (``offsetColumns`` given)."""
        return bool(self.offsetColumns)

    @property
    def target(self) -> str:
        """``schema.table`` for messages (quoted only where needed to read unambiguously)."""
        return f"{self.schema}.{self.table}"


def _check_name(option: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"option {option} must be a non-empty name, got {value!r}",
                                 setting=option)
    if len(value.encode("utf-8")) > NAME_LIMIT:
        raise ConfigurationError(
            f"option {option}: {value!r} is longer than PostgreSQL's {NAME_LIMIT}-byte names",
            setting=option)
    if "\x00" in value:
        raise ConfigurationError(f"option {option} holds a NUL character", setting=option)


def _flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"option {key} must be true or false, got {value!r}",
                             setting=key, value=str(value))


def _number(options: Mapping[str, str], key: str, name: str) -> int | None:
    value = options.get(key)
    if value is None or str(value).strip() == "":
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"option {name} must be a whole number, got {value!r}",
                                 setting=name, value=str(value)) from None


def _names(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(part.strip() for part in str(value).split(",") if part.strip())


def resolve_mode(rawMode: Any, overwrite: bool) -> str:
    """The sink's mode from option ``mode`` (any case, aliases allowed) and Spark's overwrite.

    Raises:
        ConfigurationError: An unknown mode.
    """
    mode = (str(rawMode).strip().lower() if rawMode is not None
            else "complete" if overwrite else "append")
    mode = _ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ConfigurationError(
            f"option mode {rawMode!r} is unknown: use append, update (upsert on keyColumns) "
            "or complete (replace the table's rows)", setting="mode", value=str(rawMode))
    return mode


def _micro_batch(lowered: Mapping[str, Any]) -> tuple[str, int] | None:
    queryId, batchId = lowered.get("microbatch.queryid"), lowered.get("microbatch.batchid")
    if queryId is None and batchId is None:
        return None
    if queryId is None or batchId is None:
        raise ConfigurationError(
            "options microBatch.queryId and microBatch.batchId go together (a micro-batch "
            "of a streaming query): let kafka_direct.sql.foreach_batch_sink set them",
            setting="microBatch.queryId" if queryId is None else "microBatch.batchId")
    number = _number(lowered, "microbatch.batchid", "microBatch.batchId")
    return str(queryId).strip(), -1 if number is None else number


def parse_options(options: Mapping[str, Any], fieldNames: Sequence[str], overwrite: bool,
                  reads: RangeReads | None = None) -> SinkOptions:
    """Check the sink's options against the DataFrame's columns.

    Args:
        options: The data source's options (any key case).
        fieldNames: The DataFrame's column names, in order; the record columns when the
            sink reads offset ranges.
        overwrite: Whether Spark asks to overwrite (complete output mode, or
            ``mode("overwrite")`` of a batch write).
        reads: How the sink reads the offset ranges its DataFrame holds
            (:func:`~kafka_direct.sql.sink.range_reads.parse_range_reads`), or None.

    Raises:
        ConfigurationError: A missing or bad option, named with the fix.
    """
    lowered = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in lowered if k not in KNOWN_OPTIONS
                     and not k.startswith(("spark.", "kafka.")))
    if unknown:
        raise ConfigurationError(
            f"unknown options {unknown} for the kafka-direct-postgres sink; it knows "
            "dsn, password, table, schema, columns, mode, keyColumns, offsetColumns, "
            "createTable, stagingSchema, statementTimeoutMs, staleStagingMinutes, "
            "offsetStore.name / .schema and, reading offset ranges, kafka.*, recordColumns, "
            "failOnDataLoss, kafkaConsumer.pollTimeoutMs and reader", setting=unknown[0])
    table = lowered.get("table")
    if table is None or not str(table).strip():
        raise ConfigurationError(
            "the kafka-direct-postgres sink needs option table: the target table's name "
            "(and option schema for its schema)", setting="table")
    table = str(table)
    schema = str(lowered.get("schema") or "public")
    if "." in table and "schema" not in lowered and re.fullmatch(r"[^.\s]+\.[^.\s]+", table):
        raise ConfigurationError(
            f"option table {table!r} looks schema-qualified: give option schema="
            f"{table.split('.')[0]!r} and table={table.split('.')[1]!r} (a table name "
            "with a dot in it needs option schema as well)", setting="table", value=table)
    columns = _names(lowered.get("columns")) or tuple(fieldNames)
    if len(columns) != len(fieldNames):
        raise ConfigurationError(
            f"option columns names {len(columns)} target columns {list(columns)} for the "
            f"DataFrame's {len(fieldNames)} columns {list(fieldNames)}: give one target "
            "column per DataFrame column, in order (or select the columns to write first)",
            setting="columns", value=list(columns))
    mode = resolve_mode(lowered.get("mode"), overwrite)
    if overwrite and mode == "append":
        raise ConfigurationError(
            "Spark asks to overwrite (outputMode complete, or a batch write with "
            "mode('overwrite')) but option mode is 'append', which would add the whole "
            "result again each time: use mode=complete (replace the table's rows) or "
            "mode=update with keyColumns (upsert)", setting="mode", value=mode)
    if not overwrite and mode == "complete":
        raise ConfigurationError(
            "option mode=complete replaces the table's rows with each batch's: it needs "
            "outputMode('complete') (or a batch write with mode('overwrite')); use "
            "mode=append or mode=update here", setting="mode", value=mode)
    keyColumns = _names(lowered.get("keycolumns"))
    database = Database(str(lowered.get("dsn") or ""),
                        None if lowered.get("password") is None else str(lowered["password"]))
    link = StoreRef.from_options(options, dsn=database.dsn, password=database.password)
    if link is not None and lowered.get("offsetstore.dsn") is not None:
        # The sink commits the offsets in its own transaction, so in its own database: a
        # separate DSN for the sink's side would be misleading, and it is not used.
        link = StoreRef(database.dsn, link.store, link.schema, database.password)
    timeout = _number(lowered, "statementtimeoutms", "statementTimeoutMs")
    stale = _number(lowered, "stalestagingminutes", "staleStagingMinutes")
    offsetColumns = _names(lowered.get("offsetcolumns"))
    if reads is not None:
        # The sink knows which record columns are the coordinates: claims taken from any
        # other column would name offsets the task never wrote.
        claimed = _record_offsets(reads, columns)
        if offsetColumns and offsetColumns != claimed:
            raise ConfigurationError(
                f"option offsetColumns {list(offsetColumns)} must be the target columns of "
                f"the records' topic, partition and offset (recordColumns), "
                f"{list(claimed)}: give those, or leave offsetColumns out",
                setting="offsetColumns", value=list(offsetColumns))
        offsetColumns = claimed
    return SinkOptions(
        database=database, table=table, schema=schema, columns=columns, mode=mode,
        keyColumns=keyColumns, createTable=_flag(lowered, "createtable", False),
        stagingSchema=str(lowered.get("stagingschema") or schema),
        statementTimeoutMs=timeout, staleStagingMinutes=1440 if stale is None else stale,
        link=link, microBatch=_micro_batch(lowered), offsetColumns=offsetColumns,
        reads=reads)


def _record_offsets(reads: RangeReads, columns: Sequence[str]) -> tuple[str, ...]:
    """The target columns of the records' topic, partition and offset (``offsetColumns``).

    Raises:
        ConfigurationError: ``recordColumns`` lacks one of them.
    """
    named = reads.recordColumns
    missing = [c for c in ("topic", "partition", "offset") if c not in named]
    if missing:
        raise ConfigurationError(
            f"option recordColumns ({','.join(named)}) lacks {missing}: a sink reading "
            "offset ranges claims each record's topic, partition and offset, so it writes "
            "them: add them", setting="recordColumns", value=",".join(named))
    return tuple(columns[named.index(c)] for c in ("topic", "partition", "offset"))
