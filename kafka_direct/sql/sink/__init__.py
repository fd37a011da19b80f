"""The exactly-once PostgreSQL sink: ``format("kafka-direct-postgres")`` and ``foreachBatch``.

The data source (:mod:`~kafka_direct.sql.sink.postgres_sink`), its options, the target's
preparation, the tasks' staging, the encoding of Arrow rows for COPY, the driver's commit,
and :func:`~kafka_direct.sql.sink.foreach_batch.foreach_batch_sink` for ``foreachBatch``.
"""

__all__: list[str] = []
