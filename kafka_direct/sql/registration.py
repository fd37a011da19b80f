"""One call makes the Structured Streaming source and sink available to a SparkSession."""

from __future__ import annotations

import logging
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql.formats import POSTGRES_SINK_FORMAT, SOURCE_FORMAT, check_structured_support

__all__ = ["register"]

logger = logging.getLogger(__name__)


#: The parallelism of a cluster that may grow without a bound (dynamic allocation without
#: ``maxExecutors``): a batch then keeps one task per range, as Spark's source.
UNBOUNDED_PARALLELISM = 1_000_000


def _setting(spark: Any, name: str) -> str | None:
    """A Spark setting of the session (None when unset or unreadable)."""
    try:
        sc = spark.sparkContext  # classic: the application's settings
        value = sc.getConf().get(name)
    except Exception:  # Spark Connect: no SparkContext on the client
        try:
            value = spark.conf.get(name, None)
        except Exception:  # a setting the server will not show
            return None
    return str(value) if value not in (None, "") else None


def _default_parallelism(spark: Any) -> int | None:
    """How many tasks keep the cluster busy, or None when unknown.

    Spark's default parallelism (the executors' cores that have joined), raised to what the
    settings promise: ``spark.executor.instances`` x ``spark.executor.cores``, or with
    dynamic allocation ``maxExecutors`` x cores (:data:`UNBOUNDED_PARALLELISM` without a
    maximum: a cluster that starts small is not taken for a small one). A Spark Connect
    client has no SparkContext: its ``spark.default.parallelism`` setting, if any.
    """
    try:
        known: int | None = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect
        value = _setting(spark, "spark.default.parallelism")
        known = int(value) if value and value.isdigit() else None
    cores_text = _setting(spark, "spark.executor.cores") or "1"
    cores = int(cores_text) if cores_text.isdigit() else 1
    if (_setting(spark, "spark.dynamicAllocation.enabled") or "").lower() == "true":
        maximum = _setting(spark, "spark.dynamicAllocation.maxExecutors")
        promised = (int(maximum) * cores if maximum and maximum.isdigit()
                    else UNBOUNDED_PARALLELISM)
    else:
        instances = _setting(spark, "spark.executor.instances")
        promised = int(instances) * cores if instances and instances.isdigit() else 0
    if known is None and not promised:
        return None
    return min(max(known or 0, promised), UNBOUNDED_PARALLELISM)


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
