"""What the Spark contenders (spark_read.py, spark_jdbc.py) share: the session they run on,
the JVM connectors given to it, and the timing of the process.

Spark's Kafka connectors are on Maven Central only for some Spark releases
(:data:`kafka_direct.testing.jvm_peers.SPARK_KAFKA_RELEASES`): the contenders run on the
PySpark of the Python that runs them (the benchmark's own virtual environment, PySpark
4.2.0) and refuse one whose connectors Maven Central lacks. The connectors are given with
``spark.jars`` (their jars Spark's own ``jars/`` lacks, resolved once into the cache), never
``spark.jars.packages`` at run time, so no run resolves anything.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

#: The kafka-direct side and the JVM side run on one session configuration: these settings
#: only quiet Spark and bind it to the loopback address (the services listen there); the
#: JVM's options (JIT, GC, 1 GiB heap) are Spark's defaults, as a user's.
SESSION_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
}

#: Client properties given to the JVM Kafka consumer (Spark's ``kafka`` source as
#: ``kafka.<name>``, the Scala KafkaRDD as they are): larger fetches and polls than the
#: client's defaults (1 MiB per partition, 500 records per poll), as Kafka's consumer
#: tuning for throughput advises; a backlog is read, so no wait for small fetches.
JVM_CONSUMER_TUNING: dict[str, str] = {
    "max.poll.records": "10000",
    "max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "fetch.max.bytes": str(64 * 1024 * 1024),
    "receive.buffer.bytes": str(1024 * 1024),
}


def process_started() -> float:
    """This process's start as a ``time.time()`` value (from /proc, 10 ms resolution)."""
    with open("/proc/self/stat") as stat:
        text = stat.read()
    ticks = int(text[text.rindex(")") + 2:].split()[19])
    with open("/proc/stat") as stat:
        boot = next(int(line.split()[1]) for line in stat if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def connector_jars(jdbc: bool = False) -> str:
    """``spark.jars``: Spark's Kafka connectors for this PySpark (and the PostgreSQL JDBC
    driver with ``jdbc``)."""
    import pyspark

    from kafka_direct.testing.jvm_peers import postgres_jdbc_driver, spark_jars_option

    jars = spark_jars_option(spark_version(), Path(pyspark.__file__).parent)
    if jdbc:
        jars += "," + str(postgres_jdbc_driver())
    return jars


def session(master: str, app: str, jdbc: bool = False,
            conf: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
    """A SparkSession on ``master`` with the connectors and kafka-direct's formats; returns
    it and the settings that differ from Spark's defaults (for the RESULT line)."""
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    # The Python workers run on this Python (its PySpark, kafka-direct and pyarrow), not on
    # whichever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**SESSION_CONF, **(conf or {})}
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.jars", connector_jars(jdbc))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    kafka_direct.sql.register(spark)
    return spark, settings


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Each partition's log end (the topic is read from offset 0)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-peers-ends",
                         "enable.auto.commit": False})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def progress_batches(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch of a query's progress: id, rows, triggerExecution and addBatch (s)."""
    return [{"batch": p["batchId"], "rows": p["numInputRows"],
             "trigger_seconds": p["durationMs"].get("triggerExecution", 0) / 1000.0,
             "add_batch_seconds": p["durationMs"].get("addBatch", 0) / 1000.0}
            for p in progress if p["numInputRows"]]


def now() -> float:
    return time.time()
