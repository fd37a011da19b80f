"""Metadata checkpoints: atomic files, fallbacks, and recovery with getOrCreate."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_direct import CheckpointError
from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.streaming.checkpoint import Checkpoint, CheckpointReader, CheckpointWriter
from tests.streaming.helpers import Recorder, ScriptedInputDStream


def point(t, pending=()):
    return Checkpoint(t, 1000, 0, tuple(pending), {"0:X": {"n": t}}, "app")


def test_writer_is_atomic_keeps_a_backup_and_the_newest_ten(tmp_path):
    writer = CheckpointWriter(tmp_path / "cp")
    for t in range(1000, 13_000, 1000):
        writer.write(point(t))
    writer.write(point(12_000, pending=[12_000]))
    names = sorted(os.listdir(tmp_path / "cp"))
    assert "checkpoint-12000.bk" in names
    times = sorted({int(n.split("-")[1].split(".")[0]) for n in names})
    assert times == list(range(3000, 13_000, 1000))  # the newest ten
    assert not [n for n in names if n.startswith(".checkpoint-")]  # no temp file left
    read = CheckpointReader.read(tmp_path / "cp")
    assert read == point(12_000, pending=[12_000])
    writer.write(point(5000))  # older than the newest: ignored
    assert CheckpointReader.read(tmp_path / "cp").checkpointTime == 12_000


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, caplog):
    writer = CheckpointWriter(tmp_path)
    writer.write(point(1000))
    writer.write(point(2000))
    (tmp_path / "checkpoint-2000").write_text("{ not json")
    assert CheckpointReader.read(tmp_path).checkpointTime == 1000
    assert "checkpoint-2000" in caplog.text
    (tmp_path / "checkpoint-1000").write_text(json.dumps({"version": 99}))
    with pytest.raises(CheckpointError, match="every checkpoint file is damaged"):
        CheckpointReader.read(tmp_path)


def test_unreadable_or_missing_directories(tmp_path):
    assert CheckpointReader.read(tmp_path / "missing") is None
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(CheckpointError, match="cannot list checkpoint directory") as info:
        CheckpointReader.read(not_a_dir)
    assert info.value.directory == str(not_a_dir)


BATCHES = [[("a", 1)], [("b", 1)], [("a", 1)], [("a", 2)], [("b", 3)], [("c", 1)],
           [("a", 1)], [("b", 1)]]


def build(spark, directory, clock, sink):
    def setup():
        ssc = StreamingContext(spark, 1, clock=clock)
        ssc.checkpoint(str(directory))
        stream = ScriptedInputDStream(ssc, BATCHES)
        stream.foreachRDD(lambda t, rdd: sink.append(("batch", int(t.timestamp() * 1000),
                                                      sorted(rdd.collect()))))
        state = stream.updateStateByKey(lambda values, state: (state or 0) + sum(values))
        state.checkpoint(1)  # every batch's state is saved, so a recovery resumes from it
        state.foreachRDD(
            lambda t, rdd: sink.append(("state", int(t.timestamp() * 1000),
                                        sorted(rdd.collect()))))
        return ssc

    return setup


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_get_or_create_recovers_pending_and_down_time_batches_and_state(spark, tmp_path):
    first_sink = []
    clock = ManualClock(0)
    ssc = StreamingContext.getOrCreate(str(tmp_path), build(spark, tmp_path, clock, first_sink))
    assert ssc.initialCheckpoint is None
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    for t in (1000, 2000, 3000):
        clock.setTime(t)
        recorder.wait_completed(t)
    wait_for(lambda: ssc.scheduler.jobGenerator.lastProcessedBatch == 3000)
    ssc.stop(stopSparkContext=False)
    # The driver "died" after batch 3; two batch intervals pass before it comes back.
    second_sink = []
    clock2 = ManualClock(0)
    recovered = StreamingContext.getOrCreate(str(tmp_path),
                                             build(spark, tmp_path, clock2, second_sink))
    checkpoint = recovered.initialCheckpoint
    assert checkpoint is not None and checkpoint.checkpointTime == 3000
    recovered._conf.set("spark.streaming.manualClock.jump", "2500")
    recorder2 = Recorder()
    recovered.addStreamingListener(recorder2)
    recovered.start()
    assert recovered.graph.zeroTime == 0
    for t in (3000, 4000, 5000):  # the last checkpoint's batch, then the down time
        recorder2.wait_completed(t)
    clock2.setTime(6000)
    recorder2.wait_completed(6000)
    recovered.stop(stopSparkContext=False)
    batches = [(t, data) for kind, t, data in second_sink if kind == "batch"]
    assert batches == [(t, sorted(BATCHES[t // 1000 - 1])) for t in (3000, 4000, 5000, 6000)]
    states = {t: data for kind, t, data in second_sink if kind == "state"}
    # the state went on from the checkpointed state, not from scratch
    assert states[6000] == [("a", 4), ("b", 4), ("c", 1)]


def test_get_or_create_rejects_a_changed_batch_interval(spark, tmp_path):
    CheckpointWriter(tmp_path).write(Checkpoint(4000, 2000, 0))
    with pytest.raises(CheckpointError, match="batch interval of 2000 ms"):
        StreamingContext.getOrCreate(str(tmp_path), lambda: StreamingContext(spark, 1))


APP = Path(__file__).with_name("recovery_app.py")


@pytest.mark.slow  # a fault run: kills or restarts real processes (docs/testing.md)
@pytest.mark.services  # the application runs Spark in a process of its own
def test_a_killed_driver_process_recovers_every_batch(tmp_path):
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    args = [sys.executable, str(APP), str(tmp_path / "cp"), str(out)]
    first = subprocess.Popen([*args, "60"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: out.exists() and out.read_text().count("done") >= 4, timeout=90)
        wait_for(lambda: out.read_text().splitlines()[-1].startswith("start"), timeout=30)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    lines = out.read_text().splitlines()
    interrupted = int(lines[-1].split()[1])
    killed_at = len(lines)
    second = subprocess.run([*args, "4"], env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr[-3000:]
    lines = out.read_text().splitlines()
    done_after = [int(line.split()[1]) for line in lines[killed_at:] if line.startswith("done")]
    assert interrupted in done_after  # the batch cut off by the kill ran again
    done = sorted({int(line.split()[1]) for line in lines if line.startswith("done")})
    assert done == list(range(done[0], done[-1] + 500, 500))  # no batch lost


def build_output_before_state(spark, directory, clock, sink):
    """An output on the input registered before the stateful and windowed streams reading it.

    The state keeps the default checkpoint interval (10 batches), so no state RDD is saved
    in the first run's three batches: a recovery must rebuild the state from the input's
    earlier batches, after the first output already computed the input's newest batch.
    """

    def setup():
        ssc = StreamingContext(spark, 1, clock=clock)
        ssc.checkpoint(str(directory))
        stream = ScriptedInputDStream(ssc, BATCHES)
        stream.count().foreachRDD(
            lambda t, rdd: sink.append(("count", int(t.timestamp() * 1000), rdd.collect())))
        state = stream.updateStateByKey(lambda values, state: (state or 0) + sum(values))
        state.foreachRDD(
            lambda t, rdd: sink.append(("state", int(t.timestamp() * 1000),
                                        sorted(rdd.collect()))))
        stream.window(3, 1).foreachRDD(
            lambda t, rdd: sink.append(("window", int(t.timestamp() * 1000),
                                        sorted(rdd.collect()))))
        return ssc

    return setup


def test_recovered_state_and_window_read_earlier_batches_after_an_output_read_a_later_one(
        spark, tmp_path):
    first_sink = []
    clock = ManualClock(0)
    ssc = StreamingContext.getOrCreate(
        str(tmp_path), build_output_before_state(spark, tmp_path, clock, first_sink))
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    for t in (1000, 2000, 3000):
        clock.setTime(t)
        recorder.wait_completed(t)
    wait_for(lambda: ssc.scheduler.jobGenerator.lastProcessedBatch == 3000)
    ssc.stop(stopSparkContext=False)
    first_states = {t: data for kind, t, data in first_sink if kind == "state"}
    assert first_states[3000] == [("a", 2), ("b", 1)]
    second_sink = []
    clock2 = ManualClock(0)
    recovered = StreamingContext.getOrCreate(
        str(tmp_path), build_output_before_state(spark, tmp_path, clock2, second_sink))
    assert recovered.initialCheckpoint is not None
    recovered._conf.set("spark.streaming.manualClock.jump", "1500")
    recorder2 = Recorder()
    recovered.addStreamingListener(recorder2)
    recovered.start()
    try:
        for t in (3000, 4000):  # the checkpoint's batch again, then the down time
            recorder2.wait_completed(t)
        clock2.setTime(5000)
        recorder2.wait_completed(5000)
    finally:
        recovered.stop(stopSparkContext=False)
    states = {t: data for kind, t, data in second_sink if kind == "state"}
    windows = {t: data for kind, t, data in second_sink if kind == "window"}
    counts = {t: data for kind, t, data in second_sink if kind == "count"}
    assert counts == {3000: [1], 4000: [1], 5000: [1]}
    # Batches 1 and 2 are read again (for the state and the window), not skipped as "older
    # than the input's latest batch": the state goes on, it does not restart from empty.
    assert states == {3000: [("a", 2), ("b", 1)], 4000: [("a", 4), ("b", 1)],
                      5000: [("a", 4), ("b", 4)]}
    assert windows == {3000: [("a", 1), ("a", 1), ("b", 1)],
                       4000: [("a", 1), ("a", 2), ("b", 1)],
                       5000: [("a", 1), ("a", 2), ("b", 3)]}
