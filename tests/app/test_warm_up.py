"""The ingest job's Python workers, warmed before its first batch."""

from kafka_direct.app.warm_up import warm_workers


def test_a_worker_per_task_slot_is_started_with_its_connection(spark, postgres):
    dsn = postgres.dsn
    warmed = warm_workers(spark, dsn)
    assert sorted(index for index, _, _ in warmed) == list(range(spark.defaultParallelism))
    assert all(connected for _, _, connected in warmed)

    def cached(index, items):
        from kafka_direct.postgres.connection import Database, _connections

        list(items)
        yield Database(dsn) in _connections

    # The workers PySpark reuses for the next job hold the connection already.
    again = spark.parallelize(range(spark.defaultParallelism), spark.defaultParallelism) \
        .mapPartitionsWithIndex(cached).collect()
    assert any(again)


def test_a_database_that_does_not_answer_is_left_to_the_first_batch(spark):
    warmed = warm_workers(spark, "host=127.0.0.1 port=9 dbname=x connect_timeout=2")
    assert warmed and not any(connected for _, _, connected in warmed)
