"""Clocks, the recurring timer, the PID estimator and small engine parts, without Spark."""

import threading
import time

import pytest

from kafka_direct import ConfigurationError
from kafka_direct.streaming import ManualClock, PIDRateEstimator, RecurringTimer, SystemClock
from kafka_direct.streaming.batch_info import BatchInfo, StreamInputInfo
from kafka_direct.streaming.callables import with_time
from kafka_direct.streaming.clock import clock_from_conf
from kafka_direct.streaming.durations import conf_time_ms, to_ms
from kafka_direct.streaming.input_info_tracker import InputInfoTracker
from kafka_direct.streaming.listener import StreamingListenerBatchCompleted
from kafka_direct.streaming.rate_controller import RateController, RateEstimator


def test_manual_clock_waits_until_set_and_can_be_cancelled():
    clock = ManualClock(100)
    woke = []
    thread = threading.Thread(target=lambda: woke.append(clock.waitTillTime(500)))
    thread.start()
    clock.advance(200)
    time.sleep(0.05)
    assert woke == []
    clock.setTime(600)
    thread.join(2)
    assert woke == [600]
    cancel = threading.Event()
    cancel.set()
    assert clock.waitTillTime(10_000, cancel) == 600


def test_clock_is_chosen_by_spark_streaming_clock():
    assert isinstance(clock_from_conf({}), SystemClock)
    assert isinstance(clock_from_conf({"spark.streaming.clock":
                                       "org.apache.spark.util.ManualClock"}), ManualClock)
    assert isinstance(clock_from_conf(
        {"spark.streaming.clock": "kafka_direct.streaming.clock.ManualClock"}), ManualClock)
    with pytest.raises(ConfigurationError, match="names no clock"):
        clock_from_conf({"spark.streaming.clock": "no.such.Clock"})


def test_recurring_timer_starts_on_a_multiple_of_the_period_and_calls_each_period():
    clock = ManualClock(2500)
    called = []
    timer = RecurringTimer(clock, 1000, called.append, "Test")
    assert timer.getStartTime() == 3000
    assert timer.getRestartTime(originalStartTime=700) == 2700  # next 700 + k * 1000
    assert timer.start() == 3000
    for target in (3000, 4000, 5000):
        clock.setTime(target)
        deadline = time.monotonic() + 2
        while target not in called and time.monotonic() < deadline:
            time.sleep(0.005)
    assert called == [3000, 4000, 5000]
    assert timer.stop() == 5000
    clock.setTime(9000)
    time.sleep(0.05)
    assert called == [3000, 4000, 5000]


def test_restart_time_keeps_the_original_grid():
    clock = ManualClock(10_250)
    timer = RecurringTimer(clock, 1000, lambda t: None, "Test")
    assert timer.getRestartTime(originalStartTime=700) == 10_700
    clock.setTime(10_700)
    assert timer.getRestartTime(originalStartTime=700) == 11_700


def test_pid_first_batch_sets_the_baseline_then_follows_sparks_formula():
    pid = PIDRateEstimator(1000, proportional=1.0, integral=0.2, derivative=0.0, minRate=100)
    assert pid.compute(1000, 1000, 500, 0) is None  # first run: processing rate 2000 noted
    # rate 1000/s; error 2000 - 1000; backlog 500 ms * 1000/s / 1000 ms
    assert pid.compute(2000, 1000, 1000, 500) == pytest.approx(2000 - 1000 - 0.2 * 500)
    # rate 1000/s; error 900 - 1000 = -100; backlog 400
    assert pid.compute(3000, 900, 900, 400) == pytest.approx(900 + 100 - 0.2 * 400)


def test_pid_with_derivative_and_the_min_rate_floor():
    pid = PIDRateEstimator(1000, proportional=1.0, integral=0.0, derivative=0.5, minRate=10)
    pid.compute(0 + 1, 100, 100, 0)  # baseline rate 1000
    # rate 50/s: error 950, dError (950 - 0) / 0.999 s
    expected = 1000 - 950 - 0.5 * (950 / 0.999)
    assert pid.compute(1000, 50, 1000, 0) == pytest.approx(max(expected, 10))
    assert pid.compute(1000, 50, 1000, 0) is None  # not a later time
    assert pid.compute(2000, 0, 1000, 0) is None  # no records
    assert pid.compute(3000, 10, 0, 0) is None  # no processing time


def test_pid_steady_processing_rate_is_followed():
    pid = PIDRateEstimator(20, 1.0, 1.0, 0.0, 10)
    results = [pid.compute(t * 20, 1000, 20, 0) for t in range(50)]
    assert results[0] is None
    assert results[1:] == [pytest.approx(50_000.0)] * 49


def test_pid_settings_are_validated_and_only_pid_exists():
    with pytest.raises(ConfigurationError, match="minRate"):
        PIDRateEstimator(1000, minRate=0)
    with pytest.raises(ConfigurationError, match="proportional"):
        PIDRateEstimator(1000, proportional=-1)
    with pytest.raises(ConfigurationError, match="Unknown rate estimator"):
        RateEstimator.create({"spark.streaming.backpressure.rateEstimator": "fancy"}, 1000)
    pid = RateEstimator.create({"spark.streaming.backpressure.pid.minRate": "5"}, 2000)
    assert isinstance(pid, PIDRateEstimator)
    assert (pid.proportional, pid.integral, pid.derivative, pid.minRate) == (1.0, 0.2, 0.0, 5.0)


def test_rate_controller_publishes_from_completed_batches_of_its_stream():
    published = []

    class Controller(RateController):
        def publish(self, rate):
            published.append(rate)

    controller = Controller(7, PIDRateEstimator(1000, 1.0, 0.0, 0.0, 1))

    def completed(end, records, stream=7):
        info = BatchInfo(end - 1000, {stream: StreamInputInfo(stream, records)},
                         submissionTime=end - 1000, processingStartTime=end - 1000,
                         processingEndTime=end)
        controller.onBatchCompleted(StreamingListenerBatchCompleted(info))

    completed(2000, 500)
    completed(3000, 800)
    completed(4000, 999, stream=8)  # another stream's batch: ignored
    controller.waitUntilIdle()
    assert published == [pytest.approx(800.0)]
    assert controller.getLatestRate() == pytest.approx(800.0)
    controller.stop()


def test_durations_and_time_settings():
    assert to_ms(2, "d") == 2000 and to_ms(0.5, "d") == 500
    for bad in (0, -1, "2", 0.0001, True):
        with pytest.raises(ConfigurationError):
            to_ms(bad, "batchDuration")
    assert conf_time_ms({"k": "10s"}, "k", 1) == 10_000
    assert conf_time_ms({"k": "250"}, "k", 1) == 250
    assert conf_time_ms({}, "k", 7) == 7
    with pytest.raises(ConfigurationError, match="not a time"):
        conf_time_ms({"k": "soon"}, "k", 1)


def test_input_info_tracker_rejects_a_second_report_and_cleans_up():
    tracker = InputInfoTracker()
    tracker.reportInfo(1000, StreamInputInfo(0, 5, {"Description": "x"}))
    tracker.reportInfo(2000, StreamInputInfo(0, 6))
    with pytest.raises(RuntimeError, match="already added"):
        tracker.reportInfo(1000, StreamInputInfo(0, 1))
    assert tracker.getInfo(1000)[0].metadataDescription == "x"
    tracker.cleanup(2000)
    assert tracker.getInfo(1000) == {} and tracker.getInfo(2000)[0].numRecords == 6


class Callable2:
    def __call__(self, time, rdd):
        return ("with time", time, rdd)


def test_time_argument_is_detected_from_signatures_not_argcount():
    import functools

    def plain(rdd):
        return ("plain", rdd)

    def timed(time, rdd):
        return ("timed", time, rdd)

    def three(prefix, time, rdd):
        return (prefix, time, rdd)

    assert with_time(plain, 1, None, "x")("T", "R") == ("plain", "R")
    assert with_time(timed, 1, None, "x")("T", "R") == ("timed", "T", "R")
    assert with_time(functools.partial(three, "p"), 1, None, "x")("T", "R") == ("p", "T", "R")
    assert with_time(Callable2(), 1, None, "x")("T", "R") == ("with time", "T", "R")
    assert with_time(lambda rdd, extra=None: rdd, 1, None, "x")("T", "R") == "R"
    assert with_time(lambda *args: args, 1, True, "x")("T", "R") == ("T", "R")
    with pytest.raises(ConfigurationError, match="takes neither"):
        with_time(lambda a, b, c: a, 1, None, "foreachRDD")
    with pytest.raises(ConfigurationError, match="needs a function"):
        with_time(3, 1, None, "foreachRDD")
