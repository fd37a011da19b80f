"""PySpark's streaming API where kafka-direct differed: checkpoint directories of stateful
operators, transformWith's signature, listener accessors, getActiveOrCreate."""

import operator

import pytest

from kafka_direct import ConfigurationError
from kafka_direct.streaming import (
    JavaBatchInfo,
    JavaOutputOperationInfo,
    StreamingContext,
    StreamingListener,
)
from kafka_direct.streaming.batch_info import BatchInfo, OutputOperationInfo, StreamInputInfo
from kafka_direct.streaming.listener import StreamingListenerStreamingStarted
from tests.streaming.helpers import Driver

# -- 1. stateful operators need the SparkContext's checkpoint directory only ------------------

STATEFUL = {
    "updateStateByKey": (
        lambda s: s.map(lambda x: (x % 2, 1)).updateStateByKey(lambda vs, st: sum(vs) + (st or 0)),
        [[(0, 1), (1, 1)], [(0, 2), (1, 2)], [(0, 3), (1, 3)], [(0, 4), (1, 4)],
         [(0, 5), (1, 5)], [(0, 6), (1, 6)]]),
    "countByWindow": (
        lambda s: s.countByWindow(5, 1),
        [[2], [4], [6], [8], [10], [10]]),
    "countByValueAndWindow": (
        lambda s: s.map(lambda x: x % 2).countByValueAndWindow(5, 1),
        [[(0, 1), (1, 1)], [(0, 2), (1, 2)], [(0, 3), (1, 3)], [(0, 4), (1, 4)],
         [(0, 5), (1, 5)], [(0, 5), (1, 5)]]),
    "groupByKeyAndWindow": (
        lambda s: s.map(lambda x: (x % 2, x)).groupByKeyAndWindow(5, 1).mapValues(sorted),
        [[(0, [0]), (1, [1])], [(0, [0, 2]), (1, [1, 3])], [(0, [0, 2, 4]), (1, [1, 3, 5])],
         [(0, [0, 2, 4, 6]), (1, [1, 3, 5, 7])], [(0, [0, 2, 4, 6, 8]), (1, [1, 3, 5, 7, 9])],
         [(0, [2, 4, 6, 8, 10]), (1, [3, 5, 7, 9, 11])]]),
    "reduceByKeyAndWindow": (
        lambda s: s.map(lambda x: (x % 2, 1)).reduceByKeyAndWindow(
            operator.add, operator.sub, 5, 1),
        [[(0, 1), (1, 1)], [(0, 2), (1, 2)], [(0, 3), (1, 3)], [(0, 4), (1, 4)],
         [(0, 5), (1, 5)], [(0, 5), (1, 5)]]),
}


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_stateful_operators_over_a_queue_stream_need_only_the_spark_checkpoint_dir(
        spark, tmp_path, name):
    build, expected = STATEFUL[name]
    spark.setCheckpointDir(str(tmp_path))
    driver = Driver(spark)
    assert driver.ssc.checkpointDir is None  # no metadata checkpointing
    out = []
    stream = driver.ssc.queueStream([[2 * i, 2 * i + 1] for i in range(6)])
    build(stream).foreachRDD(lambda rdd: out.append(sorted(rdd.collect())))
    driver.start()
    try:
        driver.run(6)
    finally:
        driver.stop()
    assert out == expected
    assert not any(b.failed for b in driver.recorder.completed)


def test_a_stream_that_checkpoints_rdds_without_any_checkpoint_dir_is_refused(
        spark, monkeypatch):
    monkeypatch.setattr(spark, "getCheckpointDir", lambda: None)
    driver = Driver(spark)
    driver.ssc.queueStream([[1]]).countByWindow(5, 1).foreachRDD(lambda rdd: None)
    with pytest.raises(ConfigurationError, match="checkpoint directory has not been set"):
        driver.start()
    driver.stop()
    # Not only stateful streams: one given checkpoint() checkpoints its RDDs too.
    driver = Driver(spark)
    driver.ssc.queueStream([[1]]).map(str).checkpoint(2).foreachRDD(lambda rdd: None)
    with pytest.raises(ConfigurationError, match="SparkContext.setCheckpointDir"):
        driver.start()
    driver.stop()


def test_a_queue_stream_still_refuses_metadata_checkpointing(spark, tmp_path):
    driver = Driver(spark)
    driver.ssc.checkpoint(str(tmp_path))
    driver.ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
    with pytest.raises(ConfigurationError, match="queueStream doesn't support checkpointing"):
        driver.start()
    driver.stop()


# -- 2. transformWith(func, other, keepSerializer=False) --------------------------------------

def test_transform_with_takes_keep_serializer_third_and_reads_the_form_from_func(spark):
    driver = Driver(spark)
    left = driver.ssc.queueStream([[1, 2]])
    right = driver.ssc.queueStream([[3]])
    out = {}
    left.transformWith(lambda a, b: a.union(b), right, True).foreachRDD(
        lambda rdd: out.setdefault("two", sorted(rdd.collect())))
    left.transformWith(lambda t, a, b: a.map(lambda x: (type(t).__name__, x)), right,
                       False).foreachRDD(lambda rdd: out.setdefault("three", rdd.collect()))
    left.transformWith(lambda *rdds: rdds[1], right, withTime=False).foreachRDD(
        lambda rdd: out.setdefault("explicit", rdd.collect()))
    driver.start()
    try:
        driver.run(1)
    finally:
        driver.stop()
    assert out == {"two": [1, 2, 3], "three": [("datetime", 1), ("datetime", 2)],
                   "explicit": [3]}
    with pytest.raises(ConfigurationError, match="transformWith takes a function"):
        Driver(spark).ssc.queueStream([[1]]).transformWith(lambda a: a, right)


# -- 3. listener events with PySpark's (Java) accessors ---------------------------------------

def test_batch_info_records_are_also_pyspark_accessors():
    op = OutputOperationInfo(5000, 0, "foreachRDD at x.py:1", "long", startTime=5010)
    info = BatchInfo(5000, {0: StreamInputInfo(0, 7, {"Description": "d"})}, 5002,
                     None, None, {0: op})
    # The typed attributes are unchanged.
    assert info.schedulingDelay is None and info.numRecords == 7 and info.batchTime == 5000
    java = info()
    assert isinstance(java, JavaBatchInfo)
    assert java.batchTime().milliseconds() == 5000 and java.batchTime() == 5000
    assert (java.submissionTime(), java.processingStartTime(), java.processingEndTime()) == (
        5002, -1, -1)
    assert (java.schedulingDelay(), java.processingDelay(), java.totalDelay()) == (-1, -1, -1)
    assert java.numRecords() == 7 and java.numOutputOp() == 1
    inputInfo = java.streamIdToInputInfo()[0]
    assert (inputInfo.inputStreamId(), inputInfo.numRecords(), inputInfo.metadataDescription(),
            dict(inputInfo.metadata())) == (0, 7, "d", {"Description": "d"})
    javaOp = java.outputOperationInfos()[0]
    assert isinstance(javaOp, JavaOutputOperationInfo) and isinstance(op(),
                                                                      JavaOutputOperationInfo)
    assert (javaOp.batchTime().milliseconds(), javaOp.id(), javaOp.name(), javaOp.description(),
            javaOp.startTime(), javaOp.endTime(), javaOp.failureReason()) == (
        5000, 0, "foreachRDD at x.py:1", "long", 5010, -1, None)
    started = StreamingListenerStreamingStarted(123)
    assert started.time == 123 and started.time() == 123


def test_a_listener_written_for_pyspark_works_unchanged(spark):
    class PySparkListener(StreamingListener):
        def __init__(self):
            self.seen = []

        def onStreamingStarted(self, streamingStarted):
            self.seen.append(("started", streamingStarted.time()))

        def onBatchCompleted(self, batchCompleted):
            info = batchCompleted.batchInfo()
            ops = info.outputOperationInfos()
            self.seen.append(("batch", info.batchTime().milliseconds(), info.numRecords(),
                              info.schedulingDelay() >= 0, info.totalDelay() >= 0,
                              [(op.id(), op.failureReason()) for op in ops.values()]))

        def onOutputOperationCompleted(self, outputOperationCompleted):
            op = outputOperationCompleted.outputOperationInfo()
            self.seen.append(("op", op.batchTime().milliseconds(), op.endTime() >= 0))

    driver = Driver(spark)
    listener = PySparkListener()
    driver.ssc.addStreamingListener(listener)
    driver.ssc.queueStream([[1, 2]]).foreachRDD(lambda rdd: rdd.count())
    driver.start()
    try:
        driver.run(1)
    finally:
        driver.stop()
    # Our own listeners still see typed attributes.
    typed = driver.recorder.completed[0]
    assert typed.batchTime == 1000 and typed.schedulingDelay is not None
    assert listener.seen == [("started", 0), ("op", 1000, True),
                             ("batch", 1000, 0, True, True, [(0, None)])]


# -- 4. getActiveOrCreate -----------------------------------------------------------------------

def test_get_active_or_create(spark, tmp_path):
    calls = []

    def setup():
        calls.append(1)
        ssc = StreamingContext(spark, 1)
        ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
        return ssc

    assert StreamingContext.getActive() is None
    created = StreamingContext.getActiveOrCreate(None, setup)
    assert len(calls) == 1 and created.checkpointDir is None
    created.start()
    try:
        assert StreamingContext.getActiveOrCreate(None, setup) is created
        assert StreamingContext.getActiveOrCreate(str(tmp_path), setup) is created
        assert len(calls) == 1
    finally:
        created.stop(stopSparkContext=False)
    assert StreamingContext.getActive() is None
    # With a path and no active context: getOrCreate (here without a checkpoint: created,
    # and checkpointing into the path).
    fresh = StreamingContext.getActiveOrCreate(str(tmp_path / "cp"), setup)
    assert len(calls) == 2 and fresh.checkpointDir == str(tmp_path / "cp")
    with pytest.raises(ConfigurationError, match="needs a setupFunc"):
        StreamingContext.getActiveOrCreate(None, None)
    with pytest.raises(ConfigurationError, match="must return a StreamingContext"):
        StreamingContext.getActiveOrCreate(None, lambda: None)


def run_queue(spark, batches, build, n):
    driver = Driver(spark)
    out = []
    build(driver.ssc.queueStream(batches)).foreachRDD(lambda rdd: out.append(rdd.collect()))
    driver.start()
    try:
        driver.run(n)
    finally:
        driver.stop()
    assert not any(b.failed for b in driver.recorder.completed)
    return out


def test_group_by_key_and_window_keeps_keys_that_left_a_long_window_as_pyspark(
        spark, tmp_path):
    # PySpark's groupByKeyAndWindow is reduceByKeyAndWindow with an inverse: with a window
    # of five slides or more, a key whose values all left the window stays, with none.
    from pyspark.resultiterable import ResultIterable

    spark.setCheckpointDir(str(tmp_path))
    out = run_queue(spark, [[("a", 1)], [("b", 1)]] + [[]] * 7,
                    lambda s: s.groupByKeyAndWindow(5, 1), 9)
    assert all(isinstance(v, ResultIterable) for batch in out for _, v in batch)
    listed = [sorted((k, list(v)) for k, v in batch) for batch in out]
    assert listed == ([[("a", [1])]] + [[("a", [1]), ("b", [1])]] * 4
                      + [[("a", []), ("b", [1])]] + [[("a", []), ("b", [])]] * 3)
    # A shorter window is reduced afresh every slide: no empty groups.
    out = run_queue(spark, [[("a", 1)], [("b", 1)], []],
                    lambda s: s.groupByKeyAndWindow(2, 1), 4)
    assert [sorted((k, list(v)) for k, v in batch) for batch in out] == [
        [("a", [1])], [("a", [1]), ("b", [1])], [("b", [1])], []]
    assert isinstance(out[0][0][1], ResultIterable)


def test_reduce_by_key_and_window_ignores_filter_func_without_inverse_as_pyspark(
        spark, caplog):
    out = run_queue(spark, [[("a", 1)], [("b", 1)], [("a", 5)], []],
                    lambda s: s.reduceByKeyAndWindow(operator.add, None, 2, 1,
                                                     filterFunc=lambda kv: kv[1] > 1), 5)
    assert [sorted(batch) for batch in out] == [
        [("a", 1)], [("a", 1), ("b", 1)], [("a", 5), ("b", 1)], [("a", 5)], []]
    assert "ignores filterFunc when invFunc is None" in caplog.text
