"""Direct writes (``offsetColumns``): tasks COPY into the target and claim their offsets.

Tasks are played by ``write_direct`` (what a write task runs with ``offsetColumns``), the
driver by ``commit_batch``, against the real PostgreSQL: retried and speculative attempts,
zombies after the commit, batches run again after a failure (split alike or not), a new
query over offsets a failed batch wrote, split pieces of a partition, and a
differential check against the staging path.
"""

import uuid

import pyarrow as pa
import pytest

from kafka_direct.errors import ConfigurationError, SinkWriteError
from kafka_direct.postgres.direct_write import write_direct
from kafka_direct.postgres.sink_claims import RANGES_TABLE
from kafka_direct.sql.sink.commit import abort_batch, commit_batch
from kafka_direct.sql.sink.options import parse_options
from kafka_direct.sql.sink.target import prepare_target

FIELDS = ["topic", "kafka_partition", "kafka_offset", "v"]
OFFSETS = "topic,kafka_partition,kafka_offset"


def make_sink(postgres, schema, table="target", **options):
    """Prepared direct-write options over ``schema.table`` (coordinates and a text value)."""
    primary = "PRIMARY KEY (topic, kafka_partition, kafka_offset)"
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE IF NOT EXISTS "{schema}"."{table}" (topic text, '
                       f"kafka_partition int, kafka_offset bigint, v text, {primary})")
    connection.close()
    given = {"dsn": postgres.dsn, "table": table, "schema": schema, "offsetColumns": OFFSETS,
             **options}
    from pyspark.sql.types import IntegerType, LongType, StringType

    types = [StringType(), IntegerType(), LongType(), StringType()]
    return prepare_target(parse_options(given, FIELDS, False), list(zip(FIELDS, types,
                                                                        strict=True)))


def direct_target(options):
    """The sink's own target: with its linked store (whose offsets count as claims)."""
    from kafka_direct.sql.sink.postgres_sink import _direct_target

    return _direct_target(options)


def records(partition, start, count, topic="t", tag="v", value=None):
    """Kafka records ``[start, start + count)`` of ``topic``-``partition`` as rows."""
    return [(topic, partition, offset, value(offset) if value else f"{tag}{offset}")
            for offset in range(start, start + count)]


def batches(rows, chunks=1):
    size = max(1, -(-len(rows) // chunks))
    parts = [rows[i:i + size] for i in range(0, len(rows), size)] or [[]]
    out = []
    for part in parts:
        columns = list(zip(*part, strict=True)) if part else [(), (), (), ()]
        out.append(pa.record_batch({
            "topic": pa.array(columns[0], pa.string()),
            "kafka_partition": pa.array(columns[1], pa.int32()),
            "kafka_offset": pa.array(columns[2], pa.int64()),
            "v": pa.array(columns[3], pa.string())}))
    return out


def write(options, query, batch, partition, rows, chunks=1):
    return write_direct(direct_target(options), query, batch, partition, batches(rows, chunks))


def table_rows(postgres, options):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT topic, kafka_partition, kafka_offset, v FROM '
                       f'"{options.schema}"."{options.table}" ORDER BY 1, 2, 3, 4')
        rows = cursor.fetchall()
    connection.close()
    return rows


def claims_left(postgres, options):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT topic, kafka_partition, from_offset, until_offset FROM '
                       f'"{options.stagingSchema}".{RANGES_TABLE} ORDER BY 1, 2, 3')
        rows = cursor.fetchall()
    connection.close()
    return rows


def query_id():
    return str(uuid.uuid4())


def test_rows_go_straight_into_the_target_and_the_commit_clears_the_claims(postgres,
                                                                             pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    attempts = [write(sink, query, 0, p, records(p, 0, 5), chunks=2) for p in range(2)]
    # Written by the tasks themselves: there before the commit, claimed.
    assert len(table_rows(postgres, sink)) == 10
    assert claims_left(postgres, sink) == [("t", 0, 0, 5), ("t", 1, 0, 5)]
    result = commit_batch(sink, 0, attempts)
    assert (result.rows, result.skipped) == (10, False)
    assert table_rows(postgres, sink) == records(0, 0, 5) + records(1, 0, 5)
    assert claims_left(postgres, sink) == []


def test_a_retried_attempt_writes_nothing_twice(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    lost = write(sink, query, 0, 0, records(0, 0, 6))  # wrote, then its message was lost
    retry = write(sink, query, 0, 0, records(0, 0, 6), chunks=3)
    assert retry.rows == 0 and retry.covered == (lost.token,)
    other = write(sink, query, 0, 1, records(1, 0, 2))
    assert commit_batch(sink, 0, [retry, other]).rows == 2
    assert table_rows(postgres, sink) == records(0, 0, 6) + records(1, 0, 2)
    assert claims_left(postgres, sink) == []


def test_a_zombie_after_the_commit_writes_nothing(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    commit_batch(sink, 3, [write(sink, query, 3, 0, records(0, 0, 4))])
    zombie = write(sink, query, 3, 0, records(0, 0, 4, tag="zombie"))
    assert zombie.skipped and zombie.rows == 0
    assert table_rows(postgres, sink) == records(0, 0, 4)
    assert claims_left(postgres, sink) == []


def _twin(options, query, rows, answers):
    try:
        answers.put(write(options, query, 0, 0, rows, chunks=30))
    except Exception as error:  # reported by the test
        answers.put(repr(error))


def test_speculative_twins_write_once(postgres, pg_schema):
    import multiprocessing

    sink = make_sink(postgres, pg_schema)
    query = query_id()
    rows = records(0, 0, 3000)
    # Attempts run in processes of their own, as Spark's Python workers do (a process
    # has one connection per database).
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    twins = [context.Process(target=_twin, args=(sink, query, rows, answers))
             for _ in range(3)]
    for twin in twins:
        twin.start()
    results = [answers.get(timeout=120) for _ in twins]
    for twin in twins:
        twin.join(30)
    assert not [r for r in results if isinstance(r, str)]
    assert sorted(r.rows for r in results) == [0, 0, 3000]
    # Spark commits with the message of whichever attempt it saw finish.
    assert commit_batch(sink, 0, [results[0]]).rows == results[0].rows
    assert table_rows(postgres, sink) == rows
    assert claims_left(postgres, sink) == []


def test_a_failed_batch_run_again_writes_only_what_is_missing(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    done = write(sink, query, 5, 0, records(0, 10, 4))
    abort_batch(sink, 5, [done, None])  # partition 1 failed for good: the query stops
    assert len(table_rows(postgres, sink)) == 4  # visible, and claimed
    # The query restarts from its checkpoint and runs batch 5 again, split alike.
    again = [write(sink, query, 5, 0, records(0, 10, 4)), write(sink, query, 5, 1,
                                                                 records(1, 0, 3))]
    assert [a.rows for a in again] == [0, 3] and again[0].covered == (done.token,)
    assert commit_batch(sink, 5, again).rows == 3
    assert table_rows(postgres, sink) == records(0, 10, 4) + records(1, 0, 3)
    assert claims_left(postgres, sink) == []


def test_a_batch_run_again_split_otherwise_writes_each_offset_once(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    # First run: one task per partition; only partition 0's finished.
    first = write(sink, query, 2, 0, records(0, 0, 10))
    abort_batch(sink, 2, [first, None])
    # Run again with the range of partition 0 split in two tasks, partition 1 in a third.
    again = [write(sink, query, 2, 0, records(0, 0, 5)), write(sink, query, 2, 1,
                                                                records(0, 5, 5)),
             write(sink, query, 2, 2, records(1, 0, 4))]
    assert [a.rows for a in again] == [0, 0, 4]
    commit_batch(sink, 2, again)
    assert table_rows(postgres, sink) == records(0, 0, 10) + records(1, 0, 4)


def test_a_new_query_over_a_failed_batch_writes_only_its_other_offsets(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    failed = query_id()
    write(sink, failed, 0, 0, records(0, 0, 6))  # its batch never committed
    fresh = query_id()  # a new checkpoint: its batch reads [0, 10) of partition 0
    attempt = write(sink, fresh, 0, 0, records(0, 0, 10))
    assert attempt.rows == 4 and [(c.fromOffset, c.untilOffset) for c in attempt.claims] == [
        (6, 10)]
    commit_batch(sink, 0, [attempt])
    assert table_rows(postgres, sink) == records(0, 0, 10)


def test_a_batch_another_query_committed_over_its_claims_is_covered(postgres, pg_schema):
    # A second query (its checkpoint lost) runs the batch a first query has in flight: its
    # task finds the first's claims and relies on them, and its commit stores the offsets
    # and releases those claims. The first's commit then finds its batch covered by the
    # store, as a staged batch would be, not its claims missing.
    from kafka_direct.sql.link.source_side import SourceLink

    link = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:6]}", pg_schema)
    sink = make_sink(postgres, pg_schema, **{"offsetStore.name": link.store,
                                              "offsetStore.schema": pg_schema})
    first, second = query_id(), query_id()
    try:
        link.bind_read(link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}}), first, 0)
        commit_batch(sink, 0, [write(sink, first, 0, 0, records(0, 0, 2))])
        link.bind_read(link.record_plan({"t": {"0": 2}}, {"t": {"0": 5}}), first, 1)
        inFlight = write(sink, first, 1, 0, records(0, 2, 3))
        link.bind_read(link.record_plan({"t": {"0": 2}}, {"t": {"0": 5}}), second, 0)
        relying = write(sink, second, 0, 0, records(0, 2, 3))
        assert relying.rows == 0 and relying.covered == (inFlight.token,)
        commit_batch(sink, 0, [relying])
        result = commit_batch(sink, 1, [inFlight])
        assert result.plan is not None and result.plan.covered
        assert link.committed() == {"t": {"0": 5}}
        assert table_rows(postgres, sink) == records(0, 0, 5)
    finally:
        link.release()


def test_a_query_behind_the_store_it_committed_last_writes_nothing_twice(postgres,
                                                                         pg_schema):
    # The store last committed by this query (a batch found covered) is ahead of its
    # checkpoint on a partition that batch did not read: the next batch reads it from
    # behind the store. Its task must look (the store's offsets are claims), not stream
    # rows the target holds (a unique key on the coordinates failed the COPY; without
    # one, the claim's check rolled it back and stopped the query).
    from kafka_direct.sql.link.source_side import SourceLink

    link = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:6]}", pg_schema)
    sink = make_sink(postgres, pg_schema, **{"offsetStore.name": link.store,
                                              "offsetStore.schema": pg_schema})
    query, other = query_id(), query_id()
    try:
        link.bind_read(link.record_plan({"t": {"0": 0, "1": 0}}, {"t": {"0": 2, "1": 2}}),
                       query, 0)
        commit_batch(sink, 0, [write(sink, query, 0, 0, records(0, 0, 2)),
                               write(sink, query, 0, 1, records(1, 0, 2))])
        link.bind_read(link.record_plan({"t": {"0": 2, "1": 2}}, {"t": {"0": 2, "1": 4}}),
                       query, 1)
        inFlight = write(sink, query, 1, 0, records(1, 2, 2))
        link.bind_read(link.record_plan({"t": {"0": 2, "1": 2}}, {"t": {"0": 5, "1": 4}}),
                       other, 0)
        commit_batch(sink, 0, [write(sink, other, 0, 0, records(0, 2, 3)),
                               write(sink, other, 0, 1, records(1, 2, 2))])
        assert commit_batch(sink, 1, [inFlight]).plan.covered
        link.bind_read(link.record_plan({"t": {"0": 2, "1": 4}}, {"t": {"0": 5, "1": 4}}),
                       query, 2)
        behind = write(sink, query, 2, 0, records(0, 2, 3))
        assert behind.rows == 0
        assert commit_batch(sink, 2, [behind]).plan.covered  # stored by the other query
        assert link.committed() == {"t": {"0": 5, "1": 4}}
        assert table_rows(postgres, sink) == sorted(records(0, 0, 5) + records(1, 0, 4))
    finally:
        link.release()


def test_a_batch_run_again_with_a_shorter_plan_keeps_the_claim_past_the_store(postgres,
                                                                               pg_schema):
    # An attempt of batch 0 wrote offsets [0, 2) and the driver died. The query restarts
    # from an older copy of its checkpoint: batch 0 is planned again, now [0, 1). Its
    # attempt relies on the first one's claim; the commit stores 1. The claim still holds
    # offset 1's row beyond the store: it must stay, or batch 1 writes that row again.
    from kafka_direct.sql.link.source_side import SourceLink

    link = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:6]}", pg_schema)
    sink = make_sink(postgres, pg_schema, **{"offsetStore.name": link.store,
                                              "offsetStore.schema": pg_schema})
    query = query_id()
    try:
        link.bind_read(link.record_plan({"t": {"0": 0}}, {"t": {"0": 2}}), query, 0)
        crashed = write(sink, query, 0, 0, records(0, 0, 2))
        link.bind_read(link.record_plan({"t": {"0": 0}}, {"t": {"0": 1}}), query, 0)
        again = write(sink, query, 0, 0, records(0, 0, 1))
        assert again.rows == 0 and again.covered == (crashed.token,)
        commit_batch(sink, 0, [again])
        assert link.committed() == {"t": {"0": 1}}
        assert claims_left(postgres, sink) == [("t", 0, 0, 2)]
        link.bind_read(link.record_plan({"t": {"0": 1}}, {"t": {"0": 2}}), query, 1)
        nextBatch = write(sink, query, 1, 0, records(0, 1, 1))
        assert nextBatch.rows == 0
        commit_batch(sink, 1, [nextBatch])
        assert link.committed() == {"t": {"0": 2}}
        assert table_rows(postgres, sink) == records(0, 0, 2)
        assert claims_left(postgres, sink) == []
    finally:
        link.release()


@pytest.mark.parametrize(("overwrite", "extra"), [
    (False, {"mode": "update", "keyColumns": "v"}), (True, {})])
def test_upserts_and_replacements_stage_instead(overwrite, extra):
    # Each key's latest record across tasks, or the table replaced, is decided at the
    # commit: a task holding one piece of a Kafka partition's range cannot.
    with pytest.raises(ConfigurationError, match="mode=append") as caught:
        parse_options({"table": "t", "offsetColumns": OFFSETS, **extra}, FIELDS, overwrite)
    assert caught.value.setting == "offsetColumns"


def test_a_missing_claim_refuses_the_batch(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    query = query_id()
    attempt = write(sink, query, 0, 0, records(0, 0, 3))
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'DELETE FROM "{pg_schema}".{RANGES_TABLE}')
    connection.close()
    with pytest.raises(SinkWriteError, match="claims"):
        commit_batch(sink, 0, [attempt])


def test_rows_without_coordinates_are_refused(postgres, pg_schema):
    sink = make_sink(postgres, pg_schema)
    broken = pa.record_batch({"topic": pa.array([None], pa.string()),
                              "kafka_partition": pa.array([0], pa.int32()),
                              "kafka_offset": pa.array([1], pa.int64()),
                              "v": pa.array(["x"], pa.string())})
    with pytest.raises(ConfigurationError, match="offsetColumns|coordinates"):
        write_direct(direct_target(sink), query_id(), 0, 0, [broken])
    assert table_rows(postgres, sink) == []


@pytest.mark.parametrize(("options", "match"), [
    ({"offsetColumns": "topic,kafka_partition"}, "three target columns"),
    ({"offsetColumns": "topic,kafka_partition,nope"}, "not among the written columns"),
])
def test_bad_offset_columns_are_refused_by_name(options, match):
    with pytest.raises(ConfigurationError, match=match) as caught:
        parse_options({"table": "t", **options}, FIELDS, False)
    assert caught.value.setting == "offsetColumns"


def test_direct_and_staged_writes_leave_the_same_table(postgres, pg_schema):
    """Differential: the same attempts, failures and re-runs through both paths."""
    from kafka_direct.postgres.staging import stage_rows
    from tests.sql.sink.test_sink_protocol import make_sink as staged_sink
    from tests.sql.sink.test_sink_protocol import staging_target

    direct = make_sink(postgres, pg_schema, table="direct")
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".staged (topic text, kafka_partition int, '
                       "kafka_offset bigint, v text)")
    connection.close()
    staged = staged_sink(postgres, pg_schema, table="staged", create=False, fields=FIELDS)
    script = [(0, [(0, records(0, 0, 5)), (1, records(1, 0, 2))], True),
              (1, [(0, records(0, 5, 3))], False),  # fails: run again below
              (1, [(0, records(0, 5, 3)), (1, records(1, 2, 2))], True),
              (2, [(0, records(0, 8, 1)), (1, records(1, 4, 7))], True)]
    queries = query_id(), query_id()
    for batch, tasks, commits in script:
        d = [write(direct, queries[0], batch, p, rows) for p, (_, rows) in enumerate(tasks)]
        s = [stage_rows(staging_target(staged), queries[1], batch, p, batches(rows))
             for p, (_, rows) in enumerate(tasks)]
        if commits:
            commit_batch(direct, batch, d)
            commit_batch(staged, batch, s)
        else:
            abort_batch(direct, batch, d)
            abort_batch(staged, batch, s)
    assert table_rows(postgres, direct) == table_rows(postgres, staged)


def direct_model_for(postgres):
    """The commit protocol's model (test_sink_model.py) with tasks that write directly.

    The same random runs of plans, attempts that succeed, fail before or after writing, run
    twice, lost acknowledgements, aborts and restarts (same or lost checkpoint); what must
    hold changes with rows written before their batch commits:

    * the table holds every record below the store's offsets, plus records a claim covers
      (written by attempts of batches not committed yet), each exactly once, and no other;
    * every claim reaches beyond the store's offsets (a commit deletes the ones it passes; a
      claim straddling the store's end stays: it holds rows past it).
    """
    from hypothesis import strategies as st
    from hypothesis.stateful import invariant, precondition, rule

    from tests.sql.sink.test_sink_model import PARTS, TOPIC, model_for

    Base = model_for(postgres)

    class DirectModel(Base):
        def __init__(self):
            super().__init__()
            self.sql(f'DROP TABLE "{self.schema}".target')
            self.sql(f'CREATE TABLE "{self.schema}".direct (topic text, kafka_partition int, '
                     "kafka_offset bigint, v text)")  # no key: a duplicate would show
            given = {"dsn": postgres.dsn, "table": "direct", "schema": self.schema,
                     "offsetColumns": OFFSETS, "offsetStore.name": self.link.store,
                     "offsetStore.schema": self.schema}
            from pyspark.sql.types import IntegerType, LongType, StringType

            types = [StringType(), IntegerType(), LongType(), StringType()]
            self.sink = prepare_target(parse_options(given, FIELDS, False),
                                       list(zip(FIELDS, types, strict=True)))

        @precondition(lambda self: self.inflight is not None)
        @rule(partition=st.sampled_from(PARTS),
              outcome=st.sampled_from(["ok", "ok", "fails after writing", "fails before"]))
        def task(self, partition, outcome):
            batch = self.inflight
            if batch.planned:
                self.link.bind_read(batch.plan, self.query, batch.batchId)
            if outcome == "fails before":
                return
            rows = records(partition, batch.start[partition],
                           batch.end[partition] - batch.start[partition], topic=TOPIC)
            attempt = write(self.sink, self.query, batch.batchId, partition, rows)
            if outcome == "ok" and partition not in batch.attempts:
                batch.attempts[partition] = attempt

        @invariant()
        def every_consumed_record_is_in_the_target_once(self):
            rows = self.sql(f'SELECT topic, kafka_partition, kafka_offset, v FROM '
                            f'"{self.schema}".direct')
            claims = self.sql(f'SELECT kafka_partition, from_offset, until_offset FROM '
                              f'"{self.schema}".{RANGES_TABLE}')
            stored = self.store or {p: 0 for p in PARTS}
            expected = {r for p in PARTS for r in records(p, 0, stored[p], topic=TOPIC)}
            claimed = {r for p, low, high in claims for r in records(p, low, high - low,
                                                                       topic=TOPIC)}
            assert len(rows) == len(set(rows)), "a record written twice"
            assert expected <= set(rows) <= expected | claimed
            assert all(high > stored[p] for p, _, high in claims), (claims, stored)

        @invariant()
        def no_staging_of_finished_batches(self):
            pass  # nothing is staged

    return DirectModel


def test_the_direct_commit_protocol_model(postgres):
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from tests.sql.sink.test_sink_model import EXAMPLES

    # Half the staged model's examples: the default suite's time (-m slow runs many more).
    run_state_machine_as_test(direct_model_for(postgres), settings=settings(
        max_examples=max(EXAMPLES // 2, 1), stateful_step_count=25, deadline=None,
        suppress_health_check=list(HealthCheck)))


@pytest.mark.slow
@pytest.mark.timeout(3600)  # hundreds of runs of 50 steps on real PostgreSQL
def test_the_direct_commit_protocol_model_many_examples(postgres):
    import os

    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(direct_model_for(postgres), settings=settings(
        max_examples=int(os.environ.get("KAFKA_DIRECT_SINK_MODEL_EXAMPLES", "300")),
        stateful_step_count=50, deadline=None, suppress_health_check=list(HealthCheck)))
