"""StreamingContext lifecycle, batches, listeners and failures, on a ManualClock."""

import itertools
import threading
import time

import pytest

from kafka_direct import ConfigurationError, StreamingStateError
from kafka_direct.streaming import StreamingContext
from tests.streaming.helpers import Driver
from tests.streaming.lifecycle_fakes import EventLog, LifecycleInputDStream


class Boom(ValueError):
    pass


def test_states_and_their_transitions(spark, caplog):
    driver = Driver(spark)
    ssc = driver.ssc
    assert ssc.state == "INITIALIZED"
    with pytest.raises(ConfigurationError, match="No output operations registered"):
        ssc.start()
    ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    ssc.start()
    assert ssc.state == "ACTIVE" and StreamingContext.getActive() is ssc
    ssc.start()
    assert "has already been started" in caplog.text
    with pytest.raises(StreamingStateError, match="after starting a context"):
        ssc.queueStream([[1]])
    other = StreamingContext(spark, 1)
    other.queueStream([[1]]).foreachRDD(lambda rdd: None)
    with pytest.raises(StreamingStateError, match="Only one StreamingContext"):
        other.start()
    driver.stop()
    assert ssc.state == "STOPPED" and StreamingContext.getActive() is None
    assert ssc.awaitTermination(0.1) is True
    with pytest.raises(StreamingStateError, match="already been stopped"):
        ssc.start()
    ssc.stop(stopSparkContext=False)
    assert "has already been stopped" in caplog.text
    never = StreamingContext(spark, 1)
    never.stop(stopSparkContext=False)
    assert "has not been started yet" in caplog.text and never.state == "STOPPED"
    assert not spark._jsc.sc().isStopped()


def test_batches_run_at_multiples_of_the_interval_with_their_records(spark):
    driver = Driver(spark, batch_seconds=1, start_ms=500)
    seen = []
    stream = driver.ssc.queueStream([[1, 2, 3], [4], []])
    stream.map(lambda x: x * 2).foreachRDD(
        lambda time, rdd: seen.append((time.timestamp(), sorted(rdd.collect()))))
    driver.start()
    assert driver.ssc.graph.zeroTime == 0  # one interval before the first batch, at 1000
    driver.clock.setTime(1000)
    driver.recorder.wait_completed(1000)
    driver.run(2)
    driver.stop()
    assert seen == [(1.0, [2, 4, 6]), (2.0, [8]), (3.0, [])]


def test_listener_events_come_in_order_for_each_batch(spark):
    driver = Driver(spark)
    stream = driver.ssc.queueStream([[1], [2]])
    stream.foreachRDD(lambda rdd: rdd.count())
    stream.map(str).foreachRDD(lambda rdd: rdd.collect())
    driver.start()
    driver.run(2)
    driver.stop()
    recorder = driver.recorder
    assert recorder.wait_completed(1000) is not None
    assert driver.ssc.scheduler.listenerBus is not None
    names = [name for name, _ in recorder.events]
    assert names[0] == "streamingStarted" and names[-1] == "streamingStopped"
    for batch_time in (1000, 2000):
        order = recorder.names(batch_time)
        assert order[0] == "batchSubmitted" and order[1] == "batchStarted"
        assert order[-1] == "batchCompleted"
        assert order.count("outputOperationStarted") == 2
        assert order.count("outputOperationCompleted") == 2
        info = recorder.wait_completed(batch_time)
        assert info.schedulingDelay >= 0 and info.processingDelay >= 0
        assert info.totalDelay == info.schedulingDelay + info.processingDelay
        assert sorted(info.outputOperationInfos) == [0, 1]
        assert all(op.failureReason is None for op in info.outputOperationInfos.values())
        assert info.outputOperationInfos[0].name.startswith("foreachRDD at ")


def test_spark_jobs_carry_the_batch_job_group_and_description(spark):
    driver = Driver(spark)
    seen = {}

    def output(rdd):
        sc = rdd.context
        seen["description"] = sc.getLocalProperty("spark.job.description")
        seen["group"] = sc.getLocalProperty("spark.jobGroup.id")
        rdd.count()

    driver.ssc.queueStream([[1, 2]]).foreachRDD(output)
    driver.start()
    driver.run(1)
    driver.stop()
    assert seen["group"] == "streaming-1000-0"
    assert seen["description"].startswith("Streaming job from [output operation 0, batch time ")
    assert list(spark.statusTracker().getJobIdsForGroup("streaming-1000-0"))


def test_a_failed_output_operation_stops_the_stream_with_its_error(spark):
    driver = Driver(spark)
    ran = []

    def output(time, rdd):
        ran.append(time.timestamp())
        if len(ran) == 2:
            raise Boom("batch 2 cannot be written")
        rdd.count()

    driver.ssc.queueStream([[1], [2], [3], [4]]).foreachRDD(output)
    driver.start()
    driver.run(1)
    driver.clock.advance(1000)
    with pytest.raises(Boom, match="batch 2 cannot be written"):
        driver.ssc.awaitTermination(30)
    failed = driver.recorder.wait_completed(2000)
    assert "Boom: batch 2 cannot be written" in failed.outputOperationInfos[0].failureReason
    assert driver.ssc.state == "STOPPED"
    driver.clock.advance(5000)
    time.sleep(0.3)
    assert ran == [1.0, 2.0]  # no later batch ran
    with pytest.raises(Boom):
        driver.ssc.awaitTerminationOrTimeout(1)


def test_graceful_stop_finishes_the_generated_batches(spark):
    driver = Driver(spark)
    release = threading.Event()
    done = []

    def slow(rdd):
        release.wait(10)
        done.append(rdd.collect())

    driver.ssc.queueStream([[1], [2]]).foreachRDD(slow)
    driver.start()
    driver.clock.advance(1000)
    while not driver.recorder.names(1000).count("batchStarted"):
        time.sleep(0.01)
    stopper = threading.Thread(target=driver.stop, kwargs={"graceful": True})
    stopper.start()
    time.sleep(0.3)
    assert stopper.is_alive()  # waiting for batch 1000
    release.set()
    stopper.join(20)
    assert not stopper.is_alive() and done == [[1]]


def test_immediate_stop_cancels_running_jobs(spark):
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
    begun = time.monotonic()
    driver.stop()
    assert time.monotonic() - begun < 10


def test_real_time_batches_on_the_system_clock(spark):
    ssc = StreamingContext(spark, 0.3)
    times = []
    ssc.constantStream(spark.parallelize([1])).foreachRDD(
        lambda t, rdd: times.append(t.timestamp()))
    ssc.start()
    assert ssc.awaitTerminationOrTimeout(1.5) is False
    ssc.stop(stopSparkContext=False, stopGracefully=True)
    assert len(times) >= 3
    millis = [round(t * 1000) for t in times]
    assert all(m % 300 == 0 for m in millis)
    assert all(b - a == 300 for a, b in itertools.pairwise(millis))


def test_stop_gracefully_on_sigterm(spark):
    import os
    import signal

    spark.getConf()  # the setting is read from the SparkContext's conf at start
    driver = Driver(spark)
    driver.ssc._conf.set("spark.streaming.stopGracefullyOnShutdown", "true")
    driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    previous = signal.getsignal(signal.SIGTERM)
    driver.start()
    os.kill(os.getpid(), signal.SIGTERM)
    assert driver.ssc.awaitTermination(20) is True
    assert driver.ssc.state == "STOPPED"
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_failing_or_slow_listener_never_holds_batches_back(spark):
    from kafka_direct.streaming import StreamingListener

    release = threading.Event()

    class Broken(StreamingListener):
        def onBatchCompleted(self, e):
            raise RuntimeError("listener bug")

    class Slow(StreamingListener):
        def onBatchSubmitted(self, e):
            release.wait(10)

    driver = Driver(spark)
    driver.ssc.addStreamingListener(Broken())
    driver.ssc.addStreamingListener(Slow())
    ran = []
    driver.ssc.queueStream([[1], [2], [3]]).foreachRDD(lambda t, rdd: ran.append(t.second))
    driver.start()
    for t in (1000, 2000, 3000):
        driver.clock.setTime(t)
    deadline = time.monotonic() + 20
    while len(ran) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == [1, 2, 3]  # batches ran while the slow listener was still blocked
    release.set()
    driver.recorder.wait_completed(3000)  # later listeners still get every event
    driver.stop()


def test_concurrent_jobs_run_output_operations_side_by_side(spark):
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": "2"})
    both = threading.Barrier(2, timeout=10)
    stream = driver.ssc.queueStream([[1]])
    stream.foreachRDD(lambda rdd: both.wait())
    stream.foreachRDD(lambda rdd: both.wait())
    driver.start()
    driver.run(1)  # with one job thread the barrier would time out and fail the batch
    driver.stop()
    assert not driver.recorder.wait_completed(1000).failed


@pytest.mark.parametrize(("args", "kwargs", "graceful"), [
    ((), {"stopSparkContext": False, "stopGraceFully": True}, True),  # PySpark's spelling
    ((), {"stopSparkContext": False, "stopGracefully": True}, True),  # Spark's
    ((False, True), {}, True),  # positional, as both
    ((False,), {"stopGraceFully": False}, False),
    ((False,), {"stopGracefully": True, "stopGraceFully": True}, True),
    ((False,), {}, False),
])
def test_stop_takes_pyspark_and_spark_spellings_of_graceful(spark, monkeypatch, args, kwargs,
                                                            graceful):
    driver = Driver(spark)
    driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    driver.start()
    seen = []
    real = driver.ssc.scheduler.stop

    def stop(processAllReceivedData, *rest, **more):
        seen.append(processAllReceivedData)
        return real(processAllReceivedData, *rest, **more)

    monkeypatch.setattr(driver.ssc.scheduler, "stop", stop)
    driver.ssc.stop(*args, **kwargs)
    assert driver.ssc.state == "STOPPED"
    assert seen == [graceful]


def test_stop_refuses_spellings_of_graceful_that_disagree(spark):
    driver = Driver(spark)
    driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    driver.start()
    try:
        with pytest.raises(ConfigurationError, match="stopGracefully=True and stopGraceFully"
                                                      "=False, which disagree"):
            driver.ssc.stop(False, True, stopGraceFully=False)
        assert driver.ssc.state == "ACTIVE"  # nothing was stopped
    finally:
        driver.stop()


def _started(spark, conf):
    """A started driver whose batch 1000 runs and blocks until ``release`` is set.

    Returns the driver, the (batch time, when) of each compute of its stream, the event
    that releases batch 1000, and when each batch's output ended.
    """
    from tests.streaming.helpers import ScriptedInputDStream

    computed, release, ended = [], threading.Event(), {}

    class Noting(ScriptedInputDStream):
        def compute(self, validTime):
            computed.append((validTime, time.monotonic()))
            return super().compute(validTime)

    def output(t, rdd):
        if round(t.timestamp() * 1000) == 1000:
            release.wait(10)
        rdd.collect()
        ended[round(t.timestamp() * 1000)] = time.monotonic()

    driver = Driver(spark, conf=conf)
    Noting(driver.ssc, [[1], [2], [3]]).foreachRDD(output)
    driver.start()
    driver.clock.setTime(1000)
    while not driver.recorder.names(1000).count("batchStarted"):
        time.sleep(0.01)
    return driver, computed, release, ended


_WAIT = {"spark.streaming.waitForPreviousBatch": "true"}


def test_batches_wait_for_the_previous_one_before_reading_their_input(spark):
    # A stream that fell behind catches up: the ticks that come while a batch runs are
    # generated (their input read) once it completed, not queued with the input of their own
    # tick, so the next batch reads everything that came meanwhile.
    driver, computed, release, ended = _started(spark, _WAIT)
    driver.clock.setTime(3000)  # ticks 2000 and 3000 while batch 1000 runs
    time.sleep(0.5)
    assert [t for t, _ in computed] == [1000]  # not read yet: batch 1000 still runs
    release.set()
    driver.wait_tick(3000)
    assert [t for t, _ in computed] == [1000, 2000, 3000]  # every tick is a batch, in order
    assert computed[1][1] >= ended[1000] and computed[2][1] >= ended[2000]
    info = driver.recorder.wait_completed(2000)
    # Its wait counts as scheduling delay, as if it had queued.
    assert info.schedulingDelay is not None and info.schedulingDelay >= 400
    driver.stop()


def test_batches_read_their_input_at_their_tick_by_default(spark):
    driver, computed, release, _ = _started(spark, None)
    driver.clock.setTime(3000)
    deadline = time.monotonic() + 10
    while len(computed) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [t for t, _ in computed] == [1000, 2000, 3000]  # queued, as in Spark
    release.set()
    driver.wait_tick(3000)
    driver.stop()


def test_an_immediate_stop_ends_the_wait_for_the_previous_batch(spark):
    driver, computed, release, _ = _started(spark, _WAIT)
    driver.clock.setTime(2000)
    time.sleep(0.2)
    begun = time.monotonic()
    stopper = threading.Thread(target=driver.stop)
    stopper.start()
    time.sleep(0.5)
    release.set()
    stopper.join(20)
    assert not stopper.is_alive() and time.monotonic() - begun < 15
    assert [t for t, _ in computed] == [1000]  # batch 2000 was never generated


def test_output_spec_validation_is_off_in_every_batchs_jobs_and_restored_after(spark):
    # As Spark's scheduler (SPARK-4835); the JVM's flag is looked up once, not per batch.
    def flag():
        return spark._jvm.org.apache.spark.internal.io.SparkHadoopWriterUtils \
            .disableOutputSpecValidation().value()

    seen = []
    driver = Driver(spark)
    driver.ssc.queueStream([[1], [2], [3]]).foreachRDD(lambda rdd: seen.append(flag()))
    driver.start()
    driver.run(3)
    driver.stop()
    assert seen == [True, True, True]
    assert flag() is False


def test_a_batch_that_ends_before_an_earlier_one_completes_after_it(spark):
    # Two job threads: batch 2000 ends while batch 1000 still runs. Its input stream hears
    # of it (the Kafka stream commits there) only after batch 1000, so commits keep the
    # batches' order; under load the order of their ends varies, and commits came 2000 first.
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": "2"})
    log = EventLog()
    stream = LifecycleInputDStream(driver.ssc, log)
    scheduler = driver.ssc.scheduler

    def later_batch_ended():
        return (2000 in getattr(scheduler, "_ended", ())  # held for batch 1000
                or ("committed", "in", 2000) in log.snapshot())

    def output(batch_time, rdd):
        if round(batch_time.timestamp() * 1000) == 1000:  # ends once batch 2000 has ended
            deadline = time.monotonic() + 30
            while not later_batch_ended():
                assert time.monotonic() < deadline, "batch 2000 never ended"
                time.sleep(0.005)

    stream.foreachRDD(output)
    driver.start()
    driver.clock.advance(1000)
    driver.clock.advance(1000)
    driver.recorder.wait_completed(2000)
    driver.recorder.wait_completed(1000)
    driver.stop(graceful=True)
    assert [e[2] for e in log.of("committed")] == [1000, 2000]
    completed = [e.batchInfo.batchTime for n, e in driver.recorder.events
                 if n == "batchCompleted"]
    assert completed == [1000, 2000]
