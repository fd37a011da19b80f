"""The structured job's typed writer: a sink whose tasks stage and whose commit moves, once.

``format("kafka-direct-ingest-postgres")``, registered by the ingest job, takes the
``kafka-direct`` source's rows (``topic, kafka_partition, kafka_offset, key, value``), or
its offset ranges (``emit=offsetRanges``, with the ``kafka.*`` and ``recordColumns``
options of :mod:`kafka_direct.sql.sink.range_reads`: each task then reads its ranges'
records itself, and no record crosses Spark's JVM):

* each write task decodes its Arrow batches' records and stages them (:mod:`.stage`),
  registered in the structured sink's staging registry under Spark's query and batch ids;
* the driver's commit is the ``kafka-direct-postgres`` sink's
  (:func:`~kafka_direct.sql.sink.commit.commit_batch`: the query's commit row locked, a
  batch committed before writes nothing, the batch's offsets applied to the linked offset
  store), with this package's move of the staged rows in its transaction
  (:func:`~kafka_direct.app.typed.commit.move_parts`);
* an abort drops the batch's staged tables.

Options (strings, as Spark passes them): ``dsn``, ``schema``, ``table``,
``offsetStore.name``, ``statementTimeoutMs``, ``records`` (the record options as JSON) and
``schemaRegistry.password`` (the registry's client settings as JSON: the key holds
"password" so that Spark redacts the value in plans and logs) and ``schemas`` (the Avro
schemas the driver fetched for the topics at start, by id: tasks ask the registry only for
ids they were not given).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.schema_registry import RegistrySettings
from kafka_direct.app.typed.stage import StagedPart, Stager
from kafka_direct.errors import ConfigurationError
from kafka_direct.sql.sink.range_reads import RangeReads, parse_range_reads

__all__ = ["FORMAT", "METADATA_COLUMNS", "TypedCommitMessage", "TypedIngestSink",
           "sink_options"]

logger = logging.getLogger(__name__)

#: The sink's format name (registered by the ingest job).
FORMAT = "kafka-direct-ingest-postgres"
_REGISTRY_OPTION = "schemaRegistry.password"
#: The source's columns the sink also takes, for the timestamp and header columns.
METADATA_COLUMNS = ("timestamp", "headers")


def sink_options(options: TypedOptions, dsn: str, schema: str, table: str, group: str,
                 statementTimeoutMs: int | None,
                 schemas: Mapping[int, tuple[str, ...]] | None = None) -> dict[str, str]:
    """The sink's options for the job (DSN and registry settings included: never log them).

    ``schemas``: Avro schema texts by id for the tasks (others they fetch themselves).
    """
    records = {"valueFormat": options.valueFormat, "keyFormat": options.keyFormat,
               "keyColumns": list(options.keyColumns), "onTombstone": options.onTombstone,
               "onBadRecord": options.onBadRecord, "deadLetterTable": options.deadLetterTable,
               "columns": [list(c) for c in options.columns],
               "timestampColumn": options.timestampColumn,
               "headerColumns": [list(c) for c in options.headerColumns],
               "envelope": options.envelope, "onTruncate": options.onTruncate}
    given = {"dsn": dsn, "schema": schema, "table": table, "offsetStore.name": group,
             "records": json.dumps(records)}
    if statementTimeoutMs:
        given["statementTimeoutMs"] = str(statementTimeoutMs)
    if options.registry is not None:
        given[_REGISTRY_OPTION] = json.dumps({"url": options.registry.url,
                                              "config": [list(c) for c in
                                                         options.registry.config]})
        given["schemas"] = json.dumps({str(k): list(v) for k, v in (schemas or {}).items()})
    return given


@dataclass(frozen=True)
class _Settings:
    dsn: str
    schema: str
    table: str
    group: str
    options: TypedOptions
    statementTimeoutMs: int | None
    schemas: tuple[tuple[int, tuple[str, ...]], ...] = ()
    reads: RangeReads | None = None

    def __repr__(self) -> str:
        return f"_Settings({self.schema}.{self.table})"


def _settings(given: Mapping[str, str]) -> _Settings:
    lowered = {str(k).lower(): str(v) for k, v in given.items()}
    try:
        records = json.loads(lowered["records"])
        registry = lowered.get(_REGISTRY_OPTION.lower())
        settings = None
        if registry is not None:
            found = json.loads(registry)
            settings = RegistrySettings(found["url"], tuple((str(k), str(v))
                                                            for k, v in found["config"]))
        options = TypedOptions(
            valueFormat=records["valueFormat"], keyFormat=records["keyFormat"],
            registry=settings, keyColumns=tuple(records["keyColumns"]),
            onTombstone=records["onTombstone"], onBadRecord=records["onBadRecord"],
            deadLetterTable=records["deadLetterTable"],
            columns=tuple((str(n), str(t)) for n, t in records["columns"]),
            timestampColumn=records.get("timestampColumn"),
            headerColumns=tuple((str(n), str(t)) for n, t in records.get("headerColumns", ())),
            envelope=records.get("envelope", "none"),
            onTruncate=records.get("onTruncate", "fail"))
        timeout = lowered.get("statementtimeoutms")
        schemas = tuple(sorted((int(k), tuple(str(t) for t in v)) for k, v in
                               json.loads(lowered.get("schemas") or "{}").items()))
        return _Settings(lowered.get("dsn", ""), lowered["schema"], lowered["table"],
                         lowered["offsetstore.name"], options,
                         int(timeout) if timeout else None, schemas)
    except (KeyError, ValueError, TypeError) as error:
        raise ConfigurationError(f"the {FORMAT} sink is the ingest job's own; its options "
                                 f"are set by the job ({type(error).__name__})",
                                 setting="records") from None


@dataclass(frozen=True)
class TypedCommitMessage(WriterCommitMessage):
    """A write task's commit message: its query, batch, and what it staged."""

    queryId: str
    batchId: int
    part: StagedPart


def _carried(work: Any) -> Any:
    from kafka_direct.task_errors import carried

    with carried():
        return work()


class _Writer(DataSourceStreamArrowWriter):
    """Stages each task's rows; commits or aborts a micro-batch on the driver."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings

    def __repr__(self) -> str:
        return f"{FORMAT} writer ({self.settings.schema}.{self.settings.table})"

    def write(self, iterator: Iterator[Any]) -> TypedCommitMessage:
        """Stage this task attempt's rows (on an executor)."""
        return _carried(lambda: self._write(iterator))  # type: ignore[no-any-return]

    def _write(self, iterator: Iterator[Any]) -> TypedCommitMessage:
        from pyspark import TaskContext

        from kafka_direct.sql.formats import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY

        context = TaskContext.get()
        queryId = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if context is None or not queryId or batch is None:
            raise ConfigurationError(f"the {FORMAT} sink writes streaming micro-batches "
                                     "only", setting="writeStream")
        s = self.settings
        stager = Stager(s.dsn, s.schema, s.table, s.options, str(queryId), int(batch),
                        s.statementTimeoutMs, s.schemas)
        if s.reads is not None:  # offset ranges: their records, read here
            from kafka_direct.rdd.arrow_reader import task_attempt

            iterator = s.reads.records(iterator, task_attempt())
        part = stager.stage(context.partitionId(), _records(iterator))
        return TypedCommitMessage(str(queryId), int(batch), part)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit micro-batch ``batchId`` once, its staged rows moved in the transaction."""
        _carried(lambda: self._commit(messages, batchId))

    def _commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from kafka_direct.app.typed.commit import move_tables
        from kafka_direct.postgres.staging import StagedAttempt
        from kafka_direct.sql.sink.commit import commit_batch

        s = self.settings
        attempts: list[StagedAttempt | None] = []
        parts: dict[str, StagedPart] = {}
        for message in messages:
            if not isinstance(message, TypedCommitMessage):
                attempts.append(None)  # refused by the commit: a task sent nothing
                continue
            parts[message.part.token] = message.part
            attempts.append(StagedAttempt(message.queryId, message.batchId,
                                          message.part.partitionId, message.part.token,
                                          message.part.rows))

        def move(cursor: Any, staged: Any) -> int:
            moved = move_tables(cursor, s.schema, s.table, s.options,
                                [parts[a.token] for a in staged])
            logger.info("batch %d: %d rows written, %d deleted, %d dead letters", batchId,
                        moved.written, moved.deleted, moved.deadLetters)
            return moved.written

        result = commit_batch(_sink_options(s), batchId, attempts, move=move)
        logger.debug("%r: %s", self, result)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Drop micro-batch ``batchId``'s staged rows."""
        from kafka_direct.postgres.staging import StagedAttempt
        from kafka_direct.sql.sink.commit import abort_batch

        attempts: list[StagedAttempt | None] = [
            StagedAttempt(m.queryId, m.batchId, m.part.partitionId, m.part.token, m.part.rows)
            if isinstance(m, TypedCommitMessage) else None for m in messages]
        abort_batch(_sink_options(self.settings), batchId, attempts)


def _sink_options(s: _Settings) -> Any:
    from kafka_direct.app.typed.options import COORDINATES
    from kafka_direct.postgres.connection import Database
    from kafka_direct.sql.link.source_side import SourceLink
    from kafka_direct.sql.sink.options import SinkOptions

    return SinkOptions(database=Database(s.dsn), table=s.table, schema=s.schema,
                       columns=COORDINATES, stagingSchema=s.schema,
                       statementTimeoutMs=s.statementTimeoutMs,
                       link=SourceLink(s.dsn, s.group, s.schema))


def _records(batches: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
    """(topic, partition, offset, key, value[, timestamp, headers]) of the source's rows.

    The last two when the job selected them, from Arrow record batches: the job's columns
    (``kafka_partition``, ``kafka_offset``), or Kafka's (records read from offset ranges).
    """
    for batch in batches:
        if not batch.num_rows:
            continue
        names = batch.schema.names
        column = {_JOB_NAMES.get(name, name): batch.column(i).to_pylist()
                  for i, name in enumerate(names)}
        extra = [column[name] if name in column else [None] * batch.num_rows
                 for name in METADATA_COLUMNS] if any(n in column for n in
                                                      METADATA_COLUMNS) else []
        yield from zip(column["topic"], column["kafka_partition"], column["kafka_offset"],
                       column["key"], column["value"], *extra, strict=True)


#: Kafka's names of the columns the job renames.
_JOB_NAMES = {"partition": "kafka_partition", "offset": "kafka_offset"}


class TypedIngestSink(DataSource):
    """The ``kafka-direct-ingest-postgres`` data source (the ingest job's typed writer)."""

    @classmethod
    def name(cls) -> str:
        """``kafka-direct-ingest-postgres``."""
        return FORMAT

    def __repr__(self) -> str:
        return "TypedIngestSink()"  # the options hold the DSN

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        """The micro-batch writer."""
        return _carried(lambda: self._writer(schema))  # type: ignore[no-any-return]

    def _writer(self, schema: Any) -> _Writer:
        fields = [(f.name, f.dataType) for f in schema.fields]
        reads = parse_range_reads(self.options, fields)
        if reads is not None:  # offset ranges: the records' columns are Kafka's
            names = list(reads.recordColumns)
            wanted = ["topic", "partition", "offset", "key", "value"]
            what = "option recordColumns names"
        else:
            names = [name for name, _ in fields]
            wanted = ["topic", "kafka_partition", "kafka_offset", "key", "value"]
            what = f"the {FORMAT} sink takes the columns"
        if names[:5] != wanted or not set(names[5:]) <= set(METADATA_COLUMNS):
            raise ConfigurationError(f"{what} {wanted}, then {list(METADATA_COLUMNS)} if "
                                     f"wanted; got {names}", setting="columns")
        return _Writer(replace(_settings(self.options), reads=reads))
