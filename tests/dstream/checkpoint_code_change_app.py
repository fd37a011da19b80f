"""A direct stream app whose code changes between runs, for the checkpoint identity tests.

Each Kafka stream writes its batches into its own sink, a line per batch:
``done SINK BATCH {"ranges": [[topic, partition, from, until]...], "records": [[topic,
partition, offset]...]}``. A batch run twice (after a kill) is written twice; a sink that
keys its writes by batch time keeps one of them.

The variants, all with the same checkpoint directory:
``a``: stream A only; ``const+a``: a constant stream (with an output of its own) created
before stream A; ``ab``: A then B; ``ba``: B then A.

Usage: checkpoint_code_change_app.py BOOTSTRAP TOPIC_A TOPIC_B CHECKPOINT_DIR OUTPUT_FILE
VARIANT END SECONDS. It stops gracefully once every stream had a batch that found each
partition read up to END (END 0: never), or after SECONDS.
"""

import json
import os
import sys
import time

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.streaming import StreamingContext
from kafka_direct.testing import spark_context


def main():
    bootstrap, topic_a, topic_b, directory, output, variant, end, seconds = sys.argv[1:9]
    end, seconds = int(end), float(seconds)
    caught_up = {}

    def write(line):
        with open(output, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def kafka(ssc, sink, topic):
        stream = KafkaUtils.createDirectStream(
            ssc, LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe([topic], {
                "bootstrap.servers": bootstrap, "group.id": f"code-change-{sink}",
                "auto.offset.reset": "earliest"}, groupManagement=False))
        caught_up[sink] = False

        def output_op(t, rdd):
            ranges = [[r.topic, r.partition, r.fromOffset, r.untilOffset]
                      for r in rdd.offsetRanges()]
            records = rdd.map(lambda m: [m.topic, m.partition, m.offset]).collect()
            batch = int(t.timestamp() * 1000)
            write(f"done {sink} {batch} " + json.dumps({"ranges": ranges,
                                                        "records": records}))
            if end and ranges and all(r[2] == r[3] == end for r in ranges):
                caught_up[sink] = True

        stream.foreachRDD(output_op)

    with spark_context("local[2]", "checkpoint-code-change-app") as sc:
        def setup():
            ssc = StreamingContext(sc, 0.5, conf={
                "spark.streaming.kafka.maxRatePerPartition": "20"})
            ssc.checkpoint(directory)
            if variant == "const+a":
                ssc.constantStream(sc.parallelize([1])).foreachRDD(lambda rdd: rdd.count())
            order = {"a": "A", "const+a": "A", "ab": "AB", "ba": "BA"}[variant]
            for sink in order:
                kafka(ssc, sink, topic_a if sink == "A" else topic_b)
            return ssc

        ssc = StreamingContext.getOrCreate(directory, setup)
        ssc.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (end and all(caught_up.values())):
            ssc.awaitTerminationOrTimeout(0.2)
        ssc.stop(stopSparkContext=False, stopGracefully=True)


if __name__ == "__main__":
    main()
