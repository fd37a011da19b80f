"""The CPU a batch spends per offset range at 1,000 partitions, by process, both APIs.

The same records (20,000 of 100 B by default: a small batch) in one topic of 4 partitions
and in 10 topics of 100 partitions, read on ``local[1]``:

* direct stream: a KafkaRDD of the batch's ranges (one Spark partition per range, as a
  direct stream's batch builds it) whose records a ``foreachPartition`` drains;
* direct stream, grouped: the same KafkaRDD grouped as a batch of the ingest job's is
  (``spark.streaming.kafka.minOffsetsPerTask`` = 10,000): small ranges share a Spark task,
  read in one fetch session;
* structured: ``spark.read.format("kafka-direct")`` into Spark's ``noop`` sink (small
  ranges grouped into tasks, ``minOffsetsPerTask``);
* Spark's floor: ``sc.parallelize(range(n), n).foreachPartition(nothing)``, no Kafka at all,
  1,000 tasks against 4: what Spark itself spends per Python task, which one Spark task per
  range cannot go below.

CPU is counted per process from ``/proc``: this driver (Python), Spark's JVM, its Python
workers, and the broker. The cost per range is the 1,000-partition read's CPU less the
4-partition read's, over the 996 more ranges. Runs alternate; medians of ``--repeat``.
Target (issue 39): at most 0.3 ms of CPU per range, both APIs.

Usage: python bench/range_cost.py [--records 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

from bench_support import proc_table
from latency import service_pid
from read_throughput import produce
from structured import session

from kafka_direct import LocationStrategies, OffsetRange
from kafka_direct.client.params import executor_params
from kafka_direct.rdd.kafka_rdd import ReadSettings, kafka_rdd
from kafka_direct.rdd.range_groups import group_ranges
from kafka_direct.testing import kafka_service, spark_context

PROCESSES = ("driver", "JVM", "workers", "broker")


def _subtree(table, root):
    kids = {}
    for pid, row in table.items():
        kids.setdefault(row[0], []).append(pid)
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        if pid in table:
            found.append(pid)
            pending.extend(kids.get(pid, ()))
    return found


def cpu_now(jvm, broker):
    """CPU seconds so far: this process, Spark's JVM, its Python workers, the broker."""
    table = proc_table()
    workers = sum(table[pid][2] + table[pid][3] for pid in _subtree(table, jvm) if pid != jvm)
    return {"driver": time.process_time(), "JVM": table[jvm][2] if jvm in table else 0.0,
            "workers": workers,
            "broker": sum(table[pid][2] for pid in _subtree(table, broker)) if broker else 0.0}


def measured(jvm, broker, run):
    before = cpu_now(jvm, broker)
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    after = cpu_now(jvm, broker)
    return wall, {name: after[name] - before[name] for name in PROCESSES}


def _drain(records):
    for _ in records:
        pass


def _nothing(_):
    pass


#: The grouping of the ingest job's direct stream (kafka_direct.app.ingest_job).
MIN_OFFSETS_PER_TASK = 10_000


def kafka_rdd_read(sc, params, ranges, grouped=False):
    settings = ReadSettings(params=executor_params(params))

    def run():
        # Grouped as the stream groups each batch (planning included in the measure).
        groups = (group_ranges(ranges, MIN_OFFSETS_PER_TASK, sc.defaultParallelism)
                  if grouped else None)
        kafka_rdd(sc, ranges, settings, LocationStrategies.PreferConsistent(),
                  groups=groups).foreachPartition(_drain)

    return run


def source_read(spark, bootstrap, topics):
    reading = (spark.read.format("kafka-direct").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", ",".join(topics)))

    def run():
        reading.load().write.format("noop").mode("overwrite").save()

    return run


def empty_tasks(sc, n):
    def run():
        sc.parallelize(range(n), n).foreachPartition(_nothing)

    return run


def ranges_of(kafka, topics):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(kafka.params(**{"group.id": "bench-range-cost"}))
    try:
        found = []
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=30).topics[topic]
            for partition in sorted(metadata.partitions):
                low, high = consumer.get_watermark_offsets(
                    KafkaTopicPartition(topic, partition), timeout=30)
                found.append(OffsetRange(topic, partition, low, high))
        return found
    finally:
        consumer.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    total = args.topics * args.partitions
    per_topic = args.records // args.topics
    with kafka_service() as kafka:
        tag = uuid.uuid4().hex[:6]
        small = [f"range-cost-{tag}-four"]
        kafka.create_topic(small[0], 4)
        produce(kafka, small[0], 4, per_topic * args.topics)
        big = [f"range-cost-{tag}-{i}" for i in range(args.topics)]
        for name in big:
            kafka.create_topic(name, args.partitions)
            produce(kafka, name, args.partitions, per_topic)
        broker = service_pid(kafka)
        print(f"{per_topic * args.topics} records of 100 B in 4 partitions, and in {total} "
              f"({args.topics} topics of {args.partitions}); load average "
              f"{os.getloadavg()[0]:.1f}")
        with spark_context("local[1]", "bench-range-cost",
                           conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}) as sc:
            spark = session(sc)
            jvm = sc._gateway.proc.pid
            params = kafka.params(**{"group.id": "bench-range-cost"})
            pairs = {
                "direct stream (KafkaRDD, a task per range)": (
                    kafka_rdd_read(sc, params, ranges_of(kafka, small)),
                    kafka_rdd_read(sc, params, ranges_of(kafka, big))),
                "direct stream, grouped (minOffsetsPerTask)": (
                    kafka_rdd_read(sc, params, ranges_of(kafka, small), grouped=True),
                    kafka_rdd_read(sc, params, ranges_of(kafka, big), grouped=True)),
                "structured (ranges grouped into tasks)": (
                    source_read(spark, kafka.bootstrap_servers, small),
                    source_read(spark, kafka.bootstrap_servers, big)),
                "Spark's floor: an empty Python task": (
                    empty_tasks(sc, 4), empty_tasks(sc, total)),
            }
            for few, many in pairs.values():  # warm-up: the JIT, the Python workers
                few()
                many()
            results = {label: ([], []) for label in pairs}
            for _ in range(args.repeat):
                for label, (few, many) in pairs.items():
                    results[label][0].append(measured(jvm, broker, few))
                    results[label][1].append(measured(jvm, broker, many))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    extra = total - 4
    for label, (fews, manys) in results.items():
        split = {name: statistics.median((m[1][name] - f[1][name]) * 1000 / extra
                                         for f, m in zip(fews, manys, strict=True))
                 for name in PROCESSES}
        whole = statistics.median(
            (sum(m[1].values()) - sum(f[1].values())) * 1000 / extra
            for f, m in zip(fews, manys, strict=True))
        walls = (statistics.median(f[0] for f in fews), statistics.median(m[0] for m in manys))
        print(f"{label:<44} {whole:6.3f} ms CPU per range ("
              + ", ".join(f"{name} {value:.3f}" for name, value in split.items())
              + f"); wall {walls[0]:.2f} s (4) / {walls[1]:.2f} s ({total})")
    print("target: <= 0.3 ms of CPU per range, both APIs")


if __name__ == "__main__":
    main()
