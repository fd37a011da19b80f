"""KafkaRDD: an RDD of the records of offset ranges, one Spark partition per range by default.

Partition ``i`` holds the records of ``offsetRanges()[i]``: a task assigns its cached
consumer to the range's topic-partition and reads exactly ``[fromOffset, untilOffset)``,
streaming (memory does not grow with the range). Reads are deterministic, so a retried task
sees exactly the records the failed attempt saw.

A grouped KafkaRDD (opt-in: ``spark.streaming.kafka.minOffsetsPerTask``,
``createRDD(minOffsetsPerTask=)``; :mod:`~kafka_direct.rdd.range_groups`) has one Spark
partition per group of small ranges: partition ``i`` reads the ranges of
``rangeGroups()[i]``, in that order, with one consumer in one fetch session when they are
small (:func:`~kafka_direct.client.fetch_session.in_session`). A Spark task then costs its
fixed price once for many ranges. The groups are fixed when the RDD is built: a retried task
reads exactly its group's records again, in the same order.

A task's records are read by :mod:`kafka_direct.rdd.record_reader` (whose
:func:`read_range`, :func:`read_ranges` and :func:`count_range` answer here too).
:func:`kafka_rdd` builds one placed by a location strategy: ``KafkaUtils.createRDD`` and the
direct stream both build theirs with it, so neither entry point imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, SupportsIndex, overload

from pyspark.rdd import PipelinedRDD

from kafka_direct.client.columnar import IMPL_ENV
from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import HasOffsetRanges, OffsetRange
from kafka_direct.rdd.location_strategy import (
    LocationStrategy,
    PreferBrokers,
    preferred_locations,
)
from kafka_direct.rdd.range_groups import cut
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.rdd.record_reader import count_range, read_range, read_ranges
from kafka_direct.rdd.spark_support import live_executors, located_rdd
from kafka_direct.task_errors import carry_errors, typed_errors, typed_rdd_class
from kafka_direct.topic_partition import TopicPartition

__all__ = ["GroupedOffsetRanges", "KafkaRDD", "ReadSettings", "count_range", "group_element",
           "kafka_rdd", "kafka_rdd_beside", "range_element", "range_locations", "ranges_rdd",
           "read_range", "read_ranges"]



def range_element(offsetRange: OffsetRange) -> tuple[str, int, int, int]:
    """A range as a KafkaRDD's parent holds it: ``(topic, partition, from, until)``.

    A plain tuple pickles in a third of the time of an :class:`OffsetRange` (whose pickle
    calls back into Python): a batch of a thousand partitions pickles a thousand of them
    on the driver, and each task unpickles one.
    """
    return (offsetRange.topic, offsetRange.partition, offsetRange.fromOffset,
            offsetRange.untilOffset)


def group_element(group: Sequence[OffsetRange]) -> list[tuple[str, int, int, int]]:
    """A group of ranges as a grouped KafkaRDD's parent holds it: a list of range tuples.

    A list, so that a task tells its group (one element) from a range (a tuple).
    """
    return [range_element(r) for r in group]


def _as_range(element: Any) -> OffsetRange:
    # A parent built by kafka_rdd holds tuples; one built by hand may hold OffsetRanges.
    return element if isinstance(element, OffsetRange) else OffsetRange(*element)


def _taken(elements: Iterator[Any]) -> list[OffsetRange]:
    """A task's ranges from its parent's elements: ranges, or one group's list of them."""
    taken: list[OffsetRange] = []
    for element in elements:
        if type(element) is list:
            taken.extend(map(_as_range, element))
        else:
            taken.append(_as_range(element))
    return taken


class _CountPartition:
    """The task function of a KafkaRDD's ``count()``: partition -> its range's record count."""

    def __init__(self, settings: ReadSettings, impl: str | None) -> None:
        self.settings = settings
        self.impl = impl

    def __call__(self, split: int, ranges: Iterator[Any]) -> Iterator[int]:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        return carry_errors(self._count(iter(_taken(ranges)), attempt))

    def _count(self, ranges: Iterator[OffsetRange], attempt: int) -> Iterator[int]:
        # A generator, so that carry_errors sees what counting raises.
        yield sum(count_range(offsetRange, self.settings, impl=self.impl, attempt=attempt)
                  for offsetRange in ranges)


class _ReadPartition:
    """The task function of a KafkaRDD: partition -> its range's records."""

    def __init__(self, settings: ReadSettings) -> None:
        self.settings = settings

    def __call__(self, split: int, ranges: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        # The task's input (its one range) is taken now, not when the records are first
        # asked for: a function over the records that never starts them (the sinks' Arrow
        # path reads the range itself) would otherwise leave the input unread, and PySpark
        # does not reuse a worker whose input was not read to its end. Every such task
        # then paid for a new worker process, its imports and its consumer.
        taken = _taken(ranges)
        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        return self._read(taken, attempt)

    def _read(self, ranges: list[OffsetRange], attempt: int) -> Iterator[Any]:
        if len(ranges) > 1:  # a grouped KafkaRDD's partition
            yield from carry_errors(read_ranges(ranges, self.settings, attempt=attempt))
            return
        for offsetRange in ranges:
            yield from carry_errors(read_range(offsetRange, self.settings, attempt=attempt))


class GroupedOffsetRanges(list[OffsetRange]):
    """A grouped KafkaRDD's ranges: iterated, counted, compared and sliced, never indexed.

    Spark's idiom ``offsetRanges()[TaskContext.get().partitionId()]`` names the range a
    task read only while each Spark partition reads one range. Grouped, it would name
    another range, silently: a writer storing that range's offsets with its rows would
    store wrong ones, and records would be lost or read twice on a restart. An index
    raises instead, in the driver and in the tasks the list is shipped to.
    """

    __slots__ = ()

    @overload
    def __getitem__(self, index: SupportsIndex) -> OffsetRange: ...

    @overload
    def __getitem__(self, index: slice) -> list[OffsetRange]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> OffsetRange | list[OffsetRange]:
        if isinstance(index, slice):
            return list(super().__getitem__(index))
        raise ConfigurationError(
            "offsetRanges() of a grouped KafkaRDD is not indexed by Spark partition: a "
            "partition reads several ranges. Use rangeGroups()[partitionId] (the ranges "
            "of partition partitionId) or mapPartitionsWithRanges(f); or turn grouping "
            "off (spark.streaming.kafka.minOffsetsPerTask=0, or no minOffsetsPerTask "
            "for createRDD); list(offsetRanges()) gives an indexable copy")


class KafkaRDD(typed_rdd_class(PipelinedRDD), HasOffsetRanges):  # type: ignore[misc]
    """Records of Kafka offset ranges, one Spark partition per range (or per group).

    Built by :meth:`kafka_direct.KafkaUtils.createRDD` (and by the direct stream for each
    batch). All RDD operations work; errors raised while reading (DataLossError ...) reach
    the driver with their own type, from this RDD and every RDD derived from it.

    ``count()`` and ``isEmpty()`` read Kafka unless every range is empty: an offset range's
    size is only an upper bound on its records (transaction markers, compaction).

    Grouped (``groups`` with a group of several ranges), Spark partition ``i`` reads the
    ranges of ``rangeGroups()[i]``; ``offsetRanges()`` lists them all, group after group, and
    its ``i``-th range is then *not* what partition ``i`` read.

    Raises:
        ConfigurationError: ``groups`` are not ``offsetRanges`` cut in order.
    """

    def __init__(self, parent: Any, offsetRanges: Sequence[OffsetRange],
                 settings: ReadSettings,
                 groups: Sequence[Sequence[OffsetRange]] | None = None) -> None:
        super().__init__(parent, _ReadPartition(settings), False)
        self._ranges_rdd = parent  # the ranges, placed: what count() reads again
        self._offsetRanges = tuple(offsetRanges)
        self._settings = settings
        self._groups: tuple[tuple[OffsetRange, ...], ...] | None = None
        if groups is not None and any(len(group) != 1 for group in groups):
            cut = tuple(tuple(group) for group in groups)
            if tuple(r for group in cut for r in group) != self._offsetRanges \
                    or not all(cut):
                raise ConfigurationError(
                    "a grouped KafkaRDD's groups must be its offset ranges cut in order "
                    "into non-empty groups")
            self._groups = cut

    def offsetRanges(self) -> list[OffsetRange]:
        """All ranges of the RDD, in a fixed order (group after group when grouped).

        Ungrouped (the default), the ``i``-th range is what Spark partition ``i`` read
        (``offsetRanges()[TaskContext.get().partitionId()]``, Spark's idiom). Grouped
        (:meth:`isGrouped`), it is not: a partition reads a group, ``rangeGroups()[i]``,
        and the list returned refuses an index (:class:`GroupedOffsetRanges`).
        """
        if self._groups is not None:
            return GroupedOffsetRanges(self._offsetRanges)
        return list(self._offsetRanges)

    def rangeGroups(self) -> list[tuple[OffsetRange, ...]]:
        """The ranges of each Spark partition, in partition order (one each, ungrouped).

        Inside a task: ``groups = rdd.rangeGroups()`` on the driver, then
        ``groups[TaskContext.get().partitionId()]`` (or the index of
        ``mapPartitionsWithIndex``), or :meth:`mapPartitionsWithRanges`.
        """
        if self._groups is None:
            return [(r,) for r in self._offsetRanges]
        return list(self._groups)

    def isGrouped(self) -> bool:
        """Whether a Spark partition reads several ranges (``offsetRanges()[i]`` is wrong)."""
        return self._groups is not None

    def mapPartitionsWithRanges(self, f: Any, preservesPartitioning: bool = False) -> Any:
        """``f(ranges, records)`` per Spark partition: its ranges (a tuple) and its records.

        The same for a grouped KafkaRDD and one partition per range: the idiom that needs
        no partition index.
        """
        return self.mapPartitionsWithIndex(_WithRanges(tuple(self.rangeGroups()), f),
                                           preservesPartitioning)

    def readSettings(self) -> ReadSettings:
        """How its executors read (parameters, poll timeout, deserializers...)."""
        return self._settings

    def count(self) -> int:
        """The exact number of records (read from Kafka unless all ranges are empty).

        Raw records are counted by the native columnar reader where it applies, without a
        Python object per record (:func:`~kafka_direct.rdd.record_reader.count_range`); a
        persisted KafkaRDD counts what it holds.
        """
        if all(r.count() == 0 for r in self._offsetRanges):
            return 0
        if self.holdsRecords():
            # Persisted or checkpointed records: counted where they are, not read from Kafka
            # again (which may have deleted them since).
            with typed_errors():
                return int(self.keptRecords().count())
        counter = _CountPartition(self._settings, os.environ.get(IMPL_ENV) or None)
        with typed_errors():
            return int(self._ranges_rdd.mapPartitionsWithIndex(counter).sum())

    def isEmpty(self) -> bool:
        """Whether the RDD has no record (exact; reads at most one record when it must)."""
        if all(r.count() == 0 for r in self._offsetRanges):
            return True
        if self.holdsRecords():
            with typed_errors():
                return bool(self.keptRecords().isEmpty())
        return bool(super().isEmpty())

    def localCheckpoint(self) -> None:
        """Mark the RDD for local checkpointing (Spark's), and keep it out of pipelines.

        PySpark keeps pipelining a locally checkpointed RDD's function into the RDDs derived
        from it (``count()`` is one), so their jobs would read Kafka again, past the
        checkpoint; marked checkpointed as ``checkpoint()`` marks it, they read the
        checkpoint.
        """
        super().localCheckpoint()
        self.is_checkpointed = True

    def holdsRecords(self) -> bool:
        """Whether Spark keeps this RDD's records (persisted, or marked for checkpointing).

        Its actions then use what Spark keeps; ``count()`` and ``toDF()`` read Kafka again
        only when it keeps nothing, so every action sees the same records.
        """
        if self.is_cached or self.is_checkpointed:  # cache(), persist(), checkpoint()
            return True
        level = self.getStorageLevel()  # persisted through the JVM object
        return bool(level.useMemory or level.useDisk or level.useOffHeap
                    or self.isLocallyCheckpointed())

    def keptRecords(self) -> Any:
        """The records as Spark keeps them: an RDD over this one's JVM RDD, never pipelined.

        PySpark pipelines an RDD's function into those derived from it unless it was
        persisted or checkpointed through PySpark; one persisted or checkpointed through
        the JVM RDD would be read from Kafka again. Over the JVM RDD, it is not.
        """
        from pyspark import RDD

        return RDD(self._jrdd, self.ctx, self._jrdd_deserializer)

    def toDF(self, spark: Any = None) -> Any:
        """The records as a DataFrame with the schema of Spark's Kafka source.

        Columns: key, value (binary), topic, partition, offset, timestamp, timestampType,
        headers. Needs raw records (no deserializers or messageHandler).
        """
        from kafka_direct.rdd.dataframe import records_to_dataframe

        return records_to_dataframe(self, self._settings, spark)

    def __repr__(self) -> str:
        grouped = f" in {len(self._groups)} groups" if self._groups is not None else ""
        return f"KafkaRDD[{self.id()}] with {len(self._offsetRanges)} offset ranges{grouped}"


class _WithRanges:
    """The function of :meth:`KafkaRDD.mapPartitionsWithRanges`: index -> its group."""

    def __init__(self, groups: tuple[tuple[OffsetRange, ...], ...], f: Any) -> None:
        self.groups = groups
        self.f = f

    def __call__(self, index: int, records: Iterator[Any]) -> Any:
        return self.f(self.groups[index], records)


def kafka_rdd(sc: Any, ranges: list[OffsetRange], settings: ReadSettings,
              strategy: LocationStrategy, leaders: Mapping[Any, str] | None = None,
              groups: Sequence[Sequence[OffsetRange]] | None = None) -> KafkaRDD:
    """A KafkaRDD of ``ranges`` (already checked), partition ``i`` reading ``ranges[i]``.

    Args:
        sc: The SparkContext.
        ranges: The offset ranges, in partition order.
        settings: How executors read.
        strategy: Where each range is preferably read.
        leaders: Partition leaders' hosts, for ``PreferBrokers``.
        groups: ``ranges`` cut in order into the groups of a grouped KafkaRDD
            (:func:`~kafka_direct.rdd.range_groups.group_ranges`), partition ``i`` reading
            ``groups[i]``; None, or one range each: one partition per range. A group is
            preferably read where its first range is.
    """
    if groups is not None and all(len(group) == 1 for group in groups):
        groups = None
    if groups is None:
        parent = ranges_rdd(sc, [range_element(r) for r in ranges],
                            lambda: [r.topicPartition() for r in ranges], strategy, leaders)
        return KafkaRDD(parent, ranges, settings)
    locations = range_locations(sc, lambda: [r.topicPartition() for r in ranges], strategy,
                                leaders, len(ranges))
    firsts, at = [], 0
    for group in groups:
        firsts.append(locations[at] if at < len(locations) else [])
        at += len(group)
    return KafkaRDD(located_rdd(sc, [group_element(g) for g in groups], firsts), ranges,
                    settings, groups)


def kafka_rdd_beside(sc: Any, elements: list[tuple[str, int, int, int]],
                     partitions: Sequence[TopicPartition], settings: ReadSettings,
                     strategy: LocationStrategy, leaders: Mapping[Any, str] | None,
                     ranges: Callable[[], list[OffsetRange]],
                     sizes: Sequence[int] | None = None) -> KafkaRDD:
    """A KafkaRDD whose ranges are made elsewhere while the JVM reads their elements.

    The JVM reads ``elements`` first; then ``ranges()`` gives the ranges (waiting for the
    thread that makes them), which must be the ranges of ``elements``, in their order.
    ``ranges()`` is waited for even when the JVM fails, and its error comes first.

    Args:
        sc: The SparkContext.
        elements: ``(topic, partition, from, until)`` of each range, in partition order.
        partitions: The ranges' partitions, in that order.
        settings: How executors read.
        strategy: Where each range is preferably read.
        leaders: Partition leaders' hosts, for ``PreferBrokers``.
        ranges: The ranges, once made.
        sizes: Grouped: how many consecutive ranges each Spark partition reads
            (:func:`~kafka_direct.rdd.range_groups.pack_counts`), a group preferably read
            where its first range is; None, or one range each: one partition per range.
    """
    if sizes is not None and all(size == 1 for size in sizes):
        sizes = None
    try:
        if sizes is None:
            parent = ranges_rdd(sc, elements, lambda: partitions, strategy, leaders)
        else:
            if sum(sizes) != len(elements) or not all(size > 0 for size in sizes):
                raise ConfigurationError(
                    f"a grouped KafkaRDD's group sizes must cut its {len(elements)} ranges "
                    f"into non-empty groups; got {list(sizes)}")
            locations = range_locations(sc, lambda: partitions, strategy, leaders,
                                        len(elements))
            firsts, groups, at = [], [], 0
            for size in sizes:
                firsts.append(locations[at])
                groups.append(elements[at:at + size])  # a list: a group, not one range
                at += size
            parent = located_rdd(sc, groups, firsts)
    finally:
        made = ranges()
    return KafkaRDD(parent, made, settings, None if sizes is None else cut(made, sizes))


def ranges_rdd(sc: Any, elements: list[tuple[str, int, int, int]],
               partitions: Callable[[], Sequence[TopicPartition]], strategy: LocationStrategy,
               leaders: Mapping[Any, str] | None = None) -> Any:
    """The parent of a KafkaRDD: partition ``i`` holding ``elements[i]``, placed.

    ``KafkaRDD(ranges_rdd(...), ranges, settings)`` is :func:`kafka_rdd`'s RDD when
    ``elements`` are the ranges' :func:`range_element`; the direct stream builds the two
    parts apart, so that its thread makes the batch's ranges while the JVM reads these.

    Args:
        sc: The SparkContext.
        elements: ``(topic, partition, from, until)`` of each range, in partition order.
        partitions: The ranges' partitions, in that order (asked only to place them).
        strategy: Where each range is preferably read.
        leaders: Partition leaders' hosts, for ``PreferBrokers``.
    """
    return located_rdd(sc, elements, range_locations(sc, partitions, strategy, leaders,
                                                     len(elements)))


def range_locations(sc: Any, partitions: Callable[[], Sequence[TopicPartition]],
                    strategy: LocationStrategy, leaders: Mapping[Any, str] | None,
                    count: int) -> list[list[str]]:
    """Each of ``count`` ranges' preferred hosts (``partitions()`` asked only if placed)."""
    executors = live_executors(sc)
    if executors or isinstance(strategy, PreferBrokers):
        return preferred_locations(strategy, list(partitions()), executors, leaders)
    return [[]] * count  # no executor to prefer (local mode): no range has a location
