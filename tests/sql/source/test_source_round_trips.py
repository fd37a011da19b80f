"""What a trigger of the source asks Kafka at 1,000 partitions: one listing, ten requests."""

import json
from collections import Counter

from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.sql.source.metadata import SourceMetadata
from kafka_direct.sql.source.options import parse_source_options
from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader
from tests.fakes.confluent_clients import CountingCluster


def counting_reader(cluster):
    """A stream reader whose driver consumer asks ``cluster``'s counting clients."""
    consumer, admin = cluster.clients()
    options = parse_source_options({"kafka.bootstrap.servers": "fake:1",
                                    "subscribe": ",".join(cluster.topics)},
                                   streaming=True, check_client=False)
    metadata = SourceMetadata(options, lambda params: DriverConsumer(
        params, consumerFactory=consumer, adminFactory=admin))
    return KafkaDirectStreamReader(options, None, metadata, parallelism=2)


def test_a_trigger_at_a_thousand_partitions_lists_once_and_asks_ends_in_ten_requests():
    # Broker round trips a trigger, counted on the driver consumer's clients: one listing
    # of the cluster's topics, and the end offsets in requests of 100 partitions (one
    # request of 1,000 cost librdkafka about 10 ms of CPU, quadratic in its size).
    cluster = CountingCluster()
    reader = counting_reader(cluster)
    try:
        start = json.loads(json.dumps(reader.initialOffset()))
        for _ in range(3):
            cluster.end += 3
            cluster.requests.clear()
            end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
            tasks = reader.partitions(start, end)
            reader.commit(end)
            # In any order: from the second trigger the ends are asked beside the listing.
            assert Counter(cluster.requests) == Counter(
                [("metadata", None)] + [("offsets", 100)] * 10)
            ranges = [r for task in tasks for r in task.offsetRanges]
            assert len(ranges) == 1000
            assert {(r.fromOffset, r.untilOffset) for r in ranges} == {
                (cluster.end - 3, cluster.end)}
            start = end
    finally:
        reader.stop()
