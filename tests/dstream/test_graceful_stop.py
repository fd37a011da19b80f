"""Graceful stops at random moments on the real broker: nothing lost, nothing repeated.

Records are produced all along. Each run reads from the group's committed offsets, commits
every batch with ``commitAsync`` and is stopped gracefully at a random moment (between
batches, while one is generated, while one runs). After each stop the group's committed
offsets must be the end of the last batch the run processed, and the next run must start
exactly there; over all runs every offset up to the last commit is processed exactly once.
"""

import random
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.streaming import StreamingContext
from tests.streaming.helpers import Recorder

PARTITIONS = 2
BATCH_SECONDS = 0.25


class ContinuousProducer:
    """Produces small bursts to every partition until stopped."""

    def __init__(self, kafka, topic, rng):
        self.producer = Producer(kafka.params(linger_ms=5))
        self.topic = topic
        self.rng = rng
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-producer", daemon=True)

    def _run(self):
        while not self.done.is_set():
            for partition in range(PARTITIONS):
                for _ in range(self.rng.randint(0, 5)):
                    self.producer.produce(self.topic, b"x", partition=partition)
            self.producer.poll(0)
            time.sleep(0.02)
        self.producer.flush(30)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(60)
        self.producer = None  # its client goes before the broker does


def committed(kafka, topic, group):
    consumer = Consumer(kafka.params(**{"group.id": group}))
    try:
        answer = consumer.committed([KafkaTP(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
    finally:
        consumer.close()


def one_run(spark, kafka, topic, group, stop_after):
    """Run until ``stop_after`` seconds, stop gracefully; the run's successful batches."""
    ssc = StreamingContext(spark, BATCH_SECONDS)
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    params = kafka.params(**{"group.id": group, "auto.offset.reset": "earliest"})
    stream = KafkaUtils.createDirectStream(ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))
    processed = {}
    slow = random.Random(stop_after)

    def output(batch_time, rdd):
        ranges = rdd.offsetRanges()
        records = sorted((r.partition, r.offset) for r in rdd.collect())
        if slow.random() < 0.3:
            time.sleep(slow.uniform(0.05, 0.3))  # the stop may come while a batch runs
        stream.commitAsync(ranges)
        processed[int(batch_time.timestamp() * 1000)] = (ranges, records)

    stream.foreachRDD(output)
    ssc.start()
    try:
        time.sleep(stop_after)
        if slow.random() < 0.5:  # just after a tick: while its batch is being generated
            interval_ms = int(BATCH_SECONDS * 1000)
            now_ms = time.time() * 1000
            time.sleep((interval_ms - now_ms % interval_ms) / 1000 + slow.uniform(0, 0.01))
    finally:
        ssc.stop(stopSparkContext=False, stopGracefully=True)
    assert ssc.awaitTermination(1) is True
    succeeded = {b.batchTime for b in recorder.completed if not b.failed}
    assert succeeded == set(processed), "a graceful stop cut a batch off"
    return [processed[t] for t in sorted(processed)]


def graceful_stops(spark, kafka, kafka_topic, runs, seed):
    rng = random.Random(seed)
    topic = kafka_topic(partitions=PARTITIONS)
    group = f"graceful-{uuid.uuid4().hex[:8]}"
    seen = []
    start = {}
    with ContinuousProducer(kafka, topic, random.Random(seed + 1)):
        for run in range(runs):
            batches = one_run(spark, kafka, topic, group, rng.uniform(0.3, 2.0))
            where = f"seed {seed}, run {run}"
            if batches:
                first = {r.partition: r.fromOffset for r in batches[0][0]}
                assert first == {p: start.get(p, 0) for p in range(PARTITIONS)}, \
                    f"{where}: the run did not start where the last one committed"
            ends = dict(start)
            for ranges, records in batches:
                for r in ranges:
                    assert r.fromOffset == ends.get(r.partition, 0), f"{where}: a gap"
                    ends[r.partition] = r.untilOffset
                seen.extend(records)
            assert committed(kafka, topic, group) == {p: o for p, o in ends.items()}, \
                f"{where}: committed offsets are not the end of the last processed batch"
            start = ends
    assert len(seen) == len(set(seen)), f"seed {seed}: records processed twice"
    assert sorted(seen) == [(p, o) for p in range(PARTITIONS) for o in range(start.get(p, 0))]
    assert sum(start.values()) > 0, "no batch had records: the test proved nothing"


def test_graceful_stops_at_random_moments_lose_and_repeat_nothing(spark, kafka, kafka_topic):
    graceful_stops(spark, kafka, kafka_topic, runs=10, seed=random.randrange(1 << 30))


@pytest.mark.slow
def test_many_graceful_stops_at_random_moments(spark, kafka, kafka_topic):
    graceful_stops(spark, kafka, kafka_topic, runs=60, seed=random.randrange(1 << 30))
