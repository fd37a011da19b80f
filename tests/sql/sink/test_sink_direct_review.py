"""Review of direct writes (``offsetColumns``): defects found by experiment.

Each test names its finding and fails on the code it was written against; it drives
``write_direct`` (a write task) and ``commit_batch`` (the driver) against the real
PostgreSQL, as tests/sql/sink/test_sink_direct.py does.
"""

import multiprocessing
import uuid

import pyarrow as pa
import pytest

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
        assert commit_batch(sink, 0, [winner]).rows == 4  # the query's first commit
    finally:
        go.set()
    late = answers.get(timeout=60)
    zombie.join(30)
    # The zombie must write nothing (skipped, or refused): every record once.
    assert table_rows(postgres, sink) == rows, late


# Finding 2 (upsert order): "two tasks holding pieces of one partition's range cannot
# reorder its updates" does not hold once a key also appears in another Kafka partition.
# The upsert keeps an existing row only when it comes from the SAME partition at a higher
# offset; a row of another partition in between makes the older piece's row win. Below,
# key "k" is written by p0 at offset 9 (piece 2), then by p1 (another task), then by p0 at
# offset 3 (piece 1, whose task finishes last): the table ends with p0's offset 3, a state
# no order of the partitions gives (p0's own updates applied as 9 then 3).
def test_review_upserts_never_apply_a_partitions_older_update_last(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, key="v")
    query = query_id()

    def keyed(at):
        return lambda offset: "k" if offset == at else f"u{offset}"
    piece1 = records(0, 0, 6, value=keyed(3))    # Spark partition 0: p0 [0, 6)
    piece2 = records(0, 6, 6, value=keyed(9))    # Spark partition 1: p0 [6, 12)
    other = records(1, 0, 3, value=keyed(1))     # Spark partition 2: p1 [0, 3)
    late = write(sink, query, 0, 1, piece2)
    middle = write(sink, query, 0, 2, other)
    early = write(sink, query, 0, 0, piece1)
    commit_batch(sink, 0, [early, late, middle])
    row = _sql(postgres, f'SELECT topic, kafka_partition, kafka_offset FROM '
                         f'"{pg_schema}".target WHERE v = %s', ("k",))
    # Either partition may win, but p0's latest update of "k" is offset 9, not 3.
    assert row in ([("t", 0, 9)], [("t", 1, 1)]), row


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


def _amount_sink(postgres, schema, table, scale):
    from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType

    _sql(postgres, f'CREATE TABLE "{schema}"."{table}" (topic text, kafka_partition int, '
                   f"kafka_offset bigint, k text PRIMARY KEY, amount numeric(14, {scale}))")
    fields = [*FIELDS[:3], "k", "amount"]
    given = {"dsn": postgres.dsn, "table": table, "schema": schema, "offsetColumns": OFFSETS,
             "mode": "update", "keyColumns": "k"}
    types = [StringType(), IntegerType(), LongType(), StringType(), DecimalType(14, 4)]
    return prepare_target(parse_options(given, fields, False),
                          list(zip(fields, types, strict=True)))


def _amounts(offset, key, amount):
    import decimal

    return [pa.record_batch({
        "topic": pa.array(["t"], pa.string()),
        "kafka_partition": pa.array([0], pa.int32()),
        "kafka_offset": pa.array([offset], pa.int64()),
        "k": pa.array([key], pa.string()),
        "amount": pa.array([decimal.Decimal(amount)], pa.decimal128(14, 4))})]


# Finding 5 (silent corruption in upserts): the upsert's temporary table has a fixed name
# and is created "IF NOT EXISTS" from the FIRST target a session upserts into; it lives as
# long as the cached connection (a reused Python worker's), so an upsert into another
# table (two queries in one application, schemas with tables of the same name, a target
# whose column changed type) goes through a temporary table of the wrong column types.
# Here amounts of 4 decimals are rounded to the 2 of the first target's column, silently
# (other mismatches fail with a confusing "column ... does not exist" or cast error).
def test_review_an_upsert_uses_its_own_targets_column_types(postgres, pg_schema):
    first = _amount_sink(postgres, pg_schema, "cents", 2)
    second = _amount_sink(postgres, pg_schema, "precise", 4)
    write_direct(direct_target(first), query_id(), 0, 0, _amounts(0, "a", "1.25"))
    # The same process (one cached connection): the next task upserts into the other table.
    write_direct(direct_target(second), query_id(), 0, 0, _amounts(0, "b", "1.2345"))
    assert _sql(postgres, f'SELECT amount::text FROM "{pg_schema}".precise') == [("1.2345",)]


@pytest.fixture
def no_temp_database(postgres):
    """A database where PUBLIC may not create temporary tables, a role, and a schema."""
    name, role, password = (f"review_{uuid.uuid4().hex[:8]}", f"sink_{uuid.uuid4().hex[:8]}",
                            uuid.uuid4().hex)
    admin = postgres.connect()
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (password,))
    base = " ".join(p for p in postgres.dsn.split() if not p.startswith("dbname="))
    connection = None
    try:
        import psycopg2

        connection = psycopg2.connect(f"{base} dbname={name}")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f"REVOKE TEMPORARY ON DATABASE {name} FROM PUBLIC")
            cursor.execute("CREATE SCHEMA s")
            cursor.execute("CREATE TABLE s.target (topic text, kafka_partition int, "
                           "kafka_offset bigint, v text PRIMARY KEY)")
        owner = f"{base} dbname={name}"
        login = " ".join(p for p in owner.split() if not p.startswith(("user=", "password=")))
        yield owner, f"{login} user={role}", password, connection, role
    finally:
        if connection is not None:
            connection.close()
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            cursor.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


# Finding 6 (grants): docs/sink.md says upserts need TEMPORARY on the database, and the
# sink promises to name missing grants before the first batch, but prepare_target never
# checks TEMPORARY: the options are accepted and every upserting task then fails with
# "permission denied to create temporary tables" (whose hint names other grants).
def test_review_a_missing_temporary_grant_is_named_before_the_first_batch(no_temp_database):
    from pyspark.sql.types import IntegerType, LongType, StringType

    owner, dsn, password, admin, role = no_temp_database
    given = {"table": "target", "schema": "s", "stagingSchema": "s", "offsetColumns": OFFSETS,
             "mode": "update", "keyColumns": "v"}
    fields = list(zip(FIELDS, [StringType(), IntegerType(), LongType(), StringType()],
                      strict=True))
    prepare_target(parse_options({**given, "dsn": owner}, FIELDS, False), fields)  # tables
    with admin.cursor() as cursor:
        cursor.execute(f"GRANT USAGE, CREATE ON SCHEMA s TO {role}")
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA s TO "
                       f"{role}")
    try:
        sink = prepare_target(parse_options({**given, "dsn": dsn, "password": password},
                                            FIELDS, False), fields)
    except ConfigurationError as refused:
        assert "TEMP" in str(refused)
        return
    # Accepted: the first task must then be able to write.
    write_direct(direct_target(sink), query_id(), 0, 0, batches(records(0, 0, 2)))


# Finding 7 (upserts silently ignored, differs from staging): the upsert keeps an existing
# row of the same topic and partition at a higher offset, whoever wrote it and whenever. A
# topic deleted and created again (offsets start at 0), or a table fed before by another
# pipeline, keeps its old rows against every new update of their keys, for good; the
# staging path applies them. The guard is needed only between pieces of one batch (or
# claims of one query); it should not hold across queries and topics' lifetimes.
def test_review_a_recreated_topics_updates_are_applied(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, key="v")
    before = query_id()
    commit_batch(sink, 0, [write(sink, before, 0, 0, records(0, 50, 1, value=lambda _: "k"))])
    # The topic is deleted and created again; a new query (new checkpoint) reads it.
    after = query_id()
    commit_batch(sink, 0, [write(sink, after, 0, 0, records(0, 2, 1, value=lambda _: "k"))])
    assert _sql(postgres, f'SELECT kafka_offset FROM "{pg_schema}".target') == [(2,)]
