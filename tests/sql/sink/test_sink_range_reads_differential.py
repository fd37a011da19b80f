"""Differential: the sink reading offset ranges writes what the records path writes.

Random topic contents (several partitions, null keys and values, plain records between
committed and aborted transactions, so that offsets have gaps) are ingested twice by the
same linked query, in small batches: once with the records as rows (``emit=records``,
``offsetColumns``), once with the source handing on offset ranges and the sink reading
them (``emit=offsetRanges``, ``kafka.*``), each with its own table and offset store. The
two tables must be the same, row for row, and hold every committed record once; each
store ends at the log ends. For both readers (``c`` and ``python``).
"""

import os
import random

import pytest
from confluent_kafka import Producer

from kafka_direct.sql.link.source_side import SourceLink
from tests.sql.sink.test_sink_range_reads import TABLE_COLUMNS, create_table, rows_of

PARTITIONS = 3


def produce_random(kafka, topic, seed):
    """Random records, plain and transactional; the committed ones per partition, in order."""
    rng = random.Random(seed)
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    committed = {p: [] for p in range(PARTITIONS)}
    serial = 0

    def record():
        nonlocal serial
        serial += 1
        key = None if rng.random() < 0.3 else f"k{serial}".encode()
        value = None if rng.random() < 0.2 else f"v{serial}".encode()
        return rng.randrange(PARTITIONS), key, value

    for _ in range(rng.randint(6, 9)):
        if rng.random() < 0.4:
            plain = [record() for _ in range(rng.randint(1, 8))]
            for partition in range(PARTITIONS):
                mine = [(k, v) for p, k, v in plain if p == partition]
                if mine:
                    kafka.produce(topic, [v for _, v in mine], partition=partition,
                                  keys=[k for k, _ in mine])
                    committed[partition] += mine
        else:
            sent = [record() for _ in range(rng.randint(1, 12))]
            producer.begin_transaction()
            for partition, key, value in sent:
                producer.produce(topic, value=value, key=key, partition=partition)
            if rng.random() < 0.4:
                # Sent first: an abort drops what the producer still holds, and the aborted
                # records are to take offsets (the gaps a read must step over).
                assert producer.flush(30) == 0
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                for partition, key, value in sent:
                    committed[partition].append((key, value))
    kafka.await_stable(topic, list(range(PARTITIONS)))
    return committed


def ingest(session, kafka, postgres, schema, topic, checkpoint, *, ranges, reader, table):
    """The linked query in AvailableNow batches of a few offsets; its error and batches."""
    link = {"offsetStore.name": table, "offsetStore.schema": schema}
    source = (session.readStream.format("kafka-direct")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "7").option("offsetStore.dsn", postgres.dsn)
              .options(**link))
    if ranges:
        frame = source.option("emit", "offsetRanges").load()
        sink = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "reader": reader,
                "recordColumns": "topic,partition,offset,key,value"}
    else:
        frame = (source.option("reader", reader).load()
                 .selectExpr("topic", "partition", "offset", "key", "value"))
        sink = {}
    query = (frame.writeStream.format("kafka-direct-postgres").option("dsn", postgres.dsn)
             .option("schema", schema).option("table", table).options(**link)
             .option("columns", TABLE_COLUMNS)
             .option("offsetColumns", "topic,kafka_partition,kafka_offset").options(**sink)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    return query.exception(), [p.batchId for p in query.recentProgress]


@pytest.mark.parametrize("reader", ["c", "python"])
def test_ranges_read_by_the_sink_write_what_the_records_path_writes(
        spark_session, kafka, kafka_topic, postgres, pg_schema, tmp_path, reader):
    # The seed is in every failure's message; KAFKA_DIRECT_DIFFERENTIAL_SEED runs it again.
    seed = int(os.environ.get("KAFKA_DIRECT_DIFFERENTIAL_SEED") or random.randrange(2**32))
    topic = kafka_topic(partitions=PARTITIONS)
    committed = produce_random(kafka, topic, seed)
    ends = {str(p): high for p, (_, high) in
            kafka.end_offsets(topic, range(PARTITIONS)).items()}
    # Transaction markers and aborted records: offsets without a record to write.
    assert sum(ends.values()) > sum(map(len, committed.values())), seed
    tables = {}
    for ranges, table in ((False, "records"), (True, "ranges")):
        create_table(postgres, pg_schema, table)
        error, batches = ingest(spark_session, kafka, postgres, pg_schema, topic,
                                tmp_path / table, ranges=ranges, reader=reader, table=table)
        assert error is None, (seed, table, error)
        assert len(set(batches)) >= 2, (seed, table, batches)  # several batches
        assert SourceLink(postgres.dsn, table, pg_schema).committed() == {topic: ends}, (
            seed, table)
        tables[table] = rows_of(postgres, pg_schema, table)
    assert tables["ranges"] == tables["records"], seed
    written = tables["ranges"]
    assert len({(t, p, o) for t, p, o, _, _ in written}) == len(written), seed  # once each
    for partition in range(PARTITIONS):
        assert [(k, v) for t, p, _, k, v in written if p == partition] == committed[
            partition], (seed, partition)
    assert {t for t, _, _, _, _ in written} <= {topic}
