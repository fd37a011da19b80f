"""A model-based test of the direct stream's driver logic against a model cluster.

The cluster's partitions grow, get truncated, vanish from a metadata answer, get added and
get re-created; the stream runs batches (computed ranges, read at once), some succeed, some
fail, some stay pending (concurrent jobs) and complete later; some are read only by the
next batch's window job, computed after their own batch time completed (another stream's
output gave it jobs); output operations commit; the
stream stops and a new one starts from the committed offsets or from the checkpointed
batches. Checked after every step:

* a commit never runs ahead of the successful batches (per partition, never beyond the end
  of the longest prefix of consecutive successful batches of the running stream);
* what the successful batches read, across restarts, covers each partition's log exactly
  once from its start, within each incarnation of the log; or the stream stopped with a
  typed error naming a partition whose log lost offsets it had read.

The default run is short; ``KAFKA_DIRECT_MODEL_EXAMPLES=n`` runs n examples, and the slow
test (``-m slow``) runs many more.
"""

import os
from itertools import count

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kafka_direct import ConsumerStrategies, TopicPartition
from kafka_direct.errors import ConfigurationError, DataLossError, KafkaDirectError
from tests.dstream.planning_machine import PlanningMachine
from tests.fakes.fake_cluster import make_stream, on_job_thread

TOPIC = "t"
PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "auto.offset.reset": "earliest"}
CONF = {"spark.streaming.kafka.rebalanceWaitMs": "0", "spark.streaming.kafka.maxRetries": "0",
        "spark.streaming.concurrentJobs": "3"}
DEFAULT_EXAMPLES = int(os.environ.get("KAFKA_DIRECT_MODEL_EXAMPLES", "100"))


class Batch:
    def __init__(self, time, ranges, epochs, commit):
        self.time, self.ranges, self.epochs, self.commit = time, ranges, epochs, commit
        self.state = "pending"  # then "ok" or "failed"
        self.reader = None  # the later batch whose window job read this one
        self.windowed = []  # the earlier batches this one's window job read


class DirectStreamModel(PlanningMachine):
    def __init__(self):
        super().__init__()
        self.cluster.create(TOPIC, 2)
        self.ids = {tp: [] for tp in self.partitions()}  # record ids at each offset
        self.epoch = dict.fromkeys(self.ids, 0)  # bumped when a log loses read offsets
        self.stale = set()  # lost offsets the stream has not looked at yet
        self.lost = set()  # partitions that ever lost offsets the stream had read
        self.stale_commits = {}  # the group's offsets that point into a lost log
        self.fresh_ids = count()
        self.times = count(1)
        self.read = []  # (tp, epoch, offset, id) read by successful batches, kept ones
        self.abandoned = []  # records of batches whose log was lost before they could run
        self.broken = False
        self.stream = None
        self.batches = []

    def teardown(self):
        if self.stream is not None and not self.stream._commits.queue.closed:
            self.stream.stop()
        super().teardown()

    # -- the cluster ------------------------------------------------------------------------

    def partitions(self):
        return [TopicPartition(TOPIC, p) for p in range(len(self.cluster.topics[TOPIC]))]

    def position(self, tp):
        """Where the stream (or, between streams, the group) stands in ``tp``."""
        if self.stream is not None:
            return self.stream.currentOffsets.get(tp)
        return self.cluster.committed.get(("g", tp))

    def lose(self, tp, keep):
        """The log of ``tp`` keeps offsets below ``keep`` only."""
        position = self.position(tp)
        if position is not None and keep < position:
            self.epoch[tp] += 1
            self.stale.add(tp)
            self.lost.add(tp)
        committed = self.cluster.committed.get(("g", tp))
        if committed is not None and keep < committed:
            self.stale_commits[tp] = committed

    @rule(p=st.integers(0, 3), n=st.integers(1, 6))
    def produce(self, p, n):
        tp = self.partitions()[p % len(self.partitions())]
        position = self.position(tp)
        if tp in self.stale and position is not None:
            # A log that grew back past the position before the stream looked is the same,
            # by offsets, as the log it replaced: nobody can tell (see docs/direct-stream.md).
            n = min(n, position - self.cluster.log(tp).end - 1)
        committed = self.cluster.committed.get(("g", tp))
        if committed is not None and self.stale_commits.get(tp) == committed:
            # Likewise for the group's offset, which a restarted stream starts from.
            n = min(n, committed - self.cluster.log(tp).end - 1)
        if n > 0:
            self.cluster.produce(tp, n)
            self.ids[tp].extend(next(self.fresh_ids) for _ in range(n))

    @rule(p=st.integers(0, 3), keep=st.integers(0, 20))
    def truncate(self, p, keep):
        tp = self.partitions()[p % len(self.partitions())]
        if keep < self.cluster.log(tp).end:
            self.cluster.truncate(tp, keep)
            del self.ids[tp][keep:]
            self.lose(tp, keep)

    @rule()
    def recreate(self):
        self.cluster.recreate(TOPIC)
        for tp in self.partitions():
            self.ids[tp] = []
            self.lose(tp, 0)

    @precondition(lambda self: len(self.cluster.topics[TOPIC]) < 4)
    @rule()
    def add_partition(self):
        self.cluster.add_partitions(TOPIC, 1)
        tp = self.partitions()[-1]
        self.ids[tp], self.epoch[tp] = [], 0

    def vanish_for_a_batch(self, gap):
        """One metadata answer without the topic, or without its last partition."""
        if gap == "topic":
            self.cluster.hidden.add(TOPIC)
        elif gap == "partition":
            self.cluster.visible_partitions[TOPIC] = len(self.partitions()) - 1

    # -- the stream -------------------------------------------------------------------------

    def expect_typed_error(self, error):
        """The error names a partition whose log lost offsets the stream had read."""
        assert isinstance(error, DataLossError | ConfigurationError), error
        tp = TopicPartition(error.topic, error.partition)
        assert tp in self.lost, (error, self.lost)
        if isinstance(error, DataLossError):
            assert error.position > error.logEndOffset
        self.broken = True

    def new_stream(self, failOnDataLoss, strategy, grouped=None):
        params = dict(PARAMS)
        if strategy == "pattern":
            chosen = ConsumerStrategies.SubscribePattern(TOPIC, params, groupManagement=False)
        else:
            chosen = ConsumerStrategies.Subscribe([TOPIC], params,
                                                  groupManagement=strategy == "group")
        conf = {**CONF, "spark.streaming.kafka.failOnDataLoss": str(failOnDataLoss).lower()}
        grouped = self.grouped if grouped is None else grouped
        if grouped:  # batches' small ranges share Spark tasks (a grouped KafkaRDD)
            conf["spark.streaming.kafka.minOffsetsPerTask"] = "4"
        return make_stream(self.cluster, chosen, conf)

    @initialize(failOnDataLoss=st.booleans(),
                strategy=st.sampled_from(["plain", "pattern", "group"]),
                grouped=st.booleans())
    def start(self, failOnDataLoss, strategy, grouped=False):
        self.failOnDataLoss, self.strategy, self.grouped = failOnDataLoss, strategy, grouped
        self.stream = self.new_stream(failOnDataLoss, strategy)
        self.stream.start()
        self.commits_seen = len(self.cluster.commit_log)

    def compute(self, time, commit):
        """Compute batch ``time`` and read its records now, as its tasks would."""
        try:
            ranges = self.stream.compute(time)
        except KafkaDirectError as error:
            self.expect_typed_error(error)
            return None
        finally:
            self.cluster.hidden.clear()
            self.cluster.visible_partitions.clear()
        listed = {tp for tp in self.partitions() if tp in self.stream.latestSeen}
        self.stale -= listed
        batch = Batch(time, {r.topicPartition(): (r.fromOffset, r.untilOffset) for r in ranges},
                      {r.topicPartition(): self.epoch[r.topicPartition()] for r in ranges},
                      commit)
        for tp, (start, end) in batch.ranges.items():
            assert end <= len(self.ids[tp]), (tp, start, end, len(self.ids[tp]))
        batch.records = [(tp, self.epoch[tp], offset, self.ids[tp][offset])
                         for tp, (start, end) in batch.ranges.items()
                         for offset in range(start, end)]
        self.batches.append(batch)
        if commit:
            on_job_thread(self.stream, time, lambda: self.stream.commitAsync(ranges))
        return batch

    def running(self):
        return self.stream is not None and not self.broken

    @precondition(lambda self: self.running() and all(b.state != "failed"
                                                      for b in self.batches))
    @rule(outcome=st.sampled_from(["ok", "ok", "failed", "pending"]), commit=st.booleans(),
          gap=st.sampled_from([None, None, "topic", "partition"]))
    def batch(self, outcome, commit, gap):
        self.vanish_for_a_batch(gap)
        batch = self.compute(next(self.times) * 1000, commit)
        if batch is not None and outcome != "pending":
            self.finish(batch, outcome)

    @precondition(lambda self: self.running() and all(b.state != "failed"
                                                      for b in self.batches))
    @rule(outcome=st.sampled_from(["ok", "failed", "pending"]), commit=st.booleans())
    def window_batch(self, outcome, commit):
        """Two batches read by the second one's window(2 s, 2 s) job, next to another
        stream's per-batch output: the first batch's time completes (the other stream's
        job) before the window job computes it."""
        first = next(self.times) * 1000
        self.stream.onBatchCompleted(first)
        self.check_commits()
        earlier = self.compute(first, commit=False)
        if earlier is None:
            return
        later = self.compute(next(self.times) * 1000, commit=False)
        if later is None:
            return
        earlier.reader, later.windowed = later, [earlier]
        later.commit = commit
        if commit:
            window = self.stream.batchRanges[first] + self.stream.batchRanges[later.time]
            on_job_thread(self.stream, later.time, lambda: self.stream.commitAsync(window))
        if outcome != "pending":
            self.finish(later, outcome)

    @precondition(lambda self: self.running()
                  and any(b.state == "pending" for b in self.batches))
    @rule(index=st.integers(0, 5), ok=st.booleans())
    def complete(self, index, ok):
        pending = [b for b in self.batches if b.state == "pending"]
        self.finish(pending[index % len(pending)], "ok" if ok else "failed")

    def finish(self, batch, outcome):
        batch = batch.reader or batch  # a windowed batch ends with its reader's job
        for read in [*batch.windowed, batch]:
            read.state = outcome
        if outcome == "ok":
            self.stream.onBatchCompleted(batch.time)
            self.check_commits()
            self.note_stale_commits()
            prefix = self.prefix()
            if batch.commit and batch in prefix and prefix[-1] is batch:
                committed = {tp: o for (_, tp), o in self.cluster.committed.items()}
                for tp, (_, end) in batch.ranges.items():
                    assert committed.get(tp) == end, (tp, committed, batch.ranges)

    def note_stale_commits(self):
        """A group's offset committed by a batch planned on a log since lost points into it.

        Such a batch (planned, then the topic re-created or truncated, then completed)
        commits an end of the old log. A stream restarting from the group's offsets cannot
        tell it from one of the new log once that grows past it (see docs/direct-stream.md):
        the same limit as a commit made before the loss.
        """
        for (_, tp), committed in self.cluster.committed.items():
            latest = None
            for planned in self.prefix():
                if tp in planned.ranges and planned.ranges[tp][1] == committed:
                    latest = planned
            if latest is not None and latest.epochs.get(tp, self.epoch[tp]) != self.epoch[tp]:
                self.stale_commits[tp] = committed

    def prefix(self):
        prefix = []
        for batch in self.batches:
            if batch.state != "ok":
                break
            prefix.append(batch)
        return prefix

    def frontier(self):
        ends = {}
        for batch in self.prefix():
            ends.update({tp: end for tp, (_, end) in batch.ranges.items()})
        return ends

    def check_commits(self):
        frontier = self.frontier()
        for _, offsets in self.cluster.commit_log[self.commits_seen:]:
            for tp, offset in offsets.items():
                assert tp in frontier and offset <= frontier[tp], (tp, offset, frontier)
        self.commits_seen = len(self.cluster.commit_log)

    @precondition(lambda self: self.stream is not None)
    @rule(fromCheckpoint=st.booleans())
    def restart(self, fromCheckpoint):
        old, batches = self.stream, self.batches
        old.stop()
        self.check_commits()
        state = old.checkpointState()
        self.stream, self.batches = None, []
        if self.broken:
            # The stream stopped with a typed error: what its batches read stays done, and
            # what they had not finished is lost loudly (no stream runs after it here).
            self.read.extend(r for b in batches if b.state == "ok" for r in b.records)
            self.abandoned.extend(r for b in batches if b.state != "ok" for r in b.records)
            return
        if fromCheckpoint:
            # Batches that succeeded stay done; the others are regenerated, same ranges.
            self.read.extend(r for b in batches if b.state == "ok" for r in b.records)
            regenerate = [b for b in batches if b.state != "ok"]
        else:
            self.forget_uncommitted(batches)
            regenerate = []
        if any(b.epochs[tp] != self.epoch[tp] for b in regenerate for tp in b.epochs):
            # Its tasks would fail on a log that is not the one it was computed on: its
            # offsets are lost loudly (the task's DataLossError), not skipped silently.
            self.abandoned.extend(r for b in regenerate for r in b.records)
            return
        self.cluster.hidden.clear()  # a gap lasts one metadata answer
        self.cluster.visible_partitions.clear()
        self.stream = self.new_stream(self.failOnDataLoss, self.strategy)
        if fromCheckpoint:
            self.stream.restoreCheckpointState(state)
        try:
            self.stream.start()
        except KafkaDirectError as error:
            self.expect_typed_error(error)
            return
        self.commits_seen = len(self.cluster.commit_log)
        for old_batch in regenerate:
            batch = self.compute(old_batch.time, commit=True)
            assert batch is not None and batch.ranges == old_batch.ranges

    def forget_uncommitted(self, batches):
        """What a stream restarting from the group's offsets reads again is not done."""
        # An offset beyond the log's end was committed on a log since lost (truncated,
        # re-created): it covers nothing of this log, which the new stream reads from its
        # start (or stops, DataLossError).
        committed = {tp: o for (_, tp), o in self.cluster.committed.items()
                     if o <= len(self.ids[tp])}
        done = self.prefix_of(batches)
        self.read = [r for r in self.read + [r for b in done for r in b.records]
                     if r[1] < self.epoch[r[0]] or r[2] < committed.get(r[0], 0)]
        # The other batches' records of a log since lost are gone with it: no stream reads
        # them again.
        self.abandoned.extend(r for b in batches if b not in done for r in b.records
                              if r[1] < self.epoch[r[0]])
        # A truncation keeps the records below the cut: below the group's offset, those
        # read before it (on the log of an earlier epoch) are done in this one too. A
        # record below it that no successful batch read stays missing: skipped.
        processed = {r[3] for r in self.read}
        here = {(r[0], r[2]) for r in self.read if r[1] == self.epoch[r[0]]}
        self.read.extend((tp, self.epoch[tp], offset, self.ids[tp][offset])
                         for tp, end in committed.items() for offset in range(end)
                         if (tp, offset) not in here and self.ids[tp][offset] in processed)

    @staticmethod
    def prefix_of(batches):
        prefix = []
        for batch in batches:
            if batch.state != "ok":
                break
            prefix.append(batch)
        return prefix

    # -- what must hold -----------------------------------------------------------------------

    @invariant()
    def successful_batches_read_each_offset_once_from_the_start(self):
        # What earlier streams left done, with what this one read (pending batches may
        # still succeed, failed ones are read again after a restart): each record at most
        # once, and no offset of a log skipped.
        records = self.read + self.abandoned + [r for b in self.batches for r in b.records]
        seen = set()
        for tp, epoch, _, record in self.read + [r for b in self.batches if b.state != "failed"
                                                 for r in b.records]:
            assert (tp, epoch, record) not in seen, (tp, epoch, record)
            seen.add((tp, epoch, record))
        offsets = {}
        for tp, epoch, offset, _ in records:
            offsets.setdefault((tp, epoch), set()).add(offset)
        for (tp, epoch), found in offsets.items():
            assert found == set(range(len(found))), (tp, epoch, sorted(found))


DirectStreamModel.TestCase.settings = settings(
    max_examples=DEFAULT_EXAMPLES, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestDirectStreamModel = DirectStreamModel.TestCase


def ok_batch(commit=False):
    return "batch", {"outcome": "ok", "commit": commit, "gap": None}


START = "start", {"failOnDataLoss": False, "strategy": "plain"}
FROM_GROUP = "restart", {"fromCheckpoint": False}

#: Sequences the model once judged wrongly: restarts from the group after a lost log.
RESTARTS_AFTER_A_LOST_LOG = {
    # The group's offset 2 is of a re-created topic's old log; the new log's first record
    # was read by a batch that committed nothing. The new stream finds 2 beyond the end
    # (data loss) and reads the new log from its start: that record again.
    "a commit of a lost log covers nothing of the log after it": [
        START, ("produce", {"p": 0, "n": 2}), ok_batch(commit=True), ("recreate", {}),
        ("produce", {"p": 0, "n": 1}), ok_batch(), FROM_GROUP, ok_batch()],
    # Batch [0, 1) is pending when batch [1, 2) succeeds; the log is truncated to 0 before
    # any stream read offset 0 again: that offset is gone with the log, not skipped.
    "a batch that did not succeed on a lost log is lost with it": [
        START, ("produce", {"p": 0, "n": 1}),
        ("batch", {"outcome": "pending", "commit": False, "gap": None}),
        ("produce", {"p": 0, "n": 1}), ok_batch(), ("restart", {"fromCheckpoint": True}),
        ("truncate", {"p": 0, "keep": 0}), FROM_GROUP],
    # The group committed 3; the log, read to 5, is truncated to 4: offsets 0-2 are the
    # records read and committed before. The new stream goes on at 3, read again.
    "a commit below a truncation covers the records the log kept": [
        START, ("produce", {"p": 0, "n": 3}), ok_batch(commit=True),
        ("produce", {"p": 0, "n": 2}), ok_batch(), ("truncate", {"p": 0, "keep": 4}),
        FROM_GROUP, ok_batch()],
}


@pytest.mark.parametrize("grouped", [False, True], ids=["one task per range", "grouped"])
@pytest.mark.parametrize("steps", RESTARTS_AFTER_A_LOST_LOG.values(),
                         ids=list(RESTARTS_AFTER_A_LOST_LOG))
def test_restarts_from_the_group_after_a_lost_log(steps, grouped):
    model = DirectStreamModel()
    try:
        for rule_name, arguments in steps:
            if rule_name == "start":
                arguments = {**arguments, "grouped": grouped}
            getattr(model, rule_name)(**arguments)
            model.successful_batches_read_each_offset_once_from_the_start()
    finally:
        model.teardown()


def test_a_grouped_streams_batches_are_cut_into_groups_of_its_ranges():
    model = DirectStreamModel()
    try:
        model.start(failOnDataLoss=True, strategy="plain", grouped=True)
        model.add_partition()
        for p in range(3):
            model.produce(p=p, n=1)
        model.batch(outcome="ok", commit=True, gap=None)
        model.successful_batches_read_each_offset_once_from_the_start()
        assert model.groups and len(model.groups[-1]) < 3  # small ranges share a task
    finally:
        model.teardown()


@pytest.mark.slow
def test_direct_stream_model_many_examples():
    run_state_machine_as_test(DirectStreamModel, settings=settings(
        max_examples=int(os.environ.get("KAFKA_DIRECT_MODEL_EXAMPLES", "2000")),
        stateful_step_count=60, deadline=None, suppress_health_check=list(HealthCheck)))


def test_a_commit_of_a_batch_planned_before_a_recreation_points_into_the_lost_log():
    # Found by the model: a batch planned on the old log completes after the topic was
    # re-created and commits the old log's end; the new log grows past it; a stream started
    # from the group's offsets resumes there, as Spark's does (nothing tells the logs
    # apart). The model must count that offset as stale, as one committed before the loss.
    state = DirectStreamModel()
    steps = [("start", {"failOnDataLoss": False, "strategy": "plain"}),
             ("produce", {"n": 1, "p": 0}),
             ("window_batch", {"commit": False, "outcome": "failed"}),
             ("restart", {"fromCheckpoint": True}),
             ("recreate", {}),
             ("complete", {"index": 0, "ok": True}),
             ("window_batch", {"commit": False, "outcome": "ok"}),
             ("produce", {"n": 2, "p": 0}),
             ("restart", {"fromCheckpoint": False}),
             ("window_batch", {"commit": False, "outcome": "ok"})]
    try:
        for name, arguments in steps:
            getattr(state, name)(**arguments)
            state.successful_batches_read_each_offset_once_from_the_start()
    finally:
        state.teardown()
