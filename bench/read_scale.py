"""The source's read rate at 1,000 partitions against the same records in 4 partitions.

The same number of 100-byte records (1M by default) in one topic of 4 partitions and in 10
topics of 100 partitions; each read as a batch (``spark.read.format("kafka-direct")`` into
Spark's ``noop`` sink) on ``local[1]``, so every figure is per core. Runs alternate, and the
medians are compared: drift of the shared machine hits both sides alike.

Beside the default layout (small ranges packed into tasks of ``minOffsetsPerTask`` offsets),
the 1,000-partition read with ``minOffsetsPerTask=0``: one task per range, Spark's own
layout, which pays Spark's cost of a Python data source task (about 10 ms) per partition.

Prints records/s and CPU microseconds per record (Spark's processes and this driver; the
Python workers alone in brackets), and the CPU each range costs beyond its records: the
1,000-partition read's CPU less the 4-partition read's for the same records, per range.
Targets: the 1,000-partition rate within 10% of the 4-partition one (ratio >= 0.9); at
most 0.3 ms of CPU per range (issue 39, with small batches: ``--records 20000``).

Usage: python bench/read_scale.py [--records N] [--topics 10] [--partitions 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from read_throughput import produce
from structured import session, spark_cost

from kafka_direct.testing import kafka_service, spark_context


def batch_read(spark, bootstrap, topics, **options):
    """A run of the batch read of ``topics`` into ``noop``."""
    reading = (spark.read.format("kafka-direct").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", ",".join(topics)))
    for key, value in options.items():
        reading = reading.option(key, str(value))

    def run():
        df = reading.load()
        start = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start

    return run


def measure(sc, records, run):
    """(records/s, CPU us per record, Python workers' CPU us per record)."""
    seconds, cpu, workers = spark_cost(sc, records, run)
    return records / seconds, cpu, workers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    total = args.topics * args.partitions
    per_topic = args.records // args.topics
    records = per_topic * args.topics
    with kafka_service() as kafka:
        tag = uuid.uuid4().hex[:6]
        small = [f"scale-read-{tag}-four"]
        kafka.create_topic(small[0], 4)
        produce(kafka, small[0], 4, records)
        big = [f"scale-read-{tag}-{i}" for i in range(args.topics)]
        for name in big:
            kafka.create_topic(name, args.partitions)
            produce(kafka, name, args.partitions, per_topic)
        print(f"{records} records of 100 B: in 4 partitions, and in {args.topics} topics of "
              f"{args.partitions} partitions ({records // total} per partition)")
        # The tests' JVM compiles with C1 only (quick starts); a benchmark wants the full JIT.
        with spark_context("local[1]", "bench-read-scale",
                           conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}) as sc:
            spark = session(sc)
            sides = {
                "4 partitions": batch_read(spark, kafka.bootstrap_servers, small),
                f"{total} partitions": batch_read(spark, kafka.bootstrap_servers, big),
                f"{total} partitions, one task per range (minOffsetsPerTask=0)": batch_read(
                    spark, kafka.bootstrap_servers, big, minOffsetsPerTask=0),
            }
            for run in sides.values():  # warm-up: the JIT, the Python workers
                run()
            results = {label: [] for label in sides}
            for _ in range(args.repeat):
                for label, run in sides.items():
                    results[label].append(measure(sc, records, run))
    medians = {label: tuple(statistics.median(r[i] for r in runs) for i in range(3))
               for label, runs in results.items()}
    for label, (rate, cpu, workers) in medians.items():
        print(f"{label:<62} {rate:>10,.0f} records/s  {cpu:5.2f} us CPU/record "
              f"({workers:.2f} in Python workers)")
    base = medians["4 partitions"][0]
    ratio = medians[f"{total} partitions"][0] / base
    spark_layout = medians[f"{total} partitions, one task per range (minOffsetsPerTask=0)"][0]
    print(f"{total} partitions / 4 partitions: {ratio:.2f}x (one task per range: "
          f"{spark_layout / base:.2f}x); target >= 0.90: {'met' if ratio >= 0.9 else 'NOT met'}")
    base_cpu, base_workers = medians["4 partitions"][1:]
    for label in (f"{total} partitions",
                  f"{total} partitions, one task per range (minOffsetsPerTask=0)"):
        cpu, workers = medians[label][1:]
        per_range = (cpu - base_cpu) * records / total / 1000.0
        print(f"{label}: {per_range:.3f} ms CPU per range beyond its records "
              f"({(workers - base_workers) * records / total / 1000.0:.3f} in Python "
              f"workers); target <= 0.3 ms: {'met' if per_range <= 0.3 else 'NOT met'}")


if __name__ == "__main__":
    main()
