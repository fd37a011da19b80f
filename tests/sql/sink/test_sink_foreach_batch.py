"""``foreachBatch(foreach_batch_sink(...))``: exactly once into PostgreSQL, in any output mode.

Spark refuses ``outputMode("update")`` for Python sinks; through ``foreachBatch`` each
micro-batch is a batch write committed once per (query id, batch id), on the real Spark
and PostgreSQL.
"""

import os
import re
import uuid

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql import foreach_batch_sink
from kafka_direct.sql.sink.postgres_sink import PostgresSink, SinkCommitMessage
from kafka_direct.task_errors import carried_error
from tests.sql.link.test_sink_link import CountingSource
from tests.sql.sink.test_sink_protocol import stage
from tests.sql.sink.test_sink_stream import (
    counts,
    execute,
    expected,
    finish,
    numbers,
    rows_of,
    staging_left,
)

ROWS = 10


def run_once(df, sink, checkpoint, output="append"):
    """One availableNow run of ``df`` through ``foreachBatch(sink)``; the finished query."""
    return finish(df.writeStream.outputMode(output).foreachBatch(sink)
                  .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
                  .start())


def commits(postgres, schema):
    return execute(postgres, f'SELECT query_id, batch_id FROM "{schema}".'
                   "kafka_direct_sink_commits")


@pytest.mark.parametrize(("output", "key"), [("update", "k"), ("complete", None)])
def test_aggregations_upsert_or_replace_each_batch_once(spark_session, postgres, pg_schema,
                                                        tmp_path, output, key):
    primary = " PRIMARY KEY" if key else ""
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (k bigint{primary}, n bigint)')
    options = {"keyColumns": key} if key else {}
    sink = foreach_batch_sink(dsn=postgres.dsn, schema=pg_schema, table="target", columns="k,n",
                              mode=output, **options)
    for run in range(2):
        query = run_once(counts(spark_session), sink, tmp_path / "chk", output=output)
        assert query.exception() is None
        seen = ROWS * (run + 1)
        assert rows_of(postgres, pg_schema, columns="k, n") == [
            (k, len(range(k, seen, 3))) for k in range(3)]
    assert commits(postgres, pg_schema) == [(str(query.id), 1)]
    assert staging_left(postgres, pg_schema) == (0, 0)


def test_a_batch_run_again_after_a_restart_writes_nothing_twice(spark_session, postgres,
                                                                 pg_schema, tmp_path):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    sink = foreach_batch_sink({"dsn": postgres.dsn, "schema": pg_schema, "table": "target",
                               "mode": "append"})
    checkpoint = tmp_path / "chk"
    assert run_once(numbers(spark_session), sink, checkpoint).exception() is None
    assert rows_of(postgres, pg_schema) == expected(0, ROWS)
    # As if the driver died after the function committed batch 0, before Spark's commit log.
    for name in ("0", ".0.crc"):
        os.remove(checkpoint / "commits" / name)
    query = run_once(numbers(spark_session), sink, checkpoint)
    assert query.exception() is None
    batches = [p["batchId"] for p in query.recentProgress]
    assert 0 in batches  # Spark really ran batch 0 again
    assert rows_of(postgres, pg_schema) == expected(0, ROWS * len(set(batches)))


def test_a_lost_checkpoint_resumes_from_the_offset_store(spark_session, postgres, pg_schema,
                                                         tmp_path):
    spark_session.dataSource.register(CountingSource)
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    link = {"offsetStore.name": "fb", "offsetStore.schema": pg_schema}
    sink = foreach_batch_sink(dsn=postgres.dsn, schema=pg_schema, table="target",
                              mode="append", **link)

    def run(checkpoint, cap):
        reader = (spark_session.readStream.format("sink-test-counter").option("cap", cap)
                  .option("offsetStore.dsn", postgres.dsn))
        for key, value in link.items():
            reader = reader.option(key, value)
        query = (reader.load().writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="100 milliseconds").start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None

    run(tmp_path / "first", 10)
    assert rows_of(postgres, pg_schema) == expected(0, 10)
    run(tmp_path / "second", 18)  # a fresh checkpoint: starts after the stored offsets
    assert rows_of(postgres, pg_schema) == expected(0, 18)


def test_called_outside_a_streaming_query_it_refuses(spark_session, postgres, pg_schema):
    sink = foreach_batch_sink(dsn=postgres.dsn, schema=pg_schema, table="target",
                              mode="append")
    with pytest.raises(ConfigurationError, match="foreachBatch"):
        sink(spark_session.range(3), 0)


def misuses(postgres, schema):
    def sink(table="target", **options):
        return foreach_batch_sink(dsn=postgres.dsn, schema=schema, table=table, mode="append",
                                  **options)

    def twice(df, batchId):
        sink()(df.filter("id % 2 = 0"), batchId)
        sink()(df.filter("id % 2 = 1"), batchId)

    def other_batch(df, batchId):
        sink()(df, batchId + 1)

    def two_linked(df, batchId):
        link = {"offsetStore.name": "s", "offsetStore.schema": schema}
        sink(**link)(df, batchId)
        sink("other", **link)(df, batchId)

    return {"twice": (twice, "written to .* already in this run"),
            "other batch": (other_batch, "given batch id 1 while Spark runs micro-batch 0"),
            "two linked": (two_linked, "is linked to .*target in this query already")}


@pytest.mark.parametrize("misuse", ["twice", "other batch", "two linked"])
def test_misuses_that_would_lose_rows_are_refused(spark_session, postgres, pg_schema,
                                                  tmp_path, misuse):
    for table in ("target", "other"):
        execute(postgres, f'CREATE TABLE "{pg_schema}".{table} (id bigint, v text)')
    function, message = misuses(postgres, pg_schema)[misuse]
    df = numbers(spark_session)
    if misuse == "two linked":  # a source recording its plans in the store
        spark_session.dataSource.register(CountingSource)
        df = (spark_session.readStream.format("sink-test-counter").option("cap", 4)
              .option("offsetStore.dsn", postgres.dsn).option("offsetStore.name", "s")
              .option("offsetStore.schema", pg_schema).load())
    query = run_once(df, function, tmp_path / "chk")
    assert re.search(message, str(query.exception())), str(query.exception())


def test_a_write_of_no_partition_records_its_batch(postgres, pg_schema):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    query = str(uuid.uuid4())
    options = {"dsn": postgres.dsn, "schema": pg_schema, "table": "target",
               "microBatch.queryId": query, "microBatch.batchId": "4"}
    PostgresSink(options).writer(schema, False).commit([])
    assert commits(postgres, pg_schema) == [(query, 4)]
    # The same batch again, now with rows (a re-run seeing other data): nothing written.
    writer = PostgresSink(options).writer(schema, False)
    writer.commit([SinkCommitMessage(stage(writer.options, query, 4, 0, expected(0, 3)))])
    assert rows_of(postgres, pg_schema) == []
    assert staging_left(postgres, pg_schema) == (0, 0)


def test_micro_batch_options_are_refused_on_write_stream(postgres, pg_schema):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink = PostgresSink({"dsn": postgres.dsn, "schema": pg_schema, "table": "target",
                         "microBatch.queryId": "q", "microBatch.batchId": "1"})
    with pytest.raises(Exception) as failure:
        sink.streamWriter(schema, False)
    error = carried_error(failure.value)
    assert isinstance(error, ConfigurationError) and "foreachBatch" in str(error)
