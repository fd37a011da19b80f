"""The driver's planning per batch at scale: 1,000 partitions over 10 topics, both APIs.

Direct stream: ``JobGenerator.generateJobs`` per batch (partition discovery, one ListOffsets
for every partition, rate clamp, KafkaRDD building, job submission), on a ManualClock, with
a few new records in every partition before each batch. Beside it, the same at 4 partitions.

Structured Streaming: the source's planning as Spark reports it in each trigger's progress
(``durationMs.latestOffset`` + ``durationMs.queryPlanning``), a query into ``noop`` on a
processing-time trigger, with new records in every partition between triggers; beside it,
the same at 4 partitions.

Beside each, the CPU a batch's planning costs: for the direct stream the generating
thread's CPU in ``generateJobs``, and the driver process's (every thread's: the threads that
ask the end offsets and make the ranges beside it, librdkafka's; the bench's own producer's
threads left out, which serve its 1,000 partitions all the while); for the source, whose
planning runs in a Python process
Spark starts, the same reader's ``latestOffset`` + ``partitions`` + ``commit`` called in
this process on the same topics (offsets handed over as JSON, as Spark's runner does).

Prints p50/p95/max per API and size. Target: p95 <= 10 ms at 1,000 partitions (issue 39).

Usage: python bench/planning_scale.py [--topics 10] [--partitions 100] [--batches 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid

from bench_support import Completed

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.testing import kafka_service, spark_context


def topics(kafka, count, partitions):
    names = [f"scale-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
    for name in names:
        kafka.create_topic(name, partitions)
    return names


def feed(producer, names, partitions):
    for name in names:
        for p in range(partitions):
            producer.produce(name, b"x" * 100, partition=p)
    producer.flush(60)


def percentile95(values):
    values = sorted(values)
    return values[max(0, round(0.95 * len(values)) - 1)]


def summary(label, ms, cpu=None, process=None):
    ms = sorted(ms)
    p95 = percentile95(ms)
    line = (f"{label:<44} p50 {statistics.median(ms):7.1f} ms  p95 {p95:7.1f} ms  "
            f"max {ms[-1]:7.1f} ms  ({len(ms)} batches)")
    if cpu:
        line += f"  CPU/batch p50 {statistics.median(cpu):5.1f} ms p95 {percentile95(cpu):5.1f} ms"
    if process:
        line += f"  process CPU/batch p50 {statistics.median(process):5.1f} ms"
    print(line)
    return p95


#: The threads of the bench's producer (librdkafka's), left out of the process's CPU.
FEEDING_THREADS: set[str] = set()


def threads():
    """The ids of this process's threads (empty where /proc has none)."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


def process_cpu():
    """CPU (ms) this process's threads ran, the producer's left out.

    The scheduler's run time of each thread (nanoseconds); ``process_time()`` where /proc
    has none.
    """
    total, found = 0, False
    for tid in threads() - FEEDING_THREADS:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0])
                found = True
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
    return total / 1e6 if found else time.process_time() * 1000


def time_generation(ssc):
    """Wall, thread CPU and process CPU (ms) of each batch's generation, in three lists."""
    generator = ssc.scheduler.jobGenerator
    original, walls, cpus, processes = generator.generateJobs, [], [], []

    def timed(batch_time):
        process = process_cpu()
        start, cpu = time.perf_counter(), time.thread_time()
        original(batch_time)
        cpus.append((time.thread_time() - cpu) * 1000)
        walls.append((time.perf_counter() - start) * 1000)
        processes.append(process_cpu() - process)

    generator.generateJobs = timed
    return walls, cpus, processes


def dstream(sc, kafka, producer, names, partitions, batches):
    clock = ManualClock(0)
    ssc = StreamingContext(sc, 1, clock=clock)
    params = kafka.params(**{"group.id": f"g-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest"})
    stream = KafkaUtils.createDirectStream(ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe(names, params))
    stream.foreachRDD(lambda rdd: None)  # planning only: no job reads
    done = Completed()
    ssc.addStreamingListener(done)
    ssc.start()
    walls, cpus, processes = time_generation(ssc)
    try:
        for batch in range(1, batches + 2):
            feed(producer, names, partitions)
            clock.advance(1000)
            done.wait(batch * 1000)
    finally:
        ssc.stop(stopSparkContext=False)
    return walls[1:], cpus[1:], processes[1:]  # the first batch also starts the consumer


def structured(spark, kafka, producer, names, partitions, batches):
    reader = (spark.readStream.format("kafka-direct")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", ",".join(names)).option("startingOffsets", "latest"))
    query = (reader.load().writeStream.format("noop").trigger(processingTime="1 second")
             .start())
    seen, planning = set(), []
    try:
        deadline = time.monotonic() + 60 + batches * 10
        while len(planning) < batches and time.monotonic() < deadline:
            feed(producer, names, partitions)
            time.sleep(1.0)
            for progress in query.recentProgress:
                batch = progress["batchId"]
                if batch in seen or batch == 0 or not progress["numInputRows"]:
                    continue
                seen.add(batch)
                d = progress["durationMs"]
                planning.append(d.get("latestOffset", 0) + d.get("queryPlanning", 0))
    finally:
        query.stop()
    return planning[:batches], source_cpu(kafka, producer, names, partitions, batches)


def source_cpu(kafka, producer, names, partitions, batches):
    """CPU (ms) of the source's planning per trigger, its reader driven in this process."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader

    reader = KafkaDirectStreamReader.create(
        {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": ",".join(names),
         "startingOffsets": "latest"}, parallelism=2)
    cpus = []
    try:
        start = json.loads(json.dumps(reader.initialOffset()))
        for batch in range(batches + 1):
            feed(producer, names, partitions)
            cpu = time.thread_time()
            end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
            reader.partitions(start, end)
            reader.commit(end)
            if batch:  # the first trigger also starts the consumer
                cpus.append((time.thread_time() - cpu) * 1000)
            start = end
    finally:
        reader.stop()
    return cpus


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    from confluent_kafka import Producer
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    with kafka_service() as kafka, spark_context("local[2]", "planning-scale") as sc:
        before = threads()
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 20})
        producer.list_topics(timeout=30)  # its broker's thread starts with the first answer
        FEEDING_THREADS.update(threads() - before)
        spark = SparkSession(sc)
        kafka_direct.sql.register(spark)
        big = topics(kafka, args.topics, args.partitions)
        small = topics(kafka, 1, 4)
        total = args.topics * args.partitions
        results = {}
        for api, run in (("direct stream", dstream), ("structured", structured)):
            context = sc if run is dstream else spark
            results[(api, 4)] = summary(f"{api}, 4 partitions",
                                        *run(context, kafka, producer, small, 4, args.batches))
            results[(api, total)] = summary(
                f"{api}, {total} partitions",
                *run(context, kafka, producer, big, args.partitions, args.batches))
        print(f"target: p95 <= 10 ms at {total} partitions: "
              + ", ".join(f"{api} {'met' if results[(api, total)] <= 10 else 'NOT met'}"
                          for api in ("direct stream", "structured")))


if __name__ == "__main__":
    main()
