"""PerPartitionConfig: rate limits per topic-partition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from kafka_direct.conf_values import parse_float, parse_int
from kafka_direct.errors import ConfigurationError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["DefaultPerPartitionConfig", "PerPartitionConfig", "has_no_maximum"]

MAX_RATE_CONF = "spark.streaming.kafka.maxRatePerPartition"
MIN_RATE_CONF = "spark.streaming.kafka.minRatePerPartition"


class PerPartitionConfig:
    """Rate limits of each topic-partition; subclass to vary them per partition.

    Rates are records per second; the direct stream turns them into records per batch.
    """

    def maxRatePerPartition(self, topicPartition: TopicPartition) -> float:
        """Most records per second read from the partition; 0 for no limit.

        0 lifts the limit of this partition only: it reads to its end in each batch (unless
        backpressure or a per-batch cap limits the whole stream), whatever other
        partitions' maxima are.
        """
        return 0.0

    def minRatePerPartition(self, topicPartition: TopicPartition) -> int:
        """Fewest records per batch read from the partition when it has that many (>= 1)."""
        return 1


def _overrides(values: Mapping[TopicPartition, Any] | None, name: str, least: float
               ) -> dict[TopicPartition, float]:
    if values is not None and not isinstance(values, Mapping):
        raise ConfigurationError(f"{name} must be a dict {{TopicPartition: rate}}, got "
                                 f"{type(values).__name__}")
    checked = {}
    for tp, raw in (values or {}).items():
        if not isinstance(tp, TopicPartition):
            raise ConfigurationError(f"{name} keys must be TopicPartition, got {tp!r}")
        try:
            checked[tp] = parse_float(f"{name}[{tp}]", raw, least)
        except ConfigurationError as error:
            raise ConfigurationError(error.message, topic=tp.topic,
                                     partition=tp.partition) from None
    return checked


class DefaultPerPartitionConfig(PerPartitionConfig):
    """Limits from Spark settings, optionally overridden per topic-partition.

    Args:
        conf: The SparkConf (``spark.streaming.kafka.maxRatePerPartition``, default 0 = none;
            ``spark.streaming.kafka.minRatePerPartition``, default 1).
        maxRates: Per topic-partition overrides of the maximum rate (finite, >= 0; 0 = no
            limit for that partition, even when the Spark setting sets one for the others).
        minRates: Per topic-partition overrides of the minimum rate (finite, >= 1).

    Raises:
        ConfigurationError: A setting or an override is not a finite number in its range
            (NaN and infinity included; use 0 for "no maximum").
    """

    def __init__(self, conf: Any, maxRates: Mapping[TopicPartition, float] | None = None,
                 minRates: Mapping[TopicPartition, int] | None = None) -> None:
        self.maxRate = parse_float(MAX_RATE_CONF, conf.get(MAX_RATE_CONF, "0"), 0)
        # Spark's setting is a Long: a record count per second, so a whole number.
        self.minRate = parse_int(MIN_RATE_CONF, conf.get(MIN_RATE_CONF, "1"), 1)
        self.maxRates = _overrides(maxRates, "maxRates", 0)
        self.minRates = {tp: int(value)
                         for tp, value in _overrides(minRates, "minRates", 1).items()}

    def maxRatePerPartition(self, topicPartition: TopicPartition) -> float:
        """The override for the partition, else the Spark setting."""
        return float(self.maxRates.get(topicPartition, self.maxRate))

    def minRatePerPartition(self, topicPartition: TopicPartition) -> int:
        """The override for the partition, else the Spark setting."""
        return int(self.minRates.get(topicPartition, self.minRate))


def has_no_maximum(config: PerPartitionConfig) -> bool:
    """Whether no partition has a maximum rate, known without asking each one.

    True only for the library's own configurations with no maximum set (a subclass that
    overrides ``maxRatePerPartition`` is asked partition by partition): planning a batch of
    a thousand partitions then skips a thousand questions whose answer is "no limit".
    """
    # The bound method's function: a method replaced on the class or on the instance (a
    # mock, a per-object patch) is not one of ours, and is asked partition by partition.
    bound = config.maxRatePerPartition
    if getattr(bound, "__self__", None) is not config:  # another object's method
        return False
    method = getattr(bound, "__func__", None)
    if method is PerPartitionConfig.maxRatePerPartition:
        return True
    if method is DefaultPerPartitionConfig.maxRatePerPartition:
        default = cast(DefaultPerPartitionConfig, config)
        rates = default.maxRates
        return (type(rates) is dict and default.maxRate <= 0
                and not any(rate > 0 for rate in rates.values()))
    return False
