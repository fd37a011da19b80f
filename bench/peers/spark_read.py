"""Contender, read path: kafka-direct beside Spark's JVM Kafka connectors, one measurement.

Reads a whole topic (offset 0 to its end) once, and prints one ``RESULT {json}`` line
(common.result) with the rate and the settings:

- ``--mode stream``: ``readStream`` with ``Trigger.AvailableNow`` into Spark's ``noop``
  sink (one batch: no ``maxOffsetsPerTrigger``); the time from the process's start, from
  the session's start and from the query's start to its end, and each batch's
  ``triggerExecution`` and ``numInputRows`` from the query's progress.
- ``--mode batch``: ``spark.read...load()`` written to ``noop`` (rows counted by an
  ``Observation``, both sides alike).
- ``--mode rdd``: ``KafkaUtils.createRDD`` of the offset ranges: ours
  (``kafka_direct.KafkaUtils``) ``.count()``; Spark's Scala one through the JVM (py4j),
  counted through ``sample(false, 1.0)`` because KafkaRDD overrides ``count()`` with the
  ranges' sizes and reads nothing (that metadata count is timed too and reported as
  ``metadata_count_seconds``).
- ``--mode raw``: one confluent-kafka consumer assigned every partition, reading to the end
  (the reference; ``--impl`` ignored).

``--impl kafka-direct`` is ours (``format("kafka-direct")``), ``--impl kafka`` Spark's JVM
connector (``format("kafka")``, spark-sql-kafka-0-10 / spark-streaming-kafka-0-10 given with
``spark.jars``). The records read must equal ``--records``, else the command fails.

Usage: python bench/peers/spark_read.py --impl kafka --mode stream --master local[2]
    --bootstrap-servers HOST:PORT --topic T --records 1000000 [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import spark_support
from common import result

STARTED = spark_support.process_started()


def source_options(impl: str, bootstrap: str, topic: str) -> dict[str, str]:
    """The options of the source: Spark's with its consumer tuned, ours as it comes."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "startingOffsets": "earliest"}
    if impl == "kafka":
        # One task per Kafka partition (no minPartitions: 4 partitions already fill the
        # cores), no maxOffsetsPerTrigger (AvailableNow reads the backlog in one batch).
        options.update({f"kafka.{k}": v for k, v in spark_support.JVM_CONSUMER_TUNING.items()})
    return options


def read_stream(spark, args, options):
    from pyspark.sql.streaming import StreamingQuery  # noqa: F401

    fmt = "kafka-direct" if args.impl == "kafka-direct" else "kafka"
    checkpoint = tempfile.mkdtemp(prefix="spark-read-", dir=args.work)
    writer = (spark.readStream.format(fmt).options(**options).load()
              .writeStream.format("noop").option("checkpointLocation", checkpoint)
              .trigger(availableNow=True))
    start = time.time()
    query = writer.start()
    query.awaitTermination()
    end = time.time()
    batches = spark_support.progress_batches(query.recentProgress)
    read = sum(b["rows"] for b in batches)
    return read, start, end, {"batches": batches,
                              "batch_seconds": sum(b["trigger_seconds"] for b in batches)}


def read_batch(spark, args, options):
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812

    fmt = "kafka-direct" if args.impl == "kafka-direct" else "kafka"
    options = {**options, "endingOffsets": "latest"}
    observation = Observation("read")
    start = time.time()
    df = spark.read.format(fmt).options(**options).load()
    df.observe(observation, F.count(F.lit(1)).alias("rows")).write.format("noop") \
        .mode("overwrite").save()
    end = time.time()
    return int(observation.get["rows"]), start, end, {}


def read_rdd(spark, args, settings):
    sc = spark.sparkContext
    ends = spark_support.end_offsets(args.bootstrap_servers, args.topic, args.partitions)
    if args.impl == "kafka-direct":
        from kafka_direct import KafkaUtils, OffsetRange

        params = {"bootstrap.servers": args.bootstrap_servers, "group.id": "bench-peers-rdd"}
        ranges = [OffsetRange(args.topic, p, 0, end) for p, end in enumerate(ends)]
        start = time.time()
        read = KafkaUtils.createRDD(sc, params, ranges).count()
        return read, start, time.time(), {}
    jvm, gateway = sc._jvm, sc._gateway
    kafka010 = jvm.org.apache.spark.streaming.kafka010
    params = jvm.java.util.HashMap()
    for key, value in {"bootstrap.servers": args.bootstrap_servers,
                       "group.id": "bench-peers-rdd",
                       "key.deserializer": "org.apache.kafka.common.serialization."
                                           "ByteArrayDeserializer",
                       "value.deserializer": "org.apache.kafka.common.serialization."
                                             "ByteArrayDeserializer",
                       **spark_support.JVM_CONSUMER_TUNING}.items():
        # Numbers as Integers: KafkaRDD casts receive.buffer.bytes to one.
        params.put(key, int(value) if value.isdigit() else value)
    ranges = gateway.new_array(kafka010.OffsetRange, len(ends))
    for p, end in enumerate(ends):
        ranges[p] = kafka010.OffsetRange.create(args.topic, p, 0, end)
    start = time.time()
    rdd = kafka010.KafkaUtils.createRDD(sc._jsc, params, ranges,
                                        kafka010.LocationStrategies.PreferConsistent())
    metadata = time.time()
    counted = rdd.count()  # KafkaRDD.count(): the ranges' sizes, nothing read
    metadata = time.time() - metadata
    begin = time.time()
    read = rdd.sample(False, 1.0).count()  # every record read and iterated
    end = time.time()
    return read, begin, end, {"metadata_count": counted, "metadata_count_seconds": metadata,
                              "create_seconds": begin - start - metadata}


def read_raw(args):
    from confluent_kafka import Consumer, TopicPartition

    config = {"bootstrap.servers": args.bootstrap_servers, "group.id": "bench-peers-raw",
              "enable.auto.commit": False}
    ends = spark_support.end_offsets(args.bootstrap_servers, args.topic, args.partitions)
    start = time.time()
    consumer = Consumer(config)
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(args.partitions)])
    want, read = sum(ends), 0
    deadline = time.monotonic() + 600
    while read < want and time.monotonic() < deadline:
        for message in consumer.consume(5000, 1.0):
            if message.error() is None:
                message.value()
                read += 1
    end = time.time()
    consumer.close()
    return read, start, end, {"client": config | {"consume.batch": 5000}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("kafka-direct", "kafka"), default="kafka-direct")
    parser.add_argument("--mode", choices=("stream", "batch", "rdd", "raw"), required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True, help="records in the topic")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--work", default=None, help="scratch folder (checkpoints)")
    parser.add_argument("--warmup", type=int, default=0,
                        help="whole reads of the topic before the measured one, in the same "
                             "session (0: the measured read is the session's first, cold "
                             "JIT and Python workers)")
    args = parser.parse_args()
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    contender = ("raw-confluent-kafka" if args.mode == "raw"
                 else f"spark-{args.mode}-{args.impl}")
    settings: dict = {"mode": args.mode, "master": args.master, "partitions": args.partitions}
    session_start = session_ready = None
    if args.mode == "raw":
        read, start, end, more = read_raw(args)
    else:
        session_start = time.time()
        spark, conf = spark_support.session(args.master, contender)
        session_ready = time.time()
        settings.update({"impl": args.impl, "pyspark": spark_support.spark_version(),
                         "session": conf, "jvm_connector": args.impl == "kafka"})
        settings["warmup_reads"] = args.warmup
        if args.mode == "rdd":
            if args.impl == "kafka":
                settings["kafka_params"] = spark_support.JVM_CONSUMER_TUNING
                settings["location_strategy"] = "PreferConsistent"
                settings["counted_by"] = "sample(false, 1.0).count()"
            else:
                settings["counted_by"] = "count()"
            for _ in range(args.warmup):
                read_rdd(spark, args, settings)
            read, start, end, more = read_rdd(spark, args, settings)
        else:
            options = source_options(args.impl, args.bootstrap_servers, args.topic)
            settings["options"] = {k: v for k, v in options.items()
                                   if k != "kafka.bootstrap.servers"}
            measure = read_stream if args.mode == "stream" else read_batch
            if args.mode == "stream":
                settings["trigger"] = "AvailableNow (one batch)"
            for _ in range(args.warmup):
                measure(spark, args, options)
            read, start, end, more = measure(spark, args, options)
        spark.stop()
    if read != args.records:
        raise SystemExit(f"{contender}: read {read} records, expected {args.records}")
    seconds = end - start
    result(contender, settings, seconds, records=read, records_per_second=read / seconds,
           process_seconds=end - STARTED,
           session_seconds=None if session_start is None else session_ready - session_start,
           from_session_seconds=None if session_start is None else end - session_start,
           **more)


if __name__ == "__main__":
    main()
