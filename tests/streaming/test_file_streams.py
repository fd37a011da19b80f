"""textFileStream / binaryRecordsStream: new files picked once per batch, and recovered."""

import os
import time

import pytest

from kafka_direct import CheckpointError, ConfigurationError
from kafka_direct.streaming import FileInputDStream, ManualClock, StreamingContext
from kafka_direct.streaming.file_input_dstream import num_batches_to_remember
from tests.streaming.helpers import Driver, Recorder


def put(directory, name, mtime_ms, data="x\n"):
    """Write a file and give it the modification time ``mtime_ms`` (the clock's time)."""
    path = os.path.join(str(directory), name)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return path


def sink_of(stream):
    sink = []
    stream.foreachRDD(lambda t, rdd: sink.append((int(t.timestamp() * 1000),
                                                  sorted(rdd.collect()))))
    return sink


def test_new_files_are_taken_once_and_old_and_hidden_ones_ignored(spark, tmp_path):
    put(tmp_path, "before", 50_000, "before\n")
    put(tmp_path, "at-start", 100_000, "at-start\n")  # mtime == creation time: not new
    driver = Driver(spark, start_ms=100_000)
    stream = driver.ssc.textFileStream(str(tmp_path))
    sink = sink_of(stream)
    driver.start()
    try:
        put(tmp_path, "a", 100_400, "a1\na2\n")
        put(tmp_path, "later", 101_500, "later\n")  # after the first batch's time
        driver.run(1)  # batch 101000
        put(tmp_path, "b", 101_700, "b\n")
        put(tmp_path, ".hidden", 101_700, "hidden\n")
        put(tmp_path, "_temporary", 101_700, "temporary\n")
        os.mkdir(tmp_path / "subdir")
        driver.run(1)  # batch 102000
        put(tmp_path, "late", 101_900, "late\n")  # appeared late, its mtime in the past
        driver.run(2)  # batches 103000, 104000
    finally:
        driver.stop()
    assert sink == [(101_000, ["a1", "a2"]), (102_000, ["b", "later"]),
                    (103_000, ["late"]), (104_000, [])]
    assert stream.batchTimeToSelectedFiles[102_000] == [str(tmp_path / "b"),
                                                        str(tmp_path / "later")]
    info = driver.recorder.wait_completed(101_000).streamIdToInputInfo[stream.inputStreamId]
    assert info.metadata["files"] == [str(tmp_path / "a")]


def test_files_are_remembered_for_the_remember_window_rounded_up_to_batches(spark, tmp_path):
    driver = Driver(spark, batch_seconds=1,
                    conf={"spark.streaming.fileStream.minRememberDuration": "2500ms"})
    stream = driver.ssc.textFileStream(str(tmp_path))
    sink = sink_of(stream)
    assert stream.durationToRemember == 3000
    assert num_batches_to_remember(1000, 60_000) == 60
    driver.start()
    try:
        put(tmp_path, "a", 500, "a\n")
        driver.run(6)
        # Its batch forgotten, the file is older than the window: still never taken again.
        assert 1000 not in stream.batchTimeToSelectedFiles
        assert str(tmp_path / "a") not in stream.recentlySelectedFiles
    finally:
        driver.stop()
    assert [lines for _, lines in sink] == [["a"], [], [], [], [], []]


def test_binary_records_of_the_given_length(spark, tmp_path):
    driver = Driver(spark)
    stream = driver.ssc.binaryRecordsStream(str(tmp_path), 4)
    sink = sink_of(stream.map(bytes))
    driver.start()
    try:
        put(tmp_path, "one", 200, b"abcdefgh")
        put(tmp_path, "two", 300, b"ijkl")
        driver.run(2)
    finally:
        driver.stop()
    assert sink == [(1000, [b"abcd", b"efgh", b"ijkl"]), (2000, [])]


def test_arguments_are_checked(spark, tmp_path):
    ssc = StreamingContext(spark, 1, clock=ManualClock(0))
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ConfigurationError, match="recordLength"):
            ssc.binaryRecordsStream(str(tmp_path), bad)
    for bad in ("", None, "hdfs://nn/dir"):
        with pytest.raises(ConfigurationError):
            ssc.textFileStream(bad)
    assert ssc.textFileStream("file://" + str(tmp_path)).directory == str(tmp_path)


def build(spark, checkpoint_dir, input_dir, clock, sink):
    def setup():
        ssc = StreamingContext(spark, 1, clock=clock)
        ssc.checkpoint(str(checkpoint_dir))
        stream = ssc.textFileStream(str(input_dir))
        stream.foreachRDD(lambda t, rdd: sink.append((int(t.timestamp() * 1000),
                                                      sorted(rdd.collect()))))
        return ssc

    return setup


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_recovery_neither_skips_nor_repeats_a_file(spark, tmp_path):
    checkpoints, inputs = tmp_path / "cp", tmp_path / "in"
    inputs.mkdir()
    put(inputs, "old", 0, "old\n")
    first = []
    clock = ManualClock(0)
    ssc = StreamingContext.getOrCreate(str(checkpoints),
                                       build(spark, checkpoints, inputs, clock, first))
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    for t, name in ((1000, "a"), (2000, "b"), (3000, "c")):
        put(inputs, name, t - 500, f"{name}\n")
        clock.setTime(t)
        recorder.wait_completed(t)
    wait_for(lambda: ssc.scheduler.jobGenerator.lastProcessedBatch == 3000)
    ssc.stop(stopSparkContext=False)
    assert first == [(1000, ["a"]), (2000, ["b"]), (3000, ["c"])]
    # While the driver is down, files keep coming.
    put(inputs, "d", 3500, "d\n")
    put(inputs, "e", 4500, "e\n")
    put(inputs, "f", 5200, "f\n")
    second = []
    # Created later than d and e: without its checkpointed start, the stream would take
    # them for files that were there before it.
    clock2 = ManualClock(5500)
    recovered = StreamingContext.getOrCreate(str(checkpoints),
                                             build(spark, checkpoints, inputs, clock2, second))
    stream = next(s for s in recovered.graph.inputStreams if isinstance(s, FileInputDStream))
    assert stream.initialModTimeIgnoreThreshold == 0
    assert stream.batchTimeToSelectedFiles[3000] == [str(inputs / "c")]
    recovered._conf.set("spark.streaming.manualClock.jump", "2500")
    recorder2 = Recorder()
    recovered.addStreamingListener(recorder2)
    recovered.start()
    try:
        for t in (3000, 4000, 5000):  # the checkpoint's batch again, then the down time
            recorder2.wait_completed(t)
        put(inputs, "g", 5800, "g\n")
        clock2.setTime(6000)
        recorder2.wait_completed(6000)
    finally:
        recovered.stop(stopSparkContext=False)
    assert second == [(3000, ["c"]), (4000, ["d"]), (5000, ["e"]), (6000, ["f", "g"])]


def test_restored_files_must_be_of_the_streams_directory(spark, tmp_path):
    ssc = StreamingContext(spark, 1, clock=ManualClock(0))
    stream = ssc.textFileStream(str(tmp_path / "in"))
    with pytest.raises(CheckpointError, match="outside its directory"):
        stream.restoreCheckpointState({"batches": {"1000": ["/elsewhere/a"]}})
    stream.restoreCheckpointState({"batches": {"1000": [str(tmp_path / "in" / "a")]},
                                   "initialModTimeIgnoreThreshold": 7})
    assert stream.recentlySelectedFiles == {str(tmp_path / "in" / "a")}
    assert stream.initialModTimeIgnoreThreshold == 7
