"""A streaming app for the killed-driver test: writes 'start T' and 'done T' per batch.

Usage: recovery_app.py CHECKPOINT_DIR OUTPUT_FILE SECONDS_TO_RUN
"""

import os
import sys
import time

from kafka_direct.streaming import StreamingContext
from kafka_direct.streaming.input_dstream import InputDStream
from kafka_direct.testing import spark_context


class TimeStream(InputDStream):
    def compute(self, validTime):
        return self.ssc.sparkContext.parallelize([validTime], 1)


def main():
    directory, output, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])

    def write(line):
        with open(output, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def output_op(t, rdd):
        batch = int(t.timestamp() * 1000)
        write(f"start {batch}")
        rdd.count()
        time.sleep(0.3)
        write(f"done {batch}")

    with spark_context("local[2]", "recovery-app") as sc:
        def setup():
            ssc = StreamingContext(sc, 0.5)
            ssc.checkpoint(directory)
            TimeStream(ssc).foreachRDD(output_op)
            return ssc

        ssc = StreamingContext.getOrCreate(directory, setup)
        ssc.start()
        ssc.awaitTerminationOrTimeout(seconds)
        ssc.stop(stopSparkContext=False, stopGracefully=True)


if __name__ == "__main__":
    main()
