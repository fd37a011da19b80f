"""The sink keeps a linked source's offsets in PostgreSQL: a lost checkpoint loses nothing.

A trivial counting source stands for the kafka-direct source: its offsets are
``{"t": {"0": n}}``, it records each batch's plan through SourceLink in ``partitions()``,
binds it to the batch in ``read()`` and starts from the store's offsets when the query has
no checkpoint.
"""

import sys

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct.errors import OffsetMismatchError
from kafka_direct.sql.link.source_side import SourceLink, bind_plan
from kafka_direct.task_errors import carried_error
from tests.sql.sink.test_sink_stream import execute, rows_of

# The source runs in Spark's Python workers, which may not import the tests package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

STEP = 4


class CountingReader(DataSourceStreamReader):
    def __init__(self, options):
        self.link = SourceLink.from_options(options)
        self.cap = int(options["cap"])
        self.ignoreStore = options.get("ignoreStore") == "true"

    def getDefaultReadLimit(self):
        self.link.hold()  # at every start, in the source's own driver process
        return ReadAllAvailable()

    def initialOffset(self):
        committed = None if self.ignoreStore else self.link.committed()
        return committed or {"t": {"0": 0}}

    def latestOffset(self, start, limit):
        return {"t": {"0": min(start["t"]["0"] + STEP, self.cap)}}

    def partitions(self, start, end):
        plan = self.link.record_plan(start, end)
        return [InputPartition((start["t"]["0"], end["t"]["0"], plan))]

    def read(self, partition):
        first, last, plan = partition.value
        bind_plan(self.link, plan)  # the sink applies the plan its batch read
        for i in range(first, last):
            yield (i, f"v{i}")

    def stop(self):
        self.link.release()


class CountingSource(DataSource):
    @classmethod
    def name(cls):
        return "sink-test-counter"

    def schema(self):
        return "id long, v string"

    def streamReader(self, schema):
        return CountingReader(self.options)


@pytest.fixture
def session(spark_session):
    spark_session.dataSource.register(CountingSource)
    return spark_session


def run(session, postgres, schema, store, checkpoint, cap, **source):
    link = {"offsetStore.name": store, "offsetStore.schema": schema}
    reader = session.readStream.format("sink-test-counter").option("cap", cap)
    for key, value in {**link, "offsetStore.dsn": postgres.dsn, **source}.items():
        reader = reader.option(key, value)
    writer = (reader.load().writeStream.format("kafka-direct-postgres")
              .option("dsn", postgres.dsn).option("schema", schema).option("table", "target")
              .option("checkpointLocation", str(checkpoint))
              .trigger(processingTime="100 milliseconds"))
    for key, value in link.items():
        writer = writer.option(key, value)
    query = writer.start()
    try:
        query.processAllAvailable()
    except Exception:
        assert query.exception() is not None
    finally:
        query.stop()
    return query


def test_a_lost_checkpoint_resumes_from_the_store(session, postgres, pg_schema, tmp_path):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    first = run(session, postgres, pg_schema, "counter", tmp_path / "a", cap=10)
    assert first.exception() is None
    assert rows_of(postgres, pg_schema) == [(i, f"v{i}") for i in range(10)]
    link = SourceLink(postgres.dsn, "counter", pg_schema)
    assert link.committed() == {"t": {"0": 10}}
    # The checkpoint directory is gone: a new query starts from the store's offsets.
    second = run(session, postgres, pg_schema, "counter", tmp_path / "b", cap=17)
    assert second.exception() is None and second.id != first.id
    assert rows_of(postgres, pg_schema) == [(i, f"v{i}") for i in range(17)]
    assert link.committed() == {"t": {"0": 17}}


def test_a_source_not_starting_from_the_store_is_refused(session, postgres, pg_schema,
                                                         tmp_path):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    assert run(session, postgres, pg_schema, "counter", tmp_path / "a", cap=6).exception() \
        is None
    query = run(session, postgres, pg_schema, "counter", tmp_path / "b", cap=9,
                ignoreStore="true")
    error = carried_error(query.exception())
    assert isinstance(error, OffsetMismatchError)
    assert (error.group, error.stored, error.fromOffset) == ("counter", 6, 0)
    assert "offsetStore.name" in str(error)
    assert rows_of(postgres, pg_schema) == [(i, f"v{i}") for i in range(6)]
