"""Review of direct writes (``offsetColumns``): defects found by experiment.

Each test names its finding and fails on the code it was written against; it drives
``write_direct`` (a write task) and ``commit_batch`` (the driver) against the real
PostgreSQL, as tests/sql/sink/test_sink_direct.py does.
"""

import multiprocessing
import threading

import pyarrow as pa

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres import direct_write
from kafka_direct.postgres.direct_write import write_direct
from kafka_direct.sql.sink.commit import commit_batch
from kafka_direct.sql.sink.options import parse_options
from kafka_direct.sql.sink.target import prepare_target
from tests.sql.sink.test_sink_direct import (
    FIELDS,
    OFFSETS,
    batches,
    direct_target,
    make_sink,
    query_id,
    records,
    table_rows,
    write,
)


def _sql(postgres, statement, params=()):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall() if cursor.description else None
    connection.close()
    return rows


def _no_key_table(postgres, schema, table):
    # A target without a unique key: a record written twice shows as two rows.
    _sql(postgres, f'CREATE TABLE "{schema}"."{table}" (topic text, kafka_partition int, '
                   "kafka_offset bigint, v text)")


def _held_zombie(options, query, rows, inside, go, answers):
    """A write task whose iterator stalls after its first record batch (a slow executor)."""
    def stalled():
        yield from batches(rows[:2])
        inside.set()  # the second batch is pulled inside the task's transaction
        go.wait(60)
        yield from batches(rows[2:])
    try:
        answers.put(write_direct(direct_target(options), query, 0, 0, stalled()))
    except Exception as error:  # reported by the test
        answers.put(repr(error))


# Finding 1 (duplication): the commit-row fence does not exist for a query's first batch.
# The task reads the commit row FOR SHARE, but before the query's first commit there is no
# row to lock, so the driver's first commit (which INSERTs the row) does not wait for a
# write task still running. A zombie (a speculative or killed attempt still running) of
# batch 0 then finds its twin's claims already deleted by that commit and writes every row
# again; without an offset store and without a unique key on the target nothing stops it.
def test_review_a_zombie_of_the_first_batch_writes_nothing_twice(postgres, pg_schema):
    _no_key_table(postgres, pg_schema, "zombie")
    sink = make_sink(postgres, pg_schema, table="zombie")
    query = query_id()
    rows = records(0, 0, 4)
    context = multiprocessing.get_context("spawn")
    inside, go, answers = context.Event(), context.Event(), context.Queue()
    zombie = context.Process(target=_held_zombie,
                             args=(sink, query, rows, inside, go, answers))
    zombie.start()
    try:
        assert inside.wait(60), "the zombie attempt never started writing"
        winner = write(sink, query, 0, 0, rows)  # the attempt Spark saw finish
        # The zombie goes on a moment later, while the commit runs (the commit waits for
        # the zombie's transaction, which holds the query's commit row).
        threading.Timer(2.0, go.set).start()
        assert commit_batch(sink, 0, [winner]).rows == 4  # the query's first commit
    finally:
        go.set()
    late = answers.get(timeout=60)
    zombie.join(30)
    # The zombie must write nothing (skipped, or refused): every record once.
    assert table_rows(postgres, sink) == rows, late


# Finding 3 (memory, docs): "a task whose first rows meet no claim streams its rows
# (nothing kept in memory)" does not hold: any claim of the table that belongs to another
# batch or query, of any topic or partition, sends every task to the careful path, which
# keeps ALL its rows in memory. Such claims are common: a failed batch's claims without an
# offset store stay until deleted by hand (docs), and two queries writing one table (say
# one topic each) always see each other's in-flight claims.
def test_review_an_unrelated_claim_does_not_make_every_task_keep_its_rows(postgres, pg_schema,
                                                                         monkeypatch):
    sink = make_sink(postgres, pg_schema)
    # Another query's batch that never commits, on another topic.
    write(sink, query_id(), 0, 0, records(0, 0, 3, topic="other"))
    kept = []
    careful = direct_write._careful

    def spy(cursor, target, attempt, held):
        kept.append(sum(b.num_rows for b in held))
        return careful(cursor, target, attempt, held)
    monkeypatch.setattr(direct_write, "_careful", spy)
    attempt = write(sink, query_id(), 0, 0, records(0, 0, 1000), chunks=10)
    assert attempt.rows == 1000
    assert kept == [], f"rows of topic t kept in memory ({kept}) for a claim of topic other"


def _string_offset_sink(postgres, schema):
    from pyspark.sql.types import IntegerType, StringType

    _sql(postgres, f'CREATE TABLE "{schema}".texty (topic text, kafka_partition int, '
                   "kafka_offset text, v text)")
    given = {"dsn": postgres.dsn, "table": "texty", "schema": schema, "offsetColumns": OFFSETS}
    types = [StringType(), IntegerType(), StringType(), StringType()]
    return prepare_target(parse_options(given, FIELDS, False),
                          list(zip(FIELDS, types, strict=True)))


def _string_offsets(offsets):
    return [pa.record_batch({
        "topic": pa.array(["t"] * len(offsets), pa.string()),
        "kafka_partition": pa.array([0] * len(offsets), pa.int32()),
        "kafka_offset": pa.array([str(o) for o in offsets], pa.string()),
        "v": pa.array([f"v{o}" for o in offsets], pa.string())})]


# Finding 4 (bad option accepted; wrong claims): an offset column that is not an integer
# (a string, as after CAST(offset AS STRING)) is accepted; claims are then computed from
# the strings' lexicographic min and max: offsets 1, 2, 10 claim [1, 3), leaving offset 10
# unclaimed, and a retried attempt fails with a raw pyarrow error. The sink should refuse
# such a column before the first batch, with a ConfigurationError naming offsetColumns.
def test_review_a_non_integer_offset_column_is_refused_up_front(postgres, pg_schema):
    try:
        sink = _string_offset_sink(postgres, pg_schema)
    except ConfigurationError as refused:
        assert refused.setting == "offsetColumns"
        return
    query = query_id()
    first = write_direct(direct_target(sink), query, 0, 0, _string_offsets([1, 2, 10]))
    claimed = [(c.fromOffset, c.untilOffset) for c in first.claims]
    assert claimed == [(1, 11)], f"offsets 1, 2, 10 claimed as {claimed}"
