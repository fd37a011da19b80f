"""The former home of :mod:`kafka_direct.rdd.spark_support`, kept so user imports still work.

``kafka_direct.spark_support.ensure_pyspark_python()`` is documented for jobs that start
their own SparkContext.
"""

from kafka_direct.rdd.spark_support import ensure_pyspark_python, live_executors, located_rdd

__all__ = ["ensure_pyspark_python", "live_executors", "located_rdd"]
