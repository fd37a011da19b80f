"""Stops that race with something: a start, another stop, a failing step, a timeout, a
signal handler someone installed over ours.

Each test pins one way a stop could leave the context half-stopped, hang, lose the last
batch's commit or report a stop as a failure.
"""

import signal
import threading
import time

import pytest

from kafka_direct.streaming import StreamingContext, job_scheduler
from tests.streaming.helpers import Driver
from tests.streaming.lifecycle_fakes import EventLog, LifecycleInputDStream


class SlowStartInputDStream(LifecycleInputDStream):
    """Its ``start()`` waits for ``release``, as a stream whose broker is slow to answer."""

    def __init__(self, ssc, log):
        super().__init__(ssc, log)
        self.starting = threading.Event()
        self.release = threading.Event()

    def start(self):
        self.starting.set()
        assert self.release.wait(30)
        self.log.add("start", self.label)


def _submitted(driver):
    return sorted(e.batchInfo.batchTime for n, e in driver.recorder.events
                  if n == "batchSubmitted")


def test_a_stop_during_start_waits_for_it_then_stops_everything(spark):
    driver = Driver(spark)
    log = EventLog()
    stream = SlowStartInputDStream(driver.ssc, log)
    stream.foreachRDD(lambda rdd: None)
    starter = threading.Thread(target=driver.start)
    starter.start()
    assert stream.starting.wait(10)
    stopper = threading.Thread(target=driver.stop)
    stopper.start()
    time.sleep(0.3)  # an engine that does not wait for the start stops "nothing" now
    stream.release.set()
    starter.join(30)
    stopper.join(30)
    assert not starter.is_alive() and not stopper.is_alive()
    assert driver.ssc.state == "STOPPED"
    assert StreamingContext.getActive() is None
    assert [e[0] for e in log.snapshot()] == ["start", "stop"]  # what started, stopped
    assert driver.ssc.awaitTermination(1) is True


def test_a_step_of_the_stop_that_fails_does_not_leave_the_context_half_stopped(spark, caplog):
    driver = Driver(spark, conf={"spark.streaming.stopGracefullyOnShutdown": "true"})
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    stream.foreachRDD(lambda rdd: None)
    before = signal.getsignal(signal.SIGTERM)
    driver.start()
    driver.run(1)

    def broken(*args, **kwargs):
        raise RuntimeError("generator broke while stopping")

    driver.ssc.scheduler.jobGenerator.stop = broken
    driver.stop(graceful=True)  # logged, not raised: the rest of the stop still runs
    assert "generator broke while stopping" in caplog.text
    assert driver.ssc.state == "STOPPED" and StreamingContext.getActive() is None
    assert driver.ssc.awaitTermination(1) is True
    assert [e[0] for e in log.snapshot()] == ["computeStart", "computeEnd", "committed",
                                              "stop"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_concurrent_graceful_and_immediate_stops_end_once(spark):
    """A signal's graceful stop on its thread while the main thread stops immediately."""
    driver = Driver(spark)
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    release = threading.Event()
    ran = []

    def output(t, rdd):
        ran.append(t)
        assert release.wait(10)

    stream.foreachRDD(output)
    driver.start()
    driver.clock.advance(1000)
    while not ran:
        time.sleep(0.005)
    driver.clock.advance(1000)  # batch 2000 queues behind the running batch 1000
    deadline = time.monotonic() + 10
    while _submitted(driver) != [1000, 2000]:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    graceful = threading.Thread(target=driver.stop, kwargs={"graceful": True})
    graceful.start()
    time.sleep(0.2)
    immediate = threading.Thread(target=driver.stop, kwargs={"graceful": False})
    immediate.start()
    time.sleep(0.2)
    release.set()
    graceful.join(30)
    immediate.join(30)
    assert not graceful.is_alive() and not immediate.is_alive()
    assert driver.ssc.awaitTermination(1) is True  # neither stop is a failure
    entries = [e[0] for e in log.snapshot()]
    assert entries.count("stop") == 1 and entries[-1] == "stop"
    # The graceful stop came first: both batches ran and committed before the inputs
    # stopped, each completed once.
    assert [e[2] for e in log.of("committed")] == [1000, 2000]
    assert sorted(b.batchTime for b in driver.recorder.completed) == [1000, 2000]
    assert not any(b.failed for b in driver.recorder.completed)


def test_a_graceful_stop_waits_past_its_timeout_then_cancels_without_failing_the_stream(
        spark, monkeypatch):
    # Spark waits up to an hour for submitted jobs; here one more second.
    monkeypatch.setattr(job_scheduler, "GRACEFUL_JOBS_LIMIT_S", 1.0)
    driver = Driver(spark, conf={"spark.streaming.gracefulStopTimeout": "1s"})
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    started = threading.Event()

    def forever(rdd):
        started.set()
        rdd.context.parallelize([1], 1).map(lambda x: time.sleep(60)).count()

    stream.foreachRDD(forever)
    driver.start()
    driver.clock.advance(1000)
    assert started.wait(10)
    time.sleep(0.3)  # the Spark job is running
    began = time.monotonic()
    driver.stop(graceful=True)
    took = time.monotonic() - began
    assert 2 <= took < 9, f"the graceful stop took {took:.1f} s with 1 s + 1 s to wait"
    assert driver.ssc.awaitTermination(1) is True  # cancelled by the stop: not a failure
    [info] = driver.recorder.completed
    assert info.failed  # the batch did not succeed, and says so ...
    assert "Cancelled by the stop" in info.outputOperationInfos[0].failureReason
    entries = [e[0] for e in log.snapshot()]
    assert "committed" not in entries and entries[-1] == "stop"  # ... and is not committed


def test_a_handler_installed_over_ours_survives_every_stop(spark):
    driver = Driver(spark, conf={"spark.streaming.stopGracefullyOnShutdown": "true"})
    driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)

    def mine(signum, frame):
        pass

    previous = signal.getsignal(signal.SIGTERM)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        driver.start()
        signal.signal(signal.SIGTERM, mine)  # the application's own, after start()
        driver.stop()
        assert signal.getsignal(signal.SIGTERM) is mine
        driver.stop()  # a second stop restores nothing either
        assert driver.ssc.awaitTermination(1) is True
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is sigint  # ours there was restored
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_stop_from_the_generators_own_thread_does_not_wait_for_itself(spark):
    """``ssc.stop()`` called in a ``transform`` (run while the batch is generated)."""
    driver = Driver(spark, conf={"spark.streaming.gracefulStopTimeout": "20s"})
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    done = threading.Event()
    took = []

    def stop_here(rdd):
        began = time.monotonic()
        driver.ssc.stop(stopSparkContext=False, stopGracefully=True)
        took.append(time.monotonic() - began)
        done.set()
        return rdd

    stream.transform(stop_here).foreachRDD(lambda rdd: None)
    driver.start()
    driver.clock.advance(1000)
    assert done.wait(40)
    assert took[0] < 8, f"the stop waited {took[0]:.1f} s for its own thread"
    assert driver.ssc.awaitTermination(5) is True
    assert driver.ssc.state == "STOPPED"
    assert [e[0] for e in log.snapshot()].count("stop") == 1
    assert _submitted(driver) == []  # the batch being generated was dropped, not run


@pytest.mark.parametrize("graceful", [True, False])
def test_every_submitted_batch_completes_exactly_once(spark, graceful):
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": "2"})
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    stream.foreachRDD(lambda rdd: time.sleep(0.05))
    stream.foreachRDD(lambda rdd: rdd.context.parallelize([1], 1).map(
        lambda x: time.sleep(0.1)).count())
    driver.start()
    for _ in range(4):
        driver.clock.advance(1000)
        time.sleep(0.02)
    driver.stop(graceful=graceful)
    assert driver.ssc.awaitTermination(1) is True
    completed = sorted(b.batchTime for b in driver.recorder.completed)
    assert completed == _submitted(driver)
    if graceful:
        assert completed == [1000, 2000, 3000, 4000]
        assert [e[2] for e in log.of("committed")] == completed


def test_a_batch_the_stop_gives_up_on_reports_each_output_operation_once(spark):
    """Immediate stop; output 0 outlives the cancel wait, output 2 was skipped by the stop."""
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": "2"})
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    started = threading.Barrier(3)
    stream.foreachRDD(lambda rdd: (started.wait(10), time.sleep(3.5)))  # not cancellable
    stream.foreachRDD(lambda rdd: (started.wait(10), time.sleep(0.5)))
    stream.foreachRDD(lambda rdd: None)
    driver.start()
    driver.clock.advance(1000)
    started.wait(10)
    driver.stop()
    assert driver.ssc.awaitTermination(1) is True
    [info] = driver.recorder.completed
    assert info.failed
    ops = [e.outputOperationInfo.id for n, e in driver.recorder.events
           if n == "outputOperationCompleted"]
    assert sorted(ops) == [0, 1, 2], "an output operation completed twice, or never"
    assert info.outputOperationInfos[2].failureReason.startswith("Skipped")
    assert "committed" not in [e[0] for e in log.snapshot()]


def test_a_graceful_stop_runs_a_backlog_longer_than_its_timeout(spark):
    # The batches of a driver's down time are all submitted at once on recovery; a
    # graceful stop must process them, not drop them after gracefulStopTimeout.
    driver = Driver(spark, conf={"spark.streaming.gracefulStopTimeout": "1s"})
    ran = []

    def slow(time_, rdd):
        time.sleep(0.6)
        ran.append(time_)

    driver.ssc.queueStream([[1]] * 4, oneAtATime=True).foreachRDD(slow)
    driver.start()
    driver.clock.advance(4000)  # four batches due at once
    time.sleep(0.2)
    driver.stop(graceful=True)
    assert len(ran) == 4
    assert [info.failed for info in driver.recorder.completed] == [False] * 4
