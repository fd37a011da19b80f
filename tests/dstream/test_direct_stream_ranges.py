"""How the direct stream decides each batch's ranges when partitions shrink, vanish or come
back: never a silent skip, never a restart from the original start offsets."""

import logging

import pytest

from kafka_direct import ConsumerStrategies, DataLossError, OffsetRange, TopicPartition
from kafka_direct.dstream.consumer_strategy import Subscribe
from tests.fakes.fake_cluster import FakeCluster, make_stream, stub_rdds

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "auto.offset.reset": "earliest"}


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch):
    stub_rdds(monkeypatch)


@pytest.fixture
def cluster():
    cluster = FakeCluster()
    cluster.create("t", 2)
    return cluster


def by_partition(ranges):
    return {r.partition: (r.fromOffset, r.untilOffset) for r in ranges}


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_truncated_partition_stops_the_stream_with_data_loss(cluster, isolation):
    stream = make_stream(cluster, ConsumerStrategies.Assign(
        [T0, T1], {**PARAMS, "isolation.level": isolation}))
    stream.start()
    cluster.produce(T0, 10)
    assert by_partition(stream.compute(1000)) == {0: (0, 10), 1: (0, 0)}
    cluster.truncate(T0, 4)
    with pytest.raises(DataLossError) as caught:
        stream.compute(2000)
    error = caught.value
    assert (error.topic, error.partition, error.position, error.logEndOffset) == ("t", 0, 10, 4)
    assert "failOnDataLoss" in str(error)


def test_a_recreated_topic_is_data_loss(cluster):
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(["t"], PARAMS))
    stream.start()
    cluster.produce(T0, 10)
    stream.compute(1000)
    cluster.recreate("t")
    cluster.produce(T0, 3)
    with pytest.raises(DataLossError, match="t-0"):
        stream.compute(2000)


def test_without_fail_on_data_loss_a_truncated_partition_goes_on_from_its_log_start(
        cluster, caplog):
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(["t"], PARAMS),
                         {"spark.streaming.kafka.failOnDataLoss": "false"})
    stream.start()
    cluster.produce(T0, 10)
    stream.compute(1000)
    cluster.recreate("t")
    cluster.produce(T0, 3)
    with caplog.at_level(logging.WARNING):
        assert by_partition(stream.compute(2000)) == {0: (0, 3), 1: (0, 0)}
    assert "t-0" in caplog.text and "10" in caplog.text
    cluster.produce(T0, 2)
    assert by_partition(stream.compute(3000)) == {0: (3, 5), 1: (0, 0)}


def test_a_position_held_back_by_an_open_transaction_waits(cluster):
    # A stored position the high watermark has passed but the last stable offset has not
    # (a read_uncommitted run stored it): the records exist, the stream waits for them.
    cluster.produce(T0, 10)
    cluster.log(T0).open_at = 6
    stream = make_stream(cluster, ConsumerStrategies.Assign([T0], PARAMS))
    stream.batchRanges = {500: [OffsetRange("t", 0, 0, 8)]}
    stream.start()
    assert by_partition(stream.compute(1000)) == {0: (8, 8)}
    cluster.log(T0).open_at = None
    assert by_partition(stream.compute(2000)) == {0: (8, 10)}


def test_a_partition_missing_from_one_metadata_answer_goes_on_where_it_was(cluster):
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(
        ["t"], PARAMS, offsets={T0: 2, T1: 0}, groupManagement=False))
    cluster.produce(T0, 10)
    cluster.produce(T1, 4)
    stream.start()
    assert by_partition(stream.compute(1000)) == {0: (2, 10), 1: (0, 4)}
    cluster.hidden.add("t")  # one metadata answer without the topic
    assert by_partition(stream.compute(2000)) == {}
    cluster.hidden.clear()
    cluster.produce(T0, 1)
    assert by_partition(stream.compute(3000)) == {0: (10, 11), 1: (4, 4)}


def test_a_partition_missing_from_a_pattern_answer_goes_on_where_it_was(cluster):
    cluster.add_partitions("t", 1)
    stream = make_stream(cluster, ConsumerStrategies.SubscribePattern(
        "t", PARAMS, offsets={T2: 1}, groupManagement=False))
    cluster.produce(T2, 5)
    stream.start()
    assert by_partition(stream.compute(1000))[2] == (1, 5)
    cluster.visible_partitions["t"] = 2
    assert 2 not in by_partition(stream.compute(2000))
    del cluster.visible_partitions["t"]
    assert by_partition(stream.compute(3000))[2] == (5, 5)
    assert stream.currentOffsets[T2] == 5


def test_a_new_partition_starts_at_its_given_offset_the_first_time_only(cluster):
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(
        ["t"], PARAMS, offsets={T2: 3}, groupManagement=False))
    stream.start()
    cluster.add_partitions("t", 1)
    cluster.produce(T2, 5)
    assert by_partition(stream.compute(1000))[2] == (3, 5)
    cluster.visible_partitions["t"] = 2
    stream.compute(2000)
    del cluster.visible_partitions["t"]
    cluster.produce(T2, 1)
    assert by_partition(stream.compute(3000))[2] == (5, 6)


def test_a_recovered_stream_keeps_positions_of_partitions_absent_from_the_last_batch(cluster):
    cluster.produce(T0, 9)
    cluster.produce(T1, 9)
    stream = make_stream(cluster, ConsumerStrategies.Subscribe(
        ["t"], PARAMS, groupManagement=False))
    stream.batchRanges = {1000: [OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 7)],
                          2000: [OffsetRange("t", 0, 5, 6)]}
    stream.start()
    assert stream.currentOffsets == {T0: 6, T1: 7}


@pytest.mark.parametrize("failOnDataLoss", [True, False])
def test_a_committed_offset_beyond_a_recreated_log_is_data_loss(cluster, failOnDataLoss):
    cluster.produce(T0, 3)
    cluster.committed[("g", T0)] = 10  # the group read a log that was since re-created
    stream = make_stream(cluster, ConsumerStrategies.Assign([T0], PARAMS), {
        "spark.streaming.kafka.failOnDataLoss": str(failOnDataLoss).lower()})
    if failOnDataLoss:
        with pytest.raises(DataLossError, match="t-0"):
            stream.start()
    else:
        stream.start()
        assert by_partition(stream.compute(1000)) == {0: (0, 3)}


def test_a_given_start_offset_beyond_the_end_is_a_configuration_error(cluster):
    from kafka_direct import ConfigurationError

    stream = make_stream(cluster, ConsumerStrategies.Assign([T0], PARAMS, offsets={T0: 5}))
    with pytest.raises(ConfigurationError, match="beyond its end offset"):
        stream.start()


@pytest.mark.parametrize(("strategy", "listings"), [
    (lambda topics: ConsumerStrategies.Assign(
        [TopicPartition(t, p) for t in topics for p in range(100)], PARAMS), 0),
    (lambda topics: Subscribe(topics, PARAMS, groupManagement=False), 1)])
def test_a_batch_of_a_thousand_partitions_asks_their_ends_in_ten_requests(strategy, listings):
    # Broker round trips a batch, counted on the driver consumer's clients: the end offsets
    # in requests of 100 partitions (one request of 1,000 cost librdkafka about 10 ms of
    # CPU, quadratic in its size), and for a subscription without the group one listing.
    from kafka_direct import LocationStrategies, StreamingContext
    from kafka_direct.client.driver_consumer import DriverConsumer
    from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
    from tests.fakes.confluent_clients import CountingCluster
    from tests.fakes.fake_cluster import FakeSparkContext

    counting = CountingCluster()
    consumer, admin = counting.clients()
    stream = DirectKafkaInputDStream(
        StreamingContext(FakeSparkContext(None), 1), LocationStrategies.PreferConsistent(),
        strategy(counting.topics), driverConsumerFactory=lambda params: DriverConsumer(
            params, consumerFactory=consumer, adminFactory=admin))
    stream.initialize(0)
    stream.start()
    try:
        for batch in range(1, 4):
            counting.end += 2
            counting.requests.clear()
            ranges = stream.compute(batch * 1000)
            assert counting.requests == [("metadata", None)] * listings + [("offsets", 100)] * 10
            assert len(ranges) == 1000
            assert {(r.fromOffset, r.untilOffset) for r in ranges} == {
                (counting.end - 2, counting.end)}
            assert [(r.topic, r.partition) for r in ranges] == sorted(
                (r.topic, r.partition) for r in ranges)
    finally:
        stream.stop()
