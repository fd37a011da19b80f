"""The sink reading offset ranges, beyond the plain path, on real services.

Ranges split across tasks and packed into one, a transactional topic with aborted
transactions over several partitions, a hand-made DataFrame of ranges written by a batch
write (with deleted offsets: failOnDataLoss), and a password in the kafka.* options of both
sides that shows in no plan, progress report or log.
"""

import pytest
from confluent_kafka import Producer

from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.range_rows import range_schema
from tests.sql.sink.test_sink_range_reads import TABLE_COLUMNS, create_table, rows_of, run

SECRET = "S3cr3t-Pw-9f2e"
RECORDS = "topic,partition,offset,key,value"


def _sink(frame, kafka, postgres, schema, **options):
    return (frame.format("kafka-direct-postgres").option("dsn", postgres.dsn)
            .option("schema", schema).option("table", "events")
            .option("columns", TABLE_COLUMNS)
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("recordColumns", RECORDS).options(**options))


@pytest.mark.parametrize("split", [{"minPartitions": "4"}, {"maxRecordsPerPartition": "7"}])
def test_a_range_split_across_tasks_is_written_once(spark_session, kafka, kafka_topic,
                                                    postgres, pg_schema, tmp_path, split):
    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [f"0:{i}".encode() for i in range(50)], partition=0)
    link = {"offsetStore.name": "s", "offsetStore.schema": pg_schema}
    frame = (spark_session.readStream.format("kafka-direct")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("emit", "offsetRanges").option("offsetStore.dsn", postgres.dsn)
             .options(**link, **split).load())
    query = (_sink(frame.writeStream, kafka, postgres, pg_schema, **link)
             .option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert sum(p.numInputRows for p in query.recentProgress) > 1  # ranges, not records
    assert SourceLink(postgres.dsn, "s", pg_schema).committed() == {topic: {"0": 50}}
    assert [o for _, _, o, _, _ in rows_of(postgres, pg_schema)] == list(range(50))


def test_a_transactional_topic_with_aborts_over_many_partitions(spark_session, kafka,
                                                                kafka_topic, postgres,
                                                                pg_schema, tmp_path):
    # Small batches over six partitions: tasks hold several ranges; every range ends on
    # gaps (markers, aborted records) that the sink's read skips.
    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=6)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    expected = []
    for t in range(8):
        producer.begin_transaction()
        for p in range(6):
            for i in range(3):
                producer.produce(topic, f"{t}:{p}:{i}".encode(), partition=p)
        producer.flush(30)
        if t % 3 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            expected += [(p, f"{t}:{p}:{i}".encode()) for p in range(6) for i in range(3)]
    error, _ = run(spark_session, kafka, postgres, pg_schema, topic, tmp_path / "a")
    assert error is None, error
    assert sorted((p, v) for _, p, _, _, v in rows_of(postgres, pg_schema)) == sorted(expected)
    stored = SourceLink(postgres.dsn, "ingest", pg_schema).committed()[topic]
    ends = kafka.end_offsets(topic, range(6))
    assert {int(p): end for p, end in stored.items()} == {p: e for p, (_, e) in ends.items()}


def test_a_hand_made_frame_of_ranges_by_a_batch_write(spark_session, kafka, kafka_topic,
                                                      postgres, pg_schema):
    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [f"v{i}".encode() for i in range(10)], partition=0)
    frame = spark_session.createDataFrame([(topic, 0, 2, 7)], range_schema())
    _sink(frame.write, kafka, postgres, pg_schema).mode("append").save()
    assert [(o, v) for _, _, o, _, v in rows_of(postgres, pg_schema)] == [
        (o, f"v{o}".encode()) for o in range(2, 7)]


def test_deleted_offsets_fail_the_sinks_read_unless_it_is_told_otherwise(
        spark_session, kafka, kafka_topic, postgres, pg_schema):
    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [f"v{i}".encode() for i in range(10)], partition=0)
    kafka.delete_records(topic, 0, 6)
    frame = spark_session.createDataFrame([(topic, 0, 0, 10)], range_schema())
    with pytest.raises(Exception, match="DataLossError"):
        _sink(frame.write, kafka, postgres, pg_schema).mode("append").save()
    assert rows_of(postgres, pg_schema) == []
    _sink(frame.write, kafka, postgres, pg_schema, failOnDataLoss="false").mode(
        "append").save()
    assert [o for _, _, o, _, _ in rows_of(postgres, pg_schema)] == [6, 7, 8, 9]


def test_a_kafka_password_shows_in_no_plan_progress_or_log(spark_session, kafka, kafka_topic,
                                                           postgres, pg_schema, tmp_path,
                                                           caplog, capfd):
    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=2)
    for partition in range(2):
        kafka.produce(topic, [f"{partition}:{i}".encode() for i in range(5)],
                      partition=partition)
    frame = (spark_session.readStream.format("kafka-direct")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("kafka.sasl.password", SECRET)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("emit", "offsetRanges").load())
    query = (_sink(frame.writeStream, kafka, postgres, pg_schema,
                   **{"kafka.sasl.password": SECRET})
             .option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert len(rows_of(postgres, pg_schema)) == 10
    out, err = capfd.readouterr()
    shown = [query._jsq.explainInternal(True), str(query.lastProgress),
             str([p.json for p in query.recentProgress]), caplog.text, out, err]
    assert not [text for text in shown if SECRET in text]
    with pytest.raises(Exception) as raised:  # an error in the sink's options
        _sink(frame.writeStream, kafka, postgres, pg_schema,
              **{"kafka.sasl.password": SECRET, "recordColumns": "nope"}).option(
            "checkpointLocation", str(tmp_path / "d")).start().awaitTermination(60)
    assert "recordColumns" in str(raised.value) and SECRET not in str(raised.value)
