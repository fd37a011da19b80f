"""A model of the structured sink's commit protocol, run against the real PostgreSQL.

Random sequences of what Spark and its failures do to a query linked to an offset store:
batches planned by the source (with data, or none: a no-data batch), task attempts that
succeed, fail before staging, fail after staging, or run twice (speculation); commits whose
acknowledgement is lost before Spark's commit log records them (the batch runs again);
aborts; restarts from the same checkpoint (same query id) or from a lost one (a new query
id, starting from the store). Checked after every step:

* every record the store says was consumed is in the target exactly once, and no other;
* the store's offsets are the sum of the applied plans (what the model applied);
* no batch is committed twice (a commit of a recorded batch is skipped, and only then);
* no staged rows of the query's committed or aborted batches remain.

The default run is short; ``KAFKA_DIRECT_SINK_MODEL_EXAMPLES=n`` runs n examples, and the
slow test (``-m slow``) many more.
"""

import logging
import os
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kafka_direct.postgres.staging import COMMITS_TABLE, STAGED_TABLE
from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.sink.commit import abort_batch, commit_batch
from tests.sql.sink.test_sink_protocol import make_sink, stage

PARTS = (0, 1)
TOPIC = "t"
EXAMPLES = int(os.environ.get("KAFKA_DIRECT_SINK_MODEL_EXAMPLES", "12"))


def record(partition, offset):
    return (partition * 1_000_000 + offset, f"r{partition}-{offset}")


def as_json(offsets):
    return {TOPIC: {str(p): o for p, o in offsets.items()}}


class Batch:
    def __init__(self, batchId, start, end, plan):
        self.batchId, self.start, self.end, self.plan = batchId, start, end, plan
        self.attempts = {}  # partition -> the successful attempt the commit names

    @property
    def planned(self):
        return self.plan is not None


def model_for(postgres):
    class SinkModel(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            logging.getLogger("kafka_direct").setLevel(logging.ERROR)
            self.schema = f"model_{uuid.uuid4().hex[:10]}"
            self.sql(f'CREATE SCHEMA "{self.schema}"')
            self.link = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:6]}", self.schema)
            self.sink = make_sink(postgres, self.schema, **{
                "offsetStore.name": self.link.store, "offsetStore.schema": self.schema})
            self.query = str(uuid.uuid4())
            self.nextBatch = 0
            self.checkpointEnd = None  # Spark's end offsets of this checkpoint's last batch
            self.inflight = None
            self.recorded = {}  # query -> newest batch committed in PostgreSQL
            self.store = None  # the expected stored offsets

        def sql(self, statement, *params):
            # One session for the model's own statements, each committed on its own (a
            # connection each cost more than the statement).
            connection = getattr(self, "_session", None)
            if connection is None or connection.closed:
                connection = self._session = postgres.connect()
                connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                return cursor.fetchall() if cursor.description else None

        def teardown(self):
            # The level set in __init__ must not outlive the model: later tests read warnings.
            logging.getLogger("kafka_direct").setLevel(logging.NOTSET)
            self.link.release()
            self.sql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            self._session.close()

        # -- what Spark does -----------------------------------------------------------

        @precondition(lambda self: self.inflight is None)
        @rule(counts=st.tuples(st.integers(0, 3), st.integers(0, 3)))
        def plan_batch(self, counts):
            if self.checkpointEnd is not None:
                start = dict(self.checkpointEnd)
            else:  # a fresh checkpoint: the source starts from the store, else the earliest
                committed = self.link.committed()
                assert committed == (None if self.store is None else as_json(self.store))
                start = {p: int(committed[TOPIC][str(p)]) if committed else 0 for p in PARTS}
            if sum(counts) == 0 and self.checkpointEnd is None:
                counts = (1, 0)  # a query's first batch reads something, or does not run
            end = {p: start[p] + counts[p] for p in PARTS}
            plan = None  # Spark plans no read for a no-data batch
            if sum(counts) > 0:
                plan = self.link.record_plan(as_json(start), as_json(end))
            self.inflight = Batch(self.nextBatch, start, end, plan)

        @precondition(lambda self: self.inflight is not None)
        @rule(partition=st.sampled_from(PARTS),
              outcome=st.sampled_from(["ok", "ok", "fails after staging", "fails before"]))
        def task(self, partition, outcome):
            batch = self.inflight
            if batch.planned:  # every read task binds the plan first
                self.link.bind_read(batch.plan, self.query, batch.batchId)
            if outcome == "fails before":
                return  # its transaction rolled back: nothing staged
            rows = [record(partition, o) for o in range(batch.start[partition],
                                                        batch.end[partition])]
            attempt = stage(self.sink, self.query, batch.batchId, partition, rows)
            if outcome == "ok" and partition not in batch.attempts:
                batch.attempts[partition] = attempt  # later successes: speculative, unused

        @precondition(lambda self: self.inflight is not None)
        @rule(acknowledged=st.booleans())
        def commit(self, acknowledged):
            batch = self.inflight
            for partition in PARTS:  # the tasks still running succeed first
                if partition not in batch.attempts:
                    self.task(partition, "ok")
            result = commit_batch(self.sink, batch.batchId,
                                  [batch.attempts[p] for p in PARTS])
            before = self.recorded.get(self.query, -1) >= batch.batchId
            assert result.skipped is before, (result, before)
            if not result.skipped:
                self.recorded[self.query] = batch.batchId
                assert result.plan is not None and result.plan.changed is batch.planned
                if batch.planned:
                    self.store = dict(batch.end)
            if acknowledged:
                self.checkpointEnd = dict(batch.end)
                self.nextBatch += 1
                self.inflight = None
            else:  # the driver died after PostgreSQL committed, before Spark's commit log
                self.restart(fresh=False)

        @precondition(lambda self: self.inflight is not None)
        @rule()
        def abort(self):
            batch = self.inflight
            abort_batch(self.sink, batch.batchId, [batch.attempts.get(p) for p in PARTS])
            self.restart(fresh=False)  # the query failed; it is restarted

        @rule(fresh=st.booleans())
        def restart(self, fresh):
            self.link.release()  # the source's process ended with the driver
            if fresh:  # the checkpoint directory was lost: a new query
                self.query = str(uuid.uuid4())
                self.nextBatch, self.checkpointEnd, self.inflight = 0, None, None
            elif self.inflight is not None:  # Spark runs the planned batch again
                self.inflight.attempts = {}
                if self.inflight.planned:
                    self.inflight.plan = self.link.record_plan(as_json(self.inflight.start),
                                                               as_json(self.inflight.end))

        # -- what must hold ------------------------------------------------------------

        @invariant()
        def every_consumed_record_is_in_the_target_once(self):
            rows = self.sql(f'SELECT id, v FROM "{self.schema}".target')
            expected = [record(p, o) for p in PARTS
                        for o in range(self.store[p] if self.store else 0)]
            assert sorted(rows) == sorted(expected)

        @invariant()
        def the_store_holds_the_applied_plans(self):
            if self.store is None:
                return
            assert self.link.committed() == as_json(self.store)

        @invariant()
        def each_batch_is_recorded_once(self):
            rows = self.sql(f'SELECT query_id, batch_id FROM "{self.schema}".{COMMITS_TABLE}')
            assert {q: b for q, b in rows if b >= 0} == self.recorded

        @invariant()
        def no_staging_of_finished_batches(self):
            rows = self.sql(f'SELECT DISTINCT batch_id FROM "{self.schema}".{STAGED_TABLE} '
                            "WHERE query_id = %s", self.query)
            allowed = set() if self.inflight is None else {self.inflight.batchId}
            assert {b for (b,) in rows} <= allowed

    return SinkModel


def test_the_commit_protocol_model(postgres):
    run_state_machine_as_test(model_for(postgres), settings=settings(
        max_examples=EXAMPLES, stateful_step_count=25, deadline=None,
        suppress_health_check=list(HealthCheck)))


@pytest.mark.slow
def test_the_commit_protocol_model_many_examples(postgres):
    run_state_machine_as_test(model_for(postgres), settings=settings(
        max_examples=int(os.environ.get("KAFKA_DIRECT_SINK_MODEL_EXAMPLES", "400")),
        stateful_step_count=50, deadline=None, suppress_health_check=list(HealthCheck)))
