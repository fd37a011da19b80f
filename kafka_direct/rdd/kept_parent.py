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
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kafka_direct.errors import KafkaDirectError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.kafka_rdd import KafkaRDD, range_locations
from kafka_direct.rdd.location_strategy import LocationStrategy
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.rdd.spark_support import located_rdd
from kafka_direct.topic_partition import TopicPartition

__all__ = ["KeptParent", "RangesAt", "pack_offsets"]

_OFFSET = struct.Struct("<q")


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
