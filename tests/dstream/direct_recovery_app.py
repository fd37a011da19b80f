"""A direct stream app for the killed-driver test: logs each batch's ranges.

Lines: ``start T ranges`` when a batch's output begins, ``done T ranges`` when it ends.
Usage: direct_recovery_app.py BOOTSTRAP TOPIC CHECKPOINT_DIR OUTPUT_FILE SECONDS
"""

import json
import os
import sys
import time

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.streaming import StreamingContext
from kafka_direct.testing import spark_context


def main():
    bootstrap, topic, directory, output, seconds = sys.argv[1:6]

    def write(line):
        with open(output, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    with spark_context("local[2]", "direct-recovery-app") as sc:
        def setup():
            ssc = StreamingContext(sc, 0.5, conf={
                "spark.streaming.kafka.maxRatePerPartition": "20"})
            ssc.checkpoint(directory)
            stream = KafkaUtils.createDirectStream(
                ssc, LocationStrategies.PreferConsistent(),
                ConsumerStrategies.Subscribe([topic], {
                    "bootstrap.servers": bootstrap, "group.id": "recovery",
                    "auto.offset.reset": "earliest"}))

            def output_op(t, rdd):
                ranges = json.dumps([[r.partition, r.fromOffset, r.untilOffset]
                                     for r in rdd.offsetRanges()])
                batch = int(t.timestamp() * 1000)
                write(f"start {batch} {ranges}")
                count = rdd.count()
                time.sleep(0.3)
                write(f"done {batch} {ranges} {count}")

            stream.foreachRDD(output_op)
            return ssc

        ssc = StreamingContext.getOrCreate(directory, setup)
        ssc.start()
        ssc.awaitTerminationOrTimeout(float(seconds))
        ssc.stop(stopSparkContext=False, stopGracefully=True)


if __name__ == "__main__":
    main()
