"""The ``kafka-direct`` source: ``spark.read`` / ``spark.readStream`` ``.format("kafka-direct")``.

The data source itself (:mod:`~kafka_direct.sql.source.kafka_source`), its options and their
offset parsers, what Kafka tells the driver, admission control, the planning of input
partitions, the stream and batch readers, and the executor's read into Arrow rows.
"""

__all__: list[str] = []
