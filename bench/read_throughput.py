"""Read throughput: KafkaRDD beside a raw confluent-kafka consumer loop, in one run.

Produces ~1M records of ~100 bytes into a topic with several partitions on the embedded
broker (or KAFKA_DIRECT_BOOTSTRAP), then measures, in the same run:

* raw: one confluent-kafka consumer reading the partitions one after another (the baseline),
  and raw consumers in 2 parallel processes (what the machine allows in parallel),
* KafkaRDD on ``local[1]``: ``createRDD(...).count()`` of the whole topic, one partition at
  a time, so per-partition speed with per-job costs amortized as in the raw loop: with the
  native reader (raw records are counted without a Python object each) and with the Python
  reader (``KAFKA_DIRECT_IMPL=python``), and the records themselves made and iterated
  (``rdd.map(...).count()``, ConsumerRecords in Python),
* ``KafkaRDD.toDF()`` on ``local[1]`` written to Spark's ``noop`` sink (every column built):
  Arrow batches from the native reader and from the Python reader, beside Python rows
  (``createDataFrame`` over ``record_to_row``, the view before it read Arrow),
* KafkaRDD on ``local[2]``: the whole topic with 2 tasks at a time (2 cores),
* executor memory: the Python worker's peak memory growth reading a range and a 4x larger one,
  as records and as Arrow batches (each reader).

Prints records/s and the ratios the project targets: KafkaRDD ``count()`` >= 1.5x raw (the
native reader counts records without making them in Python, which the raw loop does: the
records made and iterated are printed beside it), all partitions on 2 cores >= 1.7x one
partition, executor memory flat in range size.

Usage: python bench/read_throughput.py [--records N] [--partitions P] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafka_direct import KafkaUtils, OffsetRange
from kafka_direct.testing import kafka_service, spark_context


def produce(kafka, topic, partitions, records):
    from confluent_kafka import Producer

    producer = Producer(kafka.params(**{"linger.ms": 20, "batch.num.messages": 10000,
                                        "queue.buffering.max.messages": 1_000_000}))
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


def _take(messages):
    """What a minimal hand-written loop does with each message: check it, take its value."""
    taken = 0
    for message in messages:
        if message.error() is None:
            message.value()
            taken += 1
    return taken


def raw_rate(kafka, topic, partitions, count):
    """One consumer reading the partitions one after another, as fast as it can."""
    consumer = Consumer(kafka.params(**{"group.id": "bench-raw", "enable.auto.commit": False}))
    start = time.perf_counter()
    seen = 0
    for partition in partitions:
        consumer.assign([KafkaTopicPartition(topic, partition, 0)])
        read = 0
        while read < count:
            read += _take(consumer.consume(min(5000, count - read), 1.0))
        seen += read
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed


def _raw_worker(bootstrap, topic, partition, count, barrier, results):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-raw-par",
                         "enable.auto.commit": False})
    consumer.assign([KafkaTopicPartition(topic, partition, 0)])
    barrier.wait()
    start = time.perf_counter()
    seen = 0
    while seen < count:
        seen += _take(consumer.consume(min(5000, count - seen), 1.0))
    results.put(time.perf_counter() - start)
    consumer.close()


def raw_parallel_rate(kafka, topic, partitions, count, processes=2):
    """Raw consumers over all partitions, ``processes`` partitions at a time in parallel."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    total = 0.0
    for first in range(0, partitions, processes):
        batch = range(first, min(partitions, first + processes))
        barrier = context.Barrier(len(batch))
        workers = [context.Process(target=_raw_worker,
                                   args=(kafka.bootstrap_servers, topic, p, count, barrier,
                                         results)) for p in batch]
        for worker in workers:
            worker.start()
        total += max(results.get(timeout=300) for _ in workers)
        for worker in workers:
            worker.join()
    return partitions * count / total


def rdd_rate(sc, params, ranges):
    rdd = KafkaUtils.createRDD(sc, params, ranges)
    start = time.perf_counter()
    count = rdd.count()
    elapsed = time.perf_counter() - start
    assert count == sum(r.count() for r in ranges), count
    return count / elapsed


def rdd_records_rate(sc, params, ranges):
    """The records made as ConsumerRecords in Python and iterated (no native shortcut)."""
    rdd = KafkaUtils.createRDD(sc, params, ranges)
    start = time.perf_counter()
    count = rdd.map(lambda record: 1).count()
    return count / (time.perf_counter() - start)


def dataframe_rate(spark, sc, params, ranges, rows=False):
    """``toDF()`` written to ``noop``; ``rows``: Python rows (createDataFrame) instead."""
    from kafka_direct.rdd.dataframe import _rows, kafka_source_schema

    rdd = KafkaUtils.createRDD(sc, params, ranges)
    df = (spark.createDataFrame(rdd.mapPartitions(_rows), kafka_source_schema()) if rows
          else rdd.toDF(spark))
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return sum(r.count() for r in ranges) / (time.perf_counter() - start)


def with_impl(impl, measure, *args, **kwargs):
    """``measure`` with the driver's ``KAFKA_DIRECT_IMPL`` set to ``impl`` (shipped to tasks)."""
    before = os.environ.get("KAFKA_DIRECT_IMPL")
    os.environ["KAFKA_DIRECT_IMPL"] = impl
    try:
        return measure(*args, **kwargs)
    finally:
        if before is None:
            del os.environ["KAFKA_DIRECT_IMPL"]
        else:
            os.environ["KAFKA_DIRECT_IMPL"] = before


def peak_growth(count):
    """``(count(), the worker's peak memory growth in KiB while it ran)`` (on the worker)."""

    def status(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field))

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS
    before = status("VmRSS:")
    n = count()
    return n, status("VmHWM:") - before


def worker_memory_growth(sc, params, offset_range):
    """Records read and the Python worker's peak memory growth (KiB) while reading them."""

    def read_and_measure(records):
        yield peak_growth(lambda: sum(1 for _ in records))

    rdd = KafkaUtils.createRDD(sc, params, [offset_range])
    return rdd.mapPartitions(read_and_measure).collect()[0]


def arrow_memory_growth(sc, params, offset_range, impl):
    """Records read as Arrow batches by reader ``impl`` and the worker's peak memory growth
    (KiB): the path of the source, ``toDF()`` and the sink's COPY, one batch held at a time."""
    from kafka_direct.rdd.arrow_reader import PartitionReadSettings, read_partition
    from kafka_direct.rdd.read_settings import ReadSettings

    settings = PartitionReadSettings(ReadSettings(params), includeHeaders=True, impl=impl)

    def read_and_measure(_ranges):
        yield peak_growth(lambda: sum(batch.num_rows
                                      for batch in read_partition(offset_range, settings)))

    return sc.parallelize([0], 1).mapPartitions(read_and_measure).collect()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    args = parser.parse_args()
    per_partition = args.records // args.partitions
    with kafka_service() as kafka:
        topic = f"bench-read-{os.getpid()}"
        kafka.create_topic(topic, args.partitions)
        start = time.perf_counter()
        produce(kafka, topic, args.partitions, per_partition * args.partitions)
        print(f"produced {per_partition * args.partitions} records of 100 B in "
              f"{args.partitions} partitions ({time.perf_counter() - start:.1f} s)")
        params = kafka.params(**{"group.id": "bench"})
        ranges = [OffsetRange(topic, p, 0, per_partition) for p in range(args.partitions)]
        every_partition = range(args.partitions)
        # Warm-up: librdkafka connections, broker caches.
        raw_rate(kafka, topic, [0], min(per_partition, 50_000))
        # Raw and KafkaRDD runs alternate, and medians are compared, so drift of the shared
        # machine (the broker runs on the same 2 cores) hits both sides alike.
        with spark_context("local[1]", "bench-read-1") as sc:
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.getOrCreate()
            warm = [OffsetRange(topic, 0, 0, min(per_partition, 50_000))]
            rdd_rate(sc, params, warm)
            with_impl("python", rdd_rate, sc, params, warm)
            dataframe_rate(spark, sc, params, warm)
            raws, ones, ones_py, records, frames, frames_py, frames_rows = ([] for _ in range(7))
            for _ in range(args.repeat):
                raws.append(raw_rate(kafka, topic, every_partition, per_partition))
                ones.append(with_impl("c", rdd_rate, sc, params, ranges))
                ones_py.append(with_impl("python", rdd_rate, sc, params, ranges))
                records.append(rdd_records_rate(sc, params, ranges))
                frames.append(with_impl("c", dataframe_rate, spark, sc, params, ranges))
                frames_py.append(with_impl("python", dataframe_rate, spark, sc, params, ranges))
                frames_rows.append(dataframe_rate(spark, sc, params, ranges, rows=True))
        with spark_context("local[2]", "bench-read-2") as sc:
            rdd_rate(sc, params, [OffsetRange(topic, 0, 0, min(per_partition, 50_000))])
            raw_alls, everys = [], []
            for _ in range(args.repeat):
                raw_alls.append(raw_parallel_rate(kafka, topic, args.partitions, per_partition))
                everys.append(rdd_rate(sc, params, ranges))
            small_n, small_kib = worker_memory_growth(
                sc, {**params, "group.id": "bench-mem-small"},
                OffsetRange(topic, 1, 0, per_partition // 4))
            large_n, large_kib = worker_memory_growth(
                sc, {**params, "group.id": "bench-mem-large"},
                OffsetRange(topic, 2, 0, per_partition))
            arrow = {impl: [arrow_memory_growth(sc, {**params, "group.id": f"bench-mem-{impl}"},
                                                OffsetRange(topic, p, 0, size), impl)
                            for p, size in ((1, per_partition // 4), (3, per_partition))]
                     for impl in ("c", "python")}
        raw, one = statistics.median(raws), statistics.median(ones)
        raw_all, every = statistics.median(raw_alls), statistics.median(everys)
        print(f"raw confluent-kafka, 1 reader        : {raw:12,.0f} records/s")
        print(f"raw confluent-kafka, 2 processes     : {raw_all:12,.0f} records/s  "
              f"({raw_all / raw:.2f}x one reader: what 2 cores shared with the broker allow)")
        med = statistics.median
        print(f"KafkaRDD count(), local[1] (1 partition at a time), native reader: "
              f"{one:12,.0f} records/s  ({one / raw:.2f}x raw; target >= 1.5x)")
        print(f"KafkaRDD count(), local[1], Python reader: {med(ones_py):12,.0f} records/s  "
              f"({med(ones_py) / raw:.2f}x raw)")
        print(f"KafkaRDD records made and iterated, local[1]: {med(records):12,.0f} records/s  "
              f"({med(records) / raw:.2f}x raw)")
        print(f"KafkaRDD.toDF() into noop, local[1], native reader: {med(frames):12,.0f} "
              f"records/s  ({med(frames) / raw:.2f}x raw)")
        print(f"KafkaRDD.toDF() into noop, local[1], Python reader: {med(frames_py):12,.0f} "
              f"records/s  ({med(frames_py) / raw:.2f}x raw)")
        print(f"Python rows (createDataFrame) into noop, local[1]: {med(frames_rows):12,.0f} "
              f"records/s  ({med(frames_rows) / raw:.2f}x raw)")
        print(f"KafkaRDD, local[2] ({args.partitions} partitions, 2 cores): "
              f"{every:12,.0f} records/s  "
              f"({every / one:.2f}x one partition, target >= 1.7x; "
              f"{every / raw_all:.2f}x raw in parallel)")
        print(f"worker memory growth while reading: {small_kib / 1024:.1f} MiB for {small_n} "
              f"records, {large_kib / 1024:.1f} MiB for {large_n} records "
              f"({large_n / small_n:.0f}x the records)")
        for impl, ((small_n, small_kib), (large_n, large_kib)) in arrow.items():
            print(f"worker memory growth reading Arrow batches, {impl} reader: "
                  f"{small_kib / 1024:.1f} MiB for {small_n} records, {large_kib / 1024:.1f} "
                  f"MiB for {large_n} records ({large_n / small_n:.0f}x the records)")


if __name__ == "__main__":
    main()
