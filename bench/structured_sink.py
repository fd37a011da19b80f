"""The exactly-once structured sink against the plain way in: one COPY of the same rows.

The same N rows (topic, kafka_partition, kafka_offset, key, ~100 B bytea value: the shape
of Kafka records) are written into PostgreSQL three ways, alternately, in one run:

(a) plain COPY: the rows, already in memory as Python tuples, COPYed into a table in one
    transaction with the project's row encoder (as bench/ingest.py does);
(a') plain COPY of the rows already encoded as CSV: PostgreSQL's own ingest time, the
    floor of any loader;
(b) the sink: a streaming query (rate-micro-batch source, availableNow: one batch of N
    rows in 4 partitions, the rows built in Spark, each Spark partition one Kafka
    partition's contiguous offsets) writing with ``format("kafka-direct-postgres")``:
    tasks stage, the driver's commit moves the rows in one transaction. Timed as the
    batch's ``addBatch`` (the rows' generation, the tasks' staging and the commit) and,
    apart, from start() to the query's end;
(d) the same sink with ``offsetColumns`` (direct writes): tasks COPY straight into the
    target and claim their offsets; the commit checks the claims.

Prints rows/s of each (medians over the rounds) and the ratios to (a) and (a').
Targets: (b)/(a) >= 0.7; (d)/(a) >= 1.0 (issue 39: rows written once at a COPY's rate).

Usage: python bench/structured_sink.py [--rows N] [--rounds R]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time

from kafka_direct.postgres.copy_csv import encode_batch
from kafka_direct.testing import EmbeddedPostgres, spark_context
from sinks.postgres_writer import copy_rows

PARTITIONS = 4
COLUMNS = ("topic", "kafka_partition", "kafka_offset", "key", "value")
PAD = "x" * 85


def value_of(offset: int) -> bytes:
    return f"{offset % PARTITIONS:02d}-{offset:012d}-{PAD}".encode()


def python_rows(count):
    return [("events", i % PARTITIONS, i, None, value_of(i)) for i in range(count)]


def csv_bytes(rows):
    import pyarrow as pa

    columns = list(zip(*rows, strict=True))
    batch = pa.record_batch({
        "topic": pa.array(columns[0], pa.string()),
        "kafka_partition": pa.array(columns[1], pa.int32()),
        "kafka_offset": pa.array(columns[2], pa.int64()),
        "key": pa.array(columns[3], pa.binary()),
        "value": pa.array(columns[4], pa.binary())})
    return encode_batch(batch, bytea_columns={3, 4})  # key and value: bytea columns


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


def plain_csv_copy(pg, encoded, name):
    table(pg, name)
    connection = pg.connect()
    start = time.perf_counter()
    with connection, connection.cursor() as cursor:
        cursor.copy_expert(f"COPY {name} ({', '.join(COLUMNS)}) FROM STDIN WITH (FORMAT csv)",
                           io.BytesIO(encoded))
    elapsed = time.perf_counter() - start
    connection.close()
    return elapsed


def numbered_rows(spark, count):
    from pyspark.sql import functions as fn

    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", count)
            .option("numPartitions", PARTITIONS).load()
            .select(fn.lit("events").alias("topic"),
                    # A Kafka partition per Spark partition, as the kafka-direct source
                    # gives them (direct writes claim each task's offsets).
                    fn.spark_partition_id().alias("kafka_partition"),
                    fn.col("value").alias("kafka_offset"),
                    fn.lit(None).cast("binary").alias("key"),
                    fn.concat(fn.lpad((fn.col("value") % PARTITIONS).cast("string"), 2, "0"),
                             fn.lit("-"), fn.lpad(fn.col("value").cast("string"), 12, "0"),
                             fn.lit("-" + PAD)).cast("binary").alias("value")))


def spark_floor(spark, count):
    """addBatch seconds of one batch of ``count`` rows into a sink that only reads them."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )

    class Reads(DataSourceStreamArrowWriter):
        def write(self, iterator):
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class ReadOnly(DataSource):
        @classmethod
        def name(cls):
            return "bench-read-only"

        def streamWriter(self, schema, overwrite):
            return Reads()

    spark.dataSource.register(ReadOnly)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (numbered_rows(spark, count).writeStream.format("bench-read-only")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
    return query.lastProgress["durationMs"]["addBatch"] / 1000


def through_sink(spark, pg, count, name, direct=False):
    """(addBatch seconds, start-to-end seconds) of one batch of ``count`` rows."""
    table(pg, name)
    rows = numbered_rows(spark, count)
    with tempfile.TemporaryDirectory() as checkpoint:
        start = time.perf_counter()
        writer = (rows.writeStream.format("kafka-direct-postgres").option("dsn", pg.dsn)
                  .option("table", name).option("checkpointLocation", checkpoint))
        if direct:
            writer = writer.option("offsetColumns", "topic,kafka_partition,kafka_offset")
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        wall = time.perf_counter() - start
    progress = query.lastProgress
    assert progress is not None and progress["numInputRows"] == count, progress
    with pg.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), count(DISTINCT kafka_offset) FROM {name}")
        assert cursor.fetchone() == (count, count)
    connection.close()
    return progress["durationMs"]["addBatch"] / 1000, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sink_part(args)


def sink_part(args):
    """The sink's measurements (``args.rows``, ``args.rounds``); prints its lines."""
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    with EmbeddedPostgres() as pg, spark_context("local[2]", "bench-structured-sink") as sc:
        spark = SparkSession(sc)
        kafka_direct.sql.register(spark)
        rows = python_rows(args.rows)
        encoded = csv_bytes(rows)
        through_sink(spark, pg, 1000, "warm_up")  # JVM, Python workers, connections
        through_sink(spark, pg, 1000, "warm_up_direct", direct=True)
        spark_floor(spark, 1000)
        copies, csvs, sinks, walls, floors, directs = [], [], [], [], [], []
        for round_ in range(args.rounds):
            copies.append(plain_copy(pg, rows, f"plain_{round_}"))
            csvs.append(plain_csv_copy(pg, encoded, f"csv_{round_}"))
            batch, wall = through_sink(spark, pg, args.rows, f"sink_{round_}")
            sinks.append(batch)
            walls.append(wall)
            directs.append(through_sink(spark, pg, args.rows, f"direct_{round_}",
                                        direct=True)[0])
            floors.append(spark_floor(spark, args.rows))
            print(f"round {round_ + 1}: plain COPY {copies[-1]:.2f} s, CSV COPY "
                  f"{csvs[-1]:.2f} s, sink batch {batch:.2f} s (query {wall:.2f} s), "
                  f"direct {directs[-1]:.2f} s, Spark's floor {floors[-1]:.2f} s")
        copy_rate = args.rows / statistics.median(copies)
        csv_rate = args.rows / statistics.median(csvs)
        sink_rate = args.rows / statistics.median(sinks)
        wall_rate = args.rows / statistics.median(walls)
        print(f"rows: {args.rows} x ~100 B values in {PARTITIONS} partitions, "
              f"{args.rounds} rounds")
        print(f"(a)  plain COPY of Python rows, one transaction: {copy_rate:12,.0f} rows/s")
        print(f"(a') plain COPY of encoded CSV, one transaction: {csv_rate:12,.0f} rows/s")
        print(f"(b)  kafka-direct-postgres sink, one batch:      {sink_rate:12,.0f} rows/s "
              f"(start to end of the query: {wall_rate:,.0f} rows/s)")
        floor = statistics.median(floors)
        print(f"(c)  Spark's floor (a Python sink reading only): {args.rows / floor:12,.0f} "
              f"rows/s: the sink's own cost is {statistics.median(sinks) - floor:.2f} s "
              "per batch")
        direct_rate = args.rows / statistics.median(directs)
        print(f"(d)  the sink's direct writes, one batch:       {direct_rate:12,.0f} rows/s: "
              f"its own cost {statistics.median(directs) - floor:.2f} s per batch")
        print(f"ratio (b)/(a): {sink_rate / copy_rate:.2f}  (target >= 0.7); "
              f"(b)/(a'): {sink_rate / csv_rate:.2f}")
        print(f"ratio (d)/(a): {direct_rate / copy_rate:.2f}  (target >= 1.0); "
              f"(d)/(a'): {direct_rate / csv_rate:.2f}; (d)/(b): {direct_rate / sink_rate:.2f}")


if __name__ == "__main__":
    main()
