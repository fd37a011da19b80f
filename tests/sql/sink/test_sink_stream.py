"""``df.writeStream.format("kafka-direct-postgres")`` on the real Spark and PostgreSQL.

Rows come from Spark's ``rate-micro-batch`` source: with ``trigger(availableNow=True)``
each run of a query is one batch of exactly ``rowsPerBatch`` rows, numbered on from where
the checkpoint left off, so every test knows the exact rows each batch must leave.
"""

import os
import uuid

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.staging import STAGED_TABLE
from kafka_direct.sql.sink.postgres_sink import PostgresSink, SinkCommitMessage
from kafka_direct.task_errors import carried_error
from tests.sql.sink.test_sink_protocol import stage

ROWS = 10


def rows_of(postgres, schema, table="target", columns="id, v"):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT {columns} FROM "{schema}"."{table}" ORDER BY 1, 2')
        rows = cursor.fetchall()
    connection.close()
    return rows


def execute(postgres, statement, *params):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall() if cursor.description else None
    connection.close()
    return rows


def staging_left(postgres, schema):
    registered = execute(postgres, f'SELECT count(*) FROM "{schema}".{STAGED_TABLE}')[0][0]
    tables = execute(postgres, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON "
                     "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname LIKE "
                     "'kafka\\_direct\\_stage\\_%%'", schema)[0][0]
    return registered, tables


def numbers(spark_session, partitions=2):
    return (spark_session.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", ROWS).option("numPartitions", partitions).load()
            .select(F.col("value").alias("id"), F.concat(F.lit("v"), F.col("value"))
                    .alias("v")))


def expected(first, count):
    return [(i, f"v{i}") for i in range(first, first + count)]


def run_once(df, postgres, schema, checkpoint, mode="append", output="append", **options):
    """One availableNow run of ``df`` into ``schema.target``; returns the finished query."""
    writer = (df.writeStream.format("kafka-direct-postgres").outputMode(output)
              .option("dsn", postgres.dsn).option("schema", schema).option("table", "target")
              .option("mode", mode).option("checkpointLocation", str(checkpoint)))
    for key, value in options.items():
        writer = writer.option(key, str(value))
    return finish(writer.trigger(availableNow=True).start())


def finish(query):
    """``query`` once it ended (an availableNow run); a failure stays in its exception()."""
    try:
        query.awaitTermination(120)
    except Exception:  # a failed query: the test looks at query.exception()
        assert query.exception() is not None
    assert not query.isActive
    return query


@pytest.fixture
def target(postgres, pg_schema):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    return pg_schema


def test_append_exactly_once_across_runs(spark_session, postgres, target, tmp_path):
    df = numbers(spark_session)
    for run in range(2):
        query = run_once(df, postgres, target, tmp_path / "chk")
        assert query.exception() is None
        assert rows_of(postgres, target) == expected(0, ROWS * (run + 1))
    assert staging_left(postgres, target) == (0, 0)
    recorded = execute(postgres, f'SELECT query_id, batch_id, rows FROM "{target}".'
                       "kafka_direct_sink_commits")
    assert recorded == [(str(query.id), 1, ROWS)]


def test_a_task_failing_its_first_attempt_leaves_no_duplicate(spark_session, postgres, target,
                                                             tmp_path):
    @F.udf("string")
    def flaky(value):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("first attempt of partition 0 dies")
        return value

    df = numbers(spark_session).select("id", flaky("v").alias("v"))
    query = run_once(df, postgres, target, tmp_path / "chk")
    assert query.exception() is None
    assert rows_of(postgres, target) == expected(0, ROWS)
    assert staging_left(postgres, target) == (0, 0)


def test_a_batch_run_again_after_a_restart_writes_nothing_twice(spark_session, postgres,
                                                                 target, tmp_path):
    checkpoint = tmp_path / "chk"
    df = numbers(spark_session)
    assert run_once(df, postgres, target, checkpoint).exception() is None
    # As if the driver died after the sink committed batch 0, before Spark's commit log.
    for name in ("0", ".0.crc"):
        os.remove(checkpoint / "commits" / name)
    query = run_once(df, postgres, target, checkpoint)
    assert query.exception() is None
    batches = [p["batchId"] for p in query.recentProgress]
    assert 0 in batches  # Spark really ran batch 0 again
    assert rows_of(postgres, target) == expected(0, ROWS * len(set(batches)))
    assert staging_left(postgres, target) == (0, 0)


def test_the_writers_commit_called_twice_for_a_batch_writes_once(postgres, target):
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink = PostgresSink({"dsn": postgres.dsn, "schema": target, "table": "target"})
    writer = sink.streamWriter(schema, False)
    query = str(uuid.uuid4())
    messages = [SinkCommitMessage(stage(writer.options, query, 3, p, expected(5 * p, 5)))
                for p in range(2)]
    writer.commit(messages, 3)
    sink.streamWriter(schema, False).commit(messages, 3)  # the commit process is new each time
    assert rows_of(postgres, target) == expected(0, 10)


def fail_partition_1_once_partition_0_staged(dsn, registry):
    """A UDF failing partition 1 only after partition 0 staged its rows (however loaded
    the machine): the batch fails with rows staged."""
    @F.udf("string")
    def doomed(value):
        import time

        import psycopg2
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                connection = psycopg2.connect(dsn)
                try:
                    with connection.cursor() as cursor:
                        cursor.execute(f"SELECT count(*) FROM {registry}")
                        if cursor.fetchone()[0]:
                            break
                except psycopg2.Error:  # the registry is not there yet
                    pass
                finally:
                    connection.close()
                time.sleep(0.1)
            raise RuntimeError("partition 1 always fails")
        return value

    return doomed


def test_a_failed_batch_writes_nothing_and_its_staging_goes_with_its_commit(
        spark_session, postgres, target, tmp_path):
    doomed = fail_partition_1_once_partition_0_staged(postgres.dsn,
                                                      f'"{target}".{STAGED_TABLE}')
    checkpoint = tmp_path / "chk"
    query = run_once(numbers(spark_session).select("id", doomed("v").alias("v")), postgres,
                     target, checkpoint)
    assert query.exception() is not None
    assert rows_of(postgres, target) == []
    # The batch run again after the restart commits once and drops every staged attempt
    # of the batch, the failed run's included.
    query = run_once(numbers(spark_session), postgres, target, checkpoint)
    assert query.exception() is None
    batches = sorted({p["batchId"] for p in query.recentProgress})
    assert batches[0] == 0
    assert rows_of(postgres, target) == expected(0, ROWS * len(batches))
    assert staging_left(postgres, target) == (0, 0)


def test_a_task_still_running_when_its_batch_aborts_leaves_its_staging_to_the_batchs_commit(
        spark_session, postgres, target, tmp_path):
    """A task Spark has not stopped yet may stage after the abort (its batch failed in
    another task): those rows go with the batch's commit after the restart."""
    @F.udf("string")
    def straggling(value):
        import time

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            raise RuntimeError("partition 1 always fails")
        time.sleep(0.3)  # partition 0 stages after the abort
        return value

    checkpoint = tmp_path / "chk"
    query = run_once(numbers(spark_session).select("id", straggling("v").alias("v")),
                     postgres, target, checkpoint)
    assert query.exception() is not None
    assert rows_of(postgres, target) == []
    query = run_once(numbers(spark_session), postgres, target, checkpoint)
    assert query.exception() is None
    batches = sorted({p["batchId"] for p in query.recentProgress})
    assert rows_of(postgres, target) == expected(0, ROWS * len(batches))
    assert staging_left(postgres, target) == (0, 0)


def counts(spark_session):
    return (spark_session.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS)
            .load().groupBy((F.col("value") % 3).alias("k")).count())


@pytest.mark.parametrize("mode", ["complete", "update"])
def test_aggregations_replace_or_upsert(spark_session, postgres, pg_schema, tmp_path, mode):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (k bigint PRIMARY KEY, n bigint)')
    options = {"columns": "k,n"}
    if mode == "update":
        options["keyColumns"] = "k"
    for run in range(2):
        query = run_once(counts(spark_session), postgres, pg_schema, tmp_path / "chk",
                         mode=mode, output="complete", **options)
        assert query.exception() is None
        seen = ROWS * (run + 1)
        assert rows_of(postgres, pg_schema, columns="k, n") == [
            (k, len(range(k, seen, 3))) for k in range(3)]


def test_update_output_mode_is_refused_by_spark_and_the_fix_is_known(spark_session, postgres,
                                                                     pg_schema, tmp_path):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (k bigint PRIMARY KEY, n bigint)')
    query = run_once(counts(spark_session), postgres, pg_schema, tmp_path / "chk",
                     mode="update", output="update", columns="k,n", keyColumns="k")
    # Spark 4.3 has no update mode for Python sinks (see the module's limits).
    assert "does not support Update mode" in str(query.exception())


def test_a_bad_option_fails_the_query_with_a_typed_error(spark_session, postgres, pg_schema,
                                                         tmp_path):
    query = run_once(numbers(spark_session), postgres, pg_schema, tmp_path / "chk")
    error = carried_error(query.exception())
    assert isinstance(error, ConfigurationError)
    assert "does not exist" in str(error) and "createTable=true" in str(error)
    assert postgres.dsn not in str(query.exception())


def test_create_table_and_types_round_trip(spark_session, postgres, pg_schema, tmp_path):
    df = (spark_session.readStream.format("rate-micro-batch").option("rowsPerBatch", 3).load()
          .select(F.col("value").alias("id"), F.col("timestamp").alias("at"),
                  F.col("value").cast("string").cast("binary").alias("raw"),
                  F.array(F.col("value"), F.lit(None).cast("long")).alias("list"),
                  F.create_map(F.lit("k"), F.col("value") / 2).alias("map"),
                  F.when(F.col("value") == 1, F.lit(None)).otherwise(F.lit('a,"b"\n'))
                  .alias("text"), F.col("value").cast("decimal(10,2)").alias("amount")))
    query = run_once(df, postgres, pg_schema, tmp_path / "chk", createTable="true")
    assert query.exception() is None
    rows = rows_of(postgres, pg_schema, columns="id, at, raw, list, map, text, amount")
    assert [(r[0], bytes(r[2]), r[3], r[4], r[5], str(r[6])) for r in rows] == [
        (0, b"0", [0, None], {"k": 0.0}, 'a,"b"\n', "0.00"),
        (1, b"1", [1, None], {"k": 0.5}, None, "1.00"),
        (2, b"2", [2, None], {"k": 1.0}, 'a,"b"\n', "2.00")]
    assert rows[0][1].utcoffset() is not None  # a timestamptz column


def test_batch_writes_append_then_overwrite(spark_session, postgres, target):
    df = spark_session.createDataFrame(expected(0, 7), "id long, v string").repartition(3)
    options = {"dsn": postgres.dsn, "schema": target, "table": "target"}
    df.write.format("kafka-direct-postgres").options(**options).mode("append").save()
    assert rows_of(postgres, target) == expected(0, 7)
    small = spark_session.createDataFrame(expected(100, 2), "id long, v string")
    small.write.format("kafka-direct-postgres").options(**options).mode("overwrite").save()
    assert rows_of(postgres, target) == expected(100, 2)
    assert staging_left(postgres, target) == (0, 0)

