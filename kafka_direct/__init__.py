"""kafka-direct: the Kafka direct stream for PySpark, with exactly-once delivery into PostgreSQL.

The public API mirrors Spark's ``spark-streaming-kafka-0-10`` Scala API::

    from kafka_direct import KafkaUtils, LocationStrategies, OffsetRange

    rdd = KafkaUtils.createRDD(sc, {"bootstrap.servers": "host:9092"},
                               [OffsetRange("events", 0, 0, 100)],
                               LocationStrategies.PreferConsistent())
    rdd.offsetRanges()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_direct.errors import (
    BadRecordError,
    CheckpointError,
    ConfigurationError,
    DataLossError,
    GroupBusyError,
    KafkaDirectError,
    KafkaReadError,
    KafkaUnavailableError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    OffsetStoreError,
    PartitionsRevokedError,
    PollTimeoutError,
    RecordError,
    SchemaChangeError,
    SchemaRegistryError,
    ServiceError,
    SinkWriteError,
    StreamingQueryFailedError,
    StreamingStateError,
    UnknownTopicOrPartitionError,
)
from kafka_direct.rdd.worker_exit import quiet_idle_exit as _quiet_idle_exit
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.consumer_record import ConsumerRecord
    from kafka_direct.dstream.consumer_strategy import ConsumerStrategies, ConsumerStrategy
    from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
    from kafka_direct.dstream.per_partition_config import (
        DefaultPerPartitionConfig,
        PerPartitionConfig,
    )
    from kafka_direct.kafka_utils import KafkaUtils
    from kafka_direct.offset_range import CanCommitOffsets, HasOffsetRanges, OffsetRange
    from kafka_direct.rdd.kafka_rdd import KafkaRDD
    from kafka_direct.rdd.location_strategy import LocationStrategies, LocationStrategy
    from kafka_direct.streaming import StreamingContext
    from kafka_direct.task_errors import typed_errors

#: Where the other public names live: imported on first use, so that processes which need
#: only part of the package (Spark's Python workers for the Structured Streaming source and
#: sink, which import it with every task) do not load the direct stream, its streaming
#: context and its UI.
_LAZY = {
    "ConsumerRecord": "kafka_direct.consumer_record",
    "ConsumerStrategies": "kafka_direct.dstream.consumer_strategy",
    "ConsumerStrategy": "kafka_direct.dstream.consumer_strategy",
    "DirectKafkaInputDStream": "kafka_direct.dstream.direct_kafka_input_dstream",
    "DefaultPerPartitionConfig": "kafka_direct.dstream.per_partition_config",
    "PerPartitionConfig": "kafka_direct.dstream.per_partition_config",
    "KafkaUtils": "kafka_direct.kafka_utils",
    "CanCommitOffsets": "kafka_direct.offset_range",
    "HasOffsetRanges": "kafka_direct.offset_range",
    "OffsetRange": "kafka_direct.offset_range",
    "KafkaRDD": "kafka_direct.rdd.kafka_rdd",
    "LocationStrategies": "kafka_direct.rdd.location_strategy",
    "LocationStrategy": "kafka_direct.rdd.location_strategy",
    "StreamingContext": "kafka_direct.streaming",
    "typed_errors": "kafka_direct.task_errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "BadRecordError",
    "CanCommitOffsets",
    "CheckpointError",
    "ConfigurationError",
    "ConsumerRecord",
    "ConsumerStrategies",
    "ConsumerStrategy",
    "DataLossError",
    "DefaultPerPartitionConfig",
    "DirectKafkaInputDStream",
    "GroupBusyError",
    "HasOffsetRanges",
    "KafkaDirectError",
    "KafkaRDD",
    "KafkaReadError",
    "KafkaUnavailableError",
    "KafkaUtils",
    "LocationStrategies",
    "LocationStrategy",
    "OffsetMismatchError",
    "OffsetOutOfRangeError",
    "OffsetRange",
    "OffsetStoreError",
    "PartitionsRevokedError",
    "PerPartitionConfig",
    "PollTimeoutError",
    "RecordError",
    "SchemaChangeError",
    "SchemaRegistryError",
    "ServiceError",
    "SinkWriteError",
    "StreamingContext",
    "StreamingQueryFailedError",
    "StreamingStateError",
    "TopicPartition",
    "UnknownTopicOrPartitionError",
    "__version__",
    "typed_errors",
]

# In a Python worker of Spark's: leave quietly when Spark closes it between tasks (see the
# module), so reused workers need not be turned off to keep a job's stderr clean.
_quiet_idle_exit()
