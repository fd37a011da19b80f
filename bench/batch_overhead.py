"""Driver work per batch: from the timer's tick to the batch's jobs being submitted.

Runs a StreamingContext on a ManualClock over an input of 1 and of 100 partitions, through
a few transformations and two output operations, and times ``JobGenerator.generateJobs``
(graph traversal, RDD building, submission) per batch. Beside it, in the same run, the Spark
job floor: one tiny ``count()`` job over 1 and 100 partitions. Target: driver work <= 10 ms
per batch, small beside the job floor.

Usage: python bench/batch_overhead.py [--batches N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_support import Completed, time_generation

from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.testing import spark_context


def measure(sc, partitions, batches):
    clock = ManualClock(0)
    ssc = StreamingContext(sc, 1, clock=clock)
    source = sc.parallelize(range(partitions * 10), partitions).cache()
    source.count()
    stream = ssc.constantStream(source).map(lambda x: x * 2).filter(lambda x: x % 3)
    stream.foreachRDD(lambda rdd: rdd.count())
    stream.map(lambda x: (x % 7, 1)).reduceByKey(lambda a, b: a + b).foreachRDD(
        lambda rdd: rdd.count())
    completed = Completed()
    ssc.addStreamingListener(completed)
    ssc.start()
    durations = time_generation(ssc)
    for i in range(1, batches + 1):
        clock.setTime(i * 1000)
        completed.wait(i * 1000)
    ssc.stop(stopSparkContext=False)
    return durations[2:]  # the first batches warm up Python and the JVM


def job_floor(sc, partitions, runs=10):
    rdd = sc.parallelize(range(partitions), partitions)
    rdd.count()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        rdd.count()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    with spark_context("local[2]", "bench-batch-overhead") as sc:
        for partitions in (1, 100):
            durations = measure(sc, partitions, args.batches)
            floor = job_floor(sc, partitions)
            median = statistics.median(durations)
            p95 = sorted(durations)[int(len(durations) * 0.95) - 1]
            print(f"{partitions:3d} partitions: driver work per batch median {median:6.2f} ms,"
                  f" p95 {p95:6.2f} ms (target <= 10 ms); Spark job floor {floor:6.1f} ms "
                  f"({median / floor:.1%} of it)")


if __name__ == "__main__":
    main()
