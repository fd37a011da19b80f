"""Spark's own JVM Kafka connectors: the driver's planning per batch, in a process of its own.

Run by ``bench/planning_scale.py --peers`` on a PySpark whose Kafka connectors Maven Central
serves (spark_support), so their jars never enter the bench's own session. On the topics it
is given, with one new record in every partition before each batch, it measures:

- ``structured``: Spark's ``format("kafka")`` source (spark-sql-kafka-0-10) on a 1 s
  processing-time trigger: ``durationMs.latestOffset + durationMs.queryPlanning`` of each
  trigger, as the bench reads for ``format("kafka-direct")``. Its sink is a
  ``foreachBatch`` that does nothing (``--sink noop`` for Spark's ``noop``): the planning
  is the same, but into ``noop`` the source runs a task per partition with new records,
  1,000 a trigger, and its first such trigger opens a consumer for each (about 180 tasks a
  minute on 2 busy cores), so a trigger comes every few minutes, not every second.
- ``rate``: Spark's ``rate`` source into ``noop`` the same way (the micro-batch floor of
  this Spark, no Kafka).
- ``dstream``: the Scala direct stream (spark-streaming-kafka-0-10's
  ``KafkaUtils.createDirectStream`` in a ``JavaStreamingContext`` on a ``ManualClock``):
  from the clock's advance to the batch's job set submitted (its ``submissionTime``, whole
  milliseconds): the batch's generation (partition discovery, end offsets, rate clamp, the
  KafkaRDD, the job set's submission). Its CPU per batch is the ``JobGenerator`` thread's
  (the JVM's thread CPU clock), the batch's metadata clean-up included. The output
  operation is ``print(0)`` (a one-record ``take`` after the submission; no output
  operation would mean no batch).

The first batch of each (the consumer's start) is left out. Spark's JVM options are its
defaults, as a user's. Prints one ``RESULT {json}`` line: ``{"spark": version, "lines":
[{"label", "ms", "cpu"}]}``.

Usage: python bench/peers/spark_planning.py --bootstrap-servers HOST:PORT --topics T1,T2
    --partitions 100 [--batches 20] [--modes structured,rate,dstream] [--sink noop]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import spark_support
from planning_support import RESULT, feed, trigger_planning

MODES = ("structured", "rate", "dstream")


def session(master: str) -> Any:
    """A session with Spark's Kafka connectors; the direct stream's clock is a ManualClock."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("planning-scale-peers")
    for key, value in spark_support.SESSION_CONF.items():
        builder = builder.config(key, value)
    # Read by the DStream scheduler only; Structured Streaming keeps its system clock.
    builder = builder.config("spark.streaming.clock", "org.apache.spark.util.ManualClock")
    # With --sink noop: a consumer kept for each of the 1,000 partitions (64 by default, so
    # each trigger would open most of them again).
    builder = builder.config("spark.kafka.consumer.cache.capacity", "2000")
    spark = builder.config("spark.jars", spark_support.connector_jars()).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def structured(spark: Any, producer: Any, args: argparse.Namespace) -> list[float]:
    query = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", args.bootstrap_servers)
             .option("subscribe", ",".join(args.topics)).option("startingOffsets", "latest")
             .load().writeStream)
    if args.sink == "noop":
        query = query.format("noop")
    else:
        query = query.foreachBatch(lambda frame, batch: None)
    query = query.trigger(processingTime="1 second").start()
    try:
        return trigger_planning(query, args.batches,
                                lambda: feed(producer, args.topics, args.partitions),
                                timeout=60 + args.batches * 10)
    finally:
        query.stop()


def rate(spark: Any, args: argparse.Namespace) -> list[float]:
    query = (spark.readStream.format("rate").option("rowsPerSecond", "10").load()
             .writeStream.format("noop").trigger(processingTime="1 second").start())
    try:
        return trigger_planning(query, args.batches, lambda: None,
                                timeout=60 + args.batches * 10)
    finally:
        query.stop()


def thread_id(bean: Any, name: str) -> int:
    for ident in bean.getAllThreadIds():
        info = bean.getThreadInfo(ident)
        if info is not None and info.getThreadName() == name:
            return int(ident)
    raise SystemExit(f"no thread named {name!r} in Spark's JVM")


def dstream(spark: Any, producer: Any, args: argparse.Namespace) -> tuple[list[float],
                                                                          list[float]]:
    """Wall (from the clock's advance to the submission) and JobGenerator CPU (ms) a batch."""
    jvm = spark.sparkContext._jvm
    streaming = jvm.org.apache.spark.streaming
    kafka = streaming.kafka010
    jssc = streaming.api.java.JavaStreamingContext(spark.sparkContext._jsc,
                                                   streaming.Duration(1000))
    params = jvm.java.util.HashMap()
    for key, value in {"bootstrap.servers": args.bootstrap_servers,
                       "group.id": f"g-{uuid.uuid4().hex[:6]}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": "false",
                       "key.deserializer": "org.apache.kafka.common.serialization."
                                           "ByteArrayDeserializer",
                       "value.deserializer": "org.apache.kafka.common.serialization."
                                             "ByteArrayDeserializer"}.items():
        params.put(key, value)
    topics = jvm.java.util.ArrayList()
    for name in args.topics:
        topics.add(name)
    stream = kafka.KafkaUtils.createDirectStream(
        jssc, kafka.LocationStrategies.PreferConsistent(),
        kafka.ConsumerStrategies.Subscribe(topics, params))
    stream.print(0)
    context = jssc.ssc()
    progress = streaming.ui.StreamingJobProgressListener(context)
    context.addStreamingListener(progress)
    jssc.start()
    clock = context.scheduler().clock()
    bean = jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    generator = thread_id(bean, "JobGenerator")
    walls: list[float] = []
    cpus: list[float] = []
    try:
        for batch in range(1, args.batches + 2):
            feed(producer, args.topics, args.partitions)
            cpu = bean.getThreadCpuTime(generator)
            started = time.time() * 1000
            clock.advance(1000)
            deadline = time.monotonic() + 60
            while progress.numTotalCompletedBatches() < batch:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the Scala direct stream's batch {batch} did not "
                                     f"complete within 60 s")
                time.sleep(0.05)
            data = progress.getBatchUIData(streaming.Time(batch * 1000)).get()
            # The batch's metadata clean-up runs on the same thread when it completes.
            time.sleep(0.05)
            if batch > 1:  # the first batch also starts the consumer
                walls.append(data.submissionTime() - started)
                cpus.append((bean.getThreadCpuTime(generator) - cpu) / 1e6)
    finally:
        jssc.stop(False)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topics", required=True, type=lambda text: text.split(","))
    parser.add_argument("--partitions", type=int, required=True,
                        help="partitions of each topic")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--modes", type=lambda text: text.split(","), default=list(MODES))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--sink", choices=("foreach-batch", "noop"), default="foreach-batch",
                        help="the kafka source's sink (noop runs a task per partition)")
    args = parser.parse_args()
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))}; "
                     f"choose from {', '.join(MODES)}")
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "linger.ms": 20})
    spark = session(args.master)
    version = spark_support.spark_version()
    total = len(args.topics) * args.partitions
    lines: list[dict[str, Any]] = []
    try:
        for mode in args.modes:
            if mode == "structured":
                lines.append({"label": f"JVM kafka source, {total} partitions",
                              "ms": structured(spark, producer, args), "cpu": []})
            elif mode == "rate":
                lines.append({"label": f"rate source (Spark {version}, peers' JVM)",
                              "ms": rate(spark, args), "cpu": []})
            else:
                walls, cpus = dstream(spark, producer, args)
                lines.append({"label": f"JVM direct stream, {total} partitions",
                              "ms": walls, "cpu": cpus})
    finally:
        spark.stop()
    print(RESULT + json.dumps({"spark": version, "lines": lines}), flush=True)


if __name__ == "__main__":
    main()
