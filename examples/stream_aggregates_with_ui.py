"""A direct stream counting events per user, written exactly once per batch, with its page.

The counts of a batch come from a shuffle (``reduceByKey``), so they are written with all
the batch's offsets in one transaction (``sink.perBatch``). The statistics page and
Prometheus metrics are served on 127.0.0.1 while it runs.

Run: python examples/stream_aggregates_with_ui.py
"""

import json
import urllib.request
import uuid

import psycopg2
from _services import services

from kafka_direct.streaming import StreamingContext
from kafka_direct.testing import spark_context
from offsets import PostgresOffsetStore, createDirectStreamFromStore
from sinks import TransactionalPostgresSink


def main():
    """Count clicks per user until the 400 produced are processed."""
    topic = f"clicks-{uuid.uuid4().hex[:8]}"
    with services() as (kafka, dsn), spark_context("local[2]", "aggregate-example") as sc:
        kafka.create_topic(topic, 3)
        kafka.produce(topic, [json.dumps({"user": f"u{i % 4}"}) for i in range(400)])
        with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS clicks_per_user")
            cursor.execute("CREATE TABLE clicks_per_user (batch_time timestamptz, "
                           "user_id text, clicks bigint)")
        store = PostgresOffsetStore(dsn)
        group = f"clicks-{topic}"
        ssc = StreamingContext(sc, 1, conf={
            "spark.streaming.kafka.maxRatePerPartition": 50,
            "spark.streaming.ui.enabled": True, "spark.streaming.ui.port": 0})
        stream = createDirectStreamFromStore(
            ssc, store, group, kafka.params(**{"auto.offset.reset": "earliest"}),
            topics=[topic], valueDeserializer=json.loads)
        sink = TransactionalPostgresSink(dsn, "clicks_per_user", group,
                                         columns=("batch_time", "user_id", "clicks"))

        def per_user(time, rdd):
            counts = rdd.map(lambda r: (r.value["user"], 1)).reduceByKey(lambda a, b: a + b)
            sink.perBatch(lambda _: counts.map(lambda kv: (time, kv[0], kv[1])))(rdd)

        stream.foreachRDD(per_user)
        with store.lockGroup(group):
            ssc.start()
            print(f"statistics page: {ssc.uiWebUrl}")
            processed = 0.0
            while processed < 400 and not ssc.awaitTerminationOrTimeout(0.5):
                with urllib.request.urlopen(ssc.uiWebUrl + "metrics") as response:
                    metrics = response.read().decode()
                processed = next(float(line.split()[-1]) for line in metrics.splitlines()
                                 if line.startswith("kafka_direct_streaming_processed_records"))
            ssc.stop(stopSparkContext=False, stopGracefully=True)
        print(f"processed records (from the metrics): {processed:.0f}")
        with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT user_id, sum(clicks)::bigint FROM clicks_per_user GROUP BY 1 "
                           "ORDER BY 1")
            print("clicks per user:", dict(cursor.fetchall()))


if __name__ == "__main__":
    main()
