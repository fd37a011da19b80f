"""The sink reading offset ranges itself: the source's ``emit=offsetRanges`` on real services.

Kafka -> ``kafka-direct`` (``emit=offsetRanges``) -> ``kafka-direct-postgres`` with
``kafka.*`` options: the source's tasks hand on the batch's offset ranges, the sink's tasks
read their records and COPY them with their claims. Checked against the records path
(the same query with the records as rows) on the same topic: the same table.
"""

from kafka_direct.sql.link.source_side import SourceLink
from tests.sql.sink.test_sink_stream import execute

TABLE_COLUMNS = "topic,kafka_partition,kafka_offset,key,value"


def create_table(postgres, schema, table="events"):
    execute(postgres, f'CREATE TABLE "{schema}"."{table}" (topic text, kafka_partition int, '
            "kafka_offset bigint, key bytea, value bytea)")


def run(session, kafka, postgres, schema, topic, checkpoint, ranges=True, table="events",
        store="ingest", **options):
    """One AvailableNow run of the linked query; the batches' input rows."""
    link = {"offsetStore.name": store, "offsetStore.schema": schema}
    reader = (session.readStream.format("kafka-direct")
              .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "20").option("offsetStore.dsn", postgres.dsn)
              .options(**link))
    if ranges:
        frame = reader.option("emit", "offsetRanges").load()
        sink = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
                "recordColumns": "topic,partition,offset,key,value"}
    else:
        frame = reader.load().selectExpr("topic", "partition", "offset", "key", "value")
        sink = {}
    writer = (frame.writeStream.format("kafka-direct-postgres").option("dsn", postgres.dsn)
              .option("schema", schema).option("table", table).options(**link)
              .option("columns", TABLE_COLUMNS)
              .option("offsetColumns", "topic,kafka_partition,kafka_offset")
              .options(**sink).options(**options)
              .option("checkpointLocation", str(checkpoint)))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(120)
    error = query.exception()
    return error, [p.numInputRows for p in query.recentProgress]


def rows_of(postgres, schema, table="events"):
    rows = execute(postgres, "SELECT topic, kafka_partition, kafka_offset, key, value FROM "
                   f'"{schema}"."{table}" ORDER BY 1, 2, 3')
    return [(t, p, o, None if k is None else bytes(k), None if v is None else bytes(v))
            for t, p, o, k, v in rows]


def test_ranges_are_read_by_the_sink_and_written_once(spark_session, kafka, kafka_topic,
                                                      postgres, pg_schema, tmp_path):
    create_table(postgres, pg_schema)
    topic = kafka_topic(partitions=2)
    for partition in range(2):
        kafka.produce(topic, [f"{partition}:{i}".encode() for i in range(25)],
                      partition=partition)
    error, _ = run(spark_session, kafka, postgres, pg_schema, topic, tmp_path / "a")
    assert error is None
    link = SourceLink(postgres.dsn, "ingest", pg_schema)
    assert link.committed() == {topic: {"0": 25, "1": 25}}
    assert [(p, o, v) for _, p, o, _, v in rows_of(postgres, pg_schema)] == [
        (p, o, f"{p}:{o}".encode()) for p in range(2) for o in range(25)]
    # A lost checkpoint: the next run resumes from the stored offsets.
    for partition in range(2):
        kafka.produce(topic, [f"{partition}:{i}".encode() for i in range(25, 30)],
                      partition=partition)
    error, _ = run(spark_session, kafka, postgres, pg_schema, topic, tmp_path / "b")
    assert error is None
    assert link.committed() == {topic: {"0": 30, "1": 30}}
    assert [(p, o) for _, p, o, _, _ in rows_of(postgres, pg_schema)] == [
        (p, o) for p in range(2) for o in range(30)]
