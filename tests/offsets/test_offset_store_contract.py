"""The offset-store contract, the same for every store: PostgreSQL, Kafka group, checkpoint.

A table of cases (one commit carrying several ranges of a partition among them) and a
Hypothesis state machine run against all three stores with one model. The model runs
``KAFKA_DIRECT_MODEL_EXAMPLES`` examples per store (a small default keeps the run short);
``-m slow`` runs a longer one.
"""

import contextlib
import itertools
import os
import random
import uuid
from unittest import mock

import psycopg2
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kafka_direct import OffsetMismatchError, OffsetRange, TopicPartition
from kafka_direct.client.driver_consumer import DriverConsumer
from offsets import CheckpointOffsetStore, KafkaOffsetStore, PostgresOffsetStore

PARTITIONS = 2
LOG_END = 400  # records per partition: every offset the cases use exists


class Injected(Exception):
    """A failure between a store's write and its commit."""


class Backing:
    """Where a store keeps its offsets; new store objects on it act as restarts."""

    topic = "events"

    def store(self):
        raise NotImplementedError

    def failing_commit(self, store, group, ranges):
        """Run ``store.commit`` with a failure after the write, before the commit."""
        raise NotImplementedError

    def close(self):
        """End what the backing holds open."""


class PostgresBacking(Backing):
    def __init__(self, dsn, schema):
        self.dsn, self.schema = dsn, schema
        self._writer = None  # the failing commits' session: rolled back after each

    def store(self):
        return PostgresOffsetStore(self.dsn, table="contract", schema=self.schema)

    def failing_commit(self, store, group, ranges):
        if self._writer is None or self._writer.closed:
            self._writer = psycopg2.connect(self.dsn)
        try:
            with self._writer.cursor() as cursor:
                store.commit(group, ranges, cursor=cursor)
            raise Injected("the process died before COMMIT")
        finally:
            self._writer.rollback()

    def close(self):
        if self._writer is not None:
            self._writer.close()


class CheckpointBacking(Backing):
    def __init__(self, directory):
        self.directory = directory

    def store(self):
        return CheckpointOffsetStore(self.directory)

    def failing_commit(self, store, group, ranges):
        # The new offsets are in a temporary file; the rename that commits them fails.
        with mock.patch("offsets.checkpoint_offset_store.os.replace",
                        side_effect=Injected("died before the rename")):
            store.commit(group, ranges)


class KafkaBacking(Backing):
    def __init__(self, kafka, topic):
        self.kafka, self.topic = kafka, topic

    def store(self):
        return KafkaOffsetStore(self.kafka.params())

    def failing_commit(self, store, group, ranges):
        with mock.patch.object(DriverConsumer, "commit",
                               side_effect=Injected("the broker never got the commit")):
            store.commit(group, ranges)


@pytest.fixture(scope="module")
def contract_topic(kafka):
    name = f"contract-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, PARTITIONS)
    for p in range(PARTITIONS):
        kafka.produce(name, [b"x"] * LOG_END, partition=p)
    return name


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.services),
                        pytest.param("kafka", marks=pytest.mark.services), "checkpoint"])
def backing(request, tmp_path):
    if request.param == "postgres":
        postgres = request.getfixturevalue("postgres")
        return PostgresBacking(postgres.dsn, request.getfixturevalue("pg_schema"))
    if request.param == "kafka":
        return KafkaBacking(request.getfixturevalue("kafka"),
                            request.getfixturevalue("contract_topic"))
    return CheckpointBacking(tmp_path)


# -- the model ---------------------------------------------------------------------------

def expected(stored, ranges):
    """What a commit of ``ranges`` does to ``stored`` (model): (new offsets, error?).

    Written apart from the stores' own planning: per partition the ranges must follow each
    other (in any order); the chain applies when the stored offset is its start, is a no-op
    when it is its end, and anything else (or any partition failing) refuses all of it.
    """
    byPartition = {}
    for r in ranges:
        byPartition.setdefault(r.partition, []).append((r.fromOffset, r.untilOffset))
    after = dict(stored)
    for p, pieces in byPartition.items():
        pieces.sort()
        start, end = pieces[0]
        for a, b in pieces[1:]:
            if a != end:
                return stored, True
            end = b
        have = stored.get(p)
        if have == start and end > start:
            after[p] = end
        elif have != end:
            return stored, True
    return after, False


def ranges_of(topic, pieces):
    return [OffsetRange(topic, p, a, b) for p, a, b in pieces]


CASES = [
    # (name, stored before, commit pieces (partition, from, until), stored after or None)
    ("two consecutive ranges chain", {0: 0}, [(0, 0, 10), (0, 10, 20)], {0: 20}),
    ("in any order", {0: 0}, [(0, 10, 20), (0, 0, 10)], {0: 20}),
    ("an empty range inside the chain", {0: 0}, [(0, 0, 10), (0, 10, 10), (0, 10, 20)],
     {0: 20}),
    ("the chain repeated is a no-op", {0: 20}, [(0, 0, 10), (0, 10, 20)], {0: 20}),
    ("chains of two partitions", {0: 0, 1: 5}, [(0, 0, 10), (1, 5, 6), (0, 10, 20),
                                                (1, 6, 9)], {0: 20, 1: 9}),
    ("a hole between the ranges", {0: 0}, [(0, 0, 10), (0, 12, 20)], None),
    ("an overlap between the ranges", {0: 0}, [(0, 0, 10), (0, 5, 20)], None),
    ("the same range twice", {0: 0}, [(0, 0, 10), (0, 0, 10)], None),
    ("half of the chain applied before", {0: 10}, [(0, 0, 10), (0, 10, 20)], None),
    ("a bad chain refuses the good partition too", {0: 0, 1: 0},
     [(1, 0, 5), (0, 0, 10), (0, 11, 20)], None),
]


@pytest.mark.parametrize(("name", "before", "pieces", "after"), CASES,
                         ids=[c[0] for c in CASES])
def test_every_store_treats_one_commits_ranges_of_a_partition_the_same(
        backing, name, before, pieces, after):
    store = backing.store()
    group = f"cases-{uuid.uuid4().hex[:8]}"
    topic = backing.topic
    store.seed(group, {TopicPartition(topic, p): o for p, o in before.items()})
    assert expected(before, ranges_of(topic, pieces)) == (after or before, after is None)
    if after is None:
        with pytest.raises(OffsetMismatchError):
            store.commit(group, ranges_of(topic, pieces))
        after = before  # nothing of the commit was written
    else:
        store.commit(group, ranges_of(topic, pieces))
    assert backing.store().load(group, [topic]) == {
        TopicPartition(topic, p): o for p, o in after.items()}


class OffsetStoreModel(RuleBasedStateMachine):
    """Random commits, failures and restarts against one store; the model says what holds."""

    backing: Backing

    @initialize(starts=st.lists(st.integers(0, 5), min_size=PARTITIONS, max_size=PARTITIONS))
    def seed(self, starts):
        self.store = self.backing.store()
        self.group = f"model-{uuid.uuid4().hex[:10]}"
        self.topic = self.backing.topic
        self.model = dict(enumerate(starts))
        self.applied = {}  # partition -> pieces of the commit that last moved it
        self.store.seed(self.group, {TopicPartition(self.topic, p): o
                                     for p, o in self.model.items()})

    def _pieces(self, data, p):
        """Pieces of a commit for partition ``p``, of a kind drawn from ``data``."""
        stored = self.model[p]
        kind = data.draw(st.sampled_from(["next", "next", "repeat", "gap", "overlap",
                                          "holey"]))
        if kind == "repeat" and p in self.applied:
            return self.applied[p]
        if kind == "gap":
            a = stored + data.draw(st.integers(1, 5))
            return [(p, a, a + data.draw(st.integers(0, 5)))]
        if kind == "overlap" and stored > 0:
            a = data.draw(st.integers(0, stored - 1))
            return [(p, a, data.draw(st.integers(a, stored + 5)))]
        cuts = sorted(data.draw(st.lists(st.integers(0, 8), min_size=1, max_size=3)))
        points = [stored + c for c in cuts]
        pieces = [(p, stored, points[0])] + [(p, a, b) for a, b in itertools.pairwise(points)]
        if kind == "holey" and len(pieces) > 1:
            i = data.draw(st.integers(1, len(pieces) - 1))
            _, a, b = pieces[i]
            pieces[i] = (p, a + 1, max(a + 1, b))
        return pieces

    def _commit_pieces(self, data):
        chosen = data.draw(st.sets(st.integers(0, PARTITIONS - 1), min_size=1))
        pieces = [piece for p in sorted(chosen) for piece in self._pieces(data, p)]
        random.Random(data.draw(st.integers(0, 1000))).shuffle(pieces)
        return pieces

    @rule(data=st.data())
    def commit(self, data):
        pieces = self._commit_pieces(data)
        after, refused = expected(self.model, ranges_of(self.topic, pieces))
        if refused:
            with pytest.raises(OffsetMismatchError):
                self.store.commit(self.group, ranges_of(self.topic, pieces))
            return
        self.store.commit(self.group, ranges_of(self.topic, pieces))
        for p, o in after.items():
            if o != self.model[p]:
                # The stored offset moved by exactly the claimed chain.
                claimed = sorted((a, b) for q, a, b in pieces if q == p)
                assert claimed[0][0] == self.model[p] and claimed[-1][1] == o
                self.applied[p] = [(q, a, b) for q, a, b in pieces if q == p]
        self.model = after

    @rule(data=st.data())
    def commit_failing_before_it_is_durable(self, data):
        pieces = self._commit_pieces(data)
        _, refused = expected(self.model, ranges_of(self.topic, pieces))
        expected_errors = OffsetMismatchError if refused else Injected
        with contextlib.suppress(expected_errors):
            self.backing.failing_commit(self.store, self.group, ranges_of(self.topic, pieces))
            # Returning is right only when there was nothing to write (a repeat).
            assert expected(self.model, ranges_of(self.topic, pieces))[0] == self.model

    @rule()
    def restart(self):
        self.store = self.backing.store()

    @invariant()
    def stored_offsets_are_the_models(self):
        if hasattr(self, "store"):
            assert self.store.load(self.group, [self.topic]) == {
                TopicPartition(self.topic, p): o for p, o in self.model.items()}


DEFAULT_EXAMPLES = {"checkpoint": 200, "postgres": 50, "kafka": 25}


def run_model(backing, examples, steps):
    machine = type("Model", (OffsetStoreModel,), {"backing": backing})
    machine.TestCase.settings = settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    machine.TestCase().runTest()


@pytest.mark.parametrize("kind", [pytest.param("postgres", marks=pytest.mark.services),
                                  pytest.param("kafka", marks=pytest.mark.services),
                                  "checkpoint"])
def test_the_offset_store_model(request, kind, tmp_path):
    backing = {"postgres": lambda: PostgresBacking(request.getfixturevalue("postgres").dsn,
                                                   request.getfixturevalue("pg_schema")),
               "kafka": lambda: KafkaBacking(request.getfixturevalue("kafka"),
                                             request.getfixturevalue("contract_topic")),
               "checkpoint": lambda: CheckpointBacking(tmp_path)}[kind]()
    examples = int(os.environ.get("KAFKA_DIRECT_MODEL_EXAMPLES", DEFAULT_EXAMPLES[kind]))
    try:
        run_model(backing, examples, steps=12)
    finally:
        backing.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("postgres", marks=pytest.mark.services),
                                  pytest.param("kafka", marks=pytest.mark.services),
                                  "checkpoint"])
def test_the_offset_store_model_at_length(request, kind, tmp_path):
    backing = {"postgres": lambda: PostgresBacking(request.getfixturevalue("postgres").dsn,
                                                   request.getfixturevalue("pg_schema")),
               "kafka": lambda: KafkaBacking(request.getfixturevalue("kafka"),
                                             request.getfixturevalue("contract_topic")),
               "checkpoint": lambda: CheckpointBacking(tmp_path)}[kind]()
    try:
        run_model(backing, 10 * DEFAULT_EXAMPLES[kind], steps=30)
    finally:
        backing.close()
