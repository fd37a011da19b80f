"""The old pyspark.streaming.kafka names map onto our API (no broker, no Spark)."""

import logging
import pickle

import pytest
from pyspark import cloudpickle

from kafka_direct import ConfigurationError, OffsetRange, StreamingContext, TopicPartition
from kafka_direct import OffsetRange as OurOffsetRange
from kafka_direct.compat import pyspark_kafka
from kafka_direct.compat.pyspark_kafka import (
    Broker,
    KafkaMessageAndMetadata,
    KafkaUtils,
    TopicAndPartition,
    checkpoint_id,
    consumer_strategy,
    translate_params,
    utf8_decoder,
)
from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.dstream.consumer_strategy import Assign, Subscribe
from kafka_direct.rdd.location_strategy import PreferConsistent, PreferFixed
from tests.fakes.fake_cluster import FakeSparkContext

OLD = {"metadata.broker.list": "b:9092"}


def record(key=b"k", value=b"v", offset=7):
    return ConsumerRecord("t", 1, offset, 0, 0, key, value)


# -- names -------------------------------------------------------------------------------


def test_the_old_names_are_there():
    for name in ("KafkaUtils", "TopicAndPartition", "OffsetRange", "Broker",
                 "KafkaMessageAndMetadata", "utf8_decoder"):
        assert name in pyspark_kafka.__all__
    assert pyspark_kafka.OffsetRange is OurOffsetRange
    r = OffsetRange("t", 0, 1, 5)
    assert (r.topic, r.partition, r.fromOffset, r.untilOffset) == ("t", 0, 1, 5)


def test_utf8_decoder():
    assert utf8_decoder(b"caf\xc3\xa9") == "café"
    assert utf8_decoder(None) is None


def test_topic_and_partition_equality():
    # PySpark 2.x's test_topic_and_partition_equality.
    a, b = TopicAndPartition("foo", 0), TopicAndPartition("foo", 0)
    assert a == b and a.__ne__(b) is False
    assert a != TopicAndPartition("bar", 0)
    assert a != TopicAndPartition("foo", 1)
    assert hash(a) == hash(b) and len({a, b}) == 1
    assert {a: 1}[b] == 1
    assert a != TopicPartition("foo", 0)  # a different type, as in PySpark
    assert (a.topic, a.partition, a._topic, a._partition) == ("foo", 0, "foo", 0)


def test_topic_and_partition_converts_and_pickles():
    a = TopicAndPartition("foo", 3)
    assert a.toTopicPartition() == TopicPartition("foo", 3)
    assert TopicAndPartition.fromTopicPartition(TopicPartition("foo", 3)) == a
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a) == "TopicAndPartition('foo', 3)"
    with pytest.raises(ConfigurationError):
        TopicAndPartition("foo", -1)
    with pytest.raises(ConfigurationError):
        TopicAndPartition("", 0)


def test_broker():
    b = Broker("host", 9092)
    assert (b.host, b.port) == ("host", 9092)
    assert b == Broker("host", 9092) and hash(b) == hash(Broker("host", 9092))
    assert b != Broker("host", 9093)
    assert pickle.loads(pickle.dumps(b)) == b
    with pytest.raises(ConfigurationError):
        Broker("host", "9092")


def test_message_and_metadata_decodes_lazily():
    m = KafkaMessageAndMetadata("t", 1, 7, b"k", b"\xff")
    assert (m.topic, m.partition, m.offset, m.key) == ("t", 1, 7, "k")
    with pytest.raises(UnicodeDecodeError):
        m.message  # noqa: B018  (decoded when read, with utf8 by default)
    m._set_value_decoder(lambda v: v * 2)
    assert m.message == b"\xff\xff"
    assert KafkaMessageAndMetadata("t", 0, 0, None, None).key is None
    assert "offset: 7" in repr(m)


def test_message_and_metadata_pickles_decoded():
    m = KafkaMessageAndMetadata("t", 1, 7, b"k", b"3")
    m._set_value_decoder(lambda v: int(v))  # a lambda: not picklable itself
    back = pickle.loads(pickle.dumps(m))
    assert (back.topic, back.partition, back.offset, back.key, back.message) == \
        ("t", 1, 7, "k", 3)


# -- kafkaParams -----------------------------------------------------------------------------


def test_metadata_broker_list_becomes_bootstrap_servers():
    params, generated = translate_params(OLD)
    assert params == {"bootstrap.servers": "b:9092"} and not generated
    params, _ = translate_params({**OLD, "bootstrap.servers": "b:9092"})
    assert params == {"bootstrap.servers": "b:9092"}
    assert translate_params({"bootstrap.servers": "c:1"})[0] == {"bootstrap.servers": "c:1"}
    with pytest.raises(ConfigurationError, match="different values"):
        translate_params({**OLD, "bootstrap.servers": "other:9092"})


@pytest.mark.parametrize(("old", "new"), [("smallest", "earliest"), ("largest", "latest"),
                                          ("SMALLEST", "earliest"), ("earliest", "earliest"),
                                          ("latest", "latest")])
def test_auto_offset_reset(old, new):
    assert translate_params({**OLD, "auto.offset.reset": old})[0]["auto.offset.reset"] == new


def test_group_id_generated_only_when_needed_and_missing():
    params, generated = translate_params(OLD, group=True)
    assert generated and params["group.id"].startswith("kafka-direct-pyspark-")
    assert translate_params(OLD, group=True)[0]["group.id"] != params["group.id"]
    params, generated = translate_params({**OLD, "group.id": "mine"}, group=True)
    assert params["group.id"] == "mine" and not generated
    assert "group.id" not in translate_params(OLD)[0]


def test_zookeeper_consumer_settings_are_dropped_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        params, _ = translate_params({**OLD, "zookeeper.connect": "zk:2181",
                                      "zookeeper.connection.timeout.ms": "6000",
                                      "fetch.message.max.bytes": "1048576"})
    assert params == {"bootstrap.servers": "b:9092", "fetch.message.max.bytes": "1048576"}
    assert "zookeeper.connect, zookeeper.connection.timeout.ms" in caplog.text


def test_params_must_be_a_dict():
    with pytest.raises(ConfigurationError, match="must be a dict"):
        translate_params([("metadata.broker.list", "b:9092")])


# -- strategies --------------------------------------------------------------------------------


def test_topics_subscribe():
    strategy, generated = consumer_strategy(["a", "b"], {**OLD, "auto.offset.reset": "smallest"})
    assert isinstance(strategy, Subscribe) and generated
    assert strategy.topics == ["a", "b"]
    assert strategy.resetPolicy == "earliest"
    assert strategy.kafkaParams["bootstrap.servers"] == "b:9092"
    assert consumer_strategy(["a"], OLD, fromOffsets={})[0].__class__ is Subscribe


def test_from_offsets_assign_those_partitions_at_those_offsets():
    strategy, _ = consumer_strategy(["a"], {**OLD, "group.id": "g"},
                                    {TopicAndPartition("a", 0): 5, TopicAndPartition("a", 2): 0})
    assert isinstance(strategy, Assign)
    assert strategy.partitions == {TopicPartition("a", 0), TopicPartition("a", 2)}
    assert strategy.offsets == {TopicPartition("a", 0): 5, TopicPartition("a", 2): 0}
    assert strategy.groupId == "g"


def test_from_offsets_topics_must_equal_topics():
    with pytest.raises(ConfigurationError, match="do not equal"):
        consumer_strategy(["a", "b"], OLD, {TopicAndPartition("a", 0): 0})
    with pytest.raises(ConfigurationError, match="TopicAndPartition"):
        consumer_strategy(["a"], OLD, {("a", 0): 0})
    with pytest.raises(ConfigurationError, match="list of topic names"):
        consumer_strategy("a", OLD)


def test_checkpoint_id_of_a_generated_group_is_what_the_stream_reads():
    assert checkpoint_id(["b", "a"], None) == "pyspark.streaming.kafka topics=['a', 'b']"
    assert checkpoint_id(["a"], {TopicAndPartition("a", 1): 0, TopicAndPartition("a", 0): 3}) \
        == "pyspark.streaming.kafka partitions=['a-0', 'a-1']"


# -- createDirectStream / createRDD ------------------------------------------------------------


def test_create_direct_stream_maps_onto_ours():
    ssc = StreamingContext(FakeSparkContext(), 1)
    stream = KafkaUtils.createDirectStream(ssc, ["t"], OLD)
    assert isinstance(stream.locationStrategy, PreferConsistent)
    assert isinstance(stream.consumerStrategy, Subscribe)
    assert stream.checkpointId == "pyspark.streaming.kafka topics=['t']"
    settings = stream.settings
    assert settings.keyDeserializer is utf8_decoder and settings.valueDeserializer is utf8_decoder
    assert settings.messageHandler(record(key=None, value=b"v")) == (None, b"v")
    mine = KafkaUtils.createDirectStream(ssc, ["u"], {**OLD, "group.id": "g"},
                                         keyDecoder=None, valueDecoder=None)
    assert mine.checkpointId is None  # our default: topics and group
    assert mine.settings.keyDeserializer is None and mine.settings.valueDeserializer is None
    assert mine.settings.messageHandler(record()) == (b"k", b"v")


def test_message_handler_gets_the_old_message_with_the_decoders():
    ssc = StreamingContext(FakeSparkContext(), 1)
    stream = KafkaUtils.createDirectStream(
        ssc, ["t"], OLD, valueDecoder=lambda v: v.decode().upper(),
        messageHandler=lambda m: (m.topic, m.partition, m.offset, m.key, m.message))
    settings = stream.settings
    assert settings.keyDeserializer is None and settings.valueDeserializer is None
    # Executors get the handler as Spark ships task functions: with cloudpickle.
    handler = pickle.loads(cloudpickle.dumps(settings.messageHandler))
    assert handler(record()) == ("t", 1, 7, "k", "V")
    # A handler that reads only the message never decodes a binary key.
    only_message = KafkaUtils.createDirectStream(ssc, ["t2"], OLD,
                                                 messageHandler=lambda m: m.message)
    assert only_message.settings.messageHandler(record(key=b"\xff")) == "v"


def test_bad_functions_fail_at_construction():
    ssc = StreamingContext(FakeSparkContext(), 1)
    with pytest.raises(ConfigurationError, match="keyDecoder"):
        KafkaUtils.createDirectStream(ssc, ["t"], OLD, keyDecoder="utf8")
    with pytest.raises(ConfigurationError, match="messageHandler"):
        KafkaUtils.createDirectStream(ssc, ["t"], OLD, messageHandler=42)


def test_create_rdd_leaders_become_prefer_fixed(monkeypatch):
    seen = {}

    def fake_create_rdd(sc, params, ranges, strategy, **functions):
        seen.update(params=params, ranges=ranges, strategy=strategy, **functions)
        return "rdd"

    monkeypatch.setattr(pyspark_kafka._KafkaUtils, "createRDD", staticmethod(fake_create_rdd))
    ranges = [OffsetRange("t", 0, 0, 10)]
    assert KafkaUtils.createRDD("sc", OLD, ranges,
                                {TopicAndPartition("t", 0): Broker("h1", 9092)}) == "rdd"
    assert seen["params"] == {"bootstrap.servers": "b:9092"}
    assert seen["ranges"] is ranges
    assert seen["strategy"] == PreferFixed({TopicPartition("t", 0): "h1"})
    assert seen["keyDeserializer"] is utf8_decoder
    KafkaUtils.createRDD("sc", OLD, ranges)
    assert isinstance(seen["strategy"], PreferConsistent)
    with pytest.raises(ConfigurationError, match="Broker"):
        KafkaUtils.createRDD("sc", OLD, ranges, {TopicAndPartition("t", 0): "h1"})
