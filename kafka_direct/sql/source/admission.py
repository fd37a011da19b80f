"""Admission control: where one micro-batch of the source ends (Spark's Kafka source rules).

Pure functions of offsets (and, for the trigger delay, of an injected clock):

* :func:`admit`: the end offsets of a batch from its start and the partitions' latest
  offsets, at most ``maxRows`` offsets in all (and at most ``maxRowsPerPartition`` times
  the partitions seen at this trigger), shared over the partitions in proportion to
  their lag as the direct stream's ``maxRecordsPerBatch`` shares them
  (:func:`kafka_direct.offset_range.prorate_by_lag`). Never beyond latest, never before
  the start.
* :class:`TriggerDelay`: ``minOffsetsPerTrigger`` with ``maxTriggerDelay``: a batch waits
  until that many offsets are available, or until ``maxTriggerDelay`` has passed since the
  last batch ran.

A partition the start does not know (it appeared since) starts at
:data:`NEW_PARTITION_START`, Kafka's first offset: a deterministic start, so a batch replayed
from the offset log reads what it read the first time. Records deleted before the source
saw the partition are data loss, reported as any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka_direct.conf_values import parse_int
from kafka_direct.offset_range import Offsets, prorate_by_lag
from kafka_direct.topic_partition import TopicPartition, same_partitions

__all__ = ["NEW_PARTITION_START", "TriggerDelay", "admit", "available", "start_of",
           "trigger_limit"]

#: Where a partition absent from a batch's start offsets starts: Kafka's first offset.
NEW_PARTITION_START = 0


def start_of(start: Offsets, tp: TopicPartition) -> int:
    """Where ``tp``'s range starts in a batch starting at ``start``."""
    return start.get(tp, NEW_PARTITION_START)


def available(start: Offsets, latest: Offsets) -> int:
    """Offsets between ``start`` and ``latest`` over all partitions (none for one behind)."""
    return sum(max(end - start_of(start, tp), 0) for tp, end in latest.items())


def trigger_limit(partitions: int, maxRows: int | None = None,
                  maxRowsPerPartition: int | None = None) -> int | None:
    """The most offsets one batch may cover: the smaller of the two caps, or None.

    Args:
        partitions: How many partitions the source sees at this trigger.
        maxRows: ``maxOffsetsPerTrigger``, or None.
        maxRowsPerPartition: ``maxOffsetsPerPartitionPerTrigger``, or None; multiplied by
            ``partitions`` (at least one, so a source without partitions yet has a cap).

    Raises:
        ConfigurationError: A cap below 1.
    """
    caps = []
    if maxRows is not None:
        caps.append(parse_int("maxOffsetsPerTrigger", maxRows, 1))
    if maxRowsPerPartition is not None:
        perPartition = parse_int("maxOffsetsPerPartitionPerTrigger", maxRowsPerPartition, 1)
        caps.append(perPartition * max(partitions, 1))
    return min(caps) if caps else None


def admit(start: Offsets, latest: Offsets, maxRows: int | None = None,
          maxRowsPerPartition: int | None = None) -> dict[TopicPartition, int]:
    """The end offsets of a batch.

    Args:
        start: The batch's start (the previous batch's end).
        latest: Where each partition ends now. A partition of ``start`` missing here keeps
            its position (a metadata gap, a deleted topic); one missing from ``start`` is new
            and starts at :data:`NEW_PARTITION_START`. An end *below* the start is taken as
            it is: the caller decided the log was truncated or re-created and the query goes
            on from there (the batch reads nothing of that partition).
        maxRows: Most offsets the batch may cover in all, or None for no limit.
        maxRowsPerPartition: Most offsets per partition of ``latest`` (the partitions seen
            at this trigger, with or without news), as a cap on the whole batch shared
            like ``maxRows``; the smaller cap wins. None for no such cap.

    Returns:
        Per partition of ``start`` and ``latest``: ``start <= end <= latest`` (except as
        above), and the sum of ``end - start`` is ``min(limit, available)``. A new
        partition given nothing is left out.
    """
    # Counted per call: partitions that appear (a pattern's new topics, added
    # partitions) raise the cap from the next trigger on.
    limit = trigger_limit(len(latest), maxRows, maxRowsPerPartition)
    if limit is None and same_partitions(start, latest):
        # The same partitions as the start, in its order (the usual trigger): none kept
        # at its start, none new.
        return dict(latest)
    if limit is None:
        # Everything: each partition of latest ends there, but a new one with nothing yet
        # (the rule below); a partition latest lacks keeps its start. One lookup a
        # partition, where the general path takes five (a thousand partitions a trigger),
        # and keyed by latest's TopicPartitions: the metadata's, the same objects trigger
        # after trigger, so the next trigger's lookups are identity hits.
        ends = dict(latest)
        for tp, position in start.items():
            if tp not in ends:
                ends[tp] = position
        for tp in [tp for tp, last in latest.items()
                   if last == NEW_PARTITION_START and tp not in start]:
            del ends[tp]
        return ends
    end = {tp: position for tp, position in start.items() if tp not in latest}
    forward: dict[TopicPartition, int] = {}
    begin: dict[TopicPartition, int] = {}
    for tp, last in latest.items():
        first = start_of(start, tp)
        if last < first:
            end[tp] = last
        else:
            forward[tp] = last
            begin[tp] = first
    if limit is not None:
        forward = prorate_by_lag(forward, begin, limit)
    # A new partition that gets nothing this batch stays out of the end: absent means
    # "from offset 0" just the same, and an end that differs only by it would run an empty
    # batch.
    end.update({tp: until for tp, until in forward.items()
                if tp in start or until != NEW_PARTITION_START})
    return end


class TriggerDelay:
    """``minOffsetsPerTrigger`` with ``maxTriggerDelay``: whether a batch should wait.

    The first batch never waits (as Spark's); afterwards a batch waits while fewer than
    ``minRows`` offsets are available, unless ``maxDelayMs`` passed since the last batch ran.

    Args:
        minRows: Fewest offsets for a batch.
        maxDelayMs: Longest wait after the last batch.
        clock: Milliseconds on a monotonic clock (injectable for tests).
    """

    def __init__(self, minRows: int, maxDelayMs: int,
                 clock: Callable[[], float] | None = None) -> None:
        self.minRows = parse_int("minOffsetsPerTrigger", minRows, 1)
        self.maxDelayMs = parse_int("maxTriggerDelay", maxDelayMs, 0)
        self._clock = clock or (lambda: time.monotonic() * 1000.0)
        self._lastBatchMs: float | None = None

    def waits(self, start: Offsets, latest: Offsets) -> bool:
        """Whether a batch from ``start`` should wait for more offsets than ``latest`` has."""
        if self._lastBatchMs is None or \
                self._clock() - self._lastBatchMs >= self.maxDelayMs:
            return False
        return available(start, latest) < self.minRows

    def batch_ran(self) -> None:
        """Note that a batch was planned now (the delay counts from here)."""
        self._lastBatchMs = self._clock()
