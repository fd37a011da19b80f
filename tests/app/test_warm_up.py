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



def test_the_data_sources_are_looked_up_ahead_and_the_registration_imports_done(spark):
    # While the structured job makes its SparkSession: Spark's one lookup of the Python
    # data sources (the first register of any session waits for it).
    import sys

    from kafka_direct.app.warm_up import look_up_data_sources_ahead

    thread = look_up_data_sources_ahead(spark)
    thread.join(120)
    assert not thread.is_alive()
    manager = getattr(spark._jvm.org.apache.spark.sql.execution.datasources,
                      "DataSourceManager$")
    assert getattr(manager, "MODULE$").dataSourceBuilders().isDefined()
    assert "kafka_direct.sql.sink.postgres_sink" in sys.modules
    assert "kafka_direct.sql.source.kafka_source" in sys.modules


def test_a_lookup_ahead_that_fails_is_left_to_the_registration(caplog):
    import logging

    from kafka_direct.app.warm_up import look_up_data_sources_ahead

    class Broken:  # no JVM: the registration meets what is wrong and reports it
        def __getattr__(self, name):
            raise RuntimeError("no Spark here")

    with caplog.at_level(logging.INFO, logger="kafka_direct.app.warm_up"):
        thread = look_up_data_sources_ahead(Broken())
        thread.join(30)
    assert not thread.is_alive()
    assert "failed (RuntimeError)" in caplog.text
