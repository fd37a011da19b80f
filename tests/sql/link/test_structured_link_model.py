"""A model of a linked query end to end: source, offset store, sink and Spark's engine.

The real :class:`KafkaDirectStreamReader` driver side (over a FakeCluster, linked to a real
:class:`SourceLink` on the real PostgreSQL), the real ``commit_batch`` sink, and a small
simulation of Spark's micro-batch engine: per checkpoint an offset log (batch id -> start
and end offsets) and a commit log. Each batch: ``latestOffset`` (the first of a run
catches up to the store), the offset log written, ``partitions()`` (which records the
plan), read tasks binding the plan to the query and batch and staging one row per offset,
``commit_batch``, the commit log. Batch 0 starts from ``initialOffset()``, asked again
when the batch runs (as Spark does while nothing is committed).

Random sequences of: records produced, partitions added, batches (sometimes with a
``maxOffsetsPerTrigger`` limit), crashes at a point of a batch (after the offset log,
after staging, after the sink's commit but before Spark's commit log), restarts from the
same checkpoint (the uncommitted batch runs again), from none (a new query id, starting
from the store) or from an older copy of the checkpoint, the source's lock session broken
by PostgreSQL, and a second query (fresh checkpoint) running a batch while the first
one's batch is in flight. A step may instead fail with one of our typed errors: the query
stopped, and it is restarted without its checkpoint (the documented fix).

Checked after every step: every (partition, offset) is in the target at most once, and the
target holds exactly the offsets below the store's committed ones (the log prefix the store
claims); the store never goes back. A drain (batches run until nothing is left, restarting
without checkpoint on a typed error) reads everything produced.

A variant runs the query as the raw ingest job does: the source's read tasks emit their
offset ranges (``emit=offsetRanges``, the real ``read()``), and the sink's tasks turn the
rows back into ranges (``ranges_of``), read those records from the model's cluster and
write them straight into the target with their claims (``write_direct``); ``commit_batch``
commits the claims with the offsets. There, a batch's rows show before its commit: the
target holds the store's prefix, and beyond it only offsets an attempt still claims (its
primary key on the coordinates fails a row written twice at once).

The default run is short; ``KAFKA_DIRECT_LINK_MODEL_EXAMPLES=n`` runs n examples, and the
slow test (``-m slow``) many more.
"""

import copy
import logging
import os
import uuid
from collections import Counter

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
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from kafka_direct import TopicPartition
from kafka_direct.errors import (
    ConfigurationError,
    DataLossError,
    GroupBusyError,
    KafkaDirectError,
    OffsetMismatchError,
)
from kafka_direct.postgres.sink_claims import RANGES_TABLE
from kafka_direct.sql.link import store_lock
from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.range_rows import ranges_of
from kafka_direct.sql.sink.commit import commit_batch
from kafka_direct.sql.source.planning import KafkaInputPartition
from kafka_direct.task_errors import CarriedTaskError, carried_error
from tests.fakes.fake_cluster import FakeCluster
from tests.sql.sink.test_sink_direct import make_sink as make_direct_sink
from tests.sql.sink.test_sink_direct import write as write_direct_rows
from tests.sql.sink.test_sink_protocol import make_sink, stage
from tests.sql.source.test_source_stream_reader import make_reader

TOPIC = "t"
MAX_PARTITIONS = 3
EXAMPLES = int(os.environ.get("KAFKA_DIRECT_LINK_MODEL_EXAMPLES", "12"))
#: What stops a query: the errors a user is told to fix by restarting without checkpoint.
STOPPING = (OffsetMismatchError, DataLossError, GroupBusyError, ConfigurationError)
#: Where a batch may crash.
CRASH_POINTS = ("after offset log", "after staging", "after sink commit")
#: What the runs did (shown with ``-s``): stops by error type, crashes, batches.
OUTCOMES = Counter()


def note_outcome(what):
    OUTCOMES[what] += 1


def record_id(partition, offset):
    return partition * 1_000_000 + offset


def stopping_error(error):
    """The typed error that stops the query, or None (then the error is a defect)."""
    typed = carried_error(error) if isinstance(error, CarriedTaskError | KafkaDirectError) \
        else None
    return typed if isinstance(typed, STOPPING) else None


class Crash(Exception):
    """The driver died at a point of a batch."""


class Query:
    """One query: its id, its checkpoint (offset and commit logs) and its source's reader."""

    def __init__(self, queryId, offsets=None, commits=None):
        self.id = queryId
        self.offsets = offsets if offsets is not None else {}  # batch -> (start, end)
        self.commits = commits if commits is not None else set()
        self.reader = None

    def checkpoint(self):
        return (self.id, copy.deepcopy(self.offsets), set(self.commits))


class Engine:
    """Spark's micro-batch execution of one query over the model's cluster, link and sink."""

    def __init__(self, cluster, link, sink, direct=False):
        self.cluster, self.link, self.sink = cluster, link, sink
        #: The raw job's way: tasks emit offset ranges, the sink reads and writes them.
        self.direct = direct

    def start(self, query):
        """A run of ``query`` starts: a new reader; Spark asks its read limit (the lock)."""
        emit = {"emit": "offsetRanges"} if self.direct else {}
        query.reader = make_reader(self.cluster, link=self.link, startingOffsets="earliest",
                                   **emit)
        query.reader.getDefaultReadLimit()

    def task(self, query, batch, task, part):
        """One read task's rows, handed to one write task: its commit message."""
        if not self.direct:
            rows = [(record_id(r.partition, o), f"r{r.partition}-{o}")
                    for r in part.offsetRanges for o in range(r.fromOffset, r.untilOffset)]
            return stage(self.sink, query.id, batch, task, rows)
        # The source's task (its plan bound above) emits the ranges; the sink's task reads
        # their records (the cluster's offsets) and writes them with their claims.
        emitted = list(query.reader.read(KafkaInputPartition(part.offsetRanges)))
        rows = [(TOPIC, r.partition, o, f"r{r.partition}-{o}")
                for r in ranges_of(emitted) for o in range(r.fromOffset, r.untilOffset)]
        return write_direct_rows(self.sink, query.id, batch, task, rows)

    def empty_task(self, query, batch):
        return (write_direct_rows(self.sink, query.id, batch, 0, []) if self.direct
                else stage(self.sink, query.id, batch, 0, []))

    def run_batch(self, query, limit=None, crashAt=None, inFlight=None):
        """One micro-batch: the checkpoint's uncommitted batch again, else a new one.

        Returns the batch id, or None when there is nothing new (no batch). ``inFlight``
        runs after the batch's rows are staged, before its commit.

        Raises:
            Crash: ``crashAt`` was reached.
        """
        reader = query.reader
        last = max(query.offsets, default=-1)
        if last >= 0 and last not in query.commits:
            batch = last  # Spark runs the batch of its offset log again
        else:
            start = query.offsets[last][1] if last >= 0 else reader.initialOffset()
            end = reader.latestOffset(
                start, ReadAllAvailable() if limit is None else ReadMaxRows(limit))
            if end == start and last >= 0:
                # Nothing new. A new query runs its batch 0 all the same (Spark compares
                # the available offsets with the committed ones, none yet): it reads nothing.
                return None
            batch = last + 1
            query.offsets[batch] = (copy.deepcopy(start), copy.deepcopy(end))
        if crashAt == "after offset log":
            raise Crash
        end = query.offsets[batch][1]
        # Spark's start: the previous batch's end, else (nothing committed) initialOffset.
        start = query.offsets[batch - 1][1] if batch - 1 in query.offsets \
            else reader.initialOffset()
        messages = []
        for task, part in enumerate(reader.partitions(start, end)):
            if part.planId is not None:  # what bind_plan does with the task's properties
                self.link.bind_read(part.planId, query.id, batch)
            messages.append(self.task(query, batch, task, part))
        if not messages:  # Spark writes a batch of no input partition with one empty task
            messages.append(self.empty_task(query, batch))
        if inFlight is not None:
            inFlight()
        if crashAt == "after staging":
            raise Crash
        result = commit_batch(self.sink, batch, messages)
        if crashAt == "after sink commit":
            raise Crash
        query.commits.add(batch)
        reader.commit(end)
        note_outcome("batch covered by the store" if result.plan and result.plan.covered
                     else "batch skipped as committed" if result.skipped
                     else "batch committed")
        return batch


def model_for(postgres, direct=False):
    class LinkModel(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            logging.getLogger("kafka_direct").setLevel(logging.ERROR)
            self.schema = f"link_model_{uuid.uuid4().hex[:10]}"
            self.sql(f'CREATE SCHEMA "{self.schema}"')
            self.link = SourceLink(postgres.dsn, f"store-{uuid.uuid4().hex[:6]}", self.schema)
            store = {"offsetStore.name": self.link.store, "offsetStore.schema": self.schema}
            self.sink = (make_direct_sink if direct else make_sink)(postgres, self.schema,
                                                                    **store)
            self.cluster = FakeCluster()
            self.cluster.create(TOPIC, 1)
            self.engine = Engine(self.cluster, self.link, self.sink, direct)
            self.query = Query(str(uuid.uuid4()))
            self.saved = []  # copies of checkpoints kept earlier
            self.stored = {}  # the store's offsets last seen (never to go back)
            self.stops = 0
            self.guard(lambda: self.engine.start(self.query))

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
            logging.getLogger("kafka_direct").setLevel(logging.NOTSET)
            self.link.release()
            self.sql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            self._session.close()

        # -- the query's life ----------------------------------------------------------

        def guard(self, action):
            """Run ``action``; a typed error stops the query, restarted without checkpoint."""
            try:
                return action()
            except Crash:
                note_outcome("crashed")
                self.down()
            except Exception as error:
                typed = stopping_error(error)
                if typed is None:
                    raise
                note_outcome(f"query stopped: {type(typed).__name__}")
                self.stops += 1
                self.down()
                self.restart_query(None)
            return None

        def down(self):
            """The query's driver ended: its source's process lets go of the store."""
            self.link.release()
            self.query.reader = None

        def restart_query(self, checkpoint):
            """Start the query again from ``checkpoint`` (None: without one, a new id)."""
            if self.query.reader is not None:
                self.down()
            self.query = Query(str(uuid.uuid4())) if checkpoint is None else Query(
                checkpoint[0], copy.deepcopy(checkpoint[1]), set(checkpoint[2]))
            try:
                self.engine.start(self.query)
            except Exception as error:
                if stopping_error(error) is None or checkpoint is None:
                    raise
                self.stops += 1
                self.down()
                self.restart_query(None)

        # -- rules ---------------------------------------------------------------------

        @rule(partition=st.integers(0, MAX_PARTITIONS - 1), count=st.integers(1, 4))
        def produce(self, partition, count):
            partitions = len(self.cluster.topics[TOPIC])
            self.cluster.produce(TopicPartition(TOPIC, partition % partitions), count)

        @precondition(lambda self: len(self.cluster.topics[TOPIC]) < MAX_PARTITIONS)
        @rule(records=st.integers(0, 3))
        def add_partition(self, records):
            self.cluster.add_partitions(TOPIC, 1)
            if records:
                self.cluster.produce(
                    TopicPartition(TOPIC, len(self.cluster.topics[TOPIC]) - 1), records)

        @precondition(lambda self: self.query.reader is not None)
        @rule(limit=st.none() | st.integers(1, 4))
        def run_batch(self, limit):
            self.guard(lambda: self.engine.run_batch(self.query, limit))

        @precondition(lambda self: self.query.reader is not None)
        @rule(limit=st.none() | st.integers(1, 4), point=st.sampled_from(CRASH_POINTS),
              produced=st.integers(0, 3))
        def crash_in_batch(self, limit, point, produced):
            if produced:
                self.cluster.produce(TopicPartition(TOPIC, 0), produced)
            self.guard(lambda: self.engine.run_batch(self.query, limit, crashAt=point))

        @rule()
        def keep_checkpoint_copy(self):
            self.saved.append(self.query.checkpoint())

        @rule()
        def restart_with_checkpoint(self):
            self.restart_query(self.query.checkpoint())

        @rule()
        def restart_without_checkpoint(self):
            self.restart_query(None)

        @precondition(lambda self: self.saved)
        @rule(which=st.integers(0, 50))
        def restart_with_old_checkpoint(self, which):
            self.restart_query(self.saved[which % len(self.saved)])

        @rule()
        def break_lock_session(self):
            holder = store_lock._holders.get((self.link.database, self.link.schema,
                                              self.link.store))
            if holder is None or holder.connection is None or holder.connection.closed:
                return
            self.sql("SELECT pg_terminate_backend(%s)", holder.connection.get_backend_pid())
            note_outcome("lock session broken")

        @precondition(lambda self: self.query.reader is not None)
        @rule(limit=st.none() | st.integers(1, 4), breaks=st.booleans(),
              produced=st.integers(0, 3))
        def second_query_during_batch(self, limit, breaks, produced):
            """A second query (fresh checkpoint) runs a batch while the first one's is in
            flight; in this process both share the hold on the store (as if the first
            query's session broke and the second took the store)."""
            def second():
                if breaks:
                    self.break_lock_session()
                if produced:
                    self.cluster.produce(TopicPartition(TOPIC, 0), produced)
                other = Query(str(uuid.uuid4()))
                try:
                    self.engine.start(other)
                    if self.engine.run_batch(other, limit) is not None:
                        note_outcome("second query's batch committed in flight")
                except Exception as error:
                    typed = stopping_error(error)
                    if typed is None:
                        raise
                    note_outcome(f"second query stopped: {type(typed).__name__}")
                    self.stops += 1  # the second query stopped; its user drops it
            self.guard(lambda: self.engine.run_batch(self.query, limit, inFlight=second))

        @rule()
        def drain(self):
            """Without faults, batches read everything produced."""
            if self.query.reader is None:
                self.restart_query(self.query.checkpoint())
            for _ in range(10):
                ran = self.guard(lambda: ("ran", self.engine.run_batch(self.query)))
                if ran == ("ran", None):  # nothing new: no batch
                    break
            else:
                raise AssertionError("batches never caught up with the log")
            committed = (self.link.committed() or {}).get(TOPIC, {})
            ends = {str(p): log.end for p, log in enumerate(self.cluster.topics[TOPIC])}
            assert {p: o for p, o in committed.items()} == {
                p: o for p, o in ends.items() if o or p in committed}, (committed, ends)

        # -- what must hold ------------------------------------------------------------

        def target_ids(self):
            if not direct:
                return [i for (i,) in self.sql(f'SELECT id FROM "{self.schema}".target')]
            return [record_id(p, o) for p, o in self.sql(
                f'SELECT kafka_partition, kafka_offset FROM "{self.schema}".target')]

        def claimed_ids(self):
            """The offsets claims of attempts hold (direct writes whose batch is not
            committed yet: their rows show before the commit)."""
            if not direct:
                return set()
            return {record_id(p, o) for p, start, end in self.sql(
                f'SELECT kafka_partition, from_offset, until_offset FROM "{self.schema}".'
                f'"{RANGES_TABLE}" WHERE topic = %s', TOPIC) for o in range(start, end)}

        @invariant()
        def the_target_is_the_prefix_the_store_claims(self):
            committed = (self.link.committed() or {}).get(TOPIC, {})
            ids = self.target_ids()
            twice = sorted(i for i, n in Counter(ids).items() if n > 1)
            assert not twice, f"rows written twice: {twice}; store {committed}"
            expected = {record_id(int(p), o) for p, end in committed.items()
                        for o in range(end)}
            lost = sorted(expected - set(ids))
            extra = sorted(set(ids) - expected - self.claimed_ids())
            assert not lost and not extra, (
                f"store {committed}: rows missing {lost}, rows beyond the store {extra}")

        @invariant()
        def the_store_never_goes_back(self):
            committed = (self.link.committed() or {}).get(TOPIC, {})
            back = {p: (o, committed.get(p)) for p, o in self.stored.items()
                    if committed.get(p, -1) < o}
            assert not back, f"the store went back: {back}"
            self.stored = dict(committed)

    return LinkModel


@pytest.mark.parametrize("direct", [False, True], ids=["records", "offset ranges"])
def test_the_linked_query_model(postgres, direct):
    OUTCOMES.clear()
    run_state_machine_as_test(model_for(postgres, direct), settings=settings(
        max_examples=EXAMPLES, stateful_step_count=25, deadline=None,
        suppress_health_check=list(HealthCheck)))
    print(f"linked query model, {EXAMPLES} examples: {dict(OUTCOMES)}")


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("direct", [False, True], ids=["records", "offset ranges"])
def test_the_linked_query_model_many_examples(postgres, direct):
    OUTCOMES.clear()
    run_state_machine_as_test(model_for(postgres, direct), settings=settings(
        max_examples=int(os.environ.get("KAFKA_DIRECT_LINK_MODEL_EXAMPLES", "300")),
        stateful_step_count=50, deadline=None, suppress_health_check=list(HealthCheck)))
    print(f"linked query model: {dict(OUTCOMES)}")
