"""The ``kafka-direct`` data source: Spark's Kafka source, in Python, on KafkaRDD's reader.

::

    df = (spark.readStream.format("kafka-direct")
          .option("kafka.bootstrap.servers", "host:9092")
          .option("subscribe", "events")
          .load())                         # key, value, topic, partition, offset, ...

The options, schema and checks are those of Spark's ``kafka`` source
(:mod:`kafka_direct.sql.source.options`); batches are planned by
:mod:`kafka_direct.sql.source.stream_reader` (streams) and
:mod:`kafka_direct.sql.source.batch_reader` (``spark.read``). Needs PySpark 4.2 or newer
and pyarrow: every entry point checks, so even a direct
``spark.dataSource.register(KafkaDirectSource)`` on an older PySpark fails clearly.
"""

from __future__ import annotations

from typing import Any

from kafka_direct.sql.formats import SOURCE_FORMAT, check_structured_support

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
except ImportError:  # PySpark before 4.0 has no Python data sources: say what to do
    check_structured_support()
    raise


__all__ = ["KafkaDirectSource"]


class KafkaDirectSource(DataSource):
    """``spark.read.format("kafka-direct")`` and ``spark.readStream.format("kafka-direct")``.

    Attributes:
        parallelism: Spark's default parallelism (the executors' cores) when the source was
            registered, which batches keep as their fewest tasks when small ranges are
            packed together; None when unknown (see
            :func:`kafka_direct.sql.source.planning.default_parallelism`). Set on the class
            :func:`kafka_direct.sql.register` registers.
    """

    parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        """The format name, ``kafka-direct`` (after checking PySpark and pyarrow)."""
        check_structured_support()
        return SOURCE_FORMAT

    def schema(self) -> Any:
        """Spark's Kafka source schema; ``headers`` only with ``includeHeaders=true``.

        Only the ``columns`` option's columns when it is set; the offset ranges' columns
        with ``emit=offsetRanges`` (:mod:`kafka_direct.sql.range_rows`). Checks every
        option that does not depend on streaming or batch, so most mistakes fail at
        ``load()``.
        """
        from kafka_direct.rdd.arrow_rows import source_schema
        from kafka_direct.sql.source.options import parse_source_options
        from kafka_direct.task_errors import carried

        check_structured_support()
        with carried():
            options = parse_source_options(self.options, streaming=None)
            if options.emitsRanges:
                from kafka_direct.sql.range_rows import range_schema

                return range_schema()
            return source_schema(options.includeHeaders, options.columns)

    def reader(self, schema: Any) -> DataSourceReader:
        """The batch reader (``spark.read``) of ``schema``: Kafka's, or some of its columns."""
        from kafka_direct.sql.source.batch_reader import KafkaDirectBatchReader
        from kafka_direct.sql.source.options import parse_source_options
        from kafka_direct.task_errors import carried

        check_structured_support()
        with carried():
            options = parse_source_options(self.options, streaming=False, schema=schema)
            return KafkaDirectBatchReader(options, parallelism=self.parallelism)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """The stream reader (``spark.readStream``) of ``schema``, linked to a store if asked."""
        from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader
        from kafka_direct.task_errors import carried

        check_structured_support()
        with carried():
            return KafkaDirectStreamReader.create(self.options, schema,
                                                  parallelism=self.parallelism)
