"""The offset link: the source's plans and the sink's commits keep Kafka offsets in PostgreSQL.

The source's side (SourceLink.record_plan, committed, the store's lock) and the sink's
(apply_batch_plan inside commit_batch) against the real PostgreSQL.
"""

import uuid

import pytest

from kafka_direct.errors import (
    ConfigurationError,
    GroupBusyError,
    OffsetMismatchError,
    OffsetStoreError,
)
from kafka_direct.offsets_json import offsets_json
from kafka_direct.sql import link as offset_link
from kafka_direct.sql.link import source_side as source_link
from kafka_direct.sql.link import store_lock
from kafka_direct.sql.link.sink_side import source_holds
from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.link.tables import PLANS_TABLE, lock_key
from kafka_direct.sql.sink.commit import commit_batch
from tests.sql.sink.test_sink_protocol import make_sink, numbered, query_id, stage, target_rows


@pytest.fixture
def link(postgres, pg_schema):
    made = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:8]}", pg_schema)
    yield made
    made.release()


@pytest.fixture
def sink(postgres, pg_schema, link):
    return make_sink(postgres, pg_schema, **{"offsetStore.name": link.store,
                                             "offsetStore.schema": pg_schema})


def source_of(sink):
    """The source's side of the sink's store: what the batch's read tasks bind through."""
    ref = sink.link
    return SourceLink(ref.dsn, ref.store, ref.schema, ref.password)


def commit(sink, query, batch, rows=(), plan=None):
    """Commit a batch; ``plan``: the plan its read tasks bound (None: it read nothing)."""
    if plan is not None:
        source_of(sink).bind_read(plan, query, batch)
    return commit_batch(sink, batch, [stage(sink, query, batch, 0, list(rows))])


def test_plans_chain_into_the_store_with_the_rows(link, sink, postgres):
    assert link.committed() is None
    query = query_id()
    # Any start at first.
    plan = link.record_plan({"t": {"0": 5, "1": 0}}, {"t": {"0": 7, "1": 1}})
    result = commit(sink, query, 0, numbered(0, 3), plan=plan)
    assert result.plan.changed and result.plan.end == {"t": {"0": 7, "1": 1}}
    assert link.committed() == {"t": {"0": 7, "1": 1}}
    plan = link.record_plan({"t": {"0": 7, "1": 1}, "u": {"0": 40}},
                            {"t": {"0": 9, "1": 1}, "u": {"0": 41}})  # a new topic: anywhere
    commit(sink, query, 1, numbered(3, 3), plan=plan)
    assert link.committed() == {"t": {"0": 9, "1": 1}, "u": {"0": 41}}
    # Partitions not read keep their offset.
    plan = link.record_plan({"t": {"1": 1}}, {"t": {"1": 4}})
    commit(sink, query, 2, plan=plan)
    assert link.committed() == {"t": {"0": 9, "1": 4}, "u": {"0": 41}}
    assert len(target_rows(postgres, sink)) == 6


def test_a_plan_that_does_not_chain_is_refused_and_nothing_is_written(link, sink, postgres):
    query = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 10}})
    commit(sink, query, 0, numbered(0, 2), plan=plan)
    plan = link.record_plan({"t": {"0": 4}}, {"t": {"0": 12}})  # would repeat 6 records
    with pytest.raises(OffsetMismatchError) as raised:
        commit(sink, query, 1, numbered(10, 2), plan=plan)
    error = raised.value
    assert (error.group, error.topic, error.partition, error.stored, error.fromOffset,
            error.untilOffset) == (link.store, "t", 0, 10, 4, 12)
    assert "repeat 6 records" in str(error)
    # The cause and the fix, not the old advice to link a source that was linked already.
    assert "checkpoint is behind the store" in str(error)
    assert "Delete this query's checkpoint directory" in str(error)
    plan = link.record_plan({"t": {"0": 15}}, {"t": {"0": 20}})  # would skip 5
    with pytest.raises(OffsetMismatchError, match="skip 5 records") as raised:
        commit(sink, query, 1, numbered(10, 2), plan=plan)
    assert "store is behind this query's checkpoint" in str(raised.value)
    assert "restored from an older backup" in str(raised.value)
    assert link.committed() == {"t": {"0": 10}}
    assert target_rows(postgres, sink) == numbered(0, 2)


def test_a_batch_with_no_new_plan_read_nothing_while_the_source_runs(link, sink):
    query = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 3}})
    commit(sink, query, 0, numbered(0, 3), plan=plan)
    # A no-data batch (a watermark moved): Spark plans no read; the source still holds.
    result = commit(sink, query, 1, numbered(3, 1))
    assert not result.plan.changed and link.committed() == {"t": {"0": 3}}
    plan = link.record_plan({"t": {"0": 3}}, {"t": {"0": 3}})  # an empty plan chains too
    assert commit(sink, query, 2, plan=plan).plan.changed


def test_an_unlinked_source_is_a_configuration_error(link, sink, postgres, caplog):
    with pytest.raises(ConfigurationError, match="the store has no plan"):
        commit(sink, query_id(), 0, numbered(0, 1))
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    query = query_id()
    commit(sink, query, 0, numbered(0, 1), plan=plan)
    link.release()  # the source's process ended
    # A fresh checkpoint whose source is not linked: no plan, nobody holds the store.
    with pytest.raises(ConfigurationError, match="while the store follows query") as raised:
        commit(sink, query_id(), 0, numbered(0, 1))
    assert raised.value.setting == "offsetStore.name"
    assert target_rows(postgres, sink) == numbered(0, 1)
    # The same query right after a restart, its first batch reading nothing: accepted,
    # with a warning (the source takes the store with its first plan).
    with caplog.at_level("WARNING", logger="kafka_direct.sql.link.sink_side"):
        result = commit(sink, query, 1)
    assert not result.plan.changed and "brought no new plan" in caplog.text


def test_a_batch_committed_before_does_not_consume_a_plan(link, sink):
    query = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, query, 0, numbered(0, 2), plan=plan)
    # The restarted query runs batch 0 again: the source plans it again, the sink skips.
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    assert commit(sink, query, 0, numbered(0, 2), plan=plan).skipped
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 5}})
    assert commit(sink, query, 1, numbered(2, 3), plan=plan).plan.end == {"t": {"0": 5}}


def test_a_no_data_batch_after_a_replanned_batch_is_not_taken_for_a_new_plan(link, sink):
    query = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    commit(sink, query, 0, numbered(0, 1), plan=plan)
    # The driver died before Spark's commit log: batch 0 is planned again and skipped...
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}})
    assert commit(sink, query, 0, numbered(0, 1), plan=plan).skipped
    # ...and the next batch reads nothing (no plan of its own): the replanned batch 0 is
    # the newest plan, already applied, not a plan starting behind the store.
    result = commit(sink, query, 1)
    assert not result.plan.changed and link.committed() == {"t": {"0": 1}}
    plan = link.record_plan({"t": {"0": 1}}, {"t": {"0": 3}})
    assert commit(sink, query, 2, numbered(1, 2), plan=plan).plan.end == {"t": {"0": 3}}


def test_a_checkpoint_behind_the_store_writes_nothing_twice(link, sink, postgres):
    old = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, old, 0, numbered(0, 2), plan=plan)
    # The old query planned batch 1 (2 -> 4) in its checkpoint and died before committing.
    # A fresh query then resumed from the store and wrote 2 -> 4 as its batch 0.
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    commit(sink, query_id(), 0, numbered(2, 2), plan=plan)
    # The old checkpoint comes back: its batch 1 plans 2 -> 4 again. Those rows are in.
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    result = commit(sink, old, 1, numbered(2, 2), plan=plan)
    assert result.skipped and result.plan.covered and link.committed() == {"t": {"0": 4}}
    assert sorted(target_rows(postgres, sink)) == numbered(0, 4)
    assert commit(sink, old, 1, numbered(2, 2)).skipped  # recorded: a rerun skips too
    plan = link.record_plan({"t": {"0": 4}}, {"t": {"0": 5}})  # and the old query goes on
    commit(sink, old, 2, numbered(4, 1), plan=plan)
    assert sorted(target_rows(postgres, sink)) == numbered(0, 5)


def test_a_fresh_query_resumes_from_the_store(link, sink, postgres):
    old = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 4}})
    commit(sink, old, 0, numbered(0, 4), plan=plan)
    # The checkpoint is lost: a new query id, batch 0 again, starting from committed().
    start = link.committed()
    plan = link.record_plan(start, {"t": {"0": 6}})
    commit(sink, query_id(), 0, numbered(4, 2), plan=plan)
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
    ({"t": {"0": -1}}, {"t": {"0": 1}}, "must be an integer >= 0"),
    ({"t": {"0": True}}, {"t": {"0": 1}}, "must be an integer >= 0"),
    ({"t": [0]}, {"t": {"0": 1}}, "must map partitions to offsets"),
    ([], {}, "must be a JSON object of topics"),
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
    from kafka_direct.sql.link import sink_side as sink_link
    from kafka_direct.sql.link import tables as link_tables

    for name in offset_link.__all__:
        owners = [m for m in (link_tables, sink_link, source_link) if name in m.__all__]
        assert [getattr(offset_link, name)] == [getattr(m, name) for m in owners], name


def break_session(link, postgres):
    """PostgreSQL ends the session holding the store's lock (a restart, a cut network)."""
    holder = store_lock._holders[(link.database, link.schema, link.store)]
    with postgres.connect() as admin, admin.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", (holder.connection.get_backend_pid(),))
    admin.close()


@pytest.mark.parametrize("first", ["taker", "broken"])
def test_a_query_whose_lock_session_broke_cannot_commit_the_takers_plan(link, sink, postgres,
                                                                       first):
    q1, q2 = query_id(), query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, q1, 0, numbered(0, 2), plan=plan)
    # Q1 plans batch 1 (2 -> 5) and its tasks read it; then its lock session breaks.
    p1 = link.record_plan({"t": {"0": 2}}, {"t": {"0": 5}})
    source_of(sink).bind_read(p1, q1, 1)
    break_session(link, postgres)
    # Q2 (a fresh checkpoint) takes the store and plans from the stored offsets: 2 -> 6.
    p2 = link.record_plan({"t": {"0": 2}}, {"t": {"0": 6}})
    source_of(sink).bind_read(p2, q2, 0)
    if first == "taker":
        commit(sink, q2, 0, numbered(2, 4))
        # Q1's batch commits late: its own plan no longer chains; nothing twice.
        with pytest.raises(OffsetMismatchError, match="repeat 4 records"):
            commit(sink, q1, 1, numbered(2, 3))
        assert link.committed() == {"t": {"0": 6}}
        assert sorted(target_rows(postgres, sink)) == numbered(0, 6)
    else:
        # Q1 commits first: its own rows with its own plan (never Q2's plan)...
        assert commit(sink, q1, 1, numbered(2, 3)).plan.end == {"t": {"0": 5}}
        assert link.committed() == {"t": {"0": 5}}
        # ...and Q2's batch, planned from the same start, is refused.
        with pytest.raises(OffsetMismatchError, match="repeat 3 records"):
            commit(sink, q2, 0, numbered(2, 4))
        assert sorted(target_rows(postgres, sink)) == numbered(0, 5)


def test_a_batch_that_read_nothing_never_applies_another_batchs_plan(link, sink, postgres):
    q1 = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, q1, 0, numbered(0, 2), plan=plan)
    # Q2 planned 2 -> 6 but its tasks have not read yet; Q1 commits a no-data batch.
    link.record_plan({"t": {"0": 2}}, {"t": {"0": 6}})
    result = commit(sink, q1, 1)
    assert not result.plan.changed and link.committed() == {"t": {"0": 2}}


def test_a_checkpoint_restored_from_an_older_copy_is_refused_not_skipped(link, sink, postgres):
    query = query_id()
    for batch, (first, last) in enumerate([(0, 2), (2, 4), (4, 6)]):
        plan = link.record_plan({"t": {"0": first}}, {"t": {"0": last}})
        commit(sink, query, batch, numbered(first, last - first), plan=plan)
    # The checkpoint comes back from a copy taken after batch 0: batch 1 is planned again,
    # with other offsets (more records arrived): 2 -> 9. Those up to 6 are committed...
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 9}})
    with pytest.raises(OffsetMismatchError, match="restored from an older copy") as raised:
        commit(sink, query, 1, numbered(2, 7), plan=plan)
    assert (raised.value.stored, raised.value.untilOffset) == (6, 9)
    # ...skipping the batch would have lost 6 -> 9. A batch re-run with its own offsets
    # (within the store) is still skipped.
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    assert commit(sink, query, 1, numbered(2, 2), plan=plan).skipped
    assert sorted(target_rows(postgres, sink)) == numbered(0, 6)


def test_a_partition_moved_by_data_loss_goes_on_from_where_the_source_marked_it(link, sink,
                                                                                postgres):
    query = query_id()
    plan = link.record_plan({"t": {"0": 0, "1": 0}}, {"t": {"0": 5, "1": 5}})
    commit(sink, query, 0, numbered(0, 5), plan=plan)
    # t-0's topic was re-created (failOnDataLoss=false): the source reads it from 0 again.
    plan = link.record_plan({"t": {"0": 0, "1": 5}}, {"t": {"0": 2, "1": 6}},
                            resets={"t": {"0": 0}})
    assert commit(sink, query, 1, numbered(5, 2), plan=plan).plan.end == {"t": {"0": 2, "1": 6}}
    # Unmarked, the same start is refused.
    plan = link.record_plan({"t": {"0": 0, "1": 6}}, {"t": {"0": 3, "1": 6}})
    with pytest.raises(OffsetMismatchError):
        commit(sink, query, 2, numbered(7, 1), plan=plan)


def test_a_no_data_batch_of_a_query_the_store_no_longer_follows_is_refused(link, sink,
                                                                           postgres):
    q1, q2 = query_id(), query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, q1, 0, numbered(0, 2), plan=plan)
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    commit(sink, q2, 0, numbered(2, 2), plan=plan)  # Q2 took the store over
    # Q1's source still holds... a session; its no-data batch (rows from its state) is
    # refused instead of passing because some source holds the store.
    with pytest.raises(ConfigurationError, match=f"the store follows query {q2}"):
        commit(sink, q1, 1, numbered(90, 1))
    assert sorted(target_rows(postgres, sink)) == numbered(0, 4)


def test_a_covered_batch_makes_the_store_follow_its_query(link, sink, postgres):
    old, fresh = query_id(), query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, old, 0, numbered(0, 2), plan=plan)
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    commit(sink, fresh, 0, numbered(2, 2), plan=plan)
    # The old checkpoint comes back and catches up (its batch ends at the store): covered.
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    assert commit(sink, old, 1, plan=plan).plan.covered
    assert not commit(sink, old, 2).plan.changed  # its no-data batches pass from here


def test_a_partition_new_to_the_query_ending_at_the_stored_offset_is_not_covered(link, sink,
                                                                                postgres):
    query = query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 12}})
    commit(sink, query, 0, numbered(0, 12), plan=plan)
    # The topic was re-created and the query reads the new log from 0 to exactly 12: not
    # the stored records. Unmarked, it is refused with the possible causes...
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 12}})
    with pytest.raises(OffsetMismatchError, match="new to this query"):
        commit(sink, query, 1, numbered(100, 12), plan=plan)
    # ...marked by the source as moved by data loss, it is written.
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 12}}, resets={"t": {"0": 0}})
    result = commit(sink, query, 1, numbered(100, 12), plan=plan)
    assert result.plan.changed and not result.plan.covered
    assert len(target_rows(postgres, sink)) == 24


@pytest.mark.parametrize("dsn", [
    "postgresql://app:Sw0rd%fish@127.0.0.1:1/db",  # a bare '%': libpq quotes the token
    "host=127.0.0.1 port=1 password=Sw0rd%fish stray",  # a word without '='
    "postgresql://app:Sw0rd%fish@[::1/db",  # a broken IPv6 bracket: libpq quotes the URI
])
def test_no_piece_of_a_bad_dsn_reaches_the_exception_chain(dsn):
    import traceback

    link = SourceLink(dsn, "s")
    with pytest.raises(OffsetStoreError) as raised:
        link.committed()
    shown = "".join(traceback.format_exception(raised.value))
    assert "Sw0rd" not in shown and "fish" not in shown


def test_stores_whose_names_read_alike_have_different_locks():
    assert lock_key("x", "a/b") != lock_key("x/a", "b")


def test_a_first_batch_whose_read_was_pruned_reads_nothing_while_the_source_holds(link, sink):
    link.hold()  # the source took the store at its start; Spark planned no read (limit(0))
    result = commit(sink, query_id(), 0)
    assert not result.plan.changed and link.committed() is None


def test_rows_with_no_plan_are_refused_even_while_a_source_holds_a_planless_store(link, sink,
                                                                                  postgres):
    link.hold()  # a linked query took the store and has planned nothing yet
    with pytest.raises(ConfigurationError, match="the store has no plan"):
        commit(sink, query_id(), 0, numbered(0, 3))  # a query whose source is not linked
    assert target_rows(postgres, sink) == []


def test_a_catch_up_plan_reads_nothing_and_the_batchs_other_rows_are_written(link, sink,
                                                                            postgres):
    old, fresh = query_id(), query_id()
    plan = link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}})
    commit(sink, old, 0, numbered(0, 2), plan=plan)
    plan = link.record_plan({"t": {"0": 2}}, {"t": {"0": 4}})
    commit(sink, fresh, 0, numbered(2, 2), plan=plan)
    # The old checkpoint catches up: its plan ends where it starts, at the store; the
    # batch's rows (another source's, in a union) are written; the store follows it.
    plan = link.record_plan({"t": {"0": 4}}, {"t": {"0": 4}})
    result = commit(sink, old, 1, numbered(100, 2), plan=plan)
    assert not result.skipped and result.rows == 2 and link.committed() == {"t": {"0": 4}}
    assert not commit(sink, old, 2).plan.changed  # the store follows the old query now
