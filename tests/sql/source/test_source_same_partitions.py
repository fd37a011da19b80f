"""A trigger over the same partitions as the last: read in order, with no lookup a partition.

The source's start and end offsets hold the same partitions in the same order trigger
after trigger (the end of one is the start of the next, both in the listing's order).
Admission, the data-loss checks and range planning then read them in order in C loops; any
other pair of offsets takes the general path, with the same answers.
"""

import json
import random
import threading
from collections import Counter

from hypothesis import assume, given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_direct import TopicPartition
from kafka_direct.sql.source.admission import admit
from kafka_direct.sql.source.planning import plan_ranges
from kafka_direct.topic_partition import same_partitions
from tests.fakes.confluent_clients import CountingCluster
from tests.sql.source.test_source_round_trips import counting_reader

TPS = [TopicPartition(t, p) for t in ("a", "b", "c") for p in range(4)]


@st.composite
def pairs(draw):
    """Start and end offsets of the same partitions, in (topic, partition) order."""
    chosen = sorted(draw(st.lists(st.sampled_from(TPS), unique=True, min_size=2)))
    start = {tp: draw(st.integers(0, 2**62)) for tp in chosen}
    end = {tp: max(0, start[tp] + draw(st.integers(-3, 50))) for tp in chosen}
    return start, end


@given(pairs(), st.randoms(use_true_random=False), st.sampled_from([None, 1, 3]),
       st.sampled_from([None, 2, 7]))
def test_the_same_partitions_in_order_plan_as_any_other_order(pair, rnd, minimum, most):
    start, end = pair
    assert same_partitions(start, end)
    keys = list(end)
    rnd.shuffle(keys)
    # Another order, so that the other side takes the general path (a shuffle may leave
    # the order as it was); reversed, at least two partitions always differ.
    assume(keys != list(end))
    shuffled = {tp: end[tp] for tp in keys}
    assert not same_partitions(start, shuffled)
    general = plan_ranges(start, shuffled, minimum, most)
    assert plan_ranges(start, end, minimum, most) == general
    reordered = {tp: start[tp] for tp in reversed(start)}
    assert not same_partitions(reordered, end)
    assert admit(start, end) == admit(reordered, end)


def test_partitions_in_another_order_or_others_are_not_the_same():
    a = {TopicPartition("t", 0): 1, TopicPartition("t", 1): 2}
    assert same_partitions(a, dict(a))
    assert same_partitions(a, {TopicPartition("t", 0): 5, TopicPartition("t", 1): 0})
    assert not same_partitions(a, dict(reversed(a.items())))
    assert not same_partitions(a, {TopicPartition("t", 0): 1})
    assert not same_partitions(a, {TopicPartition("t", 0): 1, TopicPartition("u", 1): 2})


def test_a_trigger_at_a_thousand_partitions_looks_no_partition_up_in_its_thread():
    # Admission, the data-loss checks and range planning looked each partition up (a
    # TopicPartition hash, a Python call: 4,000 a trigger at a thousand partitions).
    calls = Counter()
    hash_ = TopicPartition.__hash__

    def counted(tp):
        calls[threading.current_thread().name] += 1
        return hash_(tp)

    cluster = CountingCluster()
    reader = counting_reader(cluster)
    try:
        start = json.loads(json.dumps(reader.initialOffset()))
        for trigger in range(3):
            cluster.end += random.randint(1, 3)
            if trigger == 2:
                TopicPartition.__hash__ = counted
            try:
                end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
                json.dumps(reader.reportLatestOffset())
                tasks = reader.partitions(start, end)
                reader.commit(end)
            finally:
                TopicPartition.__hash__ = hash_
            ranges = [r for task in tasks for r in task.offsetRanges]
            assert len(ranges) == 1000
            assert {(r.fromOffset, r.untilOffset) for r in ranges} == {
                (json.loads(json.dumps(start))[r.topic][str(r.partition)], cluster.end)
                for r in ranges}
            start = end
    finally:
        reader.stop()
    assert calls[threading.current_thread().name] < 10, calls
