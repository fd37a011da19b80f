"""Admission control and range planning: every offset in exactly one task, limits kept."""

import math
import pickle
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pyspark.serializers import CloudPickleSerializer

from kafka_direct import ConfigurationError, OffsetRange, TopicPartition
from kafka_direct.offset_range import prorate_by_lag
from kafka_direct.sql.source.admission import TriggerDelay, admit, available
from kafka_direct.sql.source.planning import (
    KafkaInputPartition,
    pack_ranges,
    plan_ranges,
    restore_input_partition,
    split_ranges,
)

TPS = [TopicPartition(t, p) for t in ("a", "b") for p in range(3)]

# Big offsets on purpose: shares computed in floating point go wrong beyond 2**53.
offsets = st.integers(0, 2**62)


@st.composite
def batches(draw):
    """A start, a latest beyond it (new partitions too) and a limit."""
    start, latest = {}, {}
    for tp in draw(st.lists(st.sampled_from(TPS), unique=True)):
        if draw(st.booleans()):
            start[tp] = draw(offsets)
        begin = start.get(tp, 0)
        latest[tp] = begin + draw(st.one_of(st.integers(0, 50), st.integers(0, 2**61)))
    for tp in draw(st.lists(st.sampled_from(TPS), unique=True)):
        if tp not in latest:
            start[tp] = draw(offsets)  # known partitions missing from the metadata
    maxRows = draw(st.one_of(st.none(), st.integers(1, 200), st.integers(1, 2**62)))
    return start, latest, maxRows


def covered(ranges):
    """Offsets per partition as (from, until) intervals, checked to be disjoint."""
    by_tp = {}
    for r in ranges:
        by_tp.setdefault(r.topicPartition(), []).append((r.fromOffset, r.untilOffset))
    for intervals in by_tp.values():
        intervals.sort()
        for (_, until), (begin, _) in pairwise(intervals):
            assert until == begin  # consecutive, never overlapping
    return {tp: (iv[0][0], iv[-1][1]) for tp, iv in by_tp.items()}


@given(batches())
def test_admission_never_passes_latest_nor_goes_back_and_keeps_the_limit(batch):
    start, latest, maxRows = batch
    end = admit(start, latest, maxRows)
    for tp, position in start.items():
        assert tp in end  # a known partition is never forgotten
        assert end[tp] >= position  # no partition goes back here (latest >= start)
    for tp, last in latest.items():
        assert end.get(tp, 0) <= last
    read = sum(end[tp] - start.get(tp, 0) for tp in end)
    total = available(start, latest)
    assert read == (total if maxRows is None else min(total, maxRows))


@given(batches())
def test_the_limit_is_shared_by_lag(batch):
    start, latest, _ = batch
    total = available(start, latest)
    if total == 0:
        return
    maxRows = max(1, total // 3)
    end = admit(start, latest, maxRows)
    for tp, last in latest.items():
        lag = last - start.get(tp, 0)
        share = lag * maxRows / total
        assert abs((end.get(tp, 0) - start.get(tp, 0)) - share) < 1 + 1e-9 * share


def prorate_in_floats(latest, current, maxTotal):
    """The direct stream's former split, in floating point: the reference where it is exact."""
    lag = {tp: max(end - current.get(tp, end), 0) for tp, end in latest.items()}
    total = sum(lag.values())
    if maxTotal <= 0 or total <= maxTotal:
        return dict(latest)
    exact = {tp: partition_lag * maxTotal / total for tp, partition_lag in lag.items()}
    shares = {tp: math.floor(value) for tp, value in exact.items()}
    left = maxTotal - sum(shares.values())
    for tp in sorted(exact, key=lambda t: (shares[t] - exact[t], t))[:left]:
        shares[tp] += 1
    return {tp: current.get(tp, latest[tp]) + shares[tp] for tp in latest}


@given(st.dictionaries(st.sampled_from(TPS), st.integers(0, 10**6), min_size=1),
       st.integers(1, 10**6))
def test_the_split_is_the_direct_streams_where_floating_point_is_exact(lags, maxTotal):
    current = {tp: 7 for tp in lags}
    latest = {tp: 7 + lag for tp, lag in lags.items()}
    assert prorate_by_lag(latest, current, maxTotal) == prorate_in_floats(latest, current,
                                                                          maxTotal)


def test_huge_offsets_never_overshoot_the_limit():
    # Lags beyond 2**53: floating point shares read 2 offsets too many here.
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    latest, start = {a: 2**60 + 1, b: 3}, {a: 0, b: 0}
    end = admit(start, latest, maxRows=2**60 + 1)
    assert sum(end.values()) == 2**60 + 1
    assert end[a] <= latest[a] and end[b] <= latest[b]


def test_a_partition_behind_its_start_is_taken_where_the_caller_put_it():
    tp = TopicPartition("t", 0)
    assert admit({tp: 10}, {tp: 3}) == {tp: 3}
    assert admit({tp: 10}, {tp: 3}, maxRows=1) == {tp: 3}


def test_new_partitions_start_at_zero_and_stay_out_until_they_get_records():
    old, new, empty = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    assert admit({old: 5}, {old: 5, new: 4, empty: 0}) == {old: 5, new: 4}
    # All of the limit goes by lag: the new partition's lag is counted from 0.
    assert admit({old: 5}, {old: 15, new: 10}, maxRows=4) == {old: 7, new: 2}


def test_the_per_partition_cap_counts_the_partitions_of_each_trigger():
    one, two, three = (TopicPartition("t", p) for p in range(3))
    # One partition seen: a cap of 5 offsets for the batch.
    assert admit({one: 0}, {one: 100}, maxRowsPerPartition=5) == {one: 5}
    # Two more appeared: 3 x 5 = 15, shared by lag (the new ones count from offset 0).
    end = admit({one: 5}, {one: 100, two: 100, three: 100}, maxRowsPerPartition=5)
    assert sum(end[tp] - start for tp, start in ((one, 5), (two, 0), (three, 0))) == 15
    assert end == {one: 10, two: 5, three: 5}
    # A partition behind its start or without news still counts as seen.
    # (3 x 1 = 3 offsets: without two, 2.)
    assert admit({one: 10, two: 50}, {one: 20, two: 50, three: 10},
                 maxRowsPerPartition=1) == {one: 12, two: 50, three: 1}


def test_the_smaller_of_the_two_caps_wins():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    latest = {a: 1000, b: 1000}
    assert sum(admit({}, latest, maxRows=7, maxRowsPerPartition=100).values()) == 7
    assert sum(admit({}, latest, maxRows=700, maxRowsPerPartition=100).values()) == 200
    # Exact integers, however large.
    huge = {a: 2**62, b: 2**62}
    assert sum(admit({}, huge, maxRows=2**62, maxRowsPerPartition=2**61 + 1).values()) \
        == 2**62


def test_a_bad_per_partition_cap_is_refused():
    with pytest.raises(ConfigurationError, match="maxOffsetsPerPartitionPerTrigger"):
        admit({}, {TopicPartition("t", 0): 5}, maxRowsPerPartition=0)


def test_a_bad_limit_is_refused():
    with pytest.raises(ConfigurationError):
        admit({}, {TopicPartition("t", 0): 5}, maxRows=0)


@given(batches(), st.one_of(st.none(), st.integers(1, 40)),
       st.one_of(st.none(), st.integers(1, 1000)))
@settings(max_examples=300)
def test_every_offset_of_a_batch_is_in_exactly_one_task(batch, minPartitions, parts):
    start, latest, maxRows = batch
    end = admit(start, latest, maxRows)
    # maxRecordsPerPartition as a share of the largest range, so the split stays small.
    largest = max([until - start.get(tp, 0) for tp, until in end.items()] + [1])
    maxRecords = None if parts is None else max(1, -(-largest // parts))
    ranges = plan_ranges(start, end, minPartitions, maxRecords)
    spans = covered(ranges)
    for tp, until in end.items():
        begin = start.get(tp, 0)
        if until > begin:
            assert spans[tp] == (begin, until)
        else:
            assert tp not in spans
    assert all(r.count() > 0 for r in ranges)
    if maxRecords is not None:
        assert all(r.count() <= maxRecords for r in ranges)


@given(batches(), st.one_of(st.none(), st.integers(1, 40)),
       st.one_of(st.none(), st.integers(1, 1000)),
       st.one_of(st.integers(0, 60), st.integers(0, 2**62)), st.integers(1, 12))
@settings(max_examples=300)
def test_packed_tasks_hold_every_range_once_in_order_within_the_limits(
        batch, minPartitions, parts, minOffsets, parallelism):
    start, latest, maxRows = batch
    end = admit(start, latest, maxRows)
    largest = max([until - start.get(tp, 0) for tp, until in end.items()] + [1])
    maxRecords = None if parts is None else max(1, -(-largest // parts))
    ranges = plan_ranges(start, end, minPartitions, maxRecords)
    minTasks = minPartitions or parallelism
    tasks = pack_ranges(ranges, minOffsets, minTasks, maxRecords)
    # Every range once, in the planned order (rows come in the same order), none empty.
    assert [r for task in tasks for r in task] == ranges
    assert all(task for task in tasks)
    sizes = [sum(r.count() for r in task) for task in tasks]
    if maxRecords is not None:
        assert all(size <= maxRecords for size in sizes)
    # The cores stay busy: never fewer tasks than minPartitions / the parallelism allow.
    assert len(tasks) >= min(minTasks, len(ranges))
    if minOffsets <= 1:
        assert all(len(task) == 1 for task in tasks)
    if minTasks == 1 and ranges:
        # One fill to the target: a task is closed only when full, before a range of the
        # target or more, or before a range that would take it past maxRecordsPerPartition.
        target = min(minOffsets, sum(r.count() for r in ranges))
        for (task, size), (following, _) in pairwise(zip(tasks, sizes, strict=True)):
            if len(task) > 1 or len(following) > 1:
                first = following[0].count()
                assert (size >= target or first >= target
                        or (maxRecords is not None and size + first > maxRecords))


def test_small_ranges_are_packed_and_large_ones_keep_a_task_of_their_own():
    def r(partition, count):
        return OffsetRange("t", partition, 0, count)

    ranges = [r(0, 40), r(1, 70), r(2, 500), r(3, 10), r(4, 10), r(5, 99), r(6, 1)]
    assert pack_ranges(ranges, 100) == [
        (r(0, 40), r(1, 70)), (r(2, 500),), (r(3, 10), r(4, 10), r(5, 99)), (r(6, 1),)]
    assert pack_ranges(ranges, 0) == pack_ranges(ranges, 1) == [(x,) for x in ranges]
    # maxRecordsPerPartition: no task past it (the ranges were split for it before).
    assert pack_ranges([r(0, 40), r(1, 70), r(2, 30)], 100, maxRecordsPerPartition=100) == [
        (r(0, 40),), (r(1, 70), r(2, 30))]
    # minTasks (minPartitions, else the parallelism): the target drops to a share of the
    # batch, and halves while the tasks fall short.
    assert pack_ranges([r(0, 40), r(1, 70), r(2, 30)], 100, minTasks=3) == [
        (r(0, 40),), (r(1, 70),), (r(2, 30),)]
    assert pack_ranges([r(0, 40), r(1, 20), r(2, 30), r(3, 50)], 100, minTasks=2) == [
        (r(0, 40), r(1, 20), r(2, 30)), (r(3, 50),)]
    small = [r(p, 5) for p in range(24)]
    assert [len(task) for task in pack_ranges(small, 100_000, minTasks=4)] == [6] * 4
    assert [len(task) for task in pack_ranges(small, 10, minTasks=4)] == [2] * 12
    assert pack_ranges(small, 100_000, minTasks=50) == [(x,) for x in small]
    # Falling short by one task lowers the target a little, not by half: about as many
    # tasks as the floor asks, not twice as many.
    thousand = [r(p, 1000) for p in range(1000)]
    assert 64 <= len(pack_ranges(thousand, 100_000, minTasks=64)) <= 70


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=8), st.integers(1, 64))
def test_min_partitions_gives_at_least_that_many_tasks_when_offsets_allow(sizes, minimum):
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate(sizes)]
    split = split_ranges(ranges, minPartitions=minimum)
    assert sum(r.count() for r in split) == sum(sizes)
    if len(ranges) < minimum and sum(sizes) >= minimum:
        # Spark's rounding can miss by a little, never by much.
        assert len(split) >= min(minimum, sum(sizes)) - len(sizes)
    covered(split)


def test_split_matches_sparks_calculator_examples():
    # Spark's KafkaOffsetRangeCalculatorSuite: one range of 10000 into 3 with minPartitions 3.
    assert split_ranges([OffsetRange("t", 1, 1, 10_000)], minPartitions=3) == [
        OffsetRange("t", 1, 1, 3334), OffsetRange("t", 1, 3334, 6667),
        OffsetRange("t", 1, 6667, 10_000)]
    # Small ranges stay whole and their size is left out of the big one's share.
    small = [OffsetRange("t", 1, 1, 5), OffsetRange("t", 2, 1, 5)]
    big = OffsetRange("t", 3, 1, 10_000)
    split = split_ranges([*small, big], minPartitions=4)
    assert split[:2] == small and len(split) == 4
    assert [r.count() for r in split[2:]] == [4999, 5000]
    # Enough ranges already: nothing split, empty ones dropped.
    ranges = [OffsetRange("t", p, 0, 10) for p in range(4)] + [OffsetRange("u", 0, 5, 5)]
    assert split_ranges(ranges, minPartitions=4) == ranges[:4]
    assert [r.count() for r in split_ranges([big], maxRecordsPerPartition=3000)] == [
        2499, 2500, 2500, 2500]


def test_no_range_for_partitions_without_news_or_gone_back():
    a, b, c = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    assert plan_ranges({a: 5, b: 9, c: 2}, {a: 5, b: 4, c: 3}) == [OffsetRange("t", 2, 2, 3)]


def test_a_thousand_ranges_are_checked_at_once_not_one_by_one(monkeypatch):
    # The constructor's check is a Python call a range: a millisecond of a trigger.
    checked = []
    original = OffsetRange.__post_init__
    monkeypatch.setattr(OffsetRange, "__post_init__",
                        lambda self: (checked.append(self), original(self))[1])
    start = {TopicPartition(f"t{t}", p): 3 for t in range(10) for p in range(100)}
    end = {tp: 5 + tp.partition for tp in start}
    ranges = plan_ranges(start, end)
    assert [(r.topic, r.partition, r.fromOffset, r.untilOffset) for r in ranges] == sorted(
        (tp.topic, tp.partition, 3, 5 + tp.partition) for tp in start)
    assert checked == []


def test_a_bad_offset_fails_as_the_constructor_fails():
    tp = TopicPartition("t", 0)
    with pytest.raises(ConfigurationError, match="fromOffset"):
        plan_ranges({tp: -4}, {tp: 2})


class FakeClock:
    def __init__(self):
        self.ms = 1_000_000.0

    def __call__(self):
        return self.ms


def test_min_offsets_wait_until_enough_or_until_the_delay():
    tp = TopicPartition("t", 0)
    clock = FakeClock()
    delay = TriggerDelay(minRows=10, maxDelayMs=5000, clock=clock)
    assert not delay.waits({tp: 0}, {tp: 1})  # the first batch never waits (as Spark)
    delay.batch_ran()
    clock.ms += 1000
    assert delay.waits({tp: 1}, {tp: 5})
    assert not delay.waits({tp: 1}, {tp: 11})  # enough offsets
    clock.ms += 4000
    assert not delay.waits({tp: 1}, {tp: 2})  # waited long enough
    delay.batch_ran()
    assert delay.waits({tp: 2}, {tp: 3})  # the delay counts from the last batch


def test_trigger_delay_checks_its_settings():
    with pytest.raises(ConfigurationError):
        TriggerDelay(minRows=0, maxDelayMs=10)
    with pytest.raises(ConfigurationError):
        TriggerDelay(minRows=1, maxDelayMs=-1)


def test_covered_rejects_overlaps():
    # The checker itself must be able to fail.
    with pytest.raises(AssertionError):
        covered([OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 4, 8)])
    assert Counter(covered([OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 5, 8)])) == \
        Counter({TopicPartition("t", 0): (0, 8)})


@given(st.lists(st.integers(1, 3000), max_size=60), st.integers(0, 10**6),
       st.integers(1, 16), st.one_of(st.none(), st.integers(1, 20)),
       st.one_of(st.none(), st.integers(3000, 10**6)))
@settings(max_examples=300)
def test_grouping_puts_every_range_in_exactly_one_task_deterministically(
        sizes, minOffsets, minTasks, maxRanges, maxRecords):
    # Many partitions' small ranges, grouped into tasks (read in one fetch session each):
    # every planned range in exactly one task, in order, at most maxRangesPerTask a task,
    # the same tasks however often it is asked (a replayed batch, a retried task).
    ranges = [OffsetRange(f"t{p % 3}", p, 10 * p, 10 * p + size)
              for p, size in enumerate(sizes)]
    tasks = pack_ranges(ranges, minOffsets, minTasks, maxRecords, maxRanges)
    assert [r for task in tasks for r in task] == ranges
    assert Counter(r for task in tasks for r in task) == Counter(ranges)
    assert all(task for task in tasks)
    if maxRanges is not None:
        assert all(len(task) <= maxRanges for task in tasks)
    assert len(tasks) >= min(minTasks, len(ranges))
    assert pack_ranges(list(ranges), minOffsets, minTasks, maxRecords, maxRanges) == tasks


def test_max_ranges_per_task_caps_a_task_and_is_checked():
    small = [OffsetRange("t", p, 0, 5) for p in range(24)]
    assert [len(task) for task in pack_ranges(small, 100_000, 1, None, 10)] == [10, 10, 4]
    with pytest.raises(ConfigurationError, match="maxRangesPerTask"):
        pack_ranges(small, 100_000, 1, None, 0)


@st.composite
def any_offsets(draw):
    """A start and a latest of the same few partitions, in any relation (ends below the
    start: logs that went back; zeros: new partitions with nothing yet)."""
    small = st.one_of(st.integers(0, 3), offsets)
    start = draw(st.dictionaries(st.sampled_from(TPS), small, max_size=len(TPS)))
    latest = draw(st.dictionaries(st.sampled_from(TPS), small, max_size=len(TPS)))
    return start, latest


@given(any_offsets())
def test_admitting_everything_is_the_limited_rule_with_a_limit_never_reached(batch):
    # Without a limit the batch's ends take a shorter path (one lookup a partition): the
    # same ends as the general rule, whose limit here exceeds any lag (a limit is at most
    # 2^63-1: lags summing to that or more have no limit above them).
    start, latest = batch
    assume(available(start, latest) < 2**63 - 1)
    assert admit(start, latest) == admit(start, latest, maxRows=available(start, latest) + 1)


def _wide_task(planId=None):
    """A task of 1,000 small ranges over ten topics, at offsets around a million."""
    return KafkaInputPartition(tuple(
        OffsetRange(f"scale-abcdef-{t}", p, 1_000_000 + p, 1_000_003 + p)
        for t in range(10) for p in range(100)), planId)


def test_a_wide_task_pickles_compactly():
    # Spark's runner pickles every input partition of a trigger and ships it in its task:
    # ranges as a flat tuple of numbers (a topic named once per task, a range's length
    # instead of its end) pickle in C, where a pickled OffsetRange per range cost about
    # 4 ms a trigger at 1,000 ranges and 36 bytes each.
    task = _wide_task(7)
    data = CloudPickleSerializer().dumps(task)
    assert len(data) <= 16 * len(task.offsetRanges)
    assert pickle.loads(data) == task


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "ü-topic"]), st.integers(0, 2**31 - 1),
                          st.integers(0, 2**63 - 1), st.integers(0, 2**40)),
                min_size=1, max_size=20),
       st.one_of(st.none(), st.integers(1, 2**62)))
def test_an_input_partition_reads_back_as_it_was(ranges, planId):
    task = KafkaInputPartition(tuple(
        OffsetRange(t, p, min(f, 2**63 - 1 - n), min(f, 2**63 - 1 - n) + n)
        for t, p, f, n in ranges), planId)
    copy = pickle.loads(pickle.dumps(task))
    assert copy == task and copy.offsetRanges == task.offsetRanges
    assert [type(r) for r in copy.offsetRanges] == [OffsetRange] * len(ranges)


@pytest.mark.parametrize("topics,flat", [
    (("a",), (0, 0, 5)),            # not four numbers a range
    (("a",), (1, 0, 5, 1)),         # no such topic
    (("a",), (-1, 0, 5, 1)),        # nor that
    (("a",), (0, -1, 5, 1)),        # a negative partition
    (("a",), (0, 0, 5, -2)),        # a range that ends before it starts
    (("",), (0, 0, 5, 1)),          # an empty topic
    (("a",), ()),                   # no range
])
def test_a_damaged_input_partition_is_refused_clearly(topics, flat):
    with pytest.raises(ConfigurationError, match="input partition"):
        restore_input_partition(topics, flat, None)
