"""Compatibility layers for code written against other Kafka APIs for Spark.

* :mod:`kafka_direct.compat.pyspark_kafka`: the old ``pyspark.streaming.kafka`` names
  (Spark < 3.0, Kafka 0.8 API) on top of :class:`kafka_direct.KafkaUtils`.
"""
