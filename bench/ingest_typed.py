"""Typed columns against raw bytes: the ingest job's writers on the same records, one run.

N records (JSON values of ~100 B like the job's sample events, and the same events as Avro
in a second topic, 4 partitions, on the embedded broker) are written into PostgreSQL by
the direct stream, one batch over every partition (a ManualClock tick), four ways, in
rounds:

(a) raw: the transactional sink, key and value as bytea (the raw job's writer);
(b) JSON: typed columns (``--value-format json``), appended;
(c) Avro: typed columns from a Schema Registry (``--value-format avro``), appended;
(d) Avro upsert: (c) with ``--key-columns id`` (each key's latest record).

Each is timed from the tick to the batch's completion (read, decode, stage, commit).
Prints rows/s (medians over the rounds) and each one's ratio to (a).

Usage: python bench/ingest_typed.py [--records N] [--rounds R]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time

from bench_support import Completed

from kafka_direct import LocationStrategies
from kafka_direct.app.typed.dstream import TypedDStreamWriter
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.schema_registry import RegistrySettings
from kafka_direct.app.typed.table import prepare_tables
from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.testing import EmbeddedPostgres, kafka_service, spark_context
from kafka_direct.testing.schema_registry import LocalSchemaRegistry
from offsets import PostgresOffsetStore, createDirectStreamFromStore
from sinks import TransactionalPostgresSink

PARTITIONS = 4
SCHEMA = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "amount", "type": "long"}, {"name": "ts", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def events(partition, count):
    for i in range(count):
        yield {"id": partition * 10_000_000 + i, "user": f"user-{i % 97}",
               "amount": (i * 37) % 1000, "ts": 1_700_000_000_000 + i, "note": "x" * 20}


def produce(kafka, registry, records):
    from fastavro import parse_schema, schemaless_writer

    topics = {"json": f"bench-typed-json-{time.monotonic_ns()}",
              "avro": f"bench-typed-avro-{time.monotonic_ns()}"}
    for topic in topics.values():
        kafka.create_topic(topic, PARTITIONS)
    schemaId = registry.register(f"{topics['avro']}-value", SCHEMA)
    parsed = parse_schema(SCHEMA)
    per = records // PARTITIONS
    for p in range(PARTITIONS):
        batch = list(events(p, per))
        kafka.produce(topics["json"], [json.dumps(e).encode() for e in batch], partition=p)
        encoded = []
        for event in batch:
            body = io.BytesIO()
            schemaless_writer(body, parsed, event)
            encoded.append(b"\x00" + schemaId.to_bytes(4, "big") + body.getvalue())
        kafka.produce(topics["avro"], encoded, partition=p)
    return topics, per * PARTITIONS


def one_batch(sc, kafka, pg, topic, sink, group):
    store = PostgresOffsetStore(pg.dsn)
    clock = ManualClock(0)
    ssc = StreamingContext(sc, 1, clock=clock)
    completed = Completed()
    ssc.addStreamingListener(completed)
    stream = createDirectStreamFromStore(
        ssc, store, group, kafka.params(**{"auto.offset.reset": "earliest"}), topics=[topic],
        locationStrategy=LocationStrategies.PreferConsistent())
    stream.foreachRDD(sink)
    ssc.start()
    try:
        start = time.perf_counter()
        clock.advance(1000)
        completed.wait(1000)
        elapsed = time.perf_counter() - start
    finally:
        ssc.stop(stopSparkContext=False)
    return elapsed


def raw(sc, kafka, pg, topics, name):
    from kafka_direct.app.ingest_job import ensure_table

    ensure_table(pg.dsn, "public", name)
    return one_batch(sc, kafka, pg, topics["json"],
                     TransactionalPostgresSink(pg.dsn, name, name), name)


def typed(options, topic_kind):
    def run(sc, kafka, pg, topics, name):
        prepare_tables(pg.dsn, "public", name, options)
        return one_batch(sc, kafka, pg, topics[topic_kind],
                         TypedDStreamWriter(pg.dsn, "public", name, name, options), name)

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with kafka_service() as kafka, EmbeddedPostgres() as pg, LocalSchemaRegistry() as reg, \
            spark_context("local[2]", "bench-ingest-typed") as sc:
        topics, records = produce(kafka, reg, args.records)
        registry = RegistrySettings(reg.url)
        ways = {
            "(a) raw bytes (transactional sink)": raw,
            "(b) JSON typed columns": typed(TypedOptions(valueFormat="json"), "json"),
            "(c) Avro typed columns": typed(TypedOptions(valueFormat="avro", registry=registry),
                                            "avro"),
            "(d) Avro upsert on id": typed(TypedOptions(valueFormat="avro", registry=registry,
                                                        keyColumns=("id",)), "avro"),
        }
        for way in ways.values():  # warm-up: JVM, Python workers, registry caches
            way(sc, kafka, pg, topics, f"warm_{time.monotonic_ns()}")
        timings = {label: [] for label in ways}
        for round_ in range(args.rounds):
            for index, (label, way) in enumerate(ways.items()):
                timings[label].append(way(sc, kafka, pg, topics, f"t{index}_{round_}"))
            print(f"round {round_ + 1}: " + ", ".join(
                f"{label.split()[0]} {t[-1]:.2f} s" for label, t in timings.items()))
        rates = {label: records / statistics.median(t) for label, t in timings.items()}
        base = next(iter(rates.values()))
        print(f"records: {records} x ~100 B in {PARTITIONS} partitions, {args.rounds} rounds, "
              "one batch each")
        for label, rate in rates.items():
            print(f"{label:38s} {rate:12,.0f} rows/s  {rate / base:5.2f}x raw")


if __name__ == "__main__":
    main()
