"""A model-based test of the engine's lifecycle: ticks, slow and failing output operations,
slow generation, and graceful, immediate or racing stops (a graceful one on another thread,
as on a signal, with an immediate one) at any moment, then stops again, on a ManualClock.

After each stop the run must satisfy:

* every submitted batch got exactly one ``BatchCompleted``;
* input streams heard ``onBatchCompleted`` only for batches that succeeded, after their
  outputs ended (a commit never runs ahead of its batch's success), never after their
  ``stop()``; ``stop()`` came exactly once, last, after every output that started ended
  and every generation that began;
* a graceful stop ran every tick posted before it to its end before stopping the inputs,
  and without failures everything ticked was committed (nothing lost);
* ``awaitTermination`` raised only a genuine failure of an output operation, and did raise
  one that happened before the stop;
* a second stop changes nothing.

The default run is short; ``-m slow`` or ``KAFKA_DIRECT_MODEL_EXAMPLES=<n>`` runs more.
"""

import os
import threading
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kafka_direct.streaming import StreamingListener
from tests.streaming.helpers import Driver
from tests.streaming.lifecycle_fakes import EventLog, LifecycleInputDStream

_DEFAULT_EXAMPLES = 25
_SLOW_EXAMPLES = 300


def _profile(examples):
    return settings(max_examples=examples, stateful_step_count=8, deadline=None,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False)


class Boom(ValueError):
    """A genuine failure of an output operation."""


class LoggingListener(StreamingListener):
    """Puts batch completions into the shared log, to order them against the stop."""

    def __init__(self, log):
        self.log = log

    def onBatchCompleted(self, e):
        self.log.add("batchCompleted", e.batchInfo.batchTime, e.batchInfo.failed)


OPS = st.sampled_from(["ok", "ok", "ok", "slow", "fail", "spark"])


class StopModel(RuleBasedStateMachine):
    spark = None

    @initialize(concurrent=st.sampled_from([1, 1, 2]))
    def start(self, concurrent):
        self.driver = Driver(self.spark, conf={"spark.streaming.concurrentJobs": concurrent,
                                               "spark.streaming.gracefulStopTimeout": "20s"})
        self.log = EventLog()
        self.stream = LifecycleInputDStream(self.driver.ssc, self.log)
        self.plan = {}
        self.ticked = []
        for op in range(2):
            self.stream.foreachRDD(self._output(op))
        self.driver.ssc.addStreamingListener(LoggingListener(self.log))
        self.driver.start()
        self.stopped = False

    def _output(self, op):
        def run(t, rdd):
            batch = int(t.timestamp() * 1000)
            kind = self.plan.get((batch, op), "ok")
            self.log.add("opStart", batch, op)
            try:
                if kind == "slow":
                    time.sleep(0.05)
                elif kind == "spark":
                    rdd.context.parallelize([1], 1).map(lambda x: time.sleep(0.1)).count()
                elif kind == "fail":
                    self.log.add("opFail", batch, op)
                    raise Boom(f"output {op} of batch {batch}")
            finally:
                self.log.add("opEnd", batch, op)

        return run

    @precondition(lambda self: not self.stopped)
    @rule(ops=st.tuples(OPS, OPS), computeDelay=st.sampled_from([0.0, 0.0, 0.03]),
          wait=st.booleans())
    def tick(self, ops, computeDelay, wait):
        batch = self.driver.clock.getTimeMillis() + self.driver.interval
        self.plan[(batch, 0)], self.plan[(batch, 1)] = ops
        self.stream.computeDelay = computeDelay
        self.ticked.append(batch)
        self.driver.clock.advance(self.driver.interval)
        deadline = time.monotonic() + 10
        ssc = self.driver.ssc
        while wait and (ssc.scheduler.jobGenerator.lastTickTime or 0) < batch:
            if ssc.scheduler.error is not None or ssc.state == "STOPPED":
                break
            assert time.monotonic() < deadline, f"batch {batch} was not generated"
            time.sleep(0.002)

    @precondition(lambda self: not self.stopped)
    @rule(seconds=st.sampled_from([0.0, 0.01, 0.05]))
    def pause(self, seconds):
        time.sleep(seconds)

    @precondition(lambda self: not self.stopped)
    @rule(how=st.sampled_from(["graceful", "immediate", "both"]))
    def stop(self, how):
        self._stop(how)

    @precondition(lambda self: self.stopped)
    @rule(graceful=st.booleans())
    def stop_again(self, graceful):
        """A second stop changes nothing (and raises nothing)."""
        before = self.log.snapshot()
        self.driver.ssc.stop(stopSparkContext=False, stopGracefully=graceful)
        assert self.log.snapshot() == before

    def teardown(self):
        if getattr(self, "driver", None) is not None and not self.stopped:
            self._stop("immediate")

    def _stop(self, how):
        """Stop as asked; "both" races a graceful stop (as on a signal) with an immediate one."""
        self.stopped = True
        ssc = self.driver.ssc
        self.log.add("stopCalled", how)
        if how == "both":
            other = threading.Thread(target=ssc.stop, kwargs={"stopSparkContext": False,
                                                               "stopGracefully": True})
            other.start()
            time.sleep(0.005)
        ssc.stop(stopSparkContext=False, stopGracefully=how == "graceful")
        if how == "both":
            other.join(30)
            assert not other.is_alive(), "the concurrent stop did not end"
        raised = None
        try:
            assert ssc.awaitTermination(10) is True
        except Boom as error:
            raised = error
        self._check(how == "graceful", raised)

    def _check(self, graceful, raised):
        log = self.log.snapshot()
        kinds = [e[0] for e in log]
        recorder = self.driver.recorder
        submitted = [e.batchInfo.batchTime for n, e in recorder.events if n == "batchSubmitted"]
        completed = [e.batchInfo for n, e in recorder.events if n == "batchCompleted"]
        assert len(submitted) == len(set(submitted)), "a batch was generated twice"
        assert sorted(b.batchTime for b in completed) == sorted(submitted), \
            "every submitted batch completes exactly once"
        outcome = {b.batchTime: not b.failed for b in completed}
        commits = [e[2] for e in log if e[0] == "committed"]
        assert len(commits) == len(set(commits))
        assert all(outcome.get(t) is True for t in commits), "commit of a failed batch"
        assert "commitAfterStop" not in kinds
        assert kinds.count("stop") == 1
        stopAt = kinds.index("stop")
        assert all(k != "committed" for k in kinds[stopAt:]), "commit after the inputs stopped"
        for at, entry in enumerate(log):  # a commit never runs ahead of its batch's success
            if entry[0] == "committed":
                batch = entry[2]
                ops = [e for e in log[:at] if e[0] == "opEnd" and e[1] == batch]
                assert len(ops) == 2, f"batch {batch} committed before its outputs ended"
                assert ("opFail", batch, 0) not in log and ("opFail", batch, 1) not in log
        # Every output that started ended before the inputs stopped (what an immediate stop
        # cancels ends within its wait: the slowest output here takes 0.1 s).
        assert all(k not in ("opStart", "opEnd") for k in kinds[stopAt:])
        assert kinds.count("opStart") == kinds.count("opEnd")
        for entry in log:  # generation never outlives the stop
            if entry[0] == "computeStart":
                assert ("computeEnd", *entry[1:]) in log[:stopAt]
        calledAt = kinds.index("stopCalled")
        failedBefore = any(e[0] == "batchCompleted" and e[2] for e in log[:calledAt])
        genuine = [e for e in log if e[0] == "opFail"]
        if raised is not None:
            assert genuine, f"awaitTermination raised {raised!r} without a failed output"
        if failedBefore or (graceful and genuine):
            assert raised is not None, "a genuine failure was not raised"
        if graceful and not genuine:
            # Graceful and healthy: every batch ticked before the stop ran and committed,
            # before the inputs stopped.
            assert sorted(submitted) == self.ticked
            assert sorted(commits) == self.ticked


def _run(spark, examples):
    StopModel.spark = spark
    try:
        run_state_machine_as_test(StopModel, settings=_profile(examples))
    finally:
        StopModel.spark = None


def test_stop_lifecycle_model(spark):
    examples = int(os.environ.get("KAFKA_DIRECT_MODEL_EXAMPLES", _DEFAULT_EXAMPLES))
    _run(spark, examples)


@pytest.mark.slow
def test_stop_lifecycle_model_many_examples(spark):
    _run(spark, int(os.environ.get("KAFKA_DIRECT_MODEL_EXAMPLES", _SLOW_EXAMPLES)))
