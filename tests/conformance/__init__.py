"""Apache Spark's PySpark streaming tests, run against kafka-direct's StreamingContext."""
