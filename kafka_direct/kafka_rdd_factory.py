"""Build a KafkaRDD placed by a location strategy (shared by createRDD and the stream).

Its own module so that ``KafkaUtils`` and ``DirectKafkaInputDStream`` both depend on it and
neither on the other: the entry points import the stream, the stream never imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_direct.kafka_rdd import KafkaRDD, ReadSettings
from kafka_direct.location_strategy import LocationStrategy, preferred_locations
from kafka_direct.offset_range import OffsetRange
from kafka_direct.spark_support import live_executors, located_rdd

__all__ = ["kafka_rdd"]


def kafka_rdd(sc: Any, ranges: list[OffsetRange], settings: ReadSettings,
              strategy: LocationStrategy, leaders: Mapping[Any, str] | None = None
              ) -> KafkaRDD:
    """A KafkaRDD of ``ranges`` (already checked), partition ``i`` reading ``ranges[i]``.

    Args:
        sc: The SparkContext.
        ranges: The offset ranges, in partition order.
        settings: How executors read.
        strategy: Where each range is preferably read.
        leaders: Partition leaders' hosts, for ``PreferBrokers``.
    """
    locations = preferred_locations(
        strategy, [r.topicPartition() for r in ranges], live_executors(sc), leaders)
    return KafkaRDD(located_rdd(sc, ranges, locations), ranges, settings)
