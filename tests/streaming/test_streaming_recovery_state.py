"""State survives a checkpoint recovery when another output reads the same input first.

After ``getOrCreate`` recovery, the first batch's first output operation computes the
input's batch for that time; the stateful stream then walks back through the input's earlier
(restored) batches to rebuild the state the checkpoint did not save. Those earlier batches
must be read again, as Spark does (``InputDStream.isTimeValid`` only warns about a time
before the last one), not taken for "no input": the state used to restart from empty.

For a Kafka direct stream the earlier batches are read with their checkpointed offset ranges
(never new ones), and reading them again for the state must not hold the stream's commits
back: they completed before the driver stopped.
"""

import os
import time

import pytest

from kafka_direct import ConsumerStrategies, KafkaUtils, LocationStrategies
from kafka_direct.streaming import ManualClock, StreamingContext
from tests.streaming.helpers import Recorder


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def at(t):
    return int(t.timestamp() * 1000)


def count_state(values, state):
    return (state or 0) + sum(values)


def put(directory, name, mtime_ms):
    """A one-line file whose modification time is ``mtime_ms`` (the manual clock's time)."""
    path = os.path.join(str(directory), name)
    with open(path, "w") as f:
        f.write(name + "\n")
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def run_batches(ssc, clock, times):
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    for t in times:
        clock.setTime(t)
        recorder.wait_completed(t)
    wait_for(lambda: ssc.scheduler.jobGenerator.lastProcessedBatch == times[-1])


def recover(spark, directory, setup, jump_ms):
    """getOrCreate from ``directory``; the clock jumps ``jump_ms`` past the checkpoint."""
    clock = ManualClock(0)
    ssc = StreamingContext.getOrCreate(str(directory), setup(clock))
    assert ssc.initialCheckpoint is not None, "not recovered from the checkpoint"
    ssc._conf.set("spark.streaming.manualClock.jump", str(jump_ms))
    return ssc, clock


def test_text_file_stream_state_goes_on_after_recovery(spark, tmp_path):
    checkpoints, inputs = tmp_path / "cp", tmp_path / "in"
    inputs.mkdir()
    sink = []

    def setup(clock):
        def create():
            ssc = StreamingContext(spark, 1, clock=clock)
            ssc.checkpoint(str(checkpoints))
            lines = ssc.textFileStream(str(inputs))
            # An output on the input, registered before the stateful stream.
            lines.count().foreachRDD(lambda t, rdd: sink.append(("count", at(t),
                                                                 rdd.collect())))
            state = lines.map(lambda line: ("n", 1)).updateStateByKey(count_state)
            state.foreachRDD(lambda t, rdd: sink.append(("state", at(t), rdd.collect())))
            return ssc

        return create

    clock = ManualClock(0)
    ssc = StreamingContext.getOrCreate(str(checkpoints), setup(clock))
    for i in range(4):
        put(inputs, f"f{i}", 500 + 1000 * i)
    try:
        run_batches(ssc, clock, [1000, 2000, 3000, 4000])
    finally:
        ssc.stop(stopSparkContext=False)
    assert [v for kind, _, v in sink if kind == "state"][-1] == [("n", 4)]
    # No state RDD was saved (the checkpoint interval is 10 batches): the recovered state is
    # rebuilt from the restored file batches.
    sink.clear()
    put(inputs, "f4", 4500)  # while the driver is down
    recovered, _ = recover(spark, checkpoints, setup, 1500)
    try:
        recovered.start()
        wait_for(lambda: any(kind == "state" and t == 5000 for kind, t, _ in sink))
    finally:
        recovered.stop(stopSparkContext=False)
    states = {t: v for kind, t, v in sink if kind == "state"}
    counts = {t: v for kind, t, v in sink if kind == "count"}
    assert counts == {4000: [1], 5000: [1]}  # the checkpoint's batch again, then the down time
    assert states == {4000: [("n", 4)], 5000: [("n", 5)]}


@pytest.mark.parametrize("state_first", [False, True], ids=["output-first", "state-first"])
def test_kafka_state_goes_on_and_commits_advance_after_recovery(
        spark, kafka, kafka_topic, tmp_path, state_first):
    topic = kafka_topic(partitions=2)
    params = kafka.params(**{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    checkpoints = tmp_path / "cp"
    sink, streams = [], []

    def setup(clock):
        def create():
            ssc = StreamingContext(spark, 1, clock=clock)
            ssc.checkpoint(str(checkpoints))
            stream = KafkaUtils.createDirectStream(
                ssc, LocationStrategies.PreferConsistent(),
                ConsumerStrategies.Subscribe([topic], params))
            streams.append(stream)

            def count_and_commit(t, rdd):
                ranges = rdd.offsetRanges()
                sink.append(("ranges", at(t), sorted((r.partition, r.fromOffset,
                                                      r.untilOffset) for r in ranges)))
                stream.commitAsync(ranges)

            def state_output():
                state = stream.map(lambda record: ("n", 1)).updateStateByKey(count_state)
                state.foreachRDD(lambda t, rdd: sink.append(("state", at(t), rdd.collect())))

            if state_first:
                state_output()
            stream.foreachRDD(count_and_commit)
            if not state_first:
                state_output()
            return ssc

        return create

    clock = ManualClock(0)
    ssc = StreamingContext.getOrCreate(str(checkpoints), setup(clock))
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    try:
        for t, n in ((1000, 3), (2000, 2), (3000, 4)):
            kafka.produce(topic, [b"x"] * n, partition=t // 1000 % 2)
            clock.setTime(t)
            recorder.wait_completed(t)
        wait_for(lambda: ssc.scheduler.jobGenerator.lastProcessedBatch == 3000)
    finally:
        ssc.stop(stopSparkContext=False)
    first_ranges = {t: v for kind, t, v in sink if kind == "ranges"}
    assert [v for kind, _, v in sink if kind == "state"][-1] == [("n", 9)]
    sink.clear()
    kafka.produce(topic, [b"y"] * 5, partition=0)  # while the driver is down
    recovered, clock2 = recover(spark, checkpoints, setup, 1500)
    stream = streams[-1]
    recorder2 = Recorder()
    recovered.addStreamingListener(recorder2)
    try:
        recovered.start()
        for t in (3000, 4000):
            recorder2.wait_completed(t)
        kafka.produce(topic, [b"z"] * 2, partition=1)
        clock2.setTime(5000)
        recorder2.wait_completed(5000)
        # Every batch after the recovery succeeded: the stream commits up to the end of
        # batch 5000, not held back by the earlier batches read again for the state.
        wait_for(lambda: sorted(stream.committedOffsets.values()) == [7, 9])
    finally:
        recovered.stop(stopSparkContext=False)
    states = {t: v for kind, t, v in sink if kind == "state"}
    ranges = {t: v for kind, t, v in sink if kind == "ranges"}
    assert ranges[3000] == first_ranges[3000]  # the checkpointed ranges, not new ones
    assert ranges[4000] == [(0, 2, 7), (1, 7, 7)]
    assert ranges[5000] == [(0, 7, 7), (1, 7, 9)]
    assert states == {3000: [("n", 9)], 4000: [("n", 14)], 5000: [("n", 16)]}
