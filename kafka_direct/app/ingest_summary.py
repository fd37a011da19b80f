"""What ``kafka-direct ingest`` says at its end: the table against the log it came from.

Rows in each table, duplicates among them, and the stored offsets against the log end.
:class:`SummaryFacts` asks Kafka and PostgreSQL for them; :meth:`SummaryFacts.begin` does it
in a thread of its own as soon as the job's stream has stopped (its offsets stored), so the
questions run beside Spark's stop rather than after it; :func:`write_summary` prints them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from kafka_direct.app.ingest_arguments import IngestSettings
from kafka_direct.app.ingest_options import IngestResult
from kafka_direct.app.ingest_table import TableCheck, check_table
from kafka_direct.app.kafka_cluster import KafkaCluster
from kafka_direct.app.typed.routing import TableRoute
from kafka_direct.topic_partition import TopicPartition

__all__ = ["SummaryFacts", "write_summary"]


@dataclass(slots=True)
class _Facts:
    ends: dict[TopicPartition, int]
    checks: list[tuple[str, TableCheck]] = field(default_factory=list)
    stored: dict[TopicPartition, int] = field(default_factory=dict)


class SummaryFacts:
    """The summary's answers from Kafka and PostgreSQL, asked once the run's stream stopped.

    Args:
        settings: The command's settings.
        cluster: The Kafka cluster the job read.
        dsn: The database the job wrote.
        result: The run's result; its offsets are final when :meth:`begin` is called.
    """

    def __init__(self, settings: IngestSettings, cluster: KafkaCluster, dsn: str,
                 result: IngestResult) -> None:
        self._settings, self._cluster, self._dsn, self._result = settings, cluster, dsn, result
        self._thread: threading.Thread | None = None
        self._facts: _Facts | None = None
        self._failure: BaseException | None = None

    def begin(self) -> None:
        """Ask in a thread of its own (once): the stream has stopped, its offsets stored."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._ask_keeping_failure,
                                        name="kafka-direct-summary", daemon=True)
        self._thread.start()

    def _ask_keeping_failure(self) -> None:
        try:
            self._facts = self._ask()
        except BaseException as error:
            self._failure = error

    def get(self) -> _Facts:
        """The answers: waited for when begun, else asked now; what failed is raised here."""
        if self._thread is None:
            return self._ask()
        self._thread.join()
        if self._failure is not None:
            raise self._failure
        return self._facts if self._facts is not None else self._ask()

    def _ask(self) -> _Facts:
        options, result = self._settings.options, self._result
        counts = self._cluster.topics()
        ends: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in result.offsets} | set(options.topics)):
            for p, (_, high) in self._cluster.end_offsets(
                    topic, range(counts.get(topic, 0))).items():
                ends[TopicPartition(topic, p)] = high
        route = TableRoute(options.table)
        tables = sorted(set(route.tables({tp.topic for tp in ends}).values())) \
            if route.perTopic else [options.table]
        facts = _Facts(ends)
        for table in tables:
            if route.perTopic and not _table_exists(self._dsn, options.schema, table):
                continue  # a pattern's topic with no record yet: no table yet
            facts.checks.append((table, check_table(
                self._dsn, options.schema, table, options.group, ends,
                stored=result.offsets if options.api == "structured" else None)))
        if facts.checks:
            facts.stored = facts.checks[-1][1].stored
        else:
            facts.stored = (dict(result.offsets) if options.api == "structured"
                            else _stored(self._dsn, options, ends))
        return facts


def write_summary(settings: IngestSettings, facts: SummaryFacts, result: IngestResult,
                  out: TextIO) -> None:
    """Print the run's counts, each table's rows and duplicates, the offsets against the log."""
    options = settings.options
    answers = facts.get()
    out.write(f"{result.batches} batches, {result.records} records read, "
              f"{result.rowsWritten} rows written\n")
    for table, check in answers.checks:
        out.write(f"table {options.schema}.{table}: {check.rows} rows, "
                  f"{check.duplicates} duplicates\n")
    ends = answers.ends
    behind = {str(tp): (answers.stored.get(tp), end) for tp, end in sorted(ends.items())
              if answers.stored.get(tp) != end}
    out.write("stored offsets == log end\n" if answers.stored == ends else
              f"stored offsets behind the log end (stored, end): {behind}\n")


def _table_exists(dsn: str, schema: str, table: str) -> bool:
    from kafka_direct.postgres.connection import connect

    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(format('%%I.%%I', %s, %s)) IS NOT NULL",
                           (schema, table))
            return bool(cursor.fetchone()[0])
    finally:
        connection.close()


def _stored(dsn: str, options: Any, ends: Mapping[TopicPartition, int]
            ) -> dict[TopicPartition, int]:
    from offsets.postgres_offset_store import PostgresOffsetStore

    return dict(PostgresOffsetStore(dsn, schema=options.schema).load(
        options.group, {tp.topic for tp in ends}))

