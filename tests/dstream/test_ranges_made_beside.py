"""A batch of many partitions makes its ranges in the planner thread while the JVM works.

The batch's ranges, its place in the commit queue and its input info are made in the
stream's planner thread while the generating thread waits for Spark's JVM (a parent the
stream keeps, made by the first batch of its partitions or, grouped, of its number of
groups); all of it is done before
the batch's RDD is returned, the RDD holds exactly those ranges, and an error on either
side is the batch's. A batch over a kept parent, and below 100 partitions any batch, makes
its ranges in the generating thread: there is no JVM call to wait for.
"""

import threading

import pytest

from kafka_direct import ConsumerStrategies, LocationStrategies, OffsetRange, StreamingContext
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.dstream import direct_kafka_batches
from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
from kafka_direct.errors import ConfigurationError
from kafka_direct.rdd import kafka_rdd as kafka_rdd_module
from kafka_direct.rdd import kept_parent
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.kept_parent import KeptParent
from kafka_direct.rdd.range_groups import group_ranges
from kafka_direct.topic_partition import TopicPartition
from tests.fakes.confluent_clients import CountingCluster
from tests.fakes.fake_cluster import FakeSparkContext

PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "auto.offset.reset": "earliest"}


class _Built:
    """What the stream asked for its RDDs, and from which thread the ranges were made."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.ranges_made_in = []
        many = OffsetRange.many.__func__

        def counted_many(cls, *args):
            self.ranges_made_in.append(threading.current_thread().name)
            return many(cls, *args)

        monkeypatch.setattr(OffsetRange, "many", classmethod(counted_many))

        self.sizes = []

        def beside(sc, elements, partitions, settings, strategy, leaders, ranges,
                   sizes=None):
            # The JVM's part would read ``elements`` here, before the ranges are waited for.
            made = ranges()
            self.calls.append(("beside", threading.current_thread().name, elements, made))
            self.sizes.append(sizes)
            return list(made)

        def plain(sc, ranges, *args):
            self.calls.append(("plain", threading.current_thread().name, None, ranges))
            return list(ranges)

        monkeypatch.setattr(direct_kafka_batches, "kafka_rdd_beside", beside)
        monkeypatch.setattr(direct_kafka_batches, "kafka_rdd", plain)

        #: The kept parents made (their elements), and the kept path's calls.
        self.parents = []

        class Parent:
            def __init__(parent, elements):
                parent.elements = elements

            def mapPartitionsWithIndex(parent, at, preserves):
                return parent, at

        def located(sc, elements, locations):
            self.parents.append(elements)
            return Parent(elements)

        def over(ranges_rdd, made, settings, groups=None):
            parent, at = ranges_rdd
            if groups is not None:  # a grouped batch: task i reads group i of its parent
                self.calls.append(("kept groups", threading.current_thread().name,
                                   [next(at(index, iter([element])))
                                    for index, element in enumerate(parent.elements)], made))
                return list(made)
            self.calls.append(("kept", threading.current_thread().name,
                               [(*element, *self.offsets(at, index))
                                for index, element in enumerate(parent.elements)], made))
            return list(made)

        monkeypatch.setattr(kept_parent, "located_rdd", located)
        monkeypatch.setattr(kept_parent, "KafkaRDD", over)
        monkeypatch.setattr(KeptParent, "locations", staticmethod(
            lambda sc, partitions, strategy, leaders: [[]] * len(partitions)))

    @staticmethod
    def offsets(at, index):
        """Range ``index``'s offsets as its task reads them from the batch's function."""
        return next(at(index, iter([("?", -1)])))[2:]


def _stream(counting, conf=None):
    consumer, admin = counting.clients()
    strategy = ConsumerStrategies.Assign(
        [TopicPartition(t, p) for t in counting.topics for p in range(counting.partitions)],
        PARAMS)
    stream = DirectKafkaInputDStream(
        StreamingContext(FakeSparkContext(conf), 1), LocationStrategies.PreferConsistent(),
        strategy, driverConsumerFactory=lambda params: DriverConsumer(
            params, consumerFactory=consumer, adminFactory=admin))
    stream.initialize(0)
    stream.start()
    return stream


def _planner_threads():
    return [t for t in threading.enumerate() if t.name.startswith("kafka-direct-planner")]


def test_a_thousand_ranges_are_made_beside_the_jvm_while_it_makes_the_kept_parent(
        monkeypatch):
    # The first batch makes the stream's kept parent (a JVM call) while the planner thread
    # makes its ranges; the next batches keep that parent, call no JVM, and make their
    # ranges in the generating thread. Every batch's RDD reads exactly its ranges.
    built = _Built(monkeypatch)
    counting = CountingCluster()  # 10 topics of 100 partitions
    stream = _stream(counting)
    reported = []
    monkeypatch.setattr(stream, "reportInfo", lambda *args: reported.append(args))
    caller = threading.current_thread().name
    try:
        for batch in range(1, 4):
            counting.end += 2
            rdd = stream.compute(batch * 1000)
            kind, thread, elements, ranges = built.calls[-1]
            assert kind == "kept" and thread == caller
            assert len(built.parents) == 1  # made by the first batch only
            assert built.parents[0] == [(r.topic, r.partition) for r in ranges]
            if batch == 1:
                assert built.ranges_made_in[-1].startswith("kafka-direct-planner")
            else:
                assert built.ranges_made_in[-1] == caller
            # Partition i's task reads exactly range i.
            assert elements == [(r.topic, r.partition, r.fromOffset, r.untilOffset)
                                for r in ranges]
            assert rdd == ranges == stream.batchRanges[batch * 1000]
            assert len(ranges) == 1000
            assert {(r.fromOffset, r.untilOffset) for r in ranges} == {
                (counting.end - 2, counting.end)}
            # Done before compute returned: the position moved, the batch queued, reported.
            assert set(stream.currentOffsets.values()) == {counting.end}
            assert stream._commits.queue.owner(ranges, batch * 1000) == batch * 1000
            assert reported[-1][0] == batch * 1000
            assert reported[-1][1] == sum(r.count() for r in ranges)
        assert len(_planner_threads()) == 1
    finally:
        stream.stop()
    assert _planner_threads() == []


def test_a_grouped_batch_of_a_thousand_ranges_makes_them_beside_the_jvm_in_its_groups(
        monkeypatch):
    # Grouped (minOffsetsPerTask), the groups follow from the offsets: a batch of a number
    # of groups not seen yet has the JVM make a parent of that many partitions while the
    # planner thread makes the ranges, grouped as the ranges themselves group; a later
    # batch of as many groups keeps that parent, calls no JVM and makes its ranges in the
    # generating thread. Task i reads exactly group i.
    built = _Built(monkeypatch)
    counting = CountingCluster()
    stream = _stream(counting, {"spark.streaming.kafka.minOffsetsPerTask": "300",
                                "spark.streaming.kafka.maxRangesPerTask": "200"})
    monkeypatch.setattr(stream, "reportInfo", lambda *args: None)
    caller = threading.current_thread().name
    try:
        for batch, grown in enumerate((1, 1, 2, 1), start=1):
            counting.end += grown
            ranges = stream.compute(batch * 1000)
            kind, thread, groups, made = built.calls[-1]
            assert kind == "kept groups" and thread == caller and made == ranges
            assert len(ranges) == 1000
            expected = group_ranges(ranges, 300, FakeSparkContext.defaultParallelism, 200)
            assert groups == [[(r.topic, r.partition, r.fromOffset, r.untilOffset)
                               for r in group] for group in expected]
        # 5 groups of 200 ranges (1 offset each), again, 7 of up to 150 (2 each), then 5
        # again: that parent is kept.
        assert built.parents == [list(range(5)), list(range(7))]
        assert [thread.startswith("kafka-direct-planner")
                for thread in built.ranges_made_in] == [True, False, True, False]
        assert built.ranges_made_in[-1] == caller
        assert not [call for call in built.calls if call[0] == "beside"]
    finally:
        stream.stop()


def test_the_jvm_reads_a_grouped_batch_as_its_groups(monkeypatch):
    settings = ReadSettings(params={"bootstrap.servers": "fake:9092"})
    ranges = [OffsetRange("t", p, 0, p + 1) for p in range(5)]
    elements = [(r.topic, r.partition, r.fromOffset, r.untilOffset) for r in ranges]
    read = []

    def located(sc, parts, locations):
        read.append((parts, locations))
        return "parent"

    monkeypatch.setattr(kafka_rdd_module, "located_rdd", located)
    monkeypatch.setattr(kafka_rdd_module, "live_executors", lambda sc: [])
    monkeypatch.setattr(kafka_rdd_module, "KafkaRDD",
                        lambda parent, made, settings, groups: (parent, made, groups))
    parent, made, groups = kafka_rdd_module.kafka_rdd_beside(
        None, elements, [r.topicPartition() for r in ranges], settings,
        LocationStrategies.PreferConsistent(), None, lambda: ranges, [2, 3])
    assert read == [([elements[:2], elements[2:]], [[], []])]
    assert parent == "parent" and made == ranges
    assert groups == [tuple(ranges[:2]), tuple(ranges[2:])]
    with pytest.raises(ConfigurationError, match="group sizes"):
        kafka_rdd_module.kafka_rdd_beside(
            None, elements, [r.topicPartition() for r in ranges], settings,
            LocationStrategies.PreferConsistent(), None, lambda: ranges, [2, 2])


def test_a_batch_of_few_partitions_is_made_in_the_calling_thread(monkeypatch):
    built = _Built(monkeypatch)
    counting = CountingCluster(topics=2, partitions=4)
    stream = _stream(counting)
    try:
        counting.end += 1
        assert len(stream.compute(1000)) == 8
        assert [call[:2] for call in built.calls] == [
            ("kept", threading.current_thread().name)]
        assert built.ranges_made_in == [threading.current_thread().name]
        assert _planner_threads() == []
    finally:
        stream.stop()


def test_a_range_refused_in_the_planner_thread_fails_the_batch_and_moves_nothing(
        monkeypatch):
    _Built(monkeypatch)
    counting = CountingCluster()
    stream = _stream(counting)
    try:
        counting.end += 1
        stream.compute(1000)
        before = dict(stream.currentOffsets)

        def refused(*args):
            raise ConfigurationError("a refused range")

        monkeypatch.setattr(OffsetRange, "many", refused)
        counting.end += 1
        with pytest.raises(ConfigurationError, match="a refused range"):
            stream.compute(2000)
        assert stream.currentOffsets == before
        assert 2000 not in stream.batchRanges
    finally:
        stream.stop()


def test_the_ranges_are_waited_for_when_the_jvm_fails(monkeypatch):
    # The ranges' thread moves the stream's position: it must have ended before the batch
    # fails, whichever side failed; the ranges' own error comes first.
    settings = ReadSettings(params={"bootstrap.servers": "fake:9092"})
    ranges = [OffsetRange("t", 0, 0, 1)]
    waited = []

    def jvm_fails(*args):
        raise RuntimeError("the JVM is gone")

    monkeypatch.setattr(kafka_rdd_module, "ranges_rdd", jvm_fails)

    def made():
        waited.append(True)
        return ranges

    with pytest.raises(RuntimeError, match="the JVM is gone"):
        kafka_rdd_module.kafka_rdd_beside(None, [("t", 0, 0, 1)], [TopicPartition("t", 0)],
                                          settings, LocationStrategies.PreferConsistent(),
                                          None, made)
    assert waited == [True]

    def refused():
        raise ConfigurationError("a refused range")

    with pytest.raises(ConfigurationError, match="a refused range"):
        kafka_rdd_module.kafka_rdd_beside(None, [("t", 0, 0, 1)], [TopicPartition("t", 0)],
                                          settings, LocationStrategies.PreferConsistent(),
                                          None, refused)


def test_a_grouped_stream_regroups_no_recovered_batch(monkeypatch):
    # A batch recovered from a checkpoint may have run grouped before the failure, with
    # the cores then registered: regrouped now, a task could find some of its ranges
    # written and others not. Recovered, each range is a task of its own (each written
    # or skipped alone, whatever grouping ran first), over the stream's kept parent of
    # its partitions; a new batch is grouped.
    built = _Built(monkeypatch)
    counting = CountingCluster(topics=1, partitions=8)
    consumer, admin = counting.clients()
    stream = DirectKafkaInputDStream(
        StreamingContext(FakeSparkContext({"spark.streaming.kafka.minOffsetsPerTask": "1000"}),
                         1),
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Assign([TopicPartition(t, p) for t in counting.topics
                                   for p in range(counting.partitions)], PARAMS),
        driverConsumerFactory=lambda params: DriverConsumer(
            params, consumerFactory=consumer, adminFactory=admin))
    stream.initialize(0)
    stream.start()
    monkeypatch.setattr(stream, "reportInfo", lambda *args: None)  # a new tracker's
    try:
        counting.end += 3
        first = stream.compute(1000)
        kind, _thread, groups, _made = built.calls[-1]
        assert kind == "kept groups" and len(groups) < len(first)
        assert stream.compute(1000) == first  # regenerated after a recovery
        kind, _thread, elements, made = built.calls[-1]
        assert kind == "kept" and made == first
        assert elements == [(r.topic, r.partition, r.fromOffset, r.untilOffset)
                            for r in first]
        # Recovered batches of the same partitions keep one parent.
        assert stream.compute(1000) == first
        assert built.parents[1:] == [[(r.topic, r.partition) for r in first]]
    finally:
        stream.stop()


def test_recovered_batches_of_a_thousand_ranges_keep_one_parent(monkeypatch):
    built = _Built(monkeypatch)
    counting = CountingCluster()
    stream = _stream(counting)
    monkeypatch.setattr(stream, "reportInfo", lambda *args: None)
    try:
        counting.end += 2
        first = stream.compute(1000)
        counting.end += 1
        second = stream.compute(2000)
        assert len(built.parents) == 1
        # Regenerated after a recovery: exactly those ranges, over the same kept parent.
        for time, ranges in ((1000, first), (2000, second)):
            assert stream.compute(time) == ranges
            kind, _thread, elements, made = built.calls[-1]
            assert kind == "kept" and made == ranges
            assert elements == [(r.topic, r.partition, r.fromOffset, r.untilOffset)
                                for r in ranges]
        assert len(built.parents) == 1
    finally:
        stream.stop()
