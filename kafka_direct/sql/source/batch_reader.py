"""The ``kafka-direct`` batch reader: ``spark.read.format("kafka-direct")``.

The offsets are fixed when Spark plans the query: ``startingOffsets`` (default earliest) to
``endingOffsets`` (default latest), or the timestamp options, resolved once on the driver;
then a range per topic-partition (split for ``minPartitions`` / ``maxRecordsPerPartition``),
small ones packed into tasks (``minOffsetsPerTask``), read as the stream reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from kafka_direct.errors import ConfigurationError
from kafka_direct.rdd.arrow_reader import read_task
from kafka_direct.sql.source.metadata import SourceMetadata
from kafka_direct.sql.source.options import OffsetSpec, SourceOptions
from kafka_direct.sql.source.planning import KafkaInputPartition, plan_tasks
from kafka_direct.sql.source.stream_reader import read_settings
from kafka_direct.task_errors import carried

__all__ = ["KafkaDirectBatchReader"]


class KafkaDirectBatchReader(DataSourceReader):
    """Reads fixed offset ranges of Kafka for a batch query.

    Args:
        options: The source's options, checked for a batch query.
        metadata: Asks Kafka while planning (a new one, closed after, when None).
        parallelism: Spark's default parallelism where the source was registered, or None
            (see :func:`~kafka_direct.sql.source.planning.default_parallelism`).
    """

    def __init__(self, options: SourceOptions, metadata: SourceMetadata | None = None,
                 parallelism: int | None = None) -> None:
        self.parallelism = parallelism
        if options.ending is None:
            raise ConfigurationError("a batch read needs ending offsets (endingOffsets)")
        self.options = options
        self.ending: OffsetSpec = options.ending
        self.settings = read_settings(options)
        self._metadata = metadata

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def partitions(self) -> list[InputPartition]:
        """The query's ranges: from the starting to the ending offsets of every partition.

        Raises:
            ConfigurationError: An ending offset before the starting one (named), or a
                starting / ending option that does not fit the partitions.
        """
        with carried():
            metadata = self._metadata or SourceMetadata(self.options)
            try:
                metadata.check_assigned()
                partitions = metadata.partitions()
                start = metadata.resolve(self.options.starting, partitions)
                end = metadata.resolve(self.ending, partitions, ending=True)
            finally:
                if self._metadata is None:
                    metadata.close()
            backwards = sorted(tp for tp in start if end[tp] < start[tp])
            if backwards:
                tp = backwards[0]
                raise ConfigurationError(
                    f"the starting offset {start[tp]} of {tp} is after its ending offset "
                    f"{end[tp]}: check {self.options.starting.option!r} and "
                    f"{self.ending.option!r}", topic=tp.topic, partition=tp.partition)
            _, tasks = plan_tasks(start, end, self.options, self.parallelism)
            return [KafkaInputPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's records as ``pyarrow.RecordBatch``es (on an executor).

        Spark hands an empty plan one placeholder partition, which reads nothing.
        """
        if not isinstance(partition, KafkaInputPartition):
            return iter(())
        return read_task(partition.offsetRanges, self.settings)
