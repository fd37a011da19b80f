"""Run createRDD on a local-cluster Spark (separate executor processes); print a JSON report.

Run as a script by the tests, because a process can hold only one SparkContext.
"""

import json
import os
import sys

from kafka_direct import KafkaUtils, LocationStrategies, OffsetRange, TopicPartition
from kafka_direct.rdd.spark_support import live_executors
from kafka_direct.testing import local_cluster_context


def where(index, records):
    import os as _os

    offsets = [r.offset for r in records]
    # The parent of a Python worker is its executor's PySpark daemon: one per executor.
    yield index, _os.getpid(), _os.getppid(), offsets


def main():
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    params = {"bootstrap.servers": bootstrap, "group.id": "cluster"}
    ranges = [OffsetRange(topic, p, 0, 20) for p in range(partitions)]
    report = {"driver_pid": os.getpid()}
    # Every preference names a live executor, so waiting for it is safe and makes placement
    # observable (with no wait a busy executor's task would run elsewhere).
    with local_cluster_context(executors=2, conf={"spark.locality.wait": "30s"}) as sc:
        executors = live_executors(sc)
        report["executors"] = [[e.host, e.executorId] for e in executors]
        runs = []
        for _ in range(2):
            rdd = KafkaUtils.createRDD(sc, params, ranges)
            jrdd = rdd._prev_jrdd.rdd()
            preferred = [str(jrdd.preferredLocations(jrdd.partitions()[i]).toString())
                         for i in range(len(ranges))]
            runs.append({"preferred": preferred,
                         "tasks": rdd.mapPartitionsWithIndex(where).collect()})
        report["runs"] = runs
        fixed_host = executors[0].host
        fixed = KafkaUtils.createRDD(
            sc, params, ranges[:1],
            LocationStrategies.PreferFixed({TopicPartition(topic, 0): fixed_host}))
        jrdd = fixed._prev_jrdd.rdd()
        report["fixed_preferred"] = str(jrdd.preferredLocations(jrdd.partitions()[0]).toString())
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
