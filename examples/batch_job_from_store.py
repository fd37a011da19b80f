"""A batch job run again and again: each run writes what arrived since the last, exactly once.

``offsetRangesFromStore`` gives the ranges from the stored offsets to the log end;
``TransactionalPostgresSink`` writes each range's rows with its offset in one transaction.

Run: python examples/batch_job_from_store.py
"""

import uuid

import psycopg2
from _services import services

from kafka_direct import KafkaUtils
from kafka_direct.testing import spark_context
from offsets import PostgresOffsetStore, offsetRangesFromStore
from sinks import TransactionalPostgresSink


def run_once(sc, kafka, dsn, topic):
    """Write what arrived since the last run; returns the ranges and counts."""
    store = PostgresOffsetStore(dsn)
    params = kafka.params(**{"auto.offset.reset": "earliest"})
    ranges = offsetRangesFromStore(store, "nightly", params, [topic])
    rdd = KafkaUtils.createRDD(sc, params, ranges, valueDeserializer=bytes.decode)
    sink = TransactionalPostgresSink(dsn, "words", "nightly", columns=("word",),
                                     row=lambda record: (record.value,))
    return ranges, sink.write(rdd)


def main():
    """Two runs, the second writing only the new record."""
    topic = f"words-{uuid.uuid4().hex[:8]}"
    with services() as (kafka, dsn), spark_context("local[2]", "batch-example") as sc:
        kafka.create_topic(topic, 2)
        with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS words")
            cursor.execute("CREATE TABLE words (word text)")
        kafka.produce(topic, ["alpha", "beta", "gamma"])
        ranges, written = run_once(sc, kafka, dsn, topic)
        print(f"first run: {written['rows']} rows from {[str(r) for r in ranges]}")
        kafka.produce(topic, ["delta"])
        ranges, written = run_once(sc, kafka, dsn, topic)
        print(f"second run: {written['rows']} rows")
        with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM words")
            print(f"table words: {cursor.fetchone()[0]} rows")


if __name__ == "__main__":
    main()
