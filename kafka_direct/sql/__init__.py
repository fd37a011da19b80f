"""Structured Streaming: the ``kafka-direct`` source and the exactly-once PostgreSQL sink.

* ``spark.readStream.format("kafka-direct")`` / ``spark.read.format("kafka-direct")``: a
  pure-Python Kafka source with the options and schema of Spark's ``kafka`` source.
* ``df.writeStream.format("kafka-direct-postgres")``: exactly once into a PostgreSQL table;
  :func:`foreach_batch_sink` does the same from ``foreachBatch`` (any output mode).

Both need PySpark 4.2 or newer (Python data sources with admission control) and pyarrow
(``pip install "kafka-direct[structured]"``); :func:`register` makes them available to a
session, classic or Spark Connect. The DataFrame view of a KafkaRDD
(:mod:`kafka_direct.rdd.dataframe`; ``kafka_direct.sql.dataframe`` still answers) has no
such needs.

Inside: :mod:`~kafka_direct.sql.source`, :mod:`~kafka_direct.sql.sink` and the offset
link between them (:mod:`~kafka_direct.sql.link`), on the names they share
(:mod:`~kafka_direct.sql.formats`) and the offsets JSON (:mod:`~kafka_direct.offsets_json`).
"""

from kafka_direct.sql.formats import POSTGRES_SINK_FORMAT, SOURCE_FORMAT, check_structured_support
from kafka_direct.sql.registration import register
from kafka_direct.sql.sink.foreach_batch import ForeachBatchSink, foreach_batch_sink

__all__ = ["POSTGRES_SINK_FORMAT", "SOURCE_FORMAT", "ForeachBatchSink", "check_structured_support",
           "foreach_batch_sink", "register"]
