"""The driver's planning per batch at scale: 1,000 partitions over 10 topics, both APIs.

Direct stream: ``JobGenerator.generateJobs`` per batch (partition discovery, one ListOffsets
for every partition, rate clamp, KafkaRDD building, job submission), on a ManualClock, with
a few new records in every partition before each batch. Beside it, the same at 4 partitions.

Structured Streaming: the source's planning as Spark reports it in each trigger's progress
(``durationMs.latestOffset`` + ``durationMs.queryPlanning``), a query into ``noop`` on a
processing-time trigger, with new records in every partition between triggers; beside it,
the same at 4 partitions. Under each, the source's own part of a trigger: the same reader's
``latestOffset``, ``reportLatestOffset``, ``partitions`` (each input partition pickled) and
``commit`` called in this process on the same topics, offsets handed over as JSON as Spark's
planner process does, wall and CPU; and Spark's ``rate`` source into noop in the same
session: the micro-batch engine's own planning with no Kafka; and a Python data source
that asks nothing and reads a row a trigger: what Spark adds to any Python source's
trigger. Spark's figure less the source's own part is Spark's: its planner process's
socket, the JVM's planning.

Beside the direct stream, the CPU a batch's planning costs: the generating
thread's CPU in ``generateJobs``, and the driver process's (every thread's: the threads that
ask the end offsets and make the ranges beside it, librdkafka's; the bench's own producer's
threads left out, which serve its 1,000 partitions all the while).

Prints p50/p95/max per API and size. Target: p95 <= 10 ms at 1,000 partitions (issue 39).

With ``--peers``, also what users of Spark's JVM connectors get on the same broker and
topics in the same run: in a process of its own (peers/spark_planning.py, on a PySpark whose
Kafka connectors Maven Central serves, so their jars never enter this session) Spark's
``format("kafka")`` source, the same ``rate`` source, and the Scala direct stream
(``KafkaUtils.createDirectStream`` on a ManualClock) at the large size. Their Python and jars
are made or resolved into the cache before anything is measured (the first run downloads).

Usage: python bench/planning_scale.py [--topics 10] [--partitions 100] [--batches 20]
    [--peers]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench_support import Completed
from planning_support import feed, peer_lines, summary, trigger_planning

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.testing import kafka_service, spark_context

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))  # the peers' environment and process helpers


def topics(kafka, count, partitions):
    names = [f"scale-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
    for name in names:
        kafka.create_topic(name, partitions)
    return names


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
    """Spark's planning of each trigger (ms), and the source's own part's wall and CPU (ms)."""
    reader = (spark.readStream.format("kafka-direct")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", ",".join(names)).option("startingOffsets", "latest"))
    query = (reader.load().writeStream.format("noop").trigger(processingTime="1 second")
             .start())
    try:
        planning = trigger_planning(query, batches, lambda: feed(producer, names, partitions),
                                    timeout=60 + batches * 10)
    finally:
        query.stop()
    return planning, *source_part(kafka, producer, names, partitions, batches)


def source_part(kafka, producer, names, partitions, batches):
    """The source's own part of each trigger's planning, its reader driven in this process.

    Each step as Spark's planner process runs it: ``latestOffset`` from the start's JSON,
    its answer written as JSON, ``reportLatestOffset``, ``partitions`` from both JSON texts
    and each input partition pickled, ``commit``. Returns the wall and this thread's CPU of
    each trigger (ms): what Spark's figure holds of ours; the rest of it is Spark's (its
    runner's socket, the JVM's planning of the micro-batch).
    """
    from pyspark.serializers import CloudPickleSerializer
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader

    pickler = CloudPickleSerializer()
    reader = KafkaDirectStreamReader.create(
        {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": ",".join(names),
         "startingOffsets": "latest"}, parallelism=2)
    walls, cpus = [], []
    try:
        start = json.dumps(reader.initialOffset())
        for batch in range(batches + 1):
            feed(producer, names, partitions)
            wall, cpu = time.perf_counter(), time.thread_time()
            end = json.dumps(reader.latestOffset(json.loads(start), ReadAllAvailable()))
            json.dumps(reader.reportLatestOffset())
            for partition in reader.partitions(json.loads(start), json.loads(end)):
                pickler.dumps(partition)
            reader.commit(json.loads(end))
            if batch:  # the first trigger also starts the consumer
                cpus.append((time.thread_time() - cpu) * 1000)
                walls.append((time.perf_counter() - wall) * 1000)
            start = end
    finally:
        reader.stop()
    return walls, cpus


def rate(spark, batches):
    """Spark's ``rate`` source into noop: the planning of a micro-batch with no Kafka (ms)."""
    query = (spark.readStream.format("rate").option("rowsPerSecond", "10").load()
             .writeStream.format("noop").trigger(processingTime="1 second").start())
    try:
        return trigger_planning(query, batches, lambda: None, timeout=60 + batches * 10)
    finally:
        query.stop()


def python_floor(spark, batches):
    """A Python data source that asks nothing and reads one row a trigger, into noop (ms).

    Spark's figure for it is what every Python data source's trigger costs before its own
    work: the planner process's socket round trips (the latest offset, the input
    partitions), the offsets as JSON through the JVM, the micro-batch's planning.
    """
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    # Defined here, not at the module's top: pickled by value into Spark's planner process.
    class FloorReader(DataSourceStreamReader):
        def __init__(self):
            self.next = 0

        def initialOffset(self):
            return {"n": 0}

        def latestOffset(self, start, limit):
            self.next += 1  # every trigger has one new row
            return {"n": self.next}

        def partitions(self, start, end):
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition):
            first, end = partition.value
            for n in range(first, end):
                yield (n,)

        def commit(self, end):
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "kafka-direct-bench-floor"

        def schema(self):
            return "n long"

        def streamReader(self, schema):
            return FloorReader()

    spark.dataSource.register(FloorSource)
    query = (spark.readStream.format(FloorSource.name()).load()
             .writeStream.format("noop").trigger(processingTime="1 second").start())
    try:
        return trigger_planning(query, batches, lambda: None, timeout=60 + batches * 10)
    finally:
        query.stop()


def prepare_peers():
    """The peers' Python and Spark's Kafka connectors: made or resolved before anything is
    measured (the first run downloads them into the cache); returns the Python's path."""
    import environment

    from kafka_direct.errors import KafkaDirectError
    from kafka_direct.testing.jvm_peers import spark_kafka_jars

    version = environment.peer_spark_version()
    print(f"peers: Spark {version}'s JVM Kafka connectors, resolved into the cache once "
          f"(about 15 MB the first time)", file=sys.stderr, flush=True)
    try:
        spark_kafka_jars(version)
    except KafkaDirectError as error:
        raise SystemExit(f"--peers: Spark {version}'s Kafka connectors are not at hand, "
                         f"nothing was measured: {error}") from None
    if environment.installed_pyspark() == version:
        return sys.executable
    return str(environment.peer_python(version))


def peers(python, kafka, names, partitions, batches):
    """Spark's JVM connectors' lines, measured in a process of their own on ``python``."""
    import common

    argv = [python, str(HERE / "peers" / "spark_planning.py"),
            "--bootstrap-servers", kafka.bootstrap_servers, "--topics", ",".join(names),
            "--partitions", str(partitions), "--batches", str(batches)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    process = subprocess.Popen(argv, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    timeout = 300 + 3 * batches * 10
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        common.kill_tree(process.pid)  # the peers' Python, its JVM and its workers
        process.communicate()
        raise SystemExit(f"the peers did not finish within {timeout} s") from None
    try:
        if process.returncode:
            raise ValueError(f"exit code {process.returncode}")
        return peer_lines(stdout)
    except ValueError as error:
        # Spark's output of a stopped query is noise; its last lines say what failed.
        sys.stderr.write(stderr[-5000:])
        raise SystemExit(f"the peers failed: {error}") from None


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--peers", action="store_true",
                        help="also Spark's rate source, and Spark's JVM Kafka source and "
                             "Scala direct stream in a process of their own")
    args = parser.parse_args(argv)
    for name in ("topics", "partitions", "batches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def main():
    args = arguments()
    python = prepare_peers() if args.peers else None
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
        for size, chosen, count in ((4, small, 4), (total, big, args.partitions)):
            results[("direct stream", size)] = summary(
                f"direct stream, {size} partitions",
                *dstream(sc, kafka, producer, chosen, count, args.batches))
        for size, chosen, count in ((4, small, 4), (total, big, args.partitions)):
            spark_ms, own_ms, own_cpu = structured(spark, kafka, producer, chosen, count,
                                                   args.batches)
            results[("structured", size)] = summary(f"structured, {size} partitions", spark_ms)
            results[("source's own part", size)] = summary(
                f"  of which the source's own, {size} partitions", own_ms, own_cpu)
        # Spark's own micro-batch planning with no Kafka, in the same run: what of the
        # structured figure no source can remove.
        summary(f"rate source (Spark {sc.version}, this session)", rate(spark, args.batches))
        # A Python data source that does nothing: what Spark adds to every Python source's
        # trigger, the floor under the structured figure.
        summary("a Python data source that asks nothing (this session)",
                python_floor(spark, args.batches))
        met = {api: results[(api, total)]
               for api in ("direct stream", "structured", "source's own part")}
        if python:
            for line in peers(python, kafka, big, args.partitions, args.batches):
                p95 = summary(line["label"], line["ms"], line["cpu"])
                if "partitions" in line["label"]:
                    met[line["label"].split(",")[0]] = p95
        print(f"target: p95 <= 10 ms at {total} partitions: "
              + ", ".join(f"{api} {'met' if p95 <= 10 else 'NOT met'}"
                          for api, p95 in met.items()))


if __name__ == "__main__":
    main()
