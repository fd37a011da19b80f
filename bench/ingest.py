"""Exactly-once ingestion against the plain way in: the transactional sink vs one COPY.

The same N records (~100 B values, 4 partitions, on the embedded broker) are written into
PostgreSQL two ways, alternately, in one run:

(a) plain COPY: the rows, already in memory, COPYed into a table in one transaction — the
    fastest a loader can put them in, with no Kafka read and no offsets;
(b) the transactional sink through a direct stream: one batch over every partition (a
    ManualClock tick), each Spark task reading its range from Kafka and writing its rows
    and its offset in one transaction; timed from the tick to the batch's completion.

Prints rows/s of each (medians over the rounds) and the ratio (b)/(a). Target: >= 0.7.

Usage: python bench/ingest.py [--records N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_support import Completed

from kafka_direct import KafkaUtils, LocationStrategies
from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.testing import EmbeddedPostgres, kafka_service, spark_context
from offsets import PostgresOffsetStore, createDirectStreamFromStore
from sinks import TransactionalPostgresSink
from sinks.postgres_writer import copy_rows

PARTITIONS = 4
COLUMNS = ("topic", "kafka_partition", "kafka_offset", "key", "value")


def produce(kafka, topic, records):
    kafka.create_topic(topic, PARTITIONS)
    per = records // PARTITIONS
    for p in range(PARTITIONS):
        values = [(f"{p:02d}-{i:012d}-" + "x" * 85).encode() for i in range(per)]
        kafka.produce(topic, values, partition=p)
    return per * PARTITIONS


def read_rows(sc, kafka, topic, per):
    from kafka_direct import OffsetRange

    ranges = [OffsetRange(topic, p, 0, per) for p in range(PARTITIONS)]
    rdd = KafkaUtils.createRDD(sc, kafka.params(), ranges)
    return rdd.map(lambda r: (r.topic, r.partition, r.offset, r.key, r.value)).collect()


def table(pg, name):
    with pg.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {name}")
        cursor.execute(f"CREATE TABLE {name} (topic text, kafka_partition int, "
                       "kafka_offset bigint, key bytea, value bytea)")
    connection.close()


def plain_copy(pg, rows, name):
    from psycopg2 import sql

    table(pg, name)
    connection = pg.connect()
    start = time.perf_counter()
    with connection, connection.cursor() as cursor:
        copy_rows(cursor, sql.Identifier(name), COLUMNS, rows)
    elapsed = time.perf_counter() - start
    connection.close()
    return elapsed


def through_stream(sc, kafka, pg, topic, name, group):
    table(pg, name)
    store = PostgresOffsetStore(pg.dsn)
    clock = ManualClock(0)
    ssc = StreamingContext(sc, 1, clock=clock)
    completed = Completed()
    ssc.addStreamingListener(completed)
    stream = createDirectStreamFromStore(
        ssc, store, group, kafka.params(**{"auto.offset.reset": "earliest"}), topics=[topic],
        locationStrategy=LocationStrategies.PreferConsistent())
    sink = TransactionalPostgresSink(pg.dsn, name, group)
    stream.foreachRDD(sink)
    ssc.start()
    try:
        start = time.perf_counter()
        clock.advance(1000)
        completed.wait(1000)
        elapsed = time.perf_counter() - start
    finally:
        ssc.stop(stopSparkContext=False)
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with kafka_service() as kafka, EmbeddedPostgres() as pg, \
            spark_context("local[2]", "bench-ingest") as sc:
        topic = f"bench-ingest-{time.monotonic_ns()}"
        records = produce(kafka, topic, args.records)
        rows = read_rows(sc, kafka, topic, records // PARTITIONS)
        through_stream(sc, kafka, pg, topic, "warm_up", "warm-up")  # JVM, workers, caches
        copies, streams = [], []
        for round_ in range(args.rounds):
            copies.append(plain_copy(pg, rows, f"plain_{round_}"))
            streams.append(through_stream(sc, kafka, pg, topic, f"sink_{round_}",
                                          f"bench-{round_}"))
            print(f"round {round_ + 1}: plain COPY {copies[-1]:.2f} s, "
                  f"transactional sink {streams[-1]:.2f} s")
        copy_rate = records / statistics.median(copies)
        stream_rate = records / statistics.median(streams)
        print(f"records: {records} x ~100 B in {PARTITIONS} partitions, {args.rounds} rounds")
        print(f"(a) plain COPY, one transaction:        {copy_rate:12,.0f} rows/s")
        print(f"(b) transactional sink, direct stream:  {stream_rate:12,.0f} rows/s")
        print(f"ratio (b)/(a): {stream_rate / copy_rate:.2f}  (target >= 0.7)")


if __name__ == "__main__":
    main()
