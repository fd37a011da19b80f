"""One call makes the Structured Streaming source and sink available to a SparkSession."""

from __future__ import annotations

import logging
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql.formats import POSTGRES_SINK_FORMAT, SOURCE_FORMAT, check_structured_support

__all__ = ["register"]

logger = logging.getLogger(__name__)


def _default_parallelism(spark: Any) -> int | None:
    """Spark's default parallelism, or None when unknown.

    The SparkContext's, else the session's ``spark.default.parallelism`` (a Spark Connect
    client has no SparkContext).
    """
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        pass
    try:
        value = spark.conf.get("spark.default.parallelism", None)
        return int(value) if value else None
    except Exception:  # not set, or not a number: unknown
        return None


def register(spark: Any) -> None:
    """Register the ``kafka-direct`` source and the ``kafka-direct-postgres`` sink.

    Works on a classic SparkSession and on a Spark Connect session alike (the classes are
    sent to the server, whose Python workers must have kafka-direct installed).

    Args:
        spark: The SparkSession.

    Raises:
        ConfigurationError: As :func:`~kafka_direct.sql.formats.check_structured_support`,
            or ``spark`` is not a SparkSession.
    """
    check_structured_support()
    registry = getattr(spark, "dataSource", None)
    if registry is None or not hasattr(registry, "register"):
        raise ConfigurationError(
            f"register needs a SparkSession (classic or Spark Connect), got "
            f"{type(spark).__name__}; pass SparkSession.builder.getOrCreate()")
    # Imported here: importing kafka_direct.sql must not need PySpark >= 4.2 (the data
    # sources subclass its classes), and the check above says what to do when it is older.
    from kafka_direct.sql.sink.postgres_sink import PostgresSink
    from kafka_direct.sql.source.kafka_source import KafkaDirectSource

    parallelism = _default_parallelism(spark)
    source: type[KafkaDirectSource] = KafkaDirectSource
    if parallelism is not None:
        # A class of its own, sent to Spark by value (it is no module's attribute), so the
        # Python processes that plan batches know how many tasks keep the cluster busy.
        source = type("KafkaDirectSource", (KafkaDirectSource,), {
            "parallelism": parallelism, "__module__": __name__,
            "__qualname__": "register.<locals>.KafkaDirectSource",
            "__doc__": KafkaDirectSource.__doc__})
    registry.register(source)
    registry.register(PostgresSink)
    logger.debug("registered the %s source and the %s sink", SOURCE_FORMAT,
                 POSTGRES_SINK_FORMAT)
