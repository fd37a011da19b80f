"""The ingest job as the fault tests run it (and kill it): one JSON argument of settings.

Settings: bootstrap, dsn, topic, schema, group, sink (transactional | idempotent |
aggregate), interval, rate, idle, marker (a file the row function appends to every 100
records, so a test can kill the job while it writes), rowDelay (seconds slept per record,
to widen the write window).

``aggregate`` counts records per key in each batch (a shuffle) and writes the counts and all
the batch's offsets in one transaction (``TransactionalPostgresSink.perBatch``).
``typed`` (optional): ``{"registry": URL}`` writes Avro keys and values as typed columns,
upserted on ``id`` with tombstones deleting (``kafka_direct.app.typed``).
Exit codes: 0 finished, 3 a KafkaDirectError stopped the job (its type on stderr).
"""

import json
import sys
import time

from kafka_direct import KafkaDirectError
from kafka_direct.app.ingest_job import run_ingest
from kafka_direct.app.ingest_options import IngestOptions
from kafka_direct.streaming.batch_log import BatchLogListener


def make_row(settings):
    marker, delay = settings.get("marker"), settings.get("rowDelay", 0)

    def row(record):
        if marker and record.offset % 100 == 0:
            with open(marker, "a") as f:
                f.write(f"{record.partition} {record.offset}\n")
        if delay:
            time.sleep(delay)
        return (record.topic, record.partition, record.offset, record.key, record.value)

    return row


def run_aggregate(settings):
    from kafka_direct.streaming import StreamingContext
    from kafka_direct.testing import spark_context
    from offsets import PostgresOffsetStore, createDirectStreamFromStore
    from sinks import TransactionalPostgresSink

    store = PostgresOffsetStore(settings["dsn"], schema=settings["schema"])
    sink = TransactionalPostgresSink(settings["dsn"], "counts", settings["group"],
                                     columns=("key", "n"), schema=settings["schema"])
    with store.lockGroup(settings["group"]), spark_context("local[2]", "aggregate") as sc:
        ssc = StreamingContext(sc, settings["interval"], conf={
            "spark.streaming.kafka.maxRatePerPartition": str(settings["rate"])})
        stream = createDirectStreamFromStore(
            ssc, store, settings["group"], {"bootstrap.servers": settings["bootstrap"],
                                            "auto.offset.reset": "earliest"},
            topics=[settings["topic"]])
        row = make_row(settings)  # its marker and delay, as for the other sinks
        ssc.addStreamingListener(BatchLogListener(settings["interval"], sys.stdout))

        def counts(rdd):
            def pair(record):
                row(record)
                return (record.key.decode(), 1)

            return rdd.map(pair).reduceByKey(lambda a, b: a + b)

        stream.foreachRDD(sink.perBatch(counts))
        idle = []

        def note(t, rdd):
            idle.append(all(r.count() == 0 for r in rdd.offsetRanges()))

        stream.foreachRDD(note)
        ssc.start()
        while not ssc.awaitTerminationOrTimeout(0.2):
            if len(idle) >= 1 and idle[-1]:
                ssc.stop(stopSparkContext=False, stopGracefully=True)


def main():
    settings = json.loads(sys.argv[1])
    try:
        if settings["sink"] == "aggregate":
            run_aggregate(settings)
            return 0
        options = IngestOptions(
            topics=(settings["topic"],), group=settings["group"], table="events",
            schema=settings["schema"], batchInterval=settings["interval"],
            maxRatePerPartition=settings["rate"], sink=settings["sink"],
            stopAfterIdleBatches=settings["idle"])
        records = None
        if settings.get("typed"):
            from kafka_direct.app.typed.options import TypedOptions
            from kafka_direct.app.typed.schema_registry import RegistrySettings

            records = TypedOptions(valueFormat="avro", keyFormat="avro",
                                   registry=RegistrySettings(settings["typed"]["registry"]),
                                   keyColumns=("id",), onTombstone="delete")
        run_ingest(options, settings["bootstrap"], settings["dsn"], sys.stdout,
                   row=make_row(settings), records=records)
    except KafkaDirectError as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
