"""A stream's KafkaRDDs over one JVM parent, kept while the stream's partitions stay the same.

A KafkaRDD is a Python function over a parent RDD whose partition ``i`` holds range ``i``.
Built each batch, that parent cost two round trips to Spark's JVM (the ranges' bytes into
a stream, the RDD read from it) and the JVM's decoding of them: about half of a batch's
planning at a thousand partitions, every batch, although the stream's partitions rarely
change.

Here the JVM parent holds each partition's ``(topic, partition)`` only, in the batch's
order, and is made once for as long as the partitions and their preferred locations stay
the same (:class:`KeptParent`). A batch's offsets travel in its own RDD's Python function
(:class:`RangesAt`: the from and until offsets packed as 64-bit integers, 16 bytes a
range), which Spark ships with the batch's job: a batch makes no JVM object while it is
planned. Partition ``i`` of the batch's RDD still reads exactly ``offsetRanges()[i]``, and
a retried task reads the same range again (its function is the batch's, fixed when the
RDD was built). Any other set or order of partitions, or other locations, makes a new
parent.

A grouped batch (several ranges a Spark task) has as many Spark partitions as groups, and
its groups change with its offsets: its kept parent (:class:`KeptGroups`) holds only each
partition's index, one parent per number of groups and their locations (a stream's batches
mostly have one count; a few are kept), and the batch's function (:class:`GroupsAt`)
carries every range, so that partition ``i`` reads exactly group ``i``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kafka_direct.errors import KafkaDirectError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.kafka_rdd import KafkaRDD, range_locations
from kafka_direct.rdd.location_strategy import LocationStrategy
from kafka_direct.rdd.range_groups import cut
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.rdd.spark_support import located_rdd
from kafka_direct.topic_partition import TopicPartition

__all__ = ["GroupsAt", "KeptGroups", "KeptParent", "RangesAt", "pack_offsets", "pack_places"]

_OFFSET = struct.Struct("<q")
_PLACE = struct.Struct("<i")

#: Parents a grouped stream keeps, one per number of groups and their locations: a
#: stream's batches mostly have one count, and a load that comes and goes two or three.
_KEPT_GROUPINGS = 4


def pack_offsets(froms: Sequence[int], untils: Sequence[int]) -> bytes | None:
    """The from offsets, then the until offsets, as little-endian int64s; None if any is not.

    Args:
        froms: Each range's first offset, in partition order.
        untils: Each range's end offset, in the same order.
    """
    try:
        return struct.pack(f"<{len(froms) + len(untils)}q", *froms, *untils)
    except struct.error:  # an offset beyond int64, or not an int: the caller's ranges say
        return None


def pack_places(partitions: Sequence[TopicPartition]
                ) -> tuple[tuple[str, ...], bytes] | None:
    """The partitions' topics (each once), and their places packed; None beyond int32.

    The places are little-endian int32s: each partition's topic index, then each
    partition number, in the order of ``partitions``.
    """
    indexes: dict[str, int] = {}
    topics = [indexes.setdefault(tp.topic, len(indexes)) for tp in partitions]
    try:
        packed = struct.pack(f"<{2 * len(partitions)}i", *topics,
                             *(tp.partition for tp in partitions))
    except struct.error:
        return None
    return tuple(indexes), packed


class RangesAt:
    """The function of a batch's ranges over a kept parent: partition ``i`` -> range ``i``.

    It reads the parent's one element of partition ``i`` (its ``(topic, partition)``) and
    yields ``(topic, partition, from, until)`` with the batch's offsets of index ``i``: the
    element a KafkaRDD's parent holds when built per batch, so that reading, counting and
    the DataFrame view take it as they take that one.

    Args:
        offsets: :func:`pack_offsets` of the batch's ranges.
        count: How many ranges (the parent's partitions).

    Raises:
        KafkaDirectError: ``offsets`` do not hold ``count`` ranges.
    """

    __slots__ = ("count", "offsets")

    def __init__(self, offsets: bytes, count: int) -> None:
        if len(offsets) != 2 * count * _OFFSET.size:
            raise KafkaDirectError(f"the packed offsets of {count} ranges must be "
                                   f"{2 * count * _OFFSET.size} bytes, got {len(offsets)}")
        self.offsets = offsets
        self.count = count

    def __getstate__(self) -> tuple[bytes, int]:
        return self.offsets, self.count

    def __setstate__(self, state: tuple[bytes, int]) -> None:
        self.offsets, self.count = state

    def __call__(self, split: int, elements: Iterator[Any]
                 ) -> Iterator[tuple[str, int, int, int]]:
        """Partition ``split``'s range element, from its parent's element and the offsets.

        Raises:
            KafkaDirectError: The partition holds other than one element, or is beyond
                the batch's ranges.
        """
        # The parent's input is read to its end (PySpark reuses a worker only then).
        taken = list(elements)
        if len(taken) != 1 or not 0 <= split < self.count:
            # The parent and the batch's offsets were made for the same partitions, in the
            # same order; anything else would read another partition's offsets.
            raise KafkaDirectError(
                f"partition {split} of a KafkaRDD over a kept parent holds {len(taken)} "
                f"elements for {self.count} ranges; a batch's offsets and its parent must "
                "be made for the same partitions")
        topic, partition = taken[0]
        fromOffset = _OFFSET.unpack_from(self.offsets, _OFFSET.size * split)[0]
        untilOffset = _OFFSET.unpack_from(self.offsets,
                                          _OFFSET.size * (self.count + split))[0]
        return iter(((topic, partition, fromOffset, untilOffset),))


class GroupsAt:
    """The function of a grouped batch over a kept parent: partition ``i`` -> group ``i``.

    The parent's partition ``i`` holds ``i`` alone; this function yields the list of
    ``(topic, partition, from, until)`` of the batch's ``i``-th group: the element a
    grouped KafkaRDD's parent holds when built per batch, read, counted and viewed as
    that one is.

    Args:
        topics: The ranges' topics, each once (:func:`pack_places`).
        places: Each range's topic index, then each range's partition (:func:`pack_places`).
        offsets: :func:`pack_offsets` of the ranges.
        sizes: How many consecutive ranges each group holds, in order.

    Raises:
        KafkaDirectError: ``places``, ``offsets`` and ``sizes`` do not describe the same
            ranges, or a group is empty.
    """

    __slots__ = ("offsets", "places", "sizes", "topics")

    def __init__(self, topics: tuple[str, ...], places: bytes, offsets: bytes,
                 sizes: Sequence[int]) -> None:
        count = sum(sizes)
        if (len(places) != 2 * count * _PLACE.size or len(offsets) != 2 * count * _OFFSET.size
                or not all(size > 0 for size in sizes)):
            raise KafkaDirectError(
                f"a grouped batch's {len(sizes)} groups of {count} ranges need "
                f"{2 * count * _PLACE.size} bytes of places and {2 * count * _OFFSET.size} of "
                f"offsets, and no empty group; got {len(places)} and {len(offsets)} bytes, "
                f"sizes {list(sizes)[:10]}")
        self.topics = topics
        self.places = places
        self.offsets = offsets
        self.sizes = tuple(sizes)

    def __getstate__(self) -> tuple[tuple[str, ...], bytes, bytes, tuple[int, ...]]:
        return self.topics, self.places, self.offsets, self.sizes

    def __setstate__(self, state: tuple[tuple[str, ...], bytes, bytes, tuple[int, ...]]
                     ) -> None:
        self.topics, self.places, self.offsets, self.sizes = state

    def __call__(self, split: int, elements: Iterator[Any]
                 ) -> Iterator[list[tuple[str, int, int, int]]]:
        """Partition ``split``'s group element, read from the batch's packed ranges.

        Raises:
            KafkaDirectError: The partition holds anything but its own index, or is
                beyond the batch's groups.
        """
        taken = list(elements)  # read to its end: PySpark reuses a worker only then
        sizes = self.sizes
        if taken != [split] or not 0 <= split < len(sizes):
            # The parent was made for as many groups as the batch has; anything else would
            # read another group's ranges.
            raise KafkaDirectError(
                f"partition {split} of a grouped KafkaRDD over a kept parent holds "
                f"{taken[:3]!r} for {len(sizes)} groups; a batch's groups and its parent "
                "must be made for the same number of groups")
        count, first, size = sum(sizes), sum(sizes[:split]), sizes[split]
        topics = _unpack(self.places, _PLACE, first, size)
        partitions = _unpack(self.places, _PLACE, count + first, size)
        froms = _unpack(self.offsets, _OFFSET, first, size)
        untils = _unpack(self.offsets, _OFFSET, count + first, size)
        names = self.topics
        return iter(([(names[t], p, f, u)
                      for t, p, f, u in zip(topics, partitions, froms, untils, strict=True)],))


def _unpack(data: bytes, item: struct.Struct, first: int, size: int) -> tuple[int, ...]:
    """``size`` values of ``item``'s format from ``data``, from value ``first`` on."""
    code = item.format[-1]
    return struct.unpack_from(f"<{size}{code}", data, item.size * first)


class KeptGroups:
    """The JVM parents of a grouped stream's KafkaRDDs: one per number of groups, kept.

    Partition ``i`` of a parent holds ``i``, placed where the batch's ``i``-th group is
    preferably read (its first range's hosts). A parent is kept for its number of groups
    and their locations; the last :data:`_KEPT_GROUPINGS` such are kept.
    """

    def __init__(self) -> None:
        self._parents: dict[tuple[int, tuple[tuple[str, ...], ...]], Any] = {}
        self._places: tuple[Sequence[TopicPartition], tuple[str, ...], bytes] | None = None

    def holds(self, sizes: Sequence[int], locations: Sequence[Sequence[str]]) -> bool:
        """Whether a parent of groups of ``sizes`` (ranges at ``locations``) is kept."""
        return _groups_key(sizes, locations) in self._parents

    def places(self, partitions: Sequence[TopicPartition]
               ) -> tuple[tuple[str, ...], bytes] | None:
        """:func:`pack_places` of ``partitions``, kept while they are the same (or equal)."""
        kept = self._places
        if kept is not None and (kept[0] is partitions or list(kept[0]) == list(partitions)):
            return kept[1], kept[2]
        packed = pack_places(partitions)
        if packed is not None:
            self._places = (partitions, *packed)
        return packed

    def parent(self, sc: Any, sizes: Sequence[int], locations: Sequence[Sequence[str]]) -> Any:
        """The parent of ``len(sizes)`` groups: the kept one, or one made now."""
        key = _groups_key(sizes, locations)
        parent = self._parents.pop(key, None)
        if parent is None:
            parent = located_rdd(sc, list(range(len(sizes))), [list(hosts) for hosts in key[1]])
        self._parents[key] = parent  # the latest used last: the first is the oldest
        while len(self._parents) > _KEPT_GROUPINGS:
            del self._parents[next(iter(self._parents))]
        return parent

    def forget(self) -> None:
        """Drop the kept parents (the stream stopped)."""
        self._parents.clear()
        self._places = None

    def kafka_rdd(self, sc: Any, partitions: Sequence[TopicPartition], offsets: bytes,
                  sizes: Sequence[int], settings: ReadSettings,
                  locations: Sequence[Sequence[str]],
                  ranges: Callable[[], list[OffsetRange]]) -> KafkaRDD:
        """A grouped batch's KafkaRDD over a kept parent, partition ``i`` reading group ``i``.

        Args:
            sc: The SparkContext.
            partitions: The ranges' partitions, in order, whose :meth:`places` are known
                (no partition number beyond int32).
            offsets: The ranges' offsets in that order (:func:`pack_offsets`).
            sizes: How many consecutive ranges each Spark partition reads (each above 0).
            settings: How executors read.
            locations: Each range's preferred hosts (:func:`range_locations`).
            ranges: The batch's ranges, once made: those of ``partitions`` and ``offsets``,
                in their order. Asked even when making the parent fails; its error comes
                first.

        Raises:
            KafkaDirectError: A partition number is beyond int32 (see :meth:`places`).
        """
        try:
            places = self.places(partitions)
            if places is None:
                raise KafkaDirectError("a grouped batch over a kept parent needs partition "
                                       "numbers within int32")
            parent = self.parent(sc, sizes, locations)
            at = GroupsAt(places[0], places[1], offsets, sizes)
        finally:
            made = ranges()
        return KafkaRDD(parent.mapPartitionsWithIndex(at, True), made, settings,
                        cut(made, sizes))


class KeptParent:
    """The JVM parent of a stream's KafkaRDDs, made again only when its partitions change.

    Its partition ``i`` holds ``(topic, partition)`` of the batch's ``i``-th range,
    placed at its preferred locations; it is kept while the batches' partitions, in order,
    and their locations stay the same (a topic grown, a new topic under a pattern, an
    executor come or gone make a new one).
    """

    def __init__(self) -> None:
        self._key: tuple[tuple[TopicPartition, ...], tuple[tuple[str, ...], ...]] | None = None
        self._parent: Any = None

    def holds(self, partitions: Sequence[TopicPartition],
              locations: Sequence[Sequence[str]]) -> bool:
        """Whether the kept parent is that of ``partitions`` at ``locations``."""
        return self._parent is not None and self._key == _key(partitions, locations)

    def parent(self, sc: Any, partitions: Sequence[TopicPartition],
               locations: Sequence[Sequence[str]]) -> Any:
        """The parent of ``partitions`` at ``locations``: the kept one, or one made now."""
        if not self.holds(partitions, locations):
            parent = located_rdd(sc, [(tp.topic, tp.partition) for tp in partitions],
                                 locations)
            self._key, self._parent = _key(partitions, locations), parent
        return self._parent

    def forget(self) -> None:
        """Drop the kept parent (the stream stopped)."""
        self._key, self._parent = None, None

    def kafka_rdd(self, sc: Any, partitions: Sequence[TopicPartition], offsets: bytes,
                  settings: ReadSettings, locations: Sequence[Sequence[str]],
                  ranges: Callable[[], list[OffsetRange]]) -> KafkaRDD:
        """A batch's KafkaRDD over the parent of ``partitions``, partition ``i`` range ``i``.

        Args:
            sc: The SparkContext.
            partitions: The ranges' partitions, in partition order (at least one).
            offsets: The ranges' offsets in that order (:func:`pack_offsets`).
            settings: How executors read.
            locations: Each range's preferred hosts (:func:`range_locations`).
            ranges: The batch's ranges, once made (when a parent is made now, while the
                JVM makes it): those of ``partitions`` and ``offsets``, in their order.
                Asked even when making the parent fails; its error comes first.
        """
        try:
            parent = self.parent(sc, partitions, locations)
            at = RangesAt(offsets, len(partitions))
        finally:
            made = ranges()
        return KafkaRDD(parent.mapPartitionsWithIndex(at, True), made, settings)

    @staticmethod
    def locations(sc: Any, partitions: Sequence[TopicPartition], strategy: LocationStrategy,
                  leaders: Mapping[Any, str] | None) -> list[list[str]]:
        """Each partition's preferred hosts now (see :func:`range_locations`)."""
        return range_locations(sc, lambda: partitions, strategy, leaders, len(partitions))


def _key(partitions: Sequence[TopicPartition], locations: Sequence[Sequence[str]]
         ) -> tuple[tuple[TopicPartition, ...], tuple[tuple[str, ...], ...]]:
    return tuple(partitions), tuple(map(tuple, locations))


def _groups_key(sizes: Sequence[int], locations: Sequence[Sequence[str]]
                ) -> tuple[int, tuple[tuple[str, ...], ...]]:
    """A grouped parent's identity: how many groups, and each group's first range's hosts."""
    firsts, at = [], 0
    for size in sizes:
        firsts.append(tuple(locations[at]) if at < len(locations) else ())
        at += size
    return len(sizes), tuple(firsts)
