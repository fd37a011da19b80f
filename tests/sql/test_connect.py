"""The source and the sink over Spark Connect: a local Connect server in its own JVM.

The client here has no SparkContext of its own for these queries: the classes are registered
through the Connect session and run in the server's Python workers. The same end-to-end
checks as on classic Spark: exact rows from a batch read, and a streaming query whose
checkpoint directory is lost resuming from the offsets stored with the rows.
"""

import pytest

from kafka_direct.sql import register
from tests.sql.link.test_sink_kafka import lost_checkpoint_resumes


@pytest.fixture(scope="module")
def remote(connect_session):
    register(connect_session)
    return connect_session


def test_the_session_is_a_connect_one(remote):
    assert type(remote).__module__ == "pyspark.sql.connect.session"


def test_batch_read_gives_exact_rows_over_connect(remote, kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    for partition in range(3):
        kafka.produce(topic, [f"{partition}:{i}".encode() for i in range(20)],
                      keys=[f"k{i}".encode() for i in range(20)], partition=partition)
    frame = (remote.read.format("kafka-direct")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", topic)
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    assert frame.columns[:7] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                 "timestampType"]
    rows = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value))
                  for r in frame.collect())
    assert rows == [(p, o, f"k{o}".encode(), f"{p}:{o}".encode())
                    for p in range(3) for o in range(20)]


def test_a_lost_checkpoint_resumes_from_postgres_over_connect(remote, kafka, kafka_topic,
                                                              postgres, pg_schema, tmp_path):
    lost_checkpoint_resumes(remote, kafka, kafka_topic(partitions=2), postgres, pg_schema,
                            tmp_path)


def test_a_bad_option_is_named_over_connect(remote, kafka):
    frame = (remote.read.format("kafka-direct")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers).load())
    # The error reaches the client as Spark's, with our message (and no traceback of ours).
    with pytest.raises(Exception, match="subscribe") as raised:
        frame.collect()
    assert "ConfigurationError" in str(raised.value)


def test_foreach_batch_sink_says_it_needs_classic_spark_over_connect(remote, postgres,
                                                                    pg_schema, tmp_path):
    from kafka_direct.sql import foreach_batch_sink

    sink = foreach_batch_sink(dsn=postgres.dsn, schema=pg_schema, table="target",
                              mode="append")
    query = (remote.readStream.format("rate-micro-batch").option("rowsPerBatch", 3).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception) as failure:
        query.awaitTermination(120)
    assert "needs classic Spark" in str(failure.value)
    assert postgres.dsn not in str(failure.value)


def test_offset_ranges_read_by_the_sink_over_connect(remote, kafka, kafka_topic, postgres,
                                                     pg_schema, tmp_path):
    from kafka_direct.sql.link.source_side import SourceLink
    from tests.sql.sink.test_sink_range_reads import create_table, rows_of, run

    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=2)
    for partition in range(2):
        kafka.produce(topic, [f"{partition}:{i}".encode() for i in range(25)],
                      partition=partition)
    error, _ = run(remote, kafka, postgres, pg_schema, topic, tmp_path / "a")
    assert error is None, error
    assert SourceLink(postgres.dsn, "ingest", pg_schema).committed() == {
        topic: {"0": 25, "1": 25}}
    assert [(p, o) for _, p, o, _, _ in rows_of(postgres, pg_schema)] == [
        (p, o) for p in range(2) for o in range(25)]
