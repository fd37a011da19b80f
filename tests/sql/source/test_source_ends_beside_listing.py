"""A trigger's end offsets asked while its topics are listed, taken only for the same partitions."""

import json
import threading
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.sql.source.metadata import SourceMetadata
from kafka_direct.sql.source.options import parse_source_options
from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader
from tests.fakes.confluent_clients import CountingCluster

#: librdkafka's special time of a log's start in ListOffsets.
EARLIEST = -2

#: How long a listing waits for an end-offsets request to begin beside it.
WAIT_S = 2.0


class WatchedCluster(CountingCluster):
    """A cluster whose listing of every topic notes whether ends were asked meanwhile."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.asking = threading.Event()
        self.beside: list[bool] = []
        self.watching = False
        self.fail_next_offsets = False

    def clients(self):
        Consumer, Admin = super().clients()
        cluster = self

        class Watched(Consumer):
            def list_topics(self, topic=None, timeout=None):
                if topic is None and cluster.watching:
                    cluster.beside.append(cluster.asking.wait(WAIT_S))
                    cluster.asking.clear()
                return super().list_topics(topic, timeout)

            def offsets_for_times(self, request, timeout):
                cluster.asking.set()
                if cluster.fail_next_offsets:
                    cluster.fail_next_offsets = False
                    cluster.requests.append(("failed", len(request)))
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
                if request and request[0].offset == EARLIEST:  # new partitions: logs from 0
                    cluster.requests.append(("earliest", len(request)))
                    return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=0,
                                            error=None) for tp in request]
                return super().offsets_for_times(request, timeout)

        return Watched, Admin


def reader_of(cluster, **options):
    consumer, admin = cluster.clients()
    parsed = parse_source_options({"kafka.bootstrap.servers": "fake:1",
                                   "subscribe": ",".join(cluster.topics),
                                   "fetchOffset.retryIntervalMs": "1", **options},
                                  streaming=True, check_client=False)
    metadata = SourceMetadata(parsed, lambda params: DriverConsumer(
        params, consumerFactory=consumer, adminFactory=admin))
    return KafkaDirectStreamReader(parsed, None, metadata, parallelism=2)


def trigger(reader, start):
    end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
    reader.commit(end)
    return end


def ends_of(offsets):
    return {(topic, int(p)): offset for topic, parts in offsets.items()
            for p, offset in parts.items()}


def test_from_the_second_trigger_the_ends_are_asked_while_the_topics_are_listed():
    cluster = WatchedCluster()
    reader = reader_of(cluster)
    try:
        start = trigger(reader, json.loads(json.dumps(reader.initialOffset())))
        cluster.watching = True
        for _ in range(2):
            cluster.end += 2
            cluster.asking.clear()  # only this trigger's questions count
            start = trigger(reader, start)
            assert set(ends_of(start).values()) == {cluster.end}
        # Each listing saw the ends asked beside it (the first trigger knows no ends yet).
        assert cluster.beside == [True, True]
    finally:
        reader.stop()


def test_a_listing_with_new_partitions_has_the_ends_asked_again_of_all_of_them():
    cluster = WatchedCluster()
    reader = reader_of(cluster)
    try:
        start = trigger(reader, json.loads(json.dumps(reader.initialOffset())))
        cluster.partitions = 101  # every topic grew a partition
        cluster.end += 4
        cluster.requests.clear()
        end = trigger(reader, start)
        assert len(ends_of(end)) == 1010
        assert set(ends_of(end).values()) == {cluster.end}
        # The 1,000 asked beside the listing, then the 1,010 it showed.
        assert sorted(n for kind, n in cluster.requests if kind == "offsets") == \
            [10] + [100] * 20
    finally:
        reader.stop()


def test_a_failed_question_beside_the_listing_is_asked_again():
    cluster = WatchedCluster()
    reader = reader_of(cluster)
    try:
        start = trigger(reader, json.loads(json.dumps(reader.initialOffset())))
        cluster.end += 5
        cluster.fail_next_offsets = True
        cluster.requests.clear()
        end = trigger(reader, start)
        assert set(ends_of(end).values()) == {cluster.end}
        assert ("failed", 100) in cluster.requests
    finally:
        reader.stop()


def test_few_partitions_are_listed_first_and_asked_after():
    cluster = WatchedCluster(topics=1, partitions=4)
    reader = reader_of(cluster)
    try:
        start = json.loads(json.dumps(reader.initialOffset()))
        for _ in range(2):
            cluster.end += 1
            cluster.requests.clear()
            start = trigger(reader, start)
            assert cluster.requests == [("metadata", "t0"), ("offsets", 4)]
    finally:
        reader.stop()


def test_stop_ends_the_thread_that_asks_beside_the_listing():
    cluster = WatchedCluster()
    reader = reader_of(cluster)
    start = trigger(reader, json.loads(json.dumps(reader.initialOffset())))
    trigger(reader, start)
    assert any(t.name.startswith("kafka-direct-source-ends") for t in threading.enumerate())
    reader.stop()
    assert not any(t.name.startswith("kafka-direct-source-ends")
                   for t in threading.enumerate())


def test_other_questions_of_end_offsets_do_not_change_what_the_next_trigger_asks_beside():
    # Offsets asked for other reasons (a partition's reset, Trigger.AvailableNow's check)
    # are not the trigger's: the next trigger still asks its own partitions beside the
    # listing, and takes that answer.
    cluster = WatchedCluster()
    reader = reader_of(cluster)
    try:
        start = trigger(reader, json.loads(json.dumps(reader.initialOffset())))
        reader.metadata.latest({next(iter(reader.metadata.partitions()))})
        cluster.end += 3
        cluster.requests.clear()
        end = trigger(reader, start)
        assert set(ends_of(end).values()) == {cluster.end}
        assert sorted(cluster.requests) == [("metadata", None)] + [("offsets", 100)] * 10
    finally:
        reader.stop()
