"""commitAsync: a commit belongs to its batch and runs when that batch, and every batch before
it, succeeded; a failed or unfinished batch is never committed past, not even on stop."""

import logging

import pytest

from kafka_direct import ConsumerStrategies, OffsetRange, TopicPartition
from kafka_direct.errors import ConfigurationError, KafkaDirectError, StreamingStateError
from tests.fakes.fake_cluster import FakeCluster, make_stream, on_job_thread, stub_rdds

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch):
    stub_rdds(monkeypatch)


@pytest.fixture
def cluster():
    cluster = FakeCluster()
    cluster.create("t", 2)
    return cluster


def subscribe(cluster, conf=None, **options):
    params = {"bootstrap.servers": "fake:9092", "group.id": "g",
              "auto.offset.reset": "earliest"}
    return make_stream(cluster, ConsumerStrategies.Subscribe(["t"], params, **options), conf)


def committed(cluster):
    return {tp: o for (g, tp), o in cluster.committed.items() if g == "g"}


def results():
    out = []
    return out, lambda offsets, error: out.append((offsets, error))


def test_a_failed_batch_is_not_committed_on_stop(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    ranges = stream.compute(1000)
    seen, callback = results()
    # output op 0 commits, output op 1 fails: onBatchCompleted never comes, the stream stops
    on_job_thread(stream, 1000, lambda: stream.commitAsync(ranges, callback))
    stream.stop()
    assert committed(cluster) == {}
    assert seen[0][0] is None and isinstance(seen[0][1], KafkaDirectError)
    assert "1000" in str(seen[0][1])


def test_a_successful_batch_commits_when_it_completes(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    cluster.produce(T1, 2)
    ranges = stream.compute(1000)
    seen, callback = results()
    on_job_thread(stream, 1000, lambda: stream.commitAsync(ranges, callback))
    assert committed(cluster) == {}
    stream.onBatchCompleted(1000)
    assert committed(cluster) == {T0: 5, T1: 2}
    assert seen == [({T0: 5, T1: 2}, None)]
    assert stream.committedOffsets == {T0: 5, T1: 2}


def test_commits_never_run_ahead_of_an_unfinished_earlier_batch(cluster):
    stream = subscribe(cluster, {"spark.streaming.concurrentJobs": "2"})
    stream.start()
    cluster.produce(T0, 5)
    first = stream.compute(1000)
    cluster.produce(T0, 3)
    second = stream.compute(2000)
    on_job_thread(stream, 2000, lambda: stream.commitAsync(second))
    stream.onBatchCompleted(2000)  # batch 2 finishes first: batch 1 still runs
    assert committed(cluster) == {}
    on_job_thread(stream, 1000, lambda: stream.commitAsync(first))
    stream.onBatchCompleted(1000)
    assert committed(cluster) == {T0: 8, T1: 0}
    assert cluster.commit_log == [("g", {T0: 8, T1: 0})]


def test_a_batch_after_a_failed_one_is_dropped_on_stop(cluster, caplog):
    stream = subscribe(cluster, {"spark.streaming.concurrentJobs": "2"})
    stream.start()
    cluster.produce(T0, 5)
    first = stream.compute(1000)
    cluster.produce(T0, 3)
    second = stream.compute(2000)
    seen, callback = results()
    on_job_thread(stream, 1000, lambda: stream.commitAsync(first, callback))  # then fails
    on_job_thread(stream, 2000, lambda: stream.commitAsync(second, callback))
    stream.onBatchCompleted(2000)
    with caplog.at_level(logging.WARNING):
        stream.stop()
    assert committed(cluster) == {}
    assert [offsets for offsets, _ in seen] == [None, None]
    assert "not committed" in caplog.text


def test_stop_commits_the_successful_prefix_and_drops_the_rest(cluster):
    stream = subscribe(cluster, {"spark.streaming.concurrentJobs": "3"})
    stream.start()
    batches = {}
    for t in (1000, 2000, 3000):
        cluster.produce(T0, 2)
        batches[t] = stream.compute(t)
    for t in (1000, 3000):
        on_job_thread(stream, t, lambda t=t: stream.commitAsync(batches[t]))
        stream.onBatchCompleted(t)
    assert committed(cluster) == {T0: 2, T1: 0}
    stream.stop()  # batch 2 never succeeded: batch 3's commit would skip its records
    assert committed(cluster) == {T0: 2, T1: 0}


def test_user_built_ranges_on_a_job_thread_belong_to_its_batch_and_are_capped(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    stream.compute(1000)
    seen, callback = results()
    mine = [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 99), OffsetRange("u", 0, 0, 4)]
    on_job_thread(stream, 1000, lambda: stream.commitAsync(mine, callback))
    stream.onBatchCompleted(1000)
    # t-1 was read up to 0 only; u-0 is not read by this stream at all
    assert committed(cluster) == {T0: 3, T1: 0}
    assert seen == [({T0: 3, T1: 0}, None)]


def test_ranges_off_a_job_thread_belong_to_the_batch_that_read_them(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    first = stream.compute(1000)
    cluster.produce(T0, 1)
    stream.compute(2000)
    stream.commitAsync(first)  # e.g. from a thread of the application's own
    stream.onBatchCompleted(1000)
    assert committed(cluster) == {T0: 5, T1: 0}


def test_ranges_of_no_pending_batch_fail_their_callback(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    stream.compute(1000)
    seen, callback = results()
    stream.commitAsync([OffsetRange("t", 0, 3, 9)], callback)
    assert seen[0][0] is None and isinstance(seen[0][1], ConfigurationError)
    stream.onBatchCompleted(1000)
    assert committed(cluster) == {}


def test_a_commit_after_stop_fails_its_callback(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    ranges = stream.compute(1000)
    stream.stop()
    seen, callback = results()
    on_job_thread(stream, 1000, lambda: stream.commitAsync(ranges, callback))
    stream.commitAsync(ranges)  # no callback: logged, not raised
    assert seen[0][0] is None and isinstance(seen[0][1], StreamingStateError)
    assert stream.drivers[0].closed


def test_stop_commits_a_successful_batch_before_closing_the_consumer(cluster):
    stream = subscribe(cluster)
    stream.start()
    cluster.produce(T0, 5)
    ranges = stream.compute(1000)
    cluster.fail_commits = True
    seen, callback = results()
    on_job_thread(stream, 1000, lambda: stream.commitAsync(ranges, callback))
    stream.onBatchCompleted(1000)  # the coordinator is away: the callback hears of it
    assert seen[0][0] is None and seen[0][1] is not None
    cluster.fail_commits = False
    cluster.produce(T0, 2)
    ranges = stream.compute(2000)
    on_job_thread(stream, 2000, lambda: stream.commitAsync(ranges, callback))
    stream.onBatchCompleted(2000)
    stream.stop()
    assert committed(cluster) == {T0: 7, T1: 0}
    assert stream.drivers[0].closed


def run_batch(ssc, time):
    """Generate batch ``time``, run its jobs on a job thread, and report its success to the
    input streams (as the JobScheduler does when every job of the batch succeeded)."""
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


class Ranges(list):
    """A stub KafkaRDD that a window may persist and union."""

    def persist(self, level=None):
        return self

    def unpersist(self, blocking=False):
        return self


def test_a_stream_read_only_through_a_window_commits_next_to_a_per_batch_output(
        cluster, monkeypatch):
    # The outside reviewer's case: B is read only by window(2 s, 2 s); A has an output every
    # 1 s batch. B's odd batches are computed by the next window job, after their own batch
    # time completed; they must not hold B's commits back forever.
    from kafka_direct import LocationStrategies, StreamingContext
    from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
    from tests.fakes.fake_cluster import FakeDriverConsumer, FakeSparkContext

    stub_rdds(monkeypatch, Ranges)
    cluster.create("b", 1)
    B0 = TopicPartition("b", 0)
    sc = FakeSparkContext()
    sc.union = lambda rdds: Ranges(r for rdd in rdds for r in rdd)
    sc.emptyRDD = Ranges
    ssc = StreamingContext(sc, 1)

    def stream(topic, group):
        params = {"bootstrap.servers": "fake:9092", "group.id": group,
                  "auto.offset.reset": "earliest"}
        return DirectKafkaInputDStream(
            ssc, LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe([topic], params),
            driverConsumerFactory=lambda p: FakeDriverConsumer(cluster, p))

    a, b = stream("t", "ga"), stream("b", "gb")
    a.foreachRDD(lambda rdd: a.commitAsync(rdd))
    seen, callback = results()
    b.window(2, 2).foreachRDD(lambda rdd: b.commitAsync(rdd, callback))
    ssc.graph.start(0)
    cluster.produce(T0, 3)
    cluster.produce(B0, 4)
    for time in (1000, 2000, 3000):
        run_batch(ssc, time)
    assert cluster.committed.get(("gb", B0)) == 4, seen
    cluster.produce(B0, 2)
    run_batch(ssc, 4000)
    assert cluster.committed.get(("gb", B0)) == 6, seen
    assert [error for _, error in seen] == [None, None]
    a.stop()
    b.stop()
    assert cluster.committed[("ga", T0)] == 3


def test_a_batch_computed_after_its_own_batch_completed_passes_with_its_reader():
    # Whatever the graph: batch 1000 completed before the stream computed it (a later
    # batch's window job computes it), so no job of its own read it.
    from kafka_direct.dstream.commit_queue import BatchCommitQueue

    queue = BatchCommitQueue()
    assert queue.batchSucceeded(1000).commits == []
    queue.addBatch(1000, [OffsetRange("t", 0, 0, 4)], hasJobs=True)
    queue.addBatch(2000, [OffsetRange("t", 0, 4, 6)], hasJobs=True)
    assert queue.add(2000, [OffsetRange("t", 0, 0, 6)], None)
    assert queue.release().offsets == {}  # the reader has not finished
    assert queue.batchSucceeded(2000).offsets == {T0: 6}
    queue.forget(5000)
    assert queue._completedFirst == set()
