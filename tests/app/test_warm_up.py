"""The ingest job's Python workers, warmed before its first batch."""

import pytest

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


def _job_descriptions(sc):
    jobs = sc._jsc.sc().statusStore().jobsList(None)
    found = []
    for index in range(jobs.size()):
        description = jobs.apply(index).description()
        if description.isDefined():
            found.append(description.get())
    return found


def test_the_sql_engine_is_warmed_by_the_jvm_alone(spark):
    # What the JVM does once, at a query's first batch, done ahead: the parser, a compiled
    # projection, Arrow's allocator, a job of the JVM alone (no Python worker).
    from kafka_direct.app.warm_up import WARM_UP_JOB, warm_sql_engine

    before = spark.getLocalProperty("spark.job.description")
    done = warm_sql_engine(spark)
    assert [name for name, _ in done] == ["parser", "codegen", "arrow", "job"]
    assert WARM_UP_JOB in _job_descriptions(spark)
    # The description was the warm-up's job's only: this thread's next jobs keep theirs.
    assert spark.getLocalProperty("spark.job.description") == before


@pytest.mark.parametrize(("ahead", "said"), [
    # The registration looks the data sources up itself, and reports what fails.
    ("look_up_data_sources_ahead", "failed (RuntimeError)"),
    # The first batch does what the warm-up did not, and reports what fails.
    ("warm_sql_engine_ahead", "stopped at the parser (RuntimeError)"),
])
def test_what_fails_ahead_is_left_to_the_step_that_needs_it(ahead, said, caplog,
                                                             monkeypatch):
    import logging

    from kafka_direct.app import warm_up

    monkeypatch.setattr(warm_up, "has_idle_core", lambda: True)

    class Broken:  # no JVM
        def __getattr__(self, name):
            raise RuntimeError("no Spark here")

    with caplog.at_level(logging.INFO, logger="kafka_direct.app.warm_up"):
        thread = getattr(warm_up, ahead)(Broken())
        thread.join(30)
    assert not thread.is_alive()
    assert said in caplog.text


def test_the_structured_job_warms_the_sql_engine_while_its_session_is_made(
        postgres, pg_schema, monkeypatch):
    import contextlib

    import kafka_direct.app.warm_up as warm_up
    from kafka_direct.app.ingest_options import IngestOptions
    from kafka_direct.app.structured_ingest import run_structured_ingest
    from kafka_direct.runtime import spark as runtime

    context = object()
    warmed = []

    class Warmed(Exception):
        pass

    @contextlib.contextmanager
    def spark_context(**kwargs):
        yield context

    def warm_sql_engine_ahead(sc):
        warmed.append(sc)
        raise Warmed  # before the session: what follows needs a real context

    monkeypatch.setattr(runtime, "spark_context", spark_context)
    monkeypatch.setattr(warm_up, "look_up_data_sources_ahead", lambda sc: None)
    monkeypatch.setattr(warm_up, "warm_sql_engine_ahead", warm_sql_engine_ahead)
    options = IngestOptions(api="structured", topics=("t",), schema=pg_schema,
                            master="local[1]")
    with pytest.raises(Warmed):
        run_structured_ingest(options, "127.0.0.1:1", postgres.dsn)
    assert warmed == [context]


@pytest.mark.parametrize(("load", "warmed"), [(0.4, True), (1.9, True), (2.0, False),
                                              (6.5, False)])
def test_the_sql_engine_is_warmed_ahead_only_with_a_core_to_spare(load, warmed, monkeypatch):
    # Beside the session's making, a warm-up pays only with a core the session does not use.
    from kafka_direct.app import warm_up

    ran = []
    monkeypatch.setattr(warm_up.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(warm_up.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(warm_up, "warm_sql_engine", lambda sc: ran.append(sc))
    thread = warm_up.warm_sql_engine_ahead("the context")
    if thread is not None:
        thread.join(30)
    assert (thread is not None) is warmed
    assert ran == (["the context"] if warmed else [])
