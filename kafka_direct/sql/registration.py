"""One call makes the Structured Streaming source and sink available to a SparkSession."""

from __future__ import annotations

import logging
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["MINIMUM_PYSPARK", "POSTGRES_SINK_FORMAT", "SOURCE_FORMAT",
           "check_structured_support", "register"]

logger = logging.getLogger(__name__)

#: The format name of the Kafka source, for ``spark.readStream.format(...)``.
SOURCE_FORMAT = "kafka-direct"
#: The format name of the exactly-once PostgreSQL sink, for ``df.writeStream.format(...)``.
POSTGRES_SINK_FORMAT = "kafka-direct-postgres"
#: Python stream readers with admission control (latestOffset(start, limit)) came in 4.2.
MINIMUM_PYSPARK = (4, 2)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_structured_support(version: str | None = None) -> None:
    """Raise a clear error unless this PySpark and pyarrow can run the source and sink.

    Args:
        version: PySpark's version (default: the installed one); for tests.

    Raises:
        ConfigurationError: PySpark is older than 4.2, or pyarrow is missing.
    """
    if version is None:
        import pyspark

        version = pyspark.__version__
    if _version_tuple(version) < MINIMUM_PYSPARK:
        raise ConfigurationError(
            f"the Structured Streaming source and sink need PySpark 4.2 or newer (Python "
            f"stream readers with admission control); this is PySpark {version}. Upgrade "
            f"with pip install 'pyspark>=4.2', or use the direct stream "
            f"(KafkaUtils.createDirectStream), which supports PySpark 3.5 and newer")
    try:
        import pyarrow  # noqa: F401
    except ImportError as missing:
        raise ConfigurationError(
            "the Structured Streaming source and sink need pyarrow: pip install "
            "'kafka-direct[structured]'") from missing


def register(spark: Any) -> None:
    """Register the ``kafka-direct`` source and the ``kafka-direct-postgres`` sink.

    Works on a classic SparkSession and on a Spark Connect session alike (the classes are
    sent to the server, whose Python workers must have kafka-direct installed).

    Args:
        spark: The SparkSession.

    Raises:
        ConfigurationError: As :func:`check_structured_support`, or ``spark`` is not a
            SparkSession.
    """
    check_structured_support()
    registry = getattr(spark, "dataSource", None)
    if registry is None or not hasattr(registry, "register"):
        raise ConfigurationError(
            f"register needs a SparkSession (classic or Spark Connect), got "
            f"{type(spark).__name__}; pass SparkSession.builder.getOrCreate()")
    from kafka_direct.sql.kafka_source import KafkaDirectSource
    from kafka_direct.sql.postgres_sink import PostgresSink

    registry.register(KafkaDirectSource)
    registry.register(PostgresSink)
    logger.debug("registered the %s source and the %s sink", SOURCE_FORMAT,
                 POSTGRES_SINK_FORMAT)
