"""What building a batch's KafkaRDD costs the driver: round trips to the JVM, pickles.

A direct stream builds one KafkaRDD per batch on the driver, in the batch's planning; at a
thousand partitions every round trip to the JVM and every pickle of a range counts.
"""

import gc
import pickle
import threading

import py4j.clientserver

from kafka_direct import LocationStrategies, OffsetRange
from kafka_direct.rdd.kafka_rdd import ReadSettings, kafka_rdd


def _ranges(count):
    return [OffsetRange(f"cost-{i // 100}", i % 100, i, i + 10) for i in range(count)]


def test_a_batch_of_a_thousand_ranges_costs_two_round_trips_to_the_jvm(spark, monkeypatch):
    settings = ReadSettings(params={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})
    kafka_rdd(spark, _ranges(3), settings, LocationStrategies.PreferConsistent())  # warm
    gc.collect()  # earlier proxies' release commands are sent now, not counted below
    commands = []
    send = py4j.clientserver.ClientServerConnection.send_command
    caller = threading.get_ident()

    def counted(self, command):
        # This thread's commands only, and no proxy's release: a collection that lands in
        # the window (in this thread or another) releases other tests' proxies too.
        if threading.get_ident() == caller and not command.startswith("m\n"):
            commands.append(command.split("\n")[:3])
        return send(self, command)

    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counted)
    rdd = kafka_rdd(spark, _ranges(1000), settings, LocationStrategies.PreferConsistent())
    monkeypatch.undo()
    # Local mode: no executors to ask about or prefer; the ranges' bytes made a JVM stream
    # and the stream read into the RDD (no class or method looked up again, no RDD id, no
    # barrier question).
    assert len(commands) == 2, commands
    assert rdd.getNumPartitions() == 1000
    assert isinstance(rdd._ranges_rdd.id(), int)  # asked of the JVM when wanted
    assert rdd.offsetRanges() == _ranges(1000)


def test_the_ranges_travel_as_plain_tuples(spark):
    settings = ReadSettings(params={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})
    ranges = _ranges(5)
    rdd = kafka_rdd(spark, ranges, settings, LocationStrategies.PreferConsistent())
    # What each task unpickles: a tuple, no class looked up by name and no reduce call.
    elements = rdd._ranges_rdd.glom().collect()
    assert elements == [[(r.topic, r.partition, r.fromOffset, r.untilOffset)] for r in ranges]
    assert b"OffsetRange" not in pickle.dumps(elements[0][0])


def test_the_ranges_reach_the_jvm_in_memory_never_through_a_file(spark, monkeypatch):
    # The JVM reads a file of frames through an unbuffered stream: a read call of the
    # operating system per length and per frame, most of the JVM's time in a batch of a
    # thousand ranges. In memory there is no file to write, read and remove.
    import tempfile

    settings = ReadSettings(params={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})

    def no_file(*args, **kwargs):
        raise AssertionError("a file was written for the ranges")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_file)
    monkeypatch.setattr(type(spark), "_serialize_to_jvm", no_file)
    ranges = _ranges(1000)
    rdd = kafka_rdd(spark, ranges, settings, LocationStrategies.PreferConsistent())
    monkeypatch.undo()
    assert rdd.getNumPartitions() == 1000
    # What the JVM holds, partition by partition, read back here with the RDD's own
    # deserializer: a Python task per partition would read the same frames a thousand
    # times over (the Python tasks' side: test_the_ranges_travel_as_plain_tuples).
    jvm_partitions = rdd._ranges_rdd._jrdd.glom().collect()
    deserializer = rdd._ranges_rdd._jrdd_deserializer.serializer  # a frame: a pickled list
    assert [[element for frame in partition for element in deserializer.loads(bytes(frame))]
            for partition in jvm_partitions] == [
        [(r.topic, r.partition, r.fromOffset, r.untilOffset)] for r in ranges]


def test_a_grouped_rdd_made_beside_its_ranges_is_the_grouped_rdd_of_those_ranges(spark):
    # The direct stream hands the JVM a grouped batch's groups while its ranges are made
    # in another thread: the RDD is the one kafka_rdd makes of the same ranges and groups.
    from kafka_direct.rdd.kafka_rdd import kafka_rdd_beside
    from kafka_direct.rdd.range_groups import group_ranges, pack_counts

    settings = ReadSettings(params={"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})
    ranges = [OffsetRange(f"cost-{i // 100}", i % 100, i, i + 1 + i % 7) for i in range(250)]
    groups = group_ranges(ranges, 40, 2, 30)
    sizes = pack_counts([r.count() for r in ranges], 40, 2, None, 30)
    assert sizes == [len(group) for group in groups]
    elements = [(r.topic, r.partition, r.fromOffset, r.untilOffset) for r in ranges]
    beside = kafka_rdd_beside(spark, elements, [r.topicPartition() for r in ranges], settings,
                              LocationStrategies.PreferConsistent(), None, lambda: ranges,
                              sizes)
    first = kafka_rdd(spark, ranges, settings, LocationStrategies.PreferConsistent(),
                      groups=groups)
    assert beside.getNumPartitions() == first.getNumPartitions() == len(groups)
    assert beside.rangeGroups() == first.rangeGroups() == groups
    assert beside.offsetRanges() == ranges
    assert beside._ranges_rdd.glom().collect() == first._ranges_rdd.glom().collect()
