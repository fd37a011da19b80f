"""How a StreamingContext stops: order of the steps, errors, listeners, signals, the UI.

A stop must end the timer, let the event loop finish generating what it was asked to,
wait for the generated batches (graceful) or cancel them (immediate), and stop the input
streams last, so the Kafka stream's commit of the last batch is never cut off.
"""

import json
import os
import signal
import threading
import time
import urllib.request

import pytest

from kafka_direct import StreamingStateError
from tests.streaming.helpers import Driver
from tests.streaming.lifecycle_fakes import EventLog, LifecycleInputDStream, OffsetsInputDStream


class Boom(ValueError):
    pass


def _gated(driver):
    """A stream whose batch 1000 is caught while being generated."""
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    return log, stream


def _stop_while_generating(driver, stream, graceful):
    """Stop while batch 1000's input is being computed; then let the computation finish."""
    stream.gate.clear()
    driver.clock.advance(1000)
    assert stream.computing.wait(10)
    stopper = threading.Thread(target=driver.stop, kwargs={"graceful": graceful})
    stopper.start()
    # An engine that stops its input streams without waiting for generation does it now.
    stream.stopped.wait(0.5)
    stream.gate.set()
    stopper.join(30)
    assert not stopper.is_alive()


def test_graceful_stop_during_generation_commits_the_batch_before_stopping_inputs(spark):
    driver = Driver(spark)
    log, stream = _gated(driver)
    ran = []
    stream.foreachRDD(lambda t, rdd: ran.append(t))
    driver.start()
    _stop_while_generating(driver, stream, graceful=True)
    assert driver.ssc.awaitTermination(1) is True
    assert [e[0] for e in log.snapshot()] == ["computeStart", "computeEnd", "committed",
                                              "stop"]
    assert len(ran) == 1
    completed = driver.recorder.completed
    assert [b.batchTime for b in completed] == [1000] and not completed[0].failed


def test_immediate_stop_during_generation_is_not_a_stream_failure(spark):
    driver = Driver(spark)
    log, stream = _gated(driver)

    def output(rdd):
        if stream.stopped.is_set():  # as a write through a closed driver consumer would
            raise StreamingStateError("not started")

    stream.foreachRDD(output)
    driver.start()
    _stop_while_generating(driver, stream, graceful=False)
    assert driver.ssc.awaitTermination(1) is True  # raises nothing
    entries = [e[0] for e in log.snapshot()]
    assert entries[-1] == "stop" and entries.count("stop") == 1
    assert "commitAfterStop" not in entries
    submitted = [e.batchInfo.batchTime for n, e in driver.recorder.events
                 if n == "batchSubmitted"]
    assert sorted(b.batchTime for b in driver.recorder.completed) == submitted


def test_jobs_cancelled_by_an_immediate_stop_are_not_a_stream_failure(spark):
    driver = Driver(spark)
    started = threading.Event()

    def forever(rdd):
        started.set()
        rdd.map(lambda x: time.sleep(30)).count()

    driver.ssc.queueStream([[1]]).foreachRDD(forever)
    driver.start()
    driver.clock.advance(1000)
    assert started.wait(10)
    time.sleep(0.5)
    driver.stop()
    assert driver.ssc.awaitTermination(1) is True  # the cancelled job's error is not raised
    [info] = driver.recorder.completed
    assert info.failed  # the batch did not succeed, and says so


def test_a_failure_before_the_stop_is_still_raised(spark):
    driver = Driver(spark)
    failed = threading.Event()

    def output(rdd):
        failed.set()
        raise Boom("genuine")

    driver.ssc.queueStream([[1]]).foreachRDD(output)
    driver.start()
    driver.clock.advance(1000)
    assert failed.wait(10)
    driver.recorder.wait_completed(1000)
    driver.stop()
    with pytest.raises(Boom, match="genuine"):
        driver.ssc.awaitTermination(5)


def test_a_failed_batch_completes_once_with_its_later_output_operations_skipped(spark):
    driver = Driver(spark)
    log, stream = _gated(driver)
    second_queued = threading.Event()
    ran = []

    def first(t, rdd):
        if t.second == 1:
            assert second_queued.wait(10)
            raise Boom("cannot write batch 1")

    stream.foreachRDD(first)
    stream.foreachRDD(lambda t, rdd: ran.append(t.second))
    driver.start()
    driver.clock.advance(1000)
    while "outputOperationStarted" not in driver.recorder.names(1000):
        time.sleep(0.005)
    driver.clock.advance(1000)  # batch 2 queues behind the failing batch 1
    deadline = time.monotonic() + 10
    while "batchSubmitted" not in driver.recorder.names(2000):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    second_queued.set()
    with pytest.raises(Boom):
        driver.ssc.awaitTermination(30)
    assert ran == []
    completions = [e.batchInfo for n, e in driver.recorder.events if n == "batchCompleted"]
    assert sorted(b.batchTime for b in completions) == [1000, 2000]  # once each
    by_time = {b.batchTime: b for b in completions}
    assert all(b.failed for b in completions)
    ops = by_time[1000].outputOperationInfos
    assert "Boom: cannot write batch 1" in ops[0].failureReason
    assert ops[1].failureReason.startswith("Skipped") and ops[1].startTime is None
    assert all(op.failureReason.startswith("Skipped")
               for op in by_time[2000].outputOperationInfos.values())
    assert [e[0] for e in log.snapshot()].count("committed") == 0
    assert log.snapshot()[-1][0] == "stop"
    page = driver.ssc.progressListener.snapshot()
    assert page.running == () and page.waiting == ()  # nothing shown as processing forever


def _stop_on_error_driver(spark):
    driver = Driver(spark, conf={"spark.streaming.stopGracefullyOnShutdown": "true"})

    def output(rdd):
        raise Boom("batch failed")

    driver.ssc.queueStream([[1]]).foreachRDD(output)
    return driver


def test_a_stop_after_an_error_restores_the_signal_handlers(spark):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    driver = _stop_on_error_driver(spark)
    driver.start()
    assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    driver.clock.advance(1000)
    with pytest.raises(Boom):
        driver.ssc.awaitTermination(30)
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_after_a_stop_on_error_reaches_the_previous_handler(spark):
    received = []

    def handler(signum, frame):
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        driver = _stop_on_error_driver(spark)
        driver.start()
        driver.clock.advance(1000)
        deadline = time.monotonic() + 30
        while driver.ssc.state != "STOPPED":  # stopped on the error, off the main thread
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
        assert received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is handler  # and ours is gone
        with pytest.raises(Boom):
            driver.ssc.awaitTermination(5)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _hammer(url, stop, failures):
    paths = ["metrics", "api/v1/streaming/statistics", "", "api/v1/streaming/batches"]
    i = 0
    while not stop.is_set():
        path = paths[i % len(paths)]
        i += 1
        try:
            with urllib.request.urlopen(url + path, timeout=10) as response:
                body = response.read().decode()
            if path.startswith("api"):
                json.loads(body)
        except Exception as error:  # a failed page comes back as a dropped connection
            failures.append(f"{path}: {error!r}")


def test_statistics_page_reads_consistent_figures_while_batches_change_them(spark):
    driver = Driver(spark, conf={"spark.streaming.ui.enabled": "true",
                                 "spark.streaming.ui.port": "0"})
    stream = OffsetsInputDStream(driver.ssc)
    stream.foreachRDD(lambda rdd: None)
    driver.start()
    url = driver.ssc.uiWebUrl
    stop, failures = threading.Event(), []
    readers = [threading.Thread(target=_hammer, args=(url, stop, failures)) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        driver.run(60)
    finally:
        stop.set()
        for reader in readers:
            reader.join(20)
    stats = json.loads(urllib.request.urlopen(url + "api/v1/streaming/statistics").read())
    driver.stop()
    assert failures == []
    [figures] = stats["inputStreams"].values()
    shown = {(p["partition"], p["nextOffset"], p["committedOffset"])
             for p in figures["partitions"]}
    assert shown == {(tp.partition, o, o) for tp, o in dict.items(stream.currentOffsets)}
