"""The old ``pyspark.streaming.kafka`` API (Spark < 3.0, Kafka 0.8) on kafka-direct.

Code written for Spark 2.x runs with its imports changed::

    # from pyspark.streaming import StreamingContext
    # from pyspark.streaming.kafka import KafkaUtils, OffsetRange, TopicAndPartition
    from kafka_direct import StreamingContext
    from kafka_direct.compat.pyspark_kafka import KafkaUtils, OffsetRange, TopicAndPartition

    stream = KafkaUtils.createDirectStream(ssc, ["events"],
                                           {"metadata.broker.list": "host:9092"})

Every call maps onto :class:`kafka_direct.KafkaUtils` with a consumer strategy
(``Subscribe``, or ``Assign`` when ``fromOffsets`` is given) and ``PreferConsistent`` (or
``PreferFixed`` for ``createRDD``'s ``leaders``). The stream's RDDs are KafkaRDDs, so
``rdd.offsetRanges()`` works in the first ``transform`` or ``foreachRDD`` on the stream, as
it did in Spark 2.x.

Kafka parameters are translated: ``metadata.broker.list`` becomes ``bootstrap.servers``;
``auto.offset.reset`` ``smallest`` / ``largest`` become ``earliest`` / ``latest``; a direct
stream without ``group.id`` gets a group of its own (the 0.8 stream used none); settings of
the 0.8 ZooKeeper consumer that librdkafka lacks (``zookeeper.connect`` ...) are dropped with
a warning, since the direct stream never used them.

``KafkaUtils.createStream`` (the receiver-based stream) is not provided.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.dstream.consumer_strategy import ConsumerStrategies, ConsumerStrategy
from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
from kafka_direct.errors import ConfigurationError
from kafka_direct.kafka_utils import KafkaUtils as _KafkaUtils
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.kafka_rdd import KafkaRDD
from kafka_direct.rdd.location_strategy import LocationStrategies
from kafka_direct.topic_partition import TopicPartition

__all__ = [
    "Broker",
    "KafkaMessageAndMetadata",
    "KafkaUtils",
    "OffsetRange",
    "TopicAndPartition",
    "checkpoint_id",
    "consumer_strategy",
    "translate_params",
    "utf8_decoder",
]

logger = logging.getLogger(__name__)

Decoder = Callable[[Any], Any]

#: Prefix of the consumer group a direct stream gets when ``kafkaParams`` has no group.id.
GENERATED_GROUP_PREFIX = "kafka-direct-pyspark-"

#: Settings of Kafka 0.8's ZooKeeper-based consumer that librdkafka does not know. The 0.8
#: direct stream ignored them; librdkafka would refuse them.
_OLD_CONSUMER_ONLY = frozenset({
    "zookeeper.connect", "zookeeper.connection.timeout.ms", "zookeeper.session.timeout.ms",
    "zookeeper.sync.time.ms", "consumer.timeout.ms", "rebalance.max.retries",
    "rebalance.backoff.ms", "refresh.leader.backoff.ms", "offsets.storage",
    "dual.commit.enabled", "exclude.internal.topics", "num.consumer.fetchers",
    "queued.max.message.chunks", "offsets.channel.backoff.ms",
    "offsets.channel.socket.timeout.ms", "offsets.commit.max.retries", "auto.commit.enable",
})

_RESETS = {"smallest": "earliest", "largest": "latest"}


def utf8_decoder(s: bytes | None) -> str | None:
    """Decode bytes as UTF-8; None (no key, or a tombstone) stays None."""
    if s is None:
        return None
    return s.decode("utf-8")


def _identity(value: Any) -> Any:
    return value


class TopicAndPartition:
    """Kafka 0.8's name for a topic-partition, equal and hashed by (topic, partition).

    Args:
        topic: Topic name, non-empty.
        partition: Partition number, >= 0.

    Raises:
        ConfigurationError: An empty topic or a partition that is not an int >= 0.
    """

    __slots__ = ("_partition", "_topic")

    def __init__(self, topic: str, partition: int) -> None:
        TopicPartition(topic, partition)  # validates both
        self._topic = topic
        self._partition = partition

    @property
    def topic(self) -> str:
        """The topic name."""
        return self._topic

    @property
    def partition(self) -> int:
        """The partition number."""
        return self._partition

    def toTopicPartition(self) -> TopicPartition:
        """The same partition as kafka-direct's :class:`~kafka_direct.TopicPartition`."""
        return TopicPartition(self._topic, self._partition)

    @classmethod
    def fromTopicPartition(cls, tp: TopicPartition) -> TopicAndPartition:
        """The TopicAndPartition of kafka-direct's ``tp``."""
        return cls(tp.topic, tp.partition)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TopicAndPartition):
            return (self._topic, self._partition) == (other._topic, other._partition)
        return False

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((self._topic, self._partition))

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopicAndPartition, (self._topic, self._partition))

    def __repr__(self) -> str:
        return f"TopicAndPartition({self._topic!r}, {self._partition})"


class Broker:
    """A Kafka broker's host and port (``createRDD``'s ``leaders`` values).

    Args:
        host: The broker's host name.
        port: The broker's port.
    """

    __slots__ = ("_host", "_port")

    def __init__(self, host: str, port: int) -> None:
        if not isinstance(host, str) or not host:
            raise ConfigurationError(f"Broker host must be a non-empty string, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigurationError(f"Broker port must be an int in 1..65535, got {port!r}")
        self._host = host
        self._port = port

    @property
    def host(self) -> str:
        """The host name."""
        return self._host

    @property
    def port(self) -> int:
        """The port."""
        return self._port

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Broker):
            return (self._host, self._port) == (other._host, other._port)
        return False

    def __hash__(self) -> int:
        return hash((self._host, self._port))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Broker, (self._host, self._port))

    def __repr__(self) -> str:
        return f"Broker({self._host!r}, {self._port})"


class KafkaMessageAndMetadata:
    """A Kafka message as Spark 2.x's ``messageHandler`` received it.

    ``key`` and ``message`` are the raw bytes through the key and value decoders (decoded
    when read, so a handler that never reads the key never decodes it).

    Args:
        topic: Topic name.
        partition: Partition number.
        offset: The message's offset.
        key: The raw key (bytes or None).
        message: The raw value (bytes or None).
    """

    __slots__ = ("_keyDecoder", "_rawKey", "_rawMessage", "_valueDecoder", "offset",
                 "partition", "topic")

    def __init__(self, topic: str, partition: int, offset: int, key: Any,
                 message: Any) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self._rawKey = key
        self._rawMessage = message
        self._keyDecoder: Decoder = utf8_decoder
        self._valueDecoder: Decoder = utf8_decoder

    def _set_key_decoder(self, decoder: Decoder) -> None:
        self._keyDecoder = decoder

    def _set_value_decoder(self, decoder: Decoder) -> None:
        self._valueDecoder = decoder

    @property
    def key(self) -> Any:
        """The key, through the key decoder."""
        return self._keyDecoder(self._rawKey)

    @property
    def message(self) -> Any:
        """The value, through the value decoder."""
        return self._valueDecoder(self._rawMessage)

    def __reduce__(self) -> tuple[Any, ...]:
        # Decoded now: a decoder (often a lambda) need not be picklable by Spark's serializer.
        return (_decoded_message,
                (self.topic, self.partition, self.offset, self.key, self.message))

    def __repr__(self) -> str:
        return (f"KafkaMessageAndMetadata(topic: {self.topic}, partition: {self.partition}, "
                f"offset: {self.offset}, key and message...)")


def _decoded_message(topic: str, partition: int, offset: int, key: Any,
                     message: Any) -> KafkaMessageAndMetadata:
    m = KafkaMessageAndMetadata(topic, partition, offset, key, message)
    m._set_key_decoder(_identity)
    m._set_value_decoder(_identity)
    return m


def _key_value(record: ConsumerRecord) -> tuple[Any, Any]:
    return (record.key, record.value)


class _OldMessageHandler:
    """Our messageHandler: a ConsumerRecord -> the user's handler of the old message."""

    def __init__(self, handler: Callable[[KafkaMessageAndMetadata], Any],
                 keyDecoder: Decoder, valueDecoder: Decoder) -> None:
        self.handler = handler
        self.keyDecoder = keyDecoder
        self.valueDecoder = valueDecoder

    def __call__(self, record: ConsumerRecord) -> Any:
        m = KafkaMessageAndMetadata(record.topic, record.partition, record.offset,
                                    record.key, record.value)
        m._set_key_decoder(self.keyDecoder)
        m._set_value_decoder(self.valueDecoder)
        return self.handler(m)


def translate_params(kafkaParams: Any, *, group: bool = False) -> tuple[dict[str, Any], bool]:
    """Kafka 0.8 consumer parameters as librdkafka properties.

    Args:
        kafkaParams: The old parameters (``metadata.broker.list`` or ``bootstrap.servers``).
        group: Whether a ``group.id`` is needed; one is generated when absent.

    Returns:
        The new parameters, and whether the group.id was generated.

    Raises:
        ConfigurationError: Not a dict, or two different broker lists.
    """
    if not isinstance(kafkaParams, Mapping):
        raise ConfigurationError(
            f"kafkaParams must be a dict, got {type(kafkaParams).__name__}")
    params = dict(kafkaParams)
    dropped = sorted(k for k in params if k in _OLD_CONSUMER_ONLY)
    for key in dropped:
        del params[key]
    if dropped:
        logger.warning("ignoring Kafka 0.8 consumer settings the direct stream never used "
                       "and librdkafka does not know: %s", ", ".join(dropped))
    if "metadata.broker.list" in params:
        brokers = params.pop("metadata.broker.list")
        if params.setdefault("bootstrap.servers", brokers) != brokers:
            raise ConfigurationError(
                "kafkaParams has both metadata.broker.list and bootstrap.servers, with "
                f"different values ({brokers!r} and {params['bootstrap.servers']!r}); "
                "give one of them")
    reset = params.get("auto.offset.reset")
    if isinstance(reset, str) and reset.lower() in _RESETS:
        params["auto.offset.reset"] = _RESETS[reset.lower()]
    generated = False
    if group and not str(params.get("group.id") or "").strip():
        params["group.id"] = GENERATED_GROUP_PREFIX + uuid.uuid4().hex[:16]
        generated = True
    return params, generated


def _topic_partition(key: Any, what: str) -> TopicPartition:
    if isinstance(key, TopicAndPartition):
        return key.toTopicPartition()
    if isinstance(key, TopicPartition):
        return key
    raise ConfigurationError(
        f"{what} keys must be TopicAndPartition(topic, partition), got {key!r}")


def _check_decoder(name: str, decoder: Any) -> Decoder:
    if decoder is None:
        return _identity
    if not callable(decoder):
        raise ConfigurationError(f"{name} must be a function of the raw bytes, got {decoder!r}")
    return decoder  # type: ignore[no-any-return]


def _read_functions(keyDecoder: Any, valueDecoder: Any, messageHandler: Any
                    ) -> dict[str, Any]:
    """Our keyDeserializer / valueDeserializer / messageHandler for the old arguments."""
    keyDecoder = _check_decoder("keyDecoder", keyDecoder)
    valueDecoder = _check_decoder("valueDecoder", valueDecoder)
    if messageHandler is None:
        return {"keyDeserializer": None if keyDecoder is _identity else keyDecoder,
                "valueDeserializer": None if valueDecoder is _identity else valueDecoder,
                "messageHandler": _key_value}
    if not callable(messageHandler):
        raise ConfigurationError(
            f"messageHandler must be a function of a KafkaMessageAndMetadata, got "
            f"{messageHandler!r}")
    return {"keyDeserializer": None, "valueDeserializer": None,
            "messageHandler": _OldMessageHandler(messageHandler, keyDecoder, valueDecoder)}


def consumer_strategy(topics: Any, kafkaParams: Any,
                      fromOffsets: Mapping[Any, int] | None = None
                      ) -> tuple[ConsumerStrategy, bool]:
    """The strategy for the old ``createDirectStream`` arguments.

    Returns:
        ``Assign`` of ``fromOffsets`` (when given) or ``Subscribe(topics)``; and whether
        the group.id was generated.

    Raises:
        ConfigurationError: ``topics`` is not a list of names, or differs from the topics
            of ``fromOffsets`` (as Spark 2.x refused).
    """
    if not isinstance(topics, list | tuple | set | frozenset):
        raise ConfigurationError(f"topics should be a list of topic names, got {topics!r}")
    params, generated = translate_params(kafkaParams, group=True)
    if not fromOffsets:
        return ConsumerStrategies.Subscribe(list(topics), params), generated
    if not isinstance(fromOffsets, Mapping):
        raise ConfigurationError(
            "fromOffsets must be a dict {TopicAndPartition: offset}, got "
            f"{type(fromOffsets).__name__}")
    offsets = {_topic_partition(k, "fromOffsets"): v for k, v in fromOffsets.items()}
    if {tp.topic for tp in offsets} != set(topics):
        raise ConfigurationError(
            f"the topics {sorted(set(topics))} do not equal the topics of fromOffsets "
            f"{sorted({tp.topic for tp in offsets})}")
    return ConsumerStrategies.Assign(sorted(offsets), params, offsets=offsets), generated


def checkpoint_id(topics: Iterable[str], fromOffsets: Mapping[Any, int] | None) -> str:
    """The checkpoint id of a stream whose group.id was generated: what it reads."""
    if fromOffsets:
        partitions = sorted(_topic_partition(k, "fromOffsets") for k in fromOffsets)
        return f"pyspark.streaming.kafka partitions={[str(tp) for tp in partitions]!r}"
    return f"pyspark.streaming.kafka topics={sorted(set(topics))!r}"


class KafkaUtils:
    """``pyspark.streaming.kafka.KafkaUtils``: the Kafka 0.8 direct stream and RDD."""

    @staticmethod
    def createDirectStream(
        ssc: Any,
        topics: list[str],
        kafkaParams: Mapping[str, Any],
        fromOffsets: Mapping[TopicAndPartition, int] | None = None,
        keyDecoder: Decoder | None = utf8_decoder,
        valueDecoder: Decoder | None = utf8_decoder,
        messageHandler: Callable[[KafkaMessageAndMetadata], Any] | None = None,
    ) -> DirectKafkaInputDStream:
        """A direct stream of ``(key, value)`` pairs, or of ``messageHandler(m)``.

        Args:
            ssc: The StreamingContext (``kafka_direct.StreamingContext``).
            topics: Topic names (all their partitions are read).
            kafkaParams: ``metadata.broker.list`` (or ``bootstrap.servers``) and other
                consumer settings; ``auto.offset.reset`` ``smallest`` or ``largest``
                (default) says where partitions without ``fromOffsets`` start.
            fromOffsets: ``{TopicAndPartition: offset}``: read exactly these partitions
                from these offsets (their topics must be ``topics``).
            keyDecoder: Turns key bytes into the key (None stays None).
            valueDecoder: Turns value bytes into the value (None stays None).
            messageHandler: Turns each :class:`KafkaMessageAndMetadata` into the element.

        Returns:
            kafka-direct's direct stream: its RDDs have ``offsetRanges()``, and it has
            ``commitAsync(ranges)``.

        Raises:
            ConfigurationError: Bad parameters, topics, offsets or functions.
        """
        strategy, generated = consumer_strategy(topics, kafkaParams, fromOffsets)
        # A generated group is new every run: the checkpoint knows the stream by what it reads.
        checkpointId = checkpoint_id(topics, fromOffsets) if generated else None
        return _KafkaUtils.createDirectStream(
            ssc, LocationStrategies.PreferConsistent(), strategy,
            checkpointId=checkpointId,
            **_read_functions(keyDecoder, valueDecoder, messageHandler))

    @staticmethod
    def createRDD(
        sc: Any,
        kafkaParams: Mapping[str, Any],
        offsetRanges: Iterable[OffsetRange],
        leaders: Mapping[TopicAndPartition, Broker] | None = None,
        keyDecoder: Decoder | None = utf8_decoder,
        valueDecoder: Decoder | None = utf8_decoder,
        messageHandler: Callable[[KafkaMessageAndMetadata], Any] | None = None,
    ) -> KafkaRDD:
        """An RDD of the messages in ``offsetRanges``, one Spark partition per range.

        Args:
            sc: The SparkContext.
            kafkaParams: ``metadata.broker.list`` (or ``bootstrap.servers``) and other
                consumer settings.
            offsetRanges: The :class:`OffsetRange` values to read.
            leaders: ``{TopicAndPartition: Broker}``: read those partitions preferably on
                an executor of the broker's host (``PreferFixed``).
            keyDecoder: Turns key bytes into the key (None stays None).
            valueDecoder: Turns value bytes into the value (None stays None).
            messageHandler: Turns each :class:`KafkaMessageAndMetadata` into the element.

        Returns:
            A KafkaRDD (with ``offsetRanges()``).

        Raises:
            ConfigurationError: Bad parameters, ranges, leaders or functions.
            UnknownTopicOrPartitionError: A range names a partition the cluster lacks.
        """
        params, _ = translate_params(kafkaParams)
        if leaders is not None and not isinstance(leaders, Mapping):
            raise ConfigurationError(
                f"leaders must be a dict {{TopicAndPartition: Broker}}, got {leaders!r}")
        hosts = {}
        for key, broker in (leaders or {}).items():
            if not isinstance(broker, Broker):
                raise ConfigurationError(f"leaders values must be Broker(host, port), got "
                                         f"{broker!r}")
            hosts[_topic_partition(key, "leaders")] = broker.host
        strategy = (LocationStrategies.PreferFixed(hosts) if hosts
                    else LocationStrategies.PreferConsistent())
        return _KafkaUtils.createRDD(
            sc, params, offsetRanges, strategy,
            **_read_functions(keyDecoder, valueDecoder, messageHandler))
