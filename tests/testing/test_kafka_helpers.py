"""The broker's test helpers (topics, records) keep their clients between calls."""

import time

import confluent_kafka
from confluent_kafka.admin import AdminClient


def test_the_helpers_keep_one_producer_and_one_admin_client(kafka, monkeypatch):
    made = []
    producer, admin = confluent_kafka.Producer, type(kafka).admin
    monkeypatch.setattr(confluent_kafka, "Producer",
                        lambda conf: made.append("producer") or producer(conf))
    monkeypatch.setattr(type(kafka), "admin",
                        lambda self: made.append("admin") or admin(self))
    consumer = confluent_kafka.Consumer
    monkeypatch.setattr(confluent_kafka, "Consumer",
                        lambda conf: made.append(conf["isolation.level"]) or consumer(conf))
    kafka.forget_clients()
    topic = kafka.create_topic("kept-clients", 2)
    kafka.produce(topic, [b"x"], partition=0)
    # A partition added since the producer last asked: it asks again (one new producer).
    kafka.add_partitions(topic, 3)
    for partition in (1, 2):
        kafka.produce(topic, [b"x"] * (partition + 1), partition=partition)
    assert kafka.end_offsets(topic, range(3)) == {0: (0, 1), 1: (0, 2), 2: (0, 3)}
    kafka.delete_records(topic, 2, 1)
    assert kafka.end_offsets(topic, [2]) == {2: (1, 3)}
    kafka.await_stable(topic, range(3))  # read_committed ends asked too
    assert sorted(made) == ["admin", "producer", "producer", "read_committed",
                            "read_uncommitted"]
    # Settings of its own: a producer of its own.
    kafka.produce(topic, [b"y"], partition=0, acks="all")
    assert made.count("producer") == 3
    # A public admin() is the caller's own.
    kafka.admin()
    kafka.delete_topic(topic)
    assert made.count("admin") == 2


def test_the_kept_producer_keeps_each_partitions_order_through_retries(kafka, monkeypatch):
    # Tests read a partition's offsets as the order they produced in. A producer with
    # several requests in flight may send a retried batch after a later one (a fresh
    # topic's "not leader" answer under load put record 6 at offset 0).
    confs = []
    producer = confluent_kafka.Producer
    monkeypatch.setattr(confluent_kafka, "Producer",
                        lambda conf: confs.append(dict(conf)) or producer(conf))
    kafka.forget_clients()
    topic = kafka.create_topic("kept-producer-order", 1)
    assert kafka.produce(topic, [f"{i}".encode() for i in range(20)], partition=0) == 20
    assert len(confs) == 1
    assert confs[0].get("max.in.flight.requests.per.connection") == 1
    assert kafka.end_offsets(topic, [0]) == {0: (0, 20)}


def test_a_deleted_topic_is_not_made_again_by_the_helpers_kept_clients(kafka, monkeypatch):
    # Kept clients refresh the metadata of every topic they used (every 5 minutes by
    # default; every 100 ms here), and a producer's question lets the broker create a
    # missing topic (auto.create.topics.enable), as an admin client's did: a topic a test
    # deleted came back empty, and the test's read met an empty log instead of no topic.
    refresh = {"topic.metadata.refresh.interval.ms": 100}
    params = type(kafka).params
    monkeypatch.setattr(type(kafka), "params",
                        lambda self, **extra: {**params(self, **extra), **refresh})
    kafka.forget_clients()
    topic = kafka.create_topic("deleted-for-good", 2)
    kafka.produce(topic, [b"x"], partition=1)
    kafka.delete_topic(topic)
    time.sleep(1.5)  # fifteen refreshes of the kept clients, had they kept the topic
    assert topic not in AdminClient(params(kafka)).list_topics(timeout=10).topics
    kafka.forget_clients()
