"""The sink reading offset ranges itself: a DataFrame of the source's ``emit=offsetRanges``.

When the sink's DataFrame holds offset ranges (:mod:`kafka_direct.sql.range_rows`), each
write task reads its ranges' records with the source's own reader
(:func:`kafka_direct.rdd.arrow_reader.read_ranges`: gaps, data loss, stalls and a retried
attempt's fresh consumer decided as for the source's tasks) and writes them as the sink
writes any rows: with ``offsetColumns``, straight into the target with their claims, in
one transaction (:mod:`kafka_direct.postgres.direct_write`). The records then never become
Spark rows: no per-record work in the JVM between a source and a sink.

The sink reads with the options the source would (``kafka.*``, ``failOnDataLoss``,
``kafkaConsumer.pollTimeoutMs``, ``reader``), and ``recordColumns`` chooses which of the
records' columns it writes (Spark's Kafka schema; by default the source's default columns).
Given to a sink whose DataFrame holds anything but offset ranges, those options are refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.client.params import executor_params
from kafka_direct.conf_values import parse_bool, parse_int
from kafka_direct.errors import ConfigurationError
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, driver_impl, read_ranges
from kafka_direct.rdd.kafka_schema import all_columns, select_columns
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.sql.kafka_options import KAFKA_PREFIX, kafka_params, reader_option
from kafka_direct.sql.range_rows import RANGE_COLUMNS, is_range_schema, ranges_of

__all__ = ["READ_OPTIONS", "RangeReads", "parse_range_reads"]

#: The sink's options for reading ranges, ``kafka.*`` aside (lower case, as Spark gives them).
READ_OPTIONS = frozenset({"recordcolumns", "failondataloss", "kafkaconsumer.polltimeoutms",
                          "reader"})
_SPELLING = {"recordcolumns": "recordColumns", "failondataloss": "failOnDataLoss",
             "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs", "reader": "reader"}


@dataclass(frozen=True, slots=True)
class RangeReads:
    """How the sink's tasks read the offset ranges their rows name.

    Attributes:
        settings: The read (Kafka parameters for executors, never shown unredacted; the
            record columns, in order).
    """

    settings: PartitionReadSettings

    def __post_init__(self) -> None:
        if not isinstance(self.settings, PartitionReadSettings) or not self.settings.columns:
            raise ConfigurationError("RangeReads needs PartitionReadSettings naming the record "
                                     "columns", setting="recordColumns")

    def __hash__(self) -> int:
        # The sink's options are hashed (a target is prepared once per process for them);
        # the Kafka parameters are a dict.
        settings, read = self.settings, self.settings.read
        return hash((tuple(sorted((k, str(v)) for k, v in read.params.items())),
                     read.pollTimeoutMs, read.failOnDataLoss, settings.includeHeaders,
                     settings.columns, settings.impl))

    @property
    def recordColumns(self) -> tuple[str, ...]:
        """The records' columns the sink writes, in order (Spark's Kafka names)."""
        columns = self.settings.columns
        return () if columns is None else columns

    def record_fields(self) -> list[tuple[str, Any]]:
        """``(name, Spark type)`` of the record columns: what the target is checked against."""
        from kafka_direct.rdd.arrow_rows import source_schema

        schema = source_schema(self.settings.includeHeaders, self.recordColumns)
        return [(f.name, f.dataType) for f in schema.fields]

    def records(self, rows: Iterator[Any], attempt: int) -> Iterator[Any]:
        """The records of the ranges ``rows`` name, as Arrow record batches, ranges in order.

        The rows are read first (a task's handful), then the records, one range after the
        other (small ranges of distinct partitions in one fetch session).

        Raises:
            ConfigurationError: A row that is no offset range.
            DataLossError: Offsets of a range were deleted (with ``failOnDataLoss``).
            PollTimeoutError: No progress within the poll timeout.
        """
        return read_ranges(list(ranges_of(rows)), self.settings, attempt=attempt)


def parse_range_reads(options: Mapping[str, Any], fields: Sequence[tuple[str, Any]]
                      ) -> RangeReads | None:
    """The reading of ranges, when the DataFrame's ``fields`` are offset ranges; else None.

    Args:
        options: The sink's options (any key case).
        fields: The DataFrame's ``(name, Spark type)`` columns.

    Raises:
        ConfigurationError: Offset ranges without ``kafka.bootstrap.servers``; reading
            options on a DataFrame of anything else; a bad reading option.
    """
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    given = sorted(_SPELLING[k] for k in lowered if k in READ_OPTIONS)
    if any(k.startswith(KAFKA_PREFIX) for k in lowered):
        given.insert(0, "kafka.*")
    if not is_range_schema(fields):
        if given and tuple(name for name, _ in fields) == RANGE_COLUMNS:
            # Named as ranges, typed otherwise: a hand-made DataFrame (createDataFrame infers
            # a long partition), not options given by mistake.
            types = ", ".join(f"{name} {dataType.simpleString()}" for name, dataType in fields)
            raise ConfigurationError(
                f"the DataFrame's columns are named as offset ranges but typed {types}; "
                "offset ranges are topic string, partition int, fromOffset bigint and "
                "untilOffset bigint: cast them (col('partition').cast('int')) or build the "
                "DataFrame with kafka_direct.sql.range_rows.range_schema()",
                setting="kafka.*")
        if given:
            raise ConfigurationError(
                f"options {given} are for a DataFrame of offset ranges (the kafka-direct "
                f"source's emit=offsetRanges), whose records the sink reads itself; this "
                f"DataFrame's columns are {[name for name, _ in fields]}: remove them",
                setting=given[0])
        return None
    if "kafka.*" not in given:
        raise ConfigurationError(
            f"the DataFrame holds offset ranges ({', '.join(RANGE_COLUMNS)}: the kafka-direct "
            "source's emit=offsetRanges), whose records the sink reads itself: give it the "
            "source's kafka.* options (kafka.bootstrap.servers at least)",
            setting="kafka.bootstrap.servers")
    wanted = lowered.get("recordcolumns", "").strip()
    headers = "headers" in [name.strip() for name in wanted.split(",")]
    columns = (select_columns(wanted, headers, "option recordColumns") if wanted
               else all_columns(False))
    read = ReadSettings(
        executor_params(kafka_params(lowered)),
        pollTimeoutMs=parse_int("option 'kafkaConsumer.pollTimeoutMs'",
                                lowered.get("kafkaconsumer.polltimeoutms", "120000"), 1),
        failOnDataLoss=parse_bool("option 'failOnDataLoss'",
                                  lowered.get("failondataloss", "true")))
    return RangeReads(PartitionReadSettings(read, includeHeaders=headers, columns=columns,
                                            impl=reader_option(lowered) or driver_impl()))
