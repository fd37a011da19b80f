"""Checkpointed stream state is matched by a stable identity, never by creation order.

Each test runs an application on a ManualClock (three batches), stops it, changes its code,
and recovers it from the checkpoint: the batch of the checkpoint runs again and the down time
is caught up (batches 3000 and 4000), then one more batch (5000). The Kafka streams are real
direct streams over a fake driver consumer: every partition has 1000 records and a batch may
take 5 of them, so batch k of a stream reads ``[5(k-1), 5k)`` of each partition.
"""

import json
import time

import pytest

from kafka_direct import CheckpointError, KafkaUtils, LocationStrategies, TopicPartition
from kafka_direct.dstream.consumer_strategy import Assign, Subscribe, SubscribePattern
from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
from kafka_direct.streaming import ManualClock, StreamingContext
from kafka_direct.streaming.checkpoint import Checkpoint, CheckpointReader, CheckpointWriter
from tests.streaming.helpers import Recorder, ScriptedInputDStream

PARTITIONS = {"alpha": 2, "beta": 2, "gamma": 1}
END = 1000
CONF = {"spark.streaming.kafka.maxRatePerPartition": "5"}


class FakeDriver:
    """The driver consumer's contract over fixed topics, each partition at END records."""

    def __init__(self, params):
        self.params = params
        self.topics = []

    def subscribe(self, topics):
        self.topics = list(topics)

    def assignment(self, waitSeconds=0.0):
        return {TopicPartition(t, p) for t in self.topics for p in range(PARTITIONS[t])}

    def partitionsOf(self, topics):
        return {t: PARTITIONS[t] for t in topics if t in PARTITIONS}

    def topicsMatching(self, matches):
        return {t: n for t, n in PARTITIONS.items() if matches(t)}

    def leaders(self, partitions):
        return {tp: "localhost" for tp in partitions}

    def latestOffsets(self, partitions):
        return {tp: END for tp in partitions}

    def earliestOffsets(self, partitions):
        return {tp: 0 for tp in partitions}

    def offsetsForTimes(self, timestamps):
        return {tp: 0 for tp in timestamps}

    def committed(self, partitions):
        return {}

    def commit(self, offsets):
        pass

    def close(self):
        pass


def params(group):
    return {"bootstrap.servers": "fake:9092", "group.id": group, "auto.offset.reset": "earliest"}


def kafka(ssc, topics=None, group="g", *, name=None, strategy=None):
    strategy = strategy or Subscribe(topics, params(group), groupManagement=False)
    stream = DirectKafkaInputDStream(ssc, LocationStrategies.PreferConsistent(), strategy,
                                     driverConsumerFactory=FakeDriver)
    if name is not None:
        stream.setCheckpointId(name)
    return stream


def sink_into(sink, name):
    """An output operation that records each batch's ranges under ``name``."""
    def output(t, rdd):
        sink.append((name, int(t.timestamp() * 1000),
                     sorted((r.topic, r.partition, r.fromOffset, r.untilOffset)
                            for r in rdd.offsetRanges())))
    return output


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def first_run(spark, directory, streams):
    """Run batches 1000..3000 of the application ``streams(ssc)`` builds, then stop."""
    clock = ManualClock(0)

    def setup():
        ssc = StreamingContext(spark, 1, clock=clock, conf=CONF)
        ssc.checkpoint(str(directory))
        streams(ssc)
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup)
    assert ssc.initialCheckpoint is None
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    try:
        for t in (1000, 2000, 3000):
            clock.setTime(t)
            recorder.wait_completed(t)
        wait_for(lambda: ssc.scheduler.jobGenerator.lastProcessedBatch == 3000)
    finally:
        ssc.stop(stopSparkContext=False)


def recover(spark, directory, streams):
    """Recover the application ``streams(ssc)`` builds; run 3000 again, 4000, then 5000."""
    clock = ManualClock(0)

    def setup():
        ssc = StreamingContext(spark, 1, clock=clock, conf=CONF)
        ssc.checkpoint(str(directory))
        streams(ssc)
        return ssc

    ssc = StreamingContext.getOrCreate(str(directory), setup)
    assert ssc.initialCheckpoint is not None
    ssc._conf.set("spark.streaming.manualClock.jump", "1500")
    recorder = Recorder()
    ssc.addStreamingListener(recorder)
    ssc.start()
    try:
        for t in (3000, 4000):
            recorder.wait_completed(t)
        clock.setTime(5000)
        recorder.wait_completed(5000)
    finally:
        ssc.stop(stopSparkContext=False)


def batches_of(sink, name):
    """``{batch: ranges}`` of one sink; a batch run twice must have had the same ranges."""
    seen = {}
    for sink_name, batch, ranges in sink:
        if sink_name != name:
            continue
        assert seen.setdefault(batch, ranges) == ranges, f"{name}: batch {batch} changed"
    return seen


def assert_exactly_once(sink, name, topic, batches=(1000, 2000, 3000, 4000, 5000)):
    """Sink ``name`` got only ``topic``, every offset once, contiguously from 0."""
    seen = batches_of(sink, name)
    assert sorted(seen) == list(batches)
    ends = {}
    for batch in sorted(seen):
        for t, partition, start, until in seen[batch]:
            assert t == topic, f"sink {name} got a range of {t} in batch {batch}"
            assert start == ends.get(partition, 0), (name, batch, partition, start, ends)
            ends[partition] = until
    assert sorted(ends) == list(range(PARTITIONS[topic]))


def test_a_stream_added_before_the_kafka_stream_keeps_its_ranges(spark, tmp_path):
    sink = []

    def before(ssc):
        kafka(ssc, ["alpha"]).foreachRDD(sink_into(sink, "A"))

    def after(ssc):
        # A new input stream and new output operations, all created before the Kafka stream.
        ssc.constantStream(spark.parallelize([1])).foreachRDD(lambda rdd: None)
        ScriptedInputDStream(ssc, [[1], [2]]).map(lambda x: x).foreachRDD(lambda rdd: None)
        stream = kafka(ssc, ["alpha"])
        stream.foreachRDD(lambda rdd: None)
        stream.foreachRDD(sink_into(sink, "A"))

    first_run(spark, tmp_path, before)
    recover(spark, tmp_path, after)
    assert_exactly_once(sink, "A", "alpha")


def test_swapped_kafka_streams_each_get_their_own_ranges(spark, tmp_path):
    sink = []

    def a_then_b(ssc):
        kafka(ssc, ["alpha"], "ga").foreachRDD(sink_into(sink, "A"))
        kafka(ssc, ["beta"], "gb").foreachRDD(sink_into(sink, "B"))

    def b_then_a(ssc):
        kafka(ssc, ["beta"], "gb").foreachRDD(sink_into(sink, "B"))
        kafka(ssc, ["alpha"], "ga").foreachRDD(sink_into(sink, "A"))

    first_run(spark, tmp_path, a_then_b)
    recover(spark, tmp_path, b_then_a)
    assert_exactly_once(sink, "A", "alpha")
    assert_exactly_once(sink, "B", "beta")


def test_a_kafka_stream_added_before_starts_afresh_and_the_old_one_goes_on(spark, tmp_path):
    sink = []

    def only_a(ssc):
        kafka(ssc, ["alpha"], "ga").foreachRDD(sink_into(sink, "A"))

    def b_then_a(ssc):
        kafka(ssc, ["beta"], "gb").foreachRDD(sink_into(sink, "B"))
        kafka(ssc, ["alpha"], "ga").foreachRDD(sink_into(sink, "A"))

    first_run(spark, tmp_path, only_a)
    recover(spark, tmp_path, b_then_a)
    assert_exactly_once(sink, "A", "alpha")
    assert_exactly_once(sink, "B", "beta", batches=(3000, 4000, 5000))


def test_same_topics_in_another_group_are_another_stream(spark, tmp_path):
    sink = []

    def groups_1_2(ssc):
        kafka(ssc, ["alpha"], "g1").foreachRDD(sink_into(sink, "G1"))
        kafka(ssc, ["alpha"], "g2").foreachRDD(sink_into(sink, "G2"))

    def groups_2_1(ssc):
        kafka(ssc, ["alpha"], "g2").foreachRDD(sink_into(sink, "G2"))
        kafka(ssc, ["alpha"], "g1").foreachRDD(sink_into(sink, "G1"))

    first_run(spark, tmp_path, groups_1_2)
    stored = CheckpointReader.read(tmp_path).streams
    assert len(stored) == 2
    recover(spark, tmp_path, groups_2_1)
    assert_exactly_once(sink, "G1", "alpha")
    assert_exactly_once(sink, "G2", "alpha")


def test_a_removed_kafka_stream_is_refused(spark, tmp_path):
    sink = []

    def a_and_b(ssc):
        kafka(ssc, ["alpha"], "ga").foreachRDD(sink_into(sink, "A"))
        kafka(ssc, ["beta"], "gb").foreachRDD(sink_into(sink, "B"))

    def only_a(ssc):
        kafka(ssc, ["alpha"], "ga").foreachRDD(sink_into(sink, "A"))
        return ssc

    first_run(spark, tmp_path, a_and_b)
    with pytest.raises(CheckpointError, match=r"beta") as info:
        StreamingContext.getOrCreate(str(tmp_path), lambda: only_a(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)))
    assert "gb" in str(info.value) and "no stream" in str(info.value)
    assert info.value.directory == str(tmp_path)


def test_changed_topics_of_an_unnamed_stream_are_refused(spark, tmp_path):
    first_run(spark, tmp_path, lambda ssc: kafka(ssc, ["alpha"]).foreachRDD(lambda rdd: None))

    def other_topics(ssc):
        kafka(ssc, ["alpha", "beta"]).foreachRDD(lambda rdd: None)
        return ssc

    with pytest.raises(CheckpointError, match=r"alpha"):
        StreamingContext.getOrCreate(str(tmp_path), lambda: other_topics(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)))


def test_a_named_stream_may_read_more_topics_but_its_ranges_must_belong(spark, tmp_path):
    sink = []
    first_run(spark, tmp_path,
              lambda ssc: kafka(ssc, ["alpha"], name="orders").foreachRDD(sink_into(sink, "A")))

    def elsewhere(ssc):
        kafka(ssc, ["beta"], name="orders").foreachRDD(lambda rdd: None)
        return ssc

    with pytest.raises(CheckpointError, match=r"alpha-0.*orders|orders.*alpha-0"):
        StreamingContext.getOrCreate(str(tmp_path), lambda: elsewhere(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)))

    # More topics (and another group) under the same name: alpha goes on, beta starts.
    recover(spark, tmp_path, lambda ssc: kafka(ssc, ["alpha", "beta"], "other", name="orders")
            .foreachRDD(sink_into(sink, "A")))
    seen = batches_of(sink, "A")
    assert [r for r in seen[3000] if r[0] == "alpha"] == [("alpha", 0, 10, 15),
                                                          ("alpha", 1, 10, 15)]
    assert [r for r in seen[4000] if r[0] == "alpha"] == [("alpha", 0, 15, 20),
                                                          ("alpha", 1, 15, 20)]
    assert [r for r in seen[4000] if r[0] == "beta"] == [("beta", 0, 0, 5), ("beta", 1, 0, 5)]


def test_ranges_must_belong_to_the_pattern_or_the_assignment(spark, tmp_path):
    def pattern(ssc, regex):
        kafka(ssc, strategy=SubscribePattern(regex, params("g"), groupManagement=False),
              name="p").foreachRDD(lambda rdd: None)
        return ssc

    first_run(spark, tmp_path / "p", lambda ssc: pattern(ssc, "al.*"))
    with pytest.raises(CheckpointError, match="alpha"):
        StreamingContext.getOrCreate(str(tmp_path / "p"), lambda: pattern(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF), "be.*"))

    def assign(ssc, partitions):
        kafka(ssc, strategy=Assign(partitions, params("g")), name="a").foreachRDD(
            lambda rdd: None)
        return ssc

    first_run(spark, tmp_path / "a", lambda ssc: assign(ssc, [TopicPartition("alpha", 1)]))
    with pytest.raises(CheckpointError, match="alpha-1"):
        StreamingContext.getOrCreate(str(tmp_path / "a"), lambda: assign(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF),
            [TopicPartition("alpha", 0)]))


def test_two_streams_of_the_same_identity_are_refused_until_named(spark, tmp_path):
    ssc = StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)
    ssc.checkpoint(str(tmp_path))
    strategy = Assign([TopicPartition("alpha", 0)], params("g"))
    kafka(ssc, strategy=strategy).foreachRDD(lambda rdd: None)
    kafka(ssc, strategy=Assign([TopicPartition("alpha", 0)], params("g"))).foreachRDD(
        lambda rdd: None)
    try:
        with pytest.raises(CheckpointError, match="same identity"):
            ssc.start()
        assert ssc.state == "INITIALIZED"
    finally:
        if ssc.state == "ACTIVE":
            ssc.stop(stopSparkContext=False)

    sink = []

    def named(ssc, first, second):
        kafka(ssc, strategy=Assign([TopicPartition("alpha", 0)], params("g")),
              name=first).foreachRDD(sink_into(sink, first))
        kafka(ssc, strategy=Assign([TopicPartition("alpha", 0)], params("g")),
              name=second).foreachRDD(sink_into(sink, second))

    first_run(spark, tmp_path / "named", lambda ssc: named(ssc, "x", "y"))
    recover(spark, tmp_path / "named", lambda ssc: named(ssc, "y", "x"))
    for name in ("x", "y"):
        seen = batches_of(sink, name)
        assert seen[4000] == [("alpha", 0, 15, 20)]


def test_checkpoint_ids_are_validated_and_set_before_start(spark):
    ssc = StreamingContext(spark, 1, clock=ManualClock(0))
    stream = kafka(ssc, ["alpha"])
    with pytest.raises(ValueError, match="checkpointId"):
        stream.setCheckpointId("")
    assert stream.setCheckpointId("orders") is stream
    assert stream.checkpointId == "orders"
    named = KafkaUtils.createDirectStream(
        ssc, LocationStrategies.PreferConsistent(),
        Subscribe(["alpha"], params("g")), checkpointId="payments")
    assert named.checkpointId == "payments"


def test_strategy_identities_are_stable_and_distinguish_what_is_read():
    def identity(strategy):
        return strategy.checkpointIdentity

    assert identity(Subscribe(["b", "a"], params("g"))) == identity(
        Subscribe(["a", "b", "a"], params("g"), groupManagement=False))
    assert identity(Subscribe(["a"], params("g"))) != identity(Subscribe(["a"], params("h")))
    assert identity(Subscribe(["a"], params("g"))) != identity(Subscribe(["a", "b"], params("g")))
    assert identity(SubscribePattern("a.*", params("g"))) != identity(
        SubscribePattern("b.*", params("g")))
    assert identity(Assign([TopicPartition("a", 1), TopicPartition("a", 0)], params("g"))) == \
        identity(Assign([TopicPartition("a", 0), TopicPartition("a", 1)], params("g")))
    assert identity(Assign([TopicPartition("a", 0)], params("g"))) != identity(
        Subscribe(["a"], params("g")))


STATE_BATCHES = [[("a", 1)], [("b", 1)], [("a", 1)], [("a", 2)], [("b", 3)]]


def test_stateful_stream_state_survives_a_stream_added_before_it(spark, tmp_path):
    sink = []
    other = []

    def stateful(ssc, extra):
        if extra:  # a second stateful stream, created first: it must not get the state
            ssc.constantStream(spark.parallelize([("z", 1)])).updateStateByKey(
                lambda values, state: (state or 0) + sum(values)).foreachRDD(
                lambda t, rdd: other.append((int(t.timestamp() * 1000),
                                             sorted(rdd.collect()))))
        state = ScriptedInputDStream(ssc, STATE_BATCHES).updateStateByKey(
            lambda values, state: (state or 0) + sum(values))
        state.checkpoint(1)
        state.foreachRDD(lambda t, rdd: sink.append((int(t.timestamp() * 1000),
                                                     sorted(rdd.collect()))))

    first_run(spark, tmp_path, lambda ssc: stateful(ssc, extra=False))
    recover(spark, tmp_path, lambda ssc: stateful(ssc, extra=True))
    states = dict(sink)
    assert states[5000] == [("a", 4), ("b", 4)]  # went on from the checkpointed state
    assert dict(other)[5000] == [("z", 5)]  # its own state: batches 1000 to 5000


def test_stateful_state_is_refused_when_its_lineage_changed_unless_named(spark, tmp_path):
    sink = []

    def counts(ssc, mapped, name=None):
        source = ScriptedInputDStream(ssc, STATE_BATCHES)
        if mapped:
            source = source.map(lambda kv: kv)
        state = source.updateStateByKey(lambda values, state: (state or 0) + sum(values))
        if name is not None:
            state.setCheckpointId(name)
        state.checkpoint(1)
        state.foreachRDD(lambda t, rdd: sink.append((int(t.timestamp() * 1000),
                                                     sorted(rdd.collect()))))
        return ssc

    first_run(spark, tmp_path / "unnamed", lambda ssc: counts(ssc, mapped=False))
    with pytest.raises(CheckpointError, match="StateDStream"):
        StreamingContext.getOrCreate(str(tmp_path / "unnamed"), lambda: counts(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF), mapped=True))

    first_run(spark, tmp_path / "named", lambda ssc: counts(ssc, False, "counts"))
    recover(spark, tmp_path / "named", lambda ssc: counts(ssc, True, "counts"))
    assert dict(sink)[5000] == [("a", 4), ("b", 4)]


def test_a_name_taken_by_a_stream_of_another_class_is_refused(spark, tmp_path):
    first_run(spark, tmp_path, lambda ssc: kafka(ssc, ["alpha"], name="x").foreachRDD(
        lambda rdd: None))

    def scripted(ssc):
        ScriptedInputDStream(ssc, [[1]]).setCheckpointId("x").foreachRDD(lambda rdd: None)
        return ssc

    with pytest.raises(CheckpointError, match="DirectKafkaInputDStream"):
        StreamingContext.getOrCreate(str(tmp_path), lambda: scripted(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)))


def old_checkpoint(directory, streams):
    """A checkpoint as the earlier format wrote it: state keyed by creation order."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "checkpoint-3000").write_text(json.dumps({
        "version": 1, "checkpointTime": 3000, "batchDuration": 1000, "zeroTime": 0,
        "pendingTimes": [], "appName": "app", "streams": streams}))


OLD_ALPHA = {"rdds": {}, "batches": {
    str(t): [["alpha", p, (t // 1000 - 1) * 5, t // 1000 * 5] for p in (0, 1)]
    for t in (2000, 3000)}}


def test_an_old_checkpoint_of_the_same_application_is_recovered(spark, tmp_path):
    old_checkpoint(tmp_path, {"0:DirectKafkaInputDStream": OLD_ALPHA,
                              "1:ForEachDStream": {"rdds": {}}})
    sink = []
    recover(spark, tmp_path,
            lambda ssc: kafka(ssc, ["alpha"]).foreachRDD(sink_into(sink, "A")))
    seen = batches_of(sink, "A")
    assert seen[3000] == [("alpha", 0, 10, 15), ("alpha", 1, 10, 15)]
    assert seen[5000] == [("alpha", 0, 20, 25), ("alpha", 1, 20, 25)]
    # What it writes now is the new format, matched by identity from then on.
    assert CheckpointReader.read(tmp_path).streams.keys() != {"0:DirectKafkaInputDStream",
                                                              "1:ForEachDStream"}


def test_an_old_checkpoint_of_a_changed_application_is_refused(spark, tmp_path):
    old_checkpoint(tmp_path, {"0:DirectKafkaInputDStream": OLD_ALPHA,
                              "1:ForEachDStream": {"rdds": {}}})

    def changed(ssc):
        ssc.constantStream(spark.parallelize([1])).foreachRDD(lambda rdd: None)
        kafka(ssc, ["alpha"]).foreachRDD(lambda rdd: None)
        return ssc

    with pytest.raises(CheckpointError, match="creation order") as info:
        StreamingContext.getOrCreate(str(tmp_path), lambda: changed(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)))
    assert "delete" in str(info.value)


def test_an_old_checkpoint_with_ranges_of_another_topic_is_refused(spark, tmp_path):
    old_checkpoint(tmp_path, {"0:DirectKafkaInputDStream": OLD_ALPHA,
                              "1:ForEachDStream": {"rdds": {}}})

    def other(ssc):
        kafka(ssc, ["beta"]).foreachRDD(lambda rdd: None)
        return ssc

    with pytest.raises(CheckpointError, match="alpha"):
        StreamingContext.getOrCreate(str(tmp_path), lambda: other(
            StreamingContext(spark, 1, clock=ManualClock(0), conf=CONF)))


def test_checkpoint_files_of_the_new_format_round_trip(tmp_path):
    point = Checkpoint(1000, 1000, 0, (), {"input:x": {"rdds": {}}}, "app")
    CheckpointWriter(tmp_path).write(point)
    assert CheckpointReader.read(tmp_path) == point
