"""The offset link: the source's plans and the sink's commits keep Kafka offsets in PostgreSQL.

The source's side (SourceLink.record_plan, committed, the store's lock) and the sink's
(apply_newest_plan inside commit_batch) against the real PostgreSQL.
"""

import uuid

import pytest

from kafka_direct.errors import (
    ConfigurationError,
    GroupBusyError,
    OffsetMismatchError,
    OffsetStoreError,
)
from kafka_direct.sql import offset_link, source_link, store_lock
from kafka_direct.sql.link_tables import PLANS_TABLE, lock_key, offsets_json
from kafka_direct.sql.sink_commit import commit_batch
from kafka_direct.sql.sink_link import source_holds
from kafka_direct.sql.source_link import SourceLink
from tests.unit.test_sink_protocol import make_sink, numbered, query_id, stage, target_rows


@pytest.fixture
def link(postgres, pg_schema):
    made = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:8]}", pg_schema)
    yield made
    made.release()


@pytest.fixture
def sink(postgres, pg_schema, link):
    return make_sink(postgres, pg_schema, **{"offsetStore.name": link.store,
                                             "offsetStore.schema": pg_schema})


def commit(sink, query, batch, rows=()):
    return commit_batch(sink, batch, [stage(sink, query, batch, 0, list(rows))])


def test_plans_chain_into_the_store_with_the_rows(link, sink, postgres):
    assert link.committed() is None
    query = query_id()
    link.record_plan({"t": {"0": 5, "1": 0}}, {"t": {"0": 7, "1": 1}})  # any start at first
    result = commit(sink, query, 0, numbered(0, 3))
    assert result.plan.changed and result.plan.end == {"t": {"0": 7, "1": 1}}
    assert link.committed() == {"t": {"0": 7, "1": 1}}
    link.record_plan({"t": {"0": 7, "1": 1}, "u": {"0": 40}},
                     {"t": {"0": 9, "1": 1}, "u": {"0": 41}})  # a new topic starts anywhere
    commit(sink, query, 1, numbered(3, 3))
    assert link.committed() == {"t": {"0": 9, "1": 1}, "u": {"0": 41}}
    link.record_plan({"t": {"1": 1}}, {"t": {"1": 4}})  # partitions not read keep their offset
    commit(sink, query, 2)
    assert link.committed() == {"t": {"0": 9, "1": 4}, "u": {"0": 41}}
    assert len(target_rows(postgres, sink)) == 6


def test_a_plan_that_does_not_chain_is_refused_and_nothing_is_written(link, sink, postgres):
    query = query_id()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 10}})
    commit(sink, query, 0, numbered(0, 2))
    link.record_plan({"t": {"0": 4}}, {"t": {"0": 12}})  # would repeat 6 records
    with pytest.raises(OffsetMismatchError) as raised:
        commit(sink, query, 1, numbered(10, 2))
    error = raised.value
    assert (error.group, error.topic, error.partition, error.stored, error.fromOffset,
            error.untilOffset) == (link.store, "t", 0, 10, 4, 12)
    assert "repeat 6 records" in str(error) and "offsetStore.name" in str(error)
    link.record_plan({"t": {"0": 15}}, {"t": {"0": 20}})  # would skip 5
    with pytest.raises(OffsetMismatchError, match="skip 5 records"):
        commit(sink, query, 1, numbered(10, 2))
    assert link.committed() == {"t": {"0": 10}}
    assert target_rows(postgres, sink) == numbered(0, 2)


def test_a_batch_with_no_new_plan_read_nothing_while_the_source_runs(link, sink):
    query = query_id()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 3}})
    commit(sink, query, 0, numbered(0, 3))
    # A no-data batch (a watermark moved): Spark plans no read; the source still holds.
    result = commit(sink, query, 1, numbered(3, 1))
    assert not result.plan.changed and link.committed() == {"t": {"0": 3}}
    link.record_plan({"t": {"0": 3}}, {"t": {"0": 3}})  # an empty plan chains too
    assert commit(sink, query, 2).plan.changed


def test_an_unlinked_source_is_a_configuration_error(link, sink, postgres, caplog):
    with pytest.raises(ConfigurationError, match="the store has no plan"):
        commit(sink, query_id(), 0, numbered(0, 1))
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    query = query_id()
    commit(sink, query, 0, numbered(0, 1))
    link.release()  # the source's process ended
    # A fresh checkpoint whose source is not linked: no plan, nobody holds the store.
    with pytest.raises(ConfigurationError, match="no running source holds the store") as raised:
        commit(sink, query_id(), 0, numbered(0, 1))
    assert raised.value.setting == "offsetStore.name"
    assert target_rows(postgres, sink) == numbered(0, 1)
    # The same query right after a restart, its first batch reading nothing: accepted,
    # with a warning (the source takes the store with its first plan).
    with caplog.at_level("WARNING", logger="kafka_direct.sql.sink_link"):
        result = commit(sink, query, 1)
    assert not result.plan.changed and "brought no new plan" in caplog.text


def test_a_batch_committed_before_does_not_consume_a_plan(link, sink):
    query = query_id()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, query, 0, numbered(0, 2))
    # The restarted query runs batch 0 again: the source plans it again, the sink skips.
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    assert commit(sink, query, 0, numbered(0, 2)).skipped
    link.record_plan({"t": {"0": 2}}, {"t": {"0": 5}})
    assert commit(sink, query, 1, numbered(2, 3)).plan.end == {"t": {"0": 5}}


def test_a_no_data_batch_after_a_replanned_batch_is_not_taken_for_a_new_plan(link, sink):
    query = query_id()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    commit(sink, query, 0, numbered(0, 1))
    # The driver died before Spark's commit log: batch 0 is planned again and skipped...
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    assert commit(sink, query, 0, numbered(0, 1)).skipped
    # ...and the next batch reads nothing (no plan of its own): the replanned batch 0 is
    # the newest plan, already applied, not a plan starting behind the store.
    result = commit(sink, query, 1)
    assert not result.plan.changed and link.committed() == {"t": {"0": 1}}
    link.record_plan({"t": {"0": 1}}, {"t": {"0": 3}})
    assert commit(sink, query, 2, numbered(1, 2)).plan.end == {"t": {"0": 3}}


def test_a_checkpoint_behind_the_store_writes_nothing_twice(link, sink, postgres):
    old = query_id()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, old, 0, numbered(0, 2))
    # The old query planned batch 1 (2 -> 4) in its checkpoint and died before committing.
    # A fresh query then resumed from the store and wrote 2 -> 4 as its batch 0.
    link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    commit(sink, query_id(), 0, numbered(2, 2))
    # The old checkpoint comes back: its batch 1 plans 2 -> 4 again. Those rows are in.
    link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    result = commit(sink, old, 1, numbered(2, 2))
    assert result.skipped and result.plan.covered and link.committed() == {"t": {"0": 4}}
    assert sorted(target_rows(postgres, sink)) == numbered(0, 4)
    assert commit(sink, old, 1, numbered(2, 2)).skipped  # recorded: a rerun skips too
    link.record_plan({"t": {"0": 4}}, {"t": {"0": 5}})  # and the old query goes on
    commit(sink, old, 2, numbered(4, 1))
    assert sorted(target_rows(postgres, sink)) == numbered(0, 5)


def test_a_fresh_query_resumes_from_the_store(link, sink, postgres):
    old = query_id()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 4}})
    commit(sink, old, 0, numbered(0, 4))
    # The checkpoint is lost: a new query id, batch 0 again, starting from committed().
    start = link.committed()
    link.record_plan(start, {"t": {"0": 6}})
    commit(sink, query_id(), 0, numbered(4, 2))
    assert link.committed() == {"t": {"0": 6}}
    assert target_rows(postgres, sink) == numbered(0, 6)


def test_a_second_query_on_the_store_is_refused(link, postgres, monkeypatch):
    monkeypatch.setattr(store_lock, "LOCK_WAIT_MS", 200)
    other = postgres.connect()
    other.autocommit = True
    try:
        with other.cursor() as cursor:  # another process's source holds the store
            cursor.execute("SELECT pg_advisory_lock(%s, hashtext(%s))",
                           lock_key(link.schema, link.store))
        with pytest.raises(GroupBusyError, match="used by another running query") as raised:
            link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
        assert raised.value.group == link.store
    finally:
        other.close()  # that query stopped: its lock went with its session
    link.hold()
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})


def test_a_source_whose_session_broke_takes_the_store_again(link, postgres):
    link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    holder = store_lock._holders[(link.database, link.schema, link.store)]
    with postgres.connect() as admin, admin.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", (holder.connection.get_backend_pid(),))
    admin.close()
    link.record_plan({"t": {"0": 1}}, {"t": {"0": 2}})
    with postgres.connect() as admin, admin.cursor() as cursor:
        assert source_holds(cursor, link.schema, link.store)
    admin.close()


def test_only_the_newest_plans_are_kept(link, postgres):
    for n in range(source_link.KEEP_PLANS + 4):
        link.record_plan({"t": {"0": n}}, {"t": {"0": n + 1}})
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{link.schema}".{PLANS_TABLE} WHERE store = %s',
                       (link.store,))
        assert cursor.fetchone()[0] == source_link.KEEP_PLANS
    connection.close()


@pytest.mark.parametrize(("start", "end", "words"), [
    ({"t": {"0": 0}}, {"t": {"1": 5}}, "its start does not"),
    ({"t": {"0": 9}}, {"t": {"0": 5}}, "is before its start"),
    ({"t": {"x": 0}}, {"t": {"x": 1}}, "not a partition number"),
    ({"t": {"0": -1}}, {"t": {"0": 1}}, "must be an int >= 0"),
    ({"t": {"0": True}}, {"t": {"0": 1}}, "must be an int >= 0"),
    ({"t": [0]}, {"t": {"0": 1}}, "mapping partitions"),
    ([], {}, "must be offsets"),
])
def test_bad_plans_are_refused_before_the_database(start, end, words):
    link = SourceLink("host=nowhere.invalid", "s")
    with pytest.raises(ConfigurationError, match=words):
        link.record_plan(start, end)


def test_offsets_json_has_a_stable_order():
    assert offsets_json({"b": {"10": 1, "2": 2}, "a": {"0": 3}}) == \
        '{"a":{"0":3},"b":{"2":2,"10":1}}'


def test_a_failing_database_is_an_offset_store_error_without_the_password():
    secret = "pw-" + uuid.uuid4().hex
    link = SourceLink(f"host=127.0.0.1 port=1 password={secret} connect_timeout=2", "s")
    for call in (link.committed, lambda: link.record_plan({}, {})):
        with pytest.raises(OffsetStoreError) as raised:
            call()
        assert secret not in str(raised.value)


def test_the_protocol_module_re_exports_the_link():
    from kafka_direct.sql import link_tables, sink_link

    for name in offset_link.__all__:
        owners = [m for m in (link_tables, sink_link, source_link) if name in m.__all__]
        assert [getattr(offset_link, name)] == [getattr(m, name) for m in owners], name
