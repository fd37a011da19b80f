"""Structured Streaming: the kafka-direct source's read rate beside a raw loop and KafkaRDD.

Produces ~1M records of ~100 bytes into a topic with several partitions on the embedded
broker (or KAFKA_DIRECT_BOOTSTRAP), then measures, in the same run and on ``local[1]`` (one
partition at a time, so per-partition speed is compared as bench/read_throughput.py does):

* raw: one confluent-kafka consumer reading the partitions one after another (the baseline),
* KafkaRDD: ``createRDD(...).count()`` of the same records,
* source, batch: ``spark.read.format("kafka-direct")`` written to Spark's ``noop`` sink,
  once with each executor reader (option ``reader``: ``c``, the native columnar one, and
  ``python``), with the CPU each spends per record (Spark's JVM and its Python workers;
  the raw loop's is its own process's),
* source, stream: ``readStream`` with ``Trigger.AvailableNow`` into the ``noop`` sink,
* source, pruned: the native reader with ``columns=value`` (column pruning), with its CPU,
* the ceiling of any Python data source: pre-built record batches, no Kafka, into ``noop``
  (Spark's own per-row cost of a Python source on this machine), with its CPU per record:
  what Spark's JVM spends taking rows in, which no source avoids,
* rows as Arrow vs as tuples: the executor-side cost of turning messages into what Spark
  receives, in-process: the source's record batches beside tuples converted by PySpark.
* the serial estimate of any source task on one core: it consumes what the raw loop
  consumes, builds its rows and has Spark take them in, so ``1 / (1/raw + 1/Arrow +
  1/ceiling)`` records/s when the three run one after another (Spark's intake partly
  overlaps on the second core, so a loaded machine can see the source above it),
* the whole machine on ``local[2]``: the source beside raw consumers in 2 processes.

Then the sink's part (bench/structured_sink.py): the kafka-direct-postgres sink's rate beside
a plain COPY of the same rows (target >= 0.7x).

Target: the source >= 0.9x raw (per core, the estimate above shows what is reachable);
with the native reader, >= 1.5x raw per core.
Each measurement is a function taking what it needs, so further parts (the sink's) append
their own functions and lines to ``main``.

Usage: python bench/structured.py [--records N] [--partitions P] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from bench_support import proc_table
from read_throughput import produce, raw_parallel_rate, raw_rate, rdd_rate

from kafka_direct import OffsetRange
from kafka_direct.testing import kafka_service, spark_context


def session(sc):
    """A SparkSession over ``sc`` with kafka-direct's formats registered."""
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    spark = SparkSession.builder.getOrCreate()
    kafka_direct.sql.register(spark)
    return spark


def source_batch_rate(spark, bootstrap, topic, records, reader=None, columns=None):
    """The source as a batch read, every row handed to Spark's noop sink: records/s."""
    reading = (spark.read.format("kafka-direct").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic))
    if reader is not None:
        reading = reading.option("reader", reader)
    if columns is not None:
        reading = reading.option("columns", columns)
    df = reading.load()
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - start)


def _cpu_seconds(root):
    """CPU seconds of process ``root`` and its descendants: (all, Python processes only)."""
    table = proc_table()
    parents = {pid: row[0] for pid, row in table.items()}
    stats = {pid: (row[1], row[2]) for pid, row in table.items()}
    tree, changed = {root}, True
    while changed:
        grown = tree | {pid for pid, parent in parents.items() if parent in tree}
        changed, tree = grown != tree, grown
    total = sum(stats[pid][1] for pid in tree if pid in stats)
    python = sum(stats[pid][1] for pid in tree if pid in stats and "python" in stats[pid][0])
    return total, python


def source_batch_cost(spark, sc, bootstrap, topic, records, reader, columns=None):
    """``source_batch_rate`` and its CPU microseconds per record (Spark's processes, and
    the Python workers alone)."""
    return spark_cost(sc, records, lambda: source_batch_rate(spark, bootstrap, topic, records,
                                                             reader, columns))


def spark_cost(sc, records, run):
    """``run()``'s result and its CPU microseconds per record: Spark's processes (and this
    driver's), and the Python workers alone."""
    jvm = sc._gateway.proc.pid
    before, before_python = _cpu_seconds(jvm)
    driver = time.process_time()
    rate = run()
    after, after_python = _cpu_seconds(jvm)
    total = after - before + time.process_time() - driver
    return rate, total * 1e6 / records, (after_python - before_python) * 1e6 / records


def raw_cost(kafka, topic, partitions, count):
    """``raw_rate`` and its CPU microseconds per record (this process, librdkafka's threads
    included)."""
    start = time.process_time()
    rate = raw_rate(kafka, topic, partitions, count)
    return rate, (time.process_time() - start) * 1e6 / (count * len(partitions))


def source_stream_rate(spark, bootstrap, topic, records, checkpoint):
    """The source as a stream (Trigger.AvailableNow, one batch) into the noop sink.

    Returns records/s over the query's whole life (its start included) and over its
    batches alone (what a running query sustains).
    """
    query = (spark.readStream.format("kafka-direct")
             .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True))
    start = time.perf_counter()
    running = query.start()
    running.awaitTermination()
    elapsed = time.perf_counter() - start
    progress = [p for p in running.recentProgress if p["numInputRows"]]
    read = sum(p["numInputRows"] for p in progress)
    assert read == records, read
    batch_seconds = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000.0
    return records / elapsed, records / batch_seconds


def python_source_ceiling(spark, records):
    """Spark's own cost of a Python data source: pre-built record batches of the source's
    schema, no Kafka, into the noop sink. No Python source can read faster than this."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return "bench-ceiling"

        def schema(self):
            from kafka_direct.rdd.arrow_rows import source_schema

            return source_schema(False)

        def reader(self, schema):
            return CeilingReader(self.options)

    class Fake:
        __slots__ = ("number",)

        def __init__(self, number):
            self.number = number

        def key(self):
            return None

        def value(self):
            return b"x" * 100

        def offset(self):
            return self.number

        def timestamp(self):
            return (1, 1_700_000_000_000)

        def headers(self):
            return None

    class CeilingReader(DataSourceReader):
        def __init__(self, options):
            self.records = int(options["records"])

        def partitions(self):
            return [InputPartition(0)]

        def read(self, partition):
            from kafka_direct.rdd.arrow_rows import RecordBatchBuilder

            batch = RecordBatchBuilder("t", 0, False).build([Fake(i) for i in range(8192)])
            for first in range(0, self.records, batch.num_rows):
                yield batch.slice(0, min(batch.num_rows, self.records - first))

    spark.dataSource.register(Ceiling)
    df = spark.read.format("bench-ceiling").option("records", str(records)).load()
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - start)


def conversion_rates(kafka, topic, count):
    """Messages -> what Spark receives, per record: Arrow batches beside PySpark's tuples.

    Reads ``count`` messages once, then times the source's RecordBatchBuilder and PySpark's
    own conversion of the same rows as tuples (what a tuple-yielding reader costs).
    """
    from datetime import UTC, datetime

    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from kafka_direct.rdd.arrow_rows import RecordBatchBuilder, source_schema

    consumer = Consumer(kafka.params(**{"group.id": "bench-conversion"}))
    consumer.assign([KafkaTopicPartition(topic, 0, 0)])
    messages = []
    while len(messages) < count:
        messages.extend(m for m in consumer.consume(5000, 1.0) if m.error() is None)
    consumer.close()
    messages = messages[:count]
    chunks = [messages[i:i + 8192] for i in range(0, count, 8192)]
    builder = RecordBatchBuilder(topic, 0, includeHeaders=False)
    builder.build(chunks[0][:10])  # pyarrow's kernels load on first use

    def arrow():
        for chunk in chunks:
            builder.build(chunk)

    class Source:
        def name(self):
            return "bench"

    schema = source_schema(False)

    def tuples():
        for chunk in chunks:
            rows = ((m.key(), m.value(), topic, 0, m.offset(),
                     datetime.fromtimestamp(m.timestamp()[1] / 1000.0, tz=UTC),
                     m.timestamp()[0] - 1) for m in chunk)
            for _ in records_to_arrow_batches(rows, 10_000, schema, Source()):
                pass

    def rate(work: Callable[[], None]) -> float:
        start = time.perf_counter()
        work()
        return count / (time.perf_counter() - start)

    return rate(arrow), rate(tuples)


def median_of(results, index):
    """The median of one field of a list of tuples."""
    return statistics.median(result[index] for result in results)


def source_part(args, kafka):
    """The source's measurements; returns the lines to print."""
    per_partition = args.records // args.partitions
    records = per_partition * args.partitions
    topic = f"bench-structured-{os.getpid()}"
    kafka.create_topic(topic, args.partitions)
    start = time.perf_counter()
    produce(kafka, topic, args.partitions, records)
    lines = [f"produced {records} records of 100 B in {args.partitions} partitions "
             f"({time.perf_counter() - start:.1f} s)"]
    params = kafka.params(**{"group.id": "bench-structured"})
    ranges = [OffsetRange(topic, p, 0, per_partition) for p in range(args.partitions)]
    every_partition = range(args.partitions)
    raw_rate(kafka, topic, [0], min(per_partition, 50_000))  # warm-up
    raws, rdds, batches, streams, sustained, ceilings = [], [], [], [], [], []
    ceiling_cpus, pruned = [], []
    raw_cpus = []
    readers = {"c": ([], [], []), "python": ([], [], [])}  # rates, CPU us, worker CPU us
    # The tests' JVM compiles with C1 only (quick starts); a benchmark wants the full JIT.
    with spark_context("local[1]", "bench-structured",
                       conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}) as sc:
        spark = session(sc)
        rdd_rate(sc, params, [OffsetRange(topic, 0, 0, min(per_partition, 50_000))])
        for _ in range(2):  # warm-up: the JIT, the Python workers, pyarrow's memory pool
            for reader in readers:
                source_batch_rate(spark, kafka.bootstrap_servers, topic, records, reader)
            python_source_ceiling(spark, records)
        # Alternating runs, medians compared: drift of the shared machine (the broker runs
        # on the same 2 cores) hits every side alike.
        for run in range(args.repeat):
            rate, cpu = raw_cost(kafka, topic, every_partition, per_partition)
            raws.append(rate)
            raw_cpus.append(cpu)
            rdds.append(rdd_rate(sc, params, ranges))
            for reader, (rates, cpus, workers) in readers.items():
                rate, cpu, worker = source_batch_cost(spark, sc, kafka.bootstrap_servers, topic,
                                                      records, reader)
                rates.append(rate)
                cpus.append(cpu)
                workers.append(worker)
            batches.append(source_batch_rate(spark, kafka.bootstrap_servers, topic,
                                             records))
            whole, running = source_stream_rate(
                spark, kafka.bootstrap_servers, topic, records,
                os.path.join(args.workdir, f"checkpoint-{os.getpid()}-{run}"))
            streams.append(whole)
            sustained.append(running)
            rate, cpu, worker = spark_cost(sc, records,
                                           lambda: python_source_ceiling(spark, records))
            ceilings.append(rate)
            ceiling_cpus.append((cpu, worker))
            pruned.append(source_batch_cost(spark, sc, kafka.bootstrap_servers, topic,
                                            records, "c", "value"))
    # The whole machine: the source on 2 cores beside raw consumers in 2 processes.
    raw_pairs, wholes = [], []
    with spark_context("local[2]", "bench-structured-2",
                       conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}) as sc:
        spark = session(sc)
        source_batch_rate(spark, kafka.bootstrap_servers, topic, records)  # warm-up
        for _ in range(args.repeat):
            raw_pairs.append(raw_parallel_rate(kafka, topic, args.partitions, per_partition))
            wholes.append(source_batch_rate(spark, kafka.bootstrap_servers, topic, records))
    arrow, tuples = conversion_rates(kafka, topic, min(per_partition, 200_000))
    raw_pair, whole = statistics.median(raw_pairs), statistics.median(wholes)
    raw, rdd = statistics.median(raws), statistics.median(rdds)
    batch, stream = statistics.median(batches), statistics.median(streams)
    batch_only, ceiling = statistics.median(sustained), statistics.median(ceilings)
    bound = 1.0 / (1.0 / raw + 1.0 / arrow + 1.0 / ceiling)
    raw_cpu = statistics.median(raw_cpus)
    lines += [
        f"raw confluent-kafka, 1 reader        : {raw:12,.0f} records/s  "
        f"(CPU {raw_cpu:.2f} us/record: {1e6 / raw_cpu:,.0f} records per CPU second)",
    ]
    for reader, (rates, cpus, workers) in readers.items():
        rate, cpu, worker = (statistics.median(rates), statistics.median(cpus),
                             statistics.median(workers))
        lines.append(
            f"source, reader={reader:6s}, local[1]   : {rate:12,.0f} records/s  "
            f"({rate / raw:.2f}x raw; CPU {cpu:.2f} us/record, Python workers {worker:.2f}: "
            f"{raw_cpu / cpu:.2f}x raw per CPU second)")
    lines += [
        f"KafkaRDD, local[1]                   : {rdd:12,.0f} records/s  ({rdd / raw:.2f}x raw)",
        f"source, batch read (default reader)  : {batch:12,.0f} records/s  "
        f"({batch / raw:.2f}x raw, target >= 0.9x; {batch / rdd:.2f}x KafkaRDD)",
        f"source, stream AvailableNow, local[1]: {stream:12,.0f} records/s  "
        f"({stream / raw:.2f}x raw, the query's start included; its batches alone "
        f"{batch_only:,.0f} records/s, {batch_only / raw:.2f}x raw)",
        f"source, reader=c, columns=value      : {median_of(pruned, 0):12,.0f} records/s  "
        f"({median_of(pruned, 0) / raw:.2f}x raw; CPU {median_of(pruned, 1):.2f} us/record, "
        f"Python workers {median_of(pruned, 2):.2f}: {raw_cpu / median_of(pruned, 1):.2f}x "
        "raw per CPU second)",
        f"any Python data source, no Kafka     : {ceiling:12,.0f} records/s  "
        f"(Spark's own cost per row: the ceiling of every Python source, {ceiling / raw:.2f}x "
        f"raw; CPU {median_of(ceiling_cpus, 0):.2f} us/record, Python workers "
        f"{median_of(ceiling_cpus, 1):.2f}: {raw_cpu / median_of(ceiling_cpus, 0):.2f}x raw "
        "per CPU second)",
        f"messages -> Spark rows, in-process   : Arrow {arrow:,.0f} records/s, tuples via "
        f"PySpark {tuples:,.0f} records/s ({arrow / tuples:.1f}x)",
        # A task on one core consumes what the raw loop consumes, then builds its rows and
        # Spark takes them in: run one after another, the three costs add up per record.
        f"serial estimate, any source, 1 core  : {bound:12,.0f} records/s  "
        f"({bound / raw:.2f}x raw: consume as raw + build Arrow + Spark's intake; the source "
        f"reaches {batch / bound:.2f}x of it)",
        f"raw confluent-kafka, 2 processes     : {raw_pair:12,.0f} records/s  "
        f"({raw_pair / raw:.2f}x one reader: what 2 cores shared with the broker allow)",
        f"source, batch read, local[2]         : {whole:12,.0f} records/s  "
        f"({whole / raw:.2f}x raw 1 reader, {whole / raw_pair:.2f}x raw in 2 processes)",
    ]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    parser.add_argument("--workdir", default="/tmp", help="where stream checkpoints go")
    parser.add_argument("--sink-rows", type=int, default=400_000,
                        help="rows of the sink's part (0: skip it)")
    args = parser.parse_args()
    with kafka_service() as kafka:
        for line in source_part(args, kafka):
            print(line)
    if args.sink_rows:
        # The sink beside a plain COPY of the same rows (bench/structured_sink.py).
        from structured_sink import sink_part

        sink_part(argparse.Namespace(rows=args.sink_rows, rounds=args.repeat))


if __name__ == "__main__":
    main()
