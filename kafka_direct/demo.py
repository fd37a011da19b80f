"""``kafka-direct demo``: produce sample events, read them back in offset-range batches.

With no ``--bootstrap-servers`` it starts the embedded broker itself, so the demo runs on a
fresh machine with nothing else installed. Each batch is one ``KafkaUtils.createRDD`` over
the next ranges of every partition; the demo prints each range with the records read from
it and checks that the batches covered the log exactly once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from kafka_direct.kafka_utils import KafkaUtils
from kafka_direct.offset_range import OffsetRange

__all__ = ["DemoOptions", "DemoResult", "run_demo"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What the demo does.

    Attributes:
        events: How many events to produce.
        partitions: Partitions of the demo topic.
        batchSize: Most offsets a batch reads per partition.
        topic: Topic name.
        bootstrapServers: An existing broker; None starts the embedded one.
        master: Spark master.
    """

    events: int = 10_000
    partitions: int = 3
    batchSize: int = 1_000
    topic: str = "kafka-direct-demo"
    bootstrapServers: str | None = None
    master: str = "local[2,2]"


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo read."""

    produced: int
    read: int
    batches: int
    duplicates: int


@contextlib.contextmanager
def _broker(options: DemoOptions) -> Iterator[Any]:
    from kafka_direct.testing.kafka import EmbeddedKafka, ExternalKafka

    if options.bootstrapServers:
        yield ExternalKafka(options.bootstrapServers).start()
    else:
        with EmbeddedKafka() as kafka:
            yield kafka


def _events(count: int) -> Iterator[bytes]:
    start = int(time.time() * 1000)
    for i in range(count):
        yield json.dumps({"id": i, "user": f"user-{i % 97}", "amount": (i * 37) % 1000,
                          "ts": start + i}).encode()


def run_demo(options: DemoOptions, out: TextIO) -> DemoResult:
    """Run the demo, writing its report to ``out``."""
    from kafka_direct.testing.spark import spark_context

    with _broker(options) as kafka:
        out.write(f"broker: {kafka.bootstrap_servers}\n")
        existing = kafka.admin().list_topics(timeout=10).topics
        if options.topic not in existing:
            kafka.create_topic(options.topic, options.partitions)
        partitions = len(kafka.admin().list_topics(options.topic, timeout=10)
                         .topics[options.topic].partitions)
        before = kafka.end_offsets(options.topic, range(partitions))
        events = list(_events(options.events))
        keys = [json.loads(e)["user"].encode() for e in events]  # spreads over partitions
        produced = kafka.produce(options.topic, events, keys=keys)
        after = kafka.end_offsets(options.topic, range(partitions))
        out.write(f"produced {produced} events into {options.topic} ({partitions} partitions)\n")
        params = kafka.params(**{"group.id": "kafka-direct-demo"})
        ids: list[int] = []
        batches = 0
        with spark_context(options.master, "kafka-direct-demo") as sc:
            position = {p: before[p][1] for p in range(partitions)}
            while any(position[p] < after[p][1] for p in range(partitions)):
                ranges = [OffsetRange(options.topic, p, position[p],
                                      min(after[p][1], position[p] + options.batchSize))
                          for p in range(partitions)]
                rdd = KafkaUtils.createRDD(sc, params, ranges,
                                           valueDeserializer=lambda v: json.loads(v))
                per_range = rdd.mapPartitionsWithIndex(
                    lambda i, records: [(i, [r.value["id"] for r in records])]).collect()
                batches += 1
                out.write(f"batch {batches}:\n")
                for index, batch_ids in per_range:
                    out.write(f"  {ranges[index]}  records: {len(batch_ids)}\n")
                    ids.extend(batch_ids)
                position = {r.partition: r.untilOffset for r in ranges}
        duplicates = len(ids) - len(set(ids))
        out.write(f"read {len(ids)} of {produced} events in {batches} batches, "
                  f"{duplicates} duplicates\n")
        return DemoResult(produced, len(ids), batches, duplicates)
