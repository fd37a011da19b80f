"""The structured sink's commit protocol against the real PostgreSQL, without Spark.

Tasks are played by ``stage_rows`` (what a write task runs), the driver by ``commit_batch``
and ``abort_batch``: attempts that fail after staging, batches committed twice, aborts,
COMMITs whose answer is lost, staging emptied by a crash, upserts and replacements.
"""

import threading
import uuid

import pyarrow as pa
import pytest

from kafka_direct.errors import ConfigurationError, SinkWriteError
from kafka_direct.postgres import connection as sink_database
from kafka_direct.postgres.errors import CommitOutcomeUnknownError
from kafka_direct.postgres.staging import STAGED_TABLE, StagingTarget, stage_rows
from kafka_direct.sql.sink.commit import abort_batch, commit_batch, commit_write, drop_stale
from kafka_direct.sql.sink.options import parse_options
from kafka_direct.sql.sink.target import prepare_target

COLUMNS = ["id", "v"]


def make_sink(postgres, schema, table="target", create=True, fields=None, overwrite=False,
              **options):
    """Prepared sink options over ``schema.table`` (created as (id bigint, v text))."""
    if create:
        with postgres.connect() as connection, connection.cursor() as cursor:
            cursor.execute(f'CREATE TABLE IF NOT EXISTS "{schema}"."{table}" '
                           f"(id bigint, v text{', PRIMARY KEY (id)' if create == 'pk' else ''})")
        connection.close()
    names = fields or COLUMNS
    parsed = parse_options({"dsn": postgres.dsn, "table": table, "schema": schema, **options},
                           names, overwrite)
    from pyspark.sql.types import LongType, StringType

    types = {"id": LongType(), "v": StringType()}
    return prepare_target(parsed, [(n, types.get(n, StringType())) for n in names])


def staging_target(options):
    return StagingTarget(options.database, options.schema, options.table, options.columns,
                         options.stagingSchema, options.statementTimeoutMs)


def rows_batch(rows):
    ids, values = zip(*rows, strict=True) if rows else ((), ())
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.string())})


def stage(options, query, batch, partition, rows, chunks=1):
    """A task attempt staging ``rows`` (in ``chunks`` record batches)."""
    size = max(1, -(-len(rows) // chunks))
    batches = [rows_batch(rows[i:i + size]) for i in range(0, len(rows), size)] or [
        rows_batch([])]
    return stage_rows(staging_target(options), query, batch, partition, batches)


def target_rows(postgres, options):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT id, v FROM "{options.schema}"."{options.table}" ORDER BY id, v')
        rows = cursor.fetchall()
    connection.close()
    return rows


def staged_left(postgres, options):
    """(registered attempts, staging tables) left in the staging schema."""
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{options.stagingSchema}".{STAGED_TABLE}')
        registered = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = "
                       "c.relnamespace WHERE n.nspname = %s AND c.relname LIKE "
                       "'kafka\\_direct\\_stage\\_%%'", (options.stagingSchema,))
        tables = cursor.fetchone()[0]
    connection.close()
    return registered, tables


def query_id():
    return str(uuid.uuid4())


def numbered(first, count, tag="x"):
    return [(i, f"{tag}{i}") for i in range(first, first + count)]


def test_only_the_named_attempts_are_moved_and_all_staging_goes(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    failed = stage(sink, query, 0, 0, numbered(0, 5, "failed"))  # staged, then the task died
    good = [stage(sink, query, 0, 0, numbered(0, 5)), stage(sink, query, 0, 1, numbered(5, 3))]
    speculative = stage(sink, query, 0, 1, numbered(5, 3, "speculative"))
    assert failed.token != good[0].token and speculative.rows == 3
    result = commit_batch(sink, 0, good)
    assert (result.rows, result.skipped) == (8, False)
    assert target_rows(postgres, sink) == numbered(0, 8)
    assert staged_left(postgres, sink) == (0, 0)


def test_a_batch_committed_again_writes_nothing(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    first = [stage(sink, query, 4, p, numbered(10 * p, 4)) for p in range(2)]
    assert commit_batch(sink, 4, first).rows == 8
    assert commit_batch(sink, 4, first).skipped  # the same messages again
    # The batch run again after a restart: new attempts, same rows, same batch id.
    again = [stage(sink, query, 4, p, numbered(10 * p, 4)) for p in range(2)]
    result = commit_batch(sink, 4, again)
    assert result.skipped and result.rows == 0
    assert commit_batch(sink, 3, [stage(sink, query, 3, 0, numbered(99, 1))]).skipped
    assert target_rows(postgres, sink) == numbered(0, 4) + numbered(10, 4)
    assert staged_left(postgres, sink) == (0, 0)


def test_a_zombie_attempt_staging_after_its_batch_committed_leaves_nothing(postgres,
                                                                           pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    assert commit_batch(sink, 0, [stage(sink, query, 0, 0, numbered(0, 3))]).rows == 3
    # A speculative attempt of batch 0 finishing late, after the commit: it stages nothing
    # (before, its staging table stayed until the age sweep).
    zombie = stage(sink, query, 0, 0, numbered(0, 3))
    assert zombie.rows == 0
    assert staged_left(postgres, sink) == (0, 0)
    assert target_rows(postgres, sink) == numbered(0, 3)


def test_abort_leaves_nothing_and_the_batch_commits_after_a_restart(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    done = stage(sink, query, 0, 0, numbered(0, 3))
    stage(sink, query, 0, 1, numbered(3, 3))  # its sibling failed for good: no message
    assert abort_batch(sink, 0, [done, None]) == 2
    assert target_rows(postgres, sink) == [] and staged_left(postgres, sink) == (0, 0)
    # Every task failed: abort has no query id to clean with; the restart's commit does.
    stage(sink, query, 0, 0, numbered(0, 3, "zombie"))
    assert abort_batch(sink, 0, [None, None]) == 0
    rerun = [stage(sink, query, 0, 0, numbered(0, 3)), stage(sink, query, 0, 1, numbered(3, 3))]
    assert commit_batch(sink, 0, rerun).rows == 6
    assert target_rows(postgres, sink) == numbered(0, 6)
    assert staged_left(postgres, sink) == (0, 0)


def test_a_commit_drops_the_staging_of_the_querys_earlier_batches(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query, other = query_id(), query_id()
    stage(sink, query, 1, 0, numbered(0, 2, "killed driver"))
    foreign = stage(sink, other, 1, 0, numbered(0, 2, "other query"))
    commit_batch(sink, 2, [stage(sink, query, 2, 0, numbered(0, 2))])
    assert staged_left(postgres, sink) == (1, 1)  # the other query's batch is its own
    assert commit_batch(sink, 1, [foreign]).rows == 2


def test_empty_partitions_stage_nothing_and_an_empty_batch_is_recorded(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    empty = stage(sink, query, 0, 0, [])
    assert empty.rows == 0 and staged_left(postgres, sink) == (0, 0)
    assert commit_batch(sink, 0, [empty]).rows == 0
    assert commit_batch(sink, 0, [stage(sink, query, 0, 0, numbered(0, 1))]).skipped


def test_many_record_batches_and_awkward_text_survive(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    awkward = [(0, ""), (1, None), (2, 'a,b"c\nd\re\\f\tg'), (3, "é ☃"), (4, "NULL"),
               (5, "\\N"), (6, " lead and trail ")]
    rows = awkward + numbered(100, 2500)
    commit_batch(sink, 0, [stage(sink, query_id(), 0, 0, rows, chunks=7)])
    assert target_rows(postgres, sink) == sorted(rows, key=lambda r: (r[0], r[1] or ""))


def test_messages_that_do_not_fit_the_batch_are_refused(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    attempt = stage(sink, query, 0, 0, numbered(0, 1))
    with pytest.raises(SinkWriteError, match="sent no commit message"):
        commit_batch(sink, 0, [attempt, None])
    with pytest.raises(SinkWriteError, match="staged its rows for batch 0"):
        commit_batch(sink, 1, [attempt])
    with pytest.raises(SinkWriteError, match="2 queries"):
        commit_batch(sink, 0, [attempt, stage(sink, query_id(), 0, 1, numbered(1, 1))])
    with pytest.raises(SinkWriteError, match="same attempt"):
        commit_batch(sink, 0, [attempt, attempt])
    with pytest.raises(ConfigurationError, match="df.write"):
        commit_batch(sink, 0, [stage(sink, "write:x", 0, 0, numbered(0, 1))])
    assert target_rows(postgres, sink) == []


def execute(postgres, statement, *params):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(statement, params)
    connection.close()


def test_staging_emptied_by_a_crash_or_dropped_as_stale_refuses_the_batch(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    lost = stage(sink, query, 0, 0, numbered(0, 4))
    kept = stage(sink, query, 0, 1, numbered(4, 4))
    # What crash recovery does to an unlogged table: its rows are gone, it stays.
    execute(postgres, f'TRUNCATE "{pg_schema}"."{lost.table}"')
    with pytest.raises(SinkWriteError, match="are gone") as raised:
        commit_batch(sink, 0, [lost, kept])
    assert raised.value.outcome == "rolled back"
    execute(postgres, f'DELETE FROM "{pg_schema}".{STAGED_TABLE} WHERE token = %s', kept.token)
    with pytest.raises(SinkWriteError, match="not registered"):
        commit_batch(sink, 0, [kept])
    assert target_rows(postgres, sink) == []
    assert commit_batch(sink, 0, [stage(sink, query, 0, 0, numbered(0, 8))]).rows == 8


def test_stale_staging_goes_by_age_but_not_under_a_running_commit(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, staleStagingMinutes="30")
    old = stage(sink, query_id(), 7, 0, numbered(0, 2))
    young = stage(sink, query_id(), 7, 0, numbered(0, 2))
    execute(postgres, f'UPDATE "{pg_schema}".{STAGED_TABLE} SET staged_at = now() - '
            "interval '31 minutes' WHERE token = %s", old.token)
    assert drop_stale(sink, force=True) == 1
    assert staged_left(postgres, sink) == (1, 1)
    with pytest.raises(SinkWriteError, match="not registered"):
        commit_batch(sink, 7, [old])
    assert commit_batch(sink, 7, [young]).rows == 2


class LostCommit:
    """commit_or_unknown that loses the server's answer (after committing, or not)."""

    def __init__(self, monkeypatch, commits):
        self.commits = commits
        self.real = sink_database.commit_or_unknown
        monkeypatch.setattr(sink_database, "commit_or_unknown", self)

    def __call__(self, connection):
        if self.commits:
            self.real(connection)
        else:
            connection.rollback()
        connection.close()
        raise CommitOutcomeUnknownError("server closed the connection unexpectedly")


@pytest.mark.parametrize("committed", [True, False])
def test_a_lost_commit_answer_is_unknown_and_the_rerun_is_exactly_once(
        postgres, pg_schema, monkeypatch, committed):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    attempts = [stage(sink, query, 0, p, numbered(10 * p, 3)) for p in range(2)]
    lost = LostCommit(monkeypatch, committed)
    with pytest.raises(SinkWriteError, match="outcome is unknown") as raised:
        commit_batch(sink, 0, attempts)
    assert raised.value.outcome == "unknown"
    monkeypatch.setattr(sink_database, "commit_or_unknown", lost.real)
    rerun = [stage(sink, query, 0, p, numbered(10 * p, 3)) for p in range(2)]
    assert commit_batch(sink, 0, rerun).skipped is committed
    assert target_rows(postgres, sink) == numbered(0, 3) + numbered(10, 3)
    assert staged_left(postgres, sink) == (0, 0)


def test_a_connection_the_server_closed_is_replaced_once(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    attempt = stage(sink, query, 0, 0, numbered(0, 2))
    connection = sink_database.cached_connection(sink.database)
    execute(postgres, "SELECT pg_terminate_backend(%s)", connection.get_backend_pid())
    assert commit_batch(sink, 0, [attempt]).rows == 2
    execute(postgres, "SELECT pg_terminate_backend(%s)",
            sink_database.cached_connection(sink.database).get_backend_pid())
    assert stage(sink, query, 1, 0, numbered(2, 2)).rows == 2


def test_two_drivers_committing_one_batch_write_it_once(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    # Another spelling of the DSN: the second driver gets a connection of its own.
    import dataclasses

    other = dataclasses.replace(sink, database=sink_database.Database(sink.database.dsn + " "))
    attempts = [[stage(sink, query, 0, 0, numbered(0, 50))] for _ in range(2)]
    results, errors = [], []
    barrier = threading.Barrier(2)

    def commit(options, messages):
        barrier.wait()
        try:
            results.append(commit_batch(options, 0, messages))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=commit, args=(o, a))
               for o, a in zip((sink, other), attempts, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # The loser either waited on the commit row and skipped, or found its staging dropped
    # by the winner; either way the batch is in once.
    assert len(results) + len(errors) == 2 and any(not r.skipped for r in results)
    assert all(isinstance(e, SinkWriteError) for e in errors)
    assert target_rows(postgres, sink) == numbered(0, 50)


def test_update_mode_upserts_and_the_last_row_of_a_key_wins(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, create="pk", mode="update", keyColumns="id")
    query = query_id()
    commit_batch(sink, 0, [stage(sink, query, 0, 0, [(1, "a"), (2, "b")])])
    batch = [stage(sink, query, 1, 0, [(2, "p0-first"), (3, "c"), (2, "p0-last")]),
             stage(sink, query, 1, 1, [(4, "d"), (3, "p1")])]
    commit_batch(sink, 1, batch)
    assert target_rows(postgres, sink) == [(1, "a"), (2, "p0-last"), (3, "p1"), (4, "d")]


def test_update_mode_with_a_nullable_unique_key_lets_null_keys_in(postgres, pg_schema):
    execute(postgres, f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
    execute(postgres, f'CREATE UNIQUE INDEX ON "{pg_schema}".target (id)')
    sink = make_sink(postgres, pg_schema, create=False, mode="update", keyColumns="id")
    commit_batch(sink, 0, [stage(sink, query_id(), 0, 0, [(None, "n1"), (None, "n2"), (5, "x")])])
    assert sorted(target_rows(postgres, sink), key=str) == sorted(
        [(None, "n1"), (None, "n2"), (5, "x")], key=str)


def test_complete_mode_replaces_the_rows(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, overwrite=True)
    query = query_id()
    commit_batch(sink, 0, [stage(sink, query, 0, 0, numbered(0, 3))])
    commit_batch(sink, 1, [stage(sink, query, 1, 0, numbered(10, 2)), stage(sink, query, 1, 1, [])])
    assert target_rows(postgres, sink) == numbered(10, 2)
    commit_batch(sink, 2, [stage(sink, query, 2, 0, [])])  # an empty result: an empty table
    assert target_rows(postgres, sink) == []


def test_a_batch_write_commits_all_its_tasks_at_once(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    write = f"write:{uuid.uuid4().hex}"
    parts = [stage(sink, write, 0, p, numbered(10 * p, 2)) for p in range(3)]
    assert commit_write(sink, parts).rows == 6
    assert staged_left(postgres, sink) == (0, 0)


# -- before the first batch: the target, its columns, its key, the role's grants ---------


def test_a_missing_table_is_named_with_both_fixes(postgres, pg_schema):
    with pytest.raises(ConfigurationError, match="does not exist: create it") as raised:
        make_sink(postgres, pg_schema, table="absent", create=False)
    assert "createTable=true" in str(raised.value)


def test_create_table_makes_it_from_the_dataframe_with_the_key(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, table="made", create=False, createTable="true",
                     mode="update", keyColumns="id")
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT column_name, data_type FROM information_schema.columns "
                       "WHERE table_schema = %s AND table_name = 'made' ORDER BY ordinal_position",
                       (pg_schema,))
        assert cursor.fetchall() == [("id", "bigint"), ("v", "text")]
    connection.close()
    commit_batch(sink, 0, [stage(sink, query_id(), 0, 0, [(1, "a"), (1, "b")])])
    assert target_rows(postgres, sink) == [(1, "b")]


def test_columns_are_resolved_ignoring_case_or_named_when_missing(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema, fields=["ID", "V"])
    assert sink.columns == ("id", "v")
    with pytest.raises(ConfigurationError, match=r"has no columns \['nope'\]"):
        make_sink(postgres, pg_schema, fields=["id", "nope"])


def test_update_mode_needs_a_unique_key_on_exactly_the_key_columns(postgres, pg_schema):
    with pytest.raises(ConfigurationError, match="ADD PRIMARY KEY"):
        make_sink(postgres, pg_schema, mode="update", keyColumns="id")


@pytest.fixture
def role(postgres, pg_schema):
    """A login role with no privileges on ``pg_schema``; yields (dsn without password, pw)."""
    name, password = f"sink_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin = postgres.connect()
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {name} LOGIN PASSWORD %s", (password,))
    base = " ".join(p for p in postgres.dsn.split() if not p.startswith(("user=", "password=")))
    yield name, f"{base} user={name}", password, admin
    with admin.cursor() as cursor:
        cursor.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{pg_schema}" FROM {name}')
        cursor.execute(f'REVOKE ALL ON SCHEMA "{pg_schema}" FROM {name}')
        cursor.execute(f'DROP SCHEMA IF EXISTS "{pg_schema}_stage" CASCADE')
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE usename = %s", (name,))
        cursor.execute(f"DROP OWNED BY {name}")
        cursor.execute(f"DROP ROLE {name}")
    admin.close()


def test_missing_grants_are_named_and_the_granted_role_works(postgres, pg_schema, role):
    name, dsn, password, admin = role
    stage_schema = f"{pg_schema}_stage"
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".target (id bigint, v text)')
        cursor.execute(f'CREATE SCHEMA "{stage_schema}"')
        # An administrator made the sink's tables; the role may not create anything else.
        cursor.execute(f'GRANT USAGE ON SCHEMA "{pg_schema}" TO {name}')
    make_sink(postgres, pg_schema, stagingSchema=stage_schema)
    options = {"dsn": dsn, "password": password, "table": "target", "schema": pg_schema,
               "stagingSchema": stage_schema}
    with pytest.raises(ConfigurationError) as raised:
        prepare_target(parse_options(options, COLUMNS, False), [])
    message = str(raised.value)
    assert f'GRANT SELECT, INSERT ON TABLE "{pg_schema}"."target" TO "{name}"' in message
    assert f'GRANT USAGE, CREATE ON SCHEMA "{stage_schema}"' in message
    assert password not in message
    with admin.cursor() as cursor:
        cursor.execute(f'GRANT SELECT, INSERT ON "{pg_schema}".target TO {name}')
        cursor.execute(f'GRANT USAGE, CREATE ON SCHEMA "{stage_schema}" TO {name}')
        cursor.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{stage_schema}".{STAGED_TABLE} '
                       f"TO {name}")
        cursor.execute(f'GRANT SELECT, INSERT, UPDATE ON "{stage_schema}".'
                       f"kafka_direct_sink_commits TO {name}")
    sink = prepare_target(parse_options({**options, "statementTimeoutMs": "5000"}, COLUMNS,
                                        False), [])
    attempt = stage(sink, query_id(), 0, 0, numbered(0, 3))
    assert commit_batch(sink, 0, [attempt]).rows == 3


def test_a_wrong_password_is_a_clear_error_without_the_password(postgres, pg_schema, role):
    _, dsn, _, _ = role
    secret = "Wr0ng-" + uuid.uuid4().hex
    with pytest.raises(SinkWriteError) as raised:
        prepare_target(parse_options({"dsn": dsn, "password": secret, "table": "t",
                                      "schema": pg_schema}, COLUMNS, False), [])
    assert "check the user and password" in str(raised.value)
    assert secret not in str(raised.value) and secret not in repr(raised.value.context)


def test_a_staging_failure_is_rolled_back_and_stages_nothing(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    bad = pa.record_batch({"id": pa.array([1]), "v": pa.array(["nul\x00byte"])})
    with pytest.raises(SinkWriteError, match="rolled back"):
        stage_rows(staging_target(sink), query_id(), 0, 0, [bad])
    assert staged_left(postgres, sink) == (0, 0)


def test_a_row_that_cannot_be_written_says_so_not_to_wait_for_the_database(postgres, pg_schema):
    from kafka_direct.errors import SinkWriteError

    sink = make_sink(postgres, pg_schema)
    with pytest.raises(SinkWriteError) as raised:
        stage(sink, query_id(), 0, 0, [(1, "nul\x00inside")])
    message = str(raised.value)
    assert "cannot be written as it is" in message and "once the database answers" not in message
    assert raised.value.outcome == "rolled back"
