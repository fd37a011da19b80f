"""How far each partition may advance in one batch (Spark's clamp, then better).

Pure functions of offsets and rates, so they are tested against Spark's formulas directly:

* Without backpressure, each partition reads at most ``maxRatePerPartition * batch seconds``;
  a partition whose maximum is 0 has no limit and reads to its end. (The Scala original
  floors such a partition at ``minRatePerPartition`` as soon as any other partition has a
  maximum, which throttles it to a few records per batch.)
* With backpressure, the estimated rate (or ``initialRate`` before the first estimate: the
  Scala original read the whole backlog in the first batch) is split over the partitions in
  proportion to their lag, then capped by each partition's maximum rate.
* Any limit in force is floored at ``minRatePerPartition`` records per batch.
* Optionally a total cap per batch (``maxRecordsPerBatch``, as Structured Streaming's
  ``maxOffsetsPerTrigger``) is split over the partitions by lag
  (:func:`kafka_direct.offset_range.prorate_by_lag`, the split the source uses too).
* No partition with zero lag causes a division by zero: no lag, no limit needed.
"""

from __future__ import annotations

from kafka_direct.dstream.per_partition_config import PerPartitionConfig, has_no_maximum
from kafka_direct.offset_range import Offsets, prorate_by_lag
from kafka_direct.topic_partition import TopicPartition

__all__ = ["clamp", "maxMessagesPerPartition"]


def maxMessagesPerPartition(latest: Offsets, current: Offsets, config: PerPartitionConfig,
                            batchSeconds: float, estimatedRate: float | None
                            ) -> dict[TopicPartition, int] | None:
    """Most records each limited partition may read this batch, or None when nothing limits.

    A partition left out of the answer has no limit: without backpressure, that is every
    partition whose maximum rate is 0. With backpressure every partition is limited.

    Args:
        latest: The newest offsets (the end of what could be read).
        current: Where each partition's next batch starts.
        config: Per-partition maximum and minimum rates.
        batchSeconds: The batch interval in seconds.
        estimatedRate: Backpressure's rate for the whole stream (records/s), or None when
            backpressure is off. A rate <= 0 means no estimate.
    """
    if (estimatedRate is None or estimatedRate <= 0) and has_no_maximum(config):
        return None
    lag = {tp: max(end - current.get(tp, end), 0) for tp, end in latest.items()}
    if estimatedRate is not None and estimatedRate > 0:
        total_lag = sum(lag.values())
        if total_lag == 0:
            return None  # nothing to read: no limit needed (and no 0/0)
        per_partition = {}
        for tp, partition_lag in lag.items():
            share = partition_lag / total_lag * estimatedRate
            maximum = config.maxRatePerPartition(tp)
            per_partition[tp] = min(share, maximum) if maximum > 0 else share
    else:
        # 0 means "no limit" for that partition alone, not "the floor" (as in Spark).
        per_partition = {tp: maximum for tp in latest
                         if (maximum := config.maxRatePerPartition(tp)) > 0}
    # Presence, not a positive sum, says a limit is in force: a tiny estimate whose shares
    # underflow to 0.0 still limits every partition (to its minimum), never lifts the limit.
    if not per_partition:
        return None
    return {tp: max(int(batchSeconds * limit), config.minRatePerPartition(tp))
            for tp, limit in per_partition.items()}


def clamp(latest: Offsets, current: Offsets, config: PerPartitionConfig, batchSeconds: float,
          estimatedRate: float | None = None, maxTotal: int = 0) -> dict[TopicPartition, int]:
    """The end offset of each partition's range for this batch.

    Never beyond ``latest`` and never before ``current``.
    """
    limits = maxMessagesPerPartition(latest, current, config, batchSeconds, estimatedRate)
    ends = dict(latest)
    if limits is not None:
        ends = {tp: min(current.get(tp, end) + limits[tp], end) if tp in limits else end
                for tp, end in latest.items()}
    if maxTotal > 0:
        ends = prorate_by_lag(ends, current, maxTotal)
    return ends
