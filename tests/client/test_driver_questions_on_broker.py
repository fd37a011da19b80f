"""The driver consumer's questions on the real broker: ends and starts through the consumer,
a partition added since its metadata was fetched, and topics listed in one request."""

import contextlib
import json
import threading
import time

from kafka_direct import TopicPartition
from kafka_direct.client.driver_consumer import DriverConsumer


def driver_for(kafka):
    return DriverConsumer(kafka.params(**{"group.id": f"questions-{time.monotonic_ns()}"}),
                          15_000)


def test_ends_and_starts_of_many_topics_and_a_partition_added_since(kafka, kafka_topic):
    topics = [kafka_topic(partitions=2) for _ in range(5)]
    for i, topic in enumerate(topics):
        kafka.produce(topic, [b"x"] * (i + 1), partition=0)
        kafka.produce(topic, [b"y"] * (i + 3), partition=1)
    kafka.delete_records(topics[0], 1, 2)
    driver = driver_for(kafka)
    try:
        listing = driver.listTopics([*topics, "no-such-topic-here"])
        assert listing.counts == dict.fromkeys(topics, 2)
        assert listing.unknown == {"no-such-topic-here"}
        partitions = [TopicPartition(t, p) for t in topics for p in (0, 1)]
        assert driver.latestOffsets(partitions) == {
            TopicPartition(t, p): i + 1 + 2 * p for i, t in enumerate(topics) for p in (0, 1)}
        starts = driver.earliestOffsets(partitions)
        assert starts.pop(TopicPartition(topics[0], 1)) == 2 and set(starts.values()) == {0}
        # A partition the consumer's metadata has never seen: refreshed, then answered.
        kafka.add_partitions(topics[1], 3)
        kafka.produce(topics[1], [b"z"] * 4, partition=2)
        added = TopicPartition(topics[1], 2)
        assert driver.latestOffsets([added, partitions[0]]) == {added: 4, partitions[0]: 1}
        assert driver.earliestOffsets([added]) == {added: 0}
        assert driver.listTopics(topics).counts[topics[1]] == 3
    finally:
        driver.close()


def test_the_keeper_polls_while_an_offsets_question_waits(kafka, kafka_topic):
    # The keeper's poll serves group callbacks; an offsets question waiting for a stalled
    # broker (up to the request timeout, each retry) must not hold it up.
    topic = kafka_topic(partitions=2)
    driver = DriverConsumer(kafka.params(**{"group.id": f"keeper-{time.monotonic_ns()}"}),
                            3_000)
    waits: list[float] = []
    stop = threading.Event()

    def keeper() -> None:
        while not stop.is_set():
            start = time.monotonic()
            driver.poll()
            waits.append(time.monotonic() - start)
            time.sleep(0.05)

    thread = threading.Thread(target=keeper, daemon=True)
    thread.start()
    kafka.pause()
    try:
        # The broker is stalled: a timeout is the answer.
        with contextlib.suppress(Exception):
            driver.latestOffsets([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    finally:
        kafka.resume()
        stop.set()
        thread.join()
        driver.close()
    assert waits and max(waits) < 1.0, f"poll() waited {max(waits):.1f} s"


def test_a_partition_added_to_a_subscribed_topic_is_assigned_at_the_next_listing(
        kafka, kafka_topic):
    # The member's metadata refreshes when the stream lists its topics each batch; that
    # refresh starts the rebalance that assigns a new partition (not the periodic refresh,
    # which the user may have set to minutes).
    topic = kafka_topic(partitions=2)
    driver = DriverConsumer(kafka.params(**{
        "group.id": f"fresh-{time.monotonic_ns()}",
        "topic.metadata.refresh.interval.ms": 60_000}), 10_000)
    try:
        driver.subscribe([topic])
        assert {tp.partition for tp in driver.assignment(15)} == {0, 1}
        kafka.add_partitions(topic, 3)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            driver.topicsMatching(lambda name: name == topic)  # a batch's listing
            if len(driver.assignment()) == 3:
                break
            time.sleep(0.5)
        assert {tp.partition for tp in driver.assignment()} == {0, 1, 2}
    finally:
        driver.close()


def test_both_consumers_deliver_their_statistics(kafka, kafka_topic):
    # Events of a consumer nobody polls pile up in its queue: the asking consumer's are
    # served after each question and by the keeper.
    topic = kafka_topic(partitions=1)
    names: set[str] = set()

    def stats(text: str) -> None:
        names.add(json.loads(text)["name"])

    params = kafka.params(**{"group.id": f"stats-{time.monotonic_ns()}",
                             "statistics.interval.ms": 50})
    driver = DriverConsumer({**params, "stats_cb": stats}, 10_000)
    try:
        driver.subscribe([topic])
        deadline = time.monotonic() + 10
        while len(names) < 2 and time.monotonic() < deadline:
            driver.latestOffsets([TopicPartition(topic, 0)])
            time.sleep(0.2)
        assert len(names) == 2, names
    finally:
        driver.close()
