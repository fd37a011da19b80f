"""Input batches asked for after a later one: read again (as Spark), never given new input.

After a recovery the first output operation computes the input's batch for the recovered
time; a stateful or windowed stream then asks for the earlier batches. Spark's
``InputDStream.isTimeValid`` only warns about such a time; ours used to refuse it, so the
recovered state restarted from empty. A Kafka direct stream reads a past batch only with the
ranges it holds for it (restored from the checkpoint), never with new ones, and a past batch
read again does not hold its commits back. Driven on fakes (no Spark, no broker).
"""

import logging

import pytest

from kafka_direct import ConsumerStrategies, LocationStrategies, TopicPartition
from kafka_direct.streaming import StreamingContext
from kafka_direct.streaming.input_dstream import InputDStream
from tests.fakes.fake_cluster import (
    FakeCluster,
    FakeDriverConsumer,
    FakeSparkContext,
    stub_rdds,
)

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Ranges(list):
    """A stub KafkaRDD (its offset ranges) that a window may persist and union."""

    def persist(self, level=None):
        return self

    def unpersist(self, blocking=False):
        return self


class TimeStream(InputDStream):
    def compute(self, validTime):
        return Ranges([validTime])


@pytest.fixture
def cluster(monkeypatch):
    stub_rdds(monkeypatch, Ranges)
    cluster = FakeCluster()
    cluster.create("t", 2)
    return cluster


def context():
    sc = FakeSparkContext()
    sc.union = lambda rdds: Ranges(r for rdd in rdds for r in rdd)
    sc.emptyRDD = Ranges
    return StreamingContext(sc, 1)


def kafka_stream(ssc, cluster):
    from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream

    params = {"bootstrap.servers": "fake:9092", "group.id": "g",
              "auto.offset.reset": "earliest"}
    return DirectKafkaInputDStream(
        ssc, LocationStrategies.PreferConsistent(), ConsumerStrategies.Subscribe(["t"], params),
        driverConsumerFactory=lambda p: FakeDriverConsumer(cluster, p))


def run_batch(ssc, time):
    """Generate batch ``time``, run its jobs on a job thread, report its success."""
    from kafka_direct.streaming.job_scheduler import BATCH_TIME_PROPERTY

    sc = ssc.sparkContext
    for job in ssc.graph.generateJobs(time):
        sc.setLocalProperty(BATCH_TIME_PROPERTY, str(time))
        try:
            job.func()
        finally:
            sc.setLocalProperty(BATCH_TIME_PROPERTY, None)
    for stream in ssc.graph.inputStreams:
        stream.onBatchCompleted(time)


def spans(rdd):
    return [(r.partition, r.fromOffset, r.untilOffset) for r in rdd]


def test_an_input_batch_before_the_last_valid_time_is_computed_with_a_warning(caplog):
    ssc = context()
    stream = TimeStream(ssc)
    stream.initialize(0)
    assert stream.getOrCompute(3000) == [3000]
    with caplog.at_level(logging.WARNING):
        assert stream.getOrCompute(1000) == [1000]
    assert "isTimeValid called with 1000 ms whereas the last valid time is 3000 ms" in (
        caplog.text)
    assert stream.lastValidTime == 3000  # never lowered
    assert stream.getOrCompute(0) is None  # the zero time and off-grid times stay invalid
    assert stream.getOrCompute(1500) is None


def test_a_recovered_kafka_stream_reads_past_batches_only_with_their_restored_ranges(
        cluster, caplog):
    first = context()
    stream = kafka_stream(first, cluster)
    stream.foreachRDD(lambda rdd: None)
    first.graph.start(0)
    before = {}
    for time, tp, n in ((1000, T0, 3), (2000, T1, 2), (3000, T0, 4)):
        cluster.produce(tp, n)
        before[time] = spans(stream.getOrCompute(time))
    states = first.graph.checkpointState()
    stream.stop()
    # The checkpoint remembers batches 2000 and 3000 only (1000 was forgotten).
    del states["input:kafka " + stream.consumerStrategy.checkpointIdentity][
        "state"]["batches"]["1000"]
    second = context()
    recovered = kafka_stream(second, cluster)
    recovered.foreachRDD(lambda rdd: None)
    second.graph.restoreCheckpointState(states)
    second.graph.start(0, 4000)
    cluster.produce(T1, 5)
    assert spans(recovered.getOrCompute(3000)) == before[3000]  # the pending batch
    assert spans(recovered.getOrCompute(2000)) == before[2000]  # a past, restored batch
    with caplog.at_level(logging.WARNING):
        assert recovered.getOrCompute(1000) is None  # past, ranges unknown: no new ranges
    assert "no batch for 1000 ms" in caplog.text
    assert spans(recovered.getOrCompute(4000)) == [(0, 7, 7), (1, 2, 7)]
    assert sorted(recovered.batchRanges) == [2000, 3000, 4000]
    recovered.stop()


def test_a_fresh_kafka_stream_gives_no_new_ranges_to_a_time_before_its_latest_batch(cluster):
    ssc = context()
    stream = kafka_stream(ssc, cluster)
    stream.foreachRDD(lambda rdd: None)
    ssc.graph.start(0)
    cluster.produce(T0, 3)
    assert spans(stream.getOrCompute(2000)) == [(0, 0, 3), (1, 0, 0)]
    cluster.produce(T0, 1)
    # 1000 was never read: its records went to batch 2000, and the next ones are 3000's.
    assert stream.getOrCompute(1000) is None
    assert spans(stream.getOrCompute(3000)) == [(0, 3, 4), (1, 0, 0)]
    stream.stop()


@pytest.mark.parametrize("window_first", [False, True], ids=["output-first", "window-first"])
def test_past_batches_read_again_after_a_recovery_do_not_hold_commits_back(
        cluster, window_first):
    windows, done = [], []

    def build():
        ssc = context()
        stream = kafka_stream(ssc, cluster)

        def window():
            stream.window(3, 1).foreachRDD(lambda t, rdd: windows.append((t, spans(rdd))))

        if window_first:
            window()
        stream.foreachRDD(lambda rdd: stream.commitAsync(
            rdd, lambda offsets, error: done.append((offsets, error))))
        if not window_first:
            window()
        return ssc, stream

    first, stream = build()
    first.graph.start(0)
    for time, tp, n in ((1000, T0, 3), (2000, T1, 2), (3000, T0, 4)):
        cluster.produce(tp, n)
        if time < 3000:
            run_batch(first, time)
        else:  # batch 3000 is cut off before its jobs run (the driver dies)
            first.graph.generateJobs(time)
    assert cluster.committed == {("g", T0): 3, ("g", T1): 2}
    states = first.graph.checkpointState()
    stream.stop()
    windows.clear()
    second, recovered = build()
    second.graph.restoreCheckpointState(states)
    second.graph.start(0, 4000)
    run_batch(second, 3000)
    # The window read batches 1000 and 2000 again with their ranges; they completed before
    # the restart, so they pass with batch 3000 and its commit goes through.
    assert windows[-1][1] == [(0, 0, 3), (1, 0, 0), (0, 3, 3), (1, 0, 2), (0, 3, 7), (1, 2, 2)]
    assert cluster.committed == {("g", T0): 7, ("g", T1): 2}
    cluster.produce(T1, 1)
    run_batch(second, 4000)
    assert cluster.committed == {("g", T0): 7, ("g", T1): 3}
    assert [error for _, error in done] == [None] * 4
    recovered.stop()
