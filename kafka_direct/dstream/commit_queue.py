"""BatchCommitQueue: where a direct stream's ``commitAsync`` waits for its batch.

A commit belongs to a batch. It is released when that batch, and every batch of the stream
before it, succeeded (all output operations): per partition, nothing is committed beyond the
end of the longest prefix of consecutive successful batches, so a commit never runs ahead of
an earlier batch still running (``spark.streaming.concurrentJobs`` > 1) nor of a failed one.
What was queued for a batch that never succeeds is dropped when the stream stops.

A batch without jobs of its own (its input is read by a window that slides slower than the
batch interval) cannot succeed by itself: it passes together with the next batch of the stream
that succeeds, whose window job read it (that batch is later in time, so the prefix rule still
holds it back behind any failed or unfinished batch). A batch is without jobs of its own when
no output operation reading the stream runs at its time (the stream decides), or when it is
computed after its own batch time already completed: no job of that batch can have read it, it
is read by a later batch's job (as Spark's commitAsync, which commits at the next compute).

:class:`BatchCommitQueue` decides; :class:`StreamCommits` commits through the stream's
driver consumer and tells the callbacks. Both are thread safe.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafka_direct.errors import ConfigurationError, KafkaDirectError, StreamingStateError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.topic_partition import TopicPartition

if TYPE_CHECKING:
    from kafka_direct.client.driver_consumer import DriverConsumer

__all__ = ["BatchCommitQueue", "CommitCallback", "QueuedCommit", "Release", "StreamCommits",
           "describe_offsets"]

logger = logging.getLogger(__name__)

# A range's offsets, read in C (a thousand ranges a batch).
_from = operator.attrgetter("fromOffset")
_until = operator.attrgetter("untilOffset")

CommitCallback = Callable[[dict[TopicPartition, int] | None, Exception | None], None]


@dataclass(frozen=True)
class QueuedCommit:
    """One ``commitAsync`` call: its ranges and its callback, tied to batch ``time``."""

    time: int
    ranges: tuple[OffsetRange, ...]
    callback: CommitCallback | None


@dataclass
class _Batch:
    """A batch's ranges, as lists in the batch's order: a dict of them is made when asked.

    A batch of a thousand partitions is queued in its planning; keying its bounds by
    partition there was a thousand Python hash calls. Only a commit from outside a job
    thread (matched by ranges) asks for them by partition.
    """

    time: int
    partitions: Sequence[TopicPartition]
    fromOffsets: list[int]
    untilOffsets: list[int]
    hasJobs: bool
    succeeded: bool = False
    commits: list[QueuedCommit] = field(default_factory=list)
    _byPartition: dict[TopicPartition, tuple[int, int]] | None = None

    @property
    def ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """``(fromOffset, untilOffset)`` per partition."""
        if self._byPartition is None:
            self._byPartition = dict(zip(self.partitions, zip(
                self.fromOffsets, self.untilOffsets, strict=True), strict=True))
        return self._byPartition


@dataclass(frozen=True)
class Release:
    """What may be committed now.

    Attributes:
        offsets: Per partition the next offset to read, to commit to the group.
        commits: The calls whose callbacks hear of the outcome.
        capped: Partitions whose asked offset went beyond what successful batches read,
            as ``{tp: (asked, committed)}``.
        unread: Partitions asked for that the stream never read (not committed).
    """

    offsets: dict[TopicPartition, int]
    commits: list[QueuedCommit]
    capped: dict[TopicPartition, tuple[int, int]]
    unread: set[TopicPartition]


class BatchCommitQueue:
    """The stream's batches in time order, their success, and the commits tied to them."""

    def __init__(self) -> None:
        self._batches: dict[int, _Batch] = {}
        #: Per partition the end of the successful prefix: never committed beyond.
        self.frontier: dict[TopicPartition, int] = {}
        self.closed = False
        # Batch times that completed before the stream computed them (see addBatch).
        self._completedFirst: set[int] = set()
        self._lock = threading.Lock()

    def addBatch(self, time: int, ranges: Sequence[OffsetRange], hasJobs: bool = True,
                 partitions: Sequence[TopicPartition] | None = None) -> None:
        """Record batch ``time`` of the stream and the ranges it reads.

        Args:
            time: The batch time.
            ranges: What the batch reads.
            hasJobs: Whether a job of batch ``time`` itself reads it. Taken as False when
                batch ``time`` already completed (:meth:`batchSucceeded` came first): the
                batch is computed for a later batch's job, with which it passes.
            partitions: The ranges' partitions, in the same order, when the caller has
                them (a thousand fewer TopicPartitions built a batch); else from the ranges.
        """
        with self._lock:
            if self.closed:
                return
            if time in self._completedFirst:
                self._completedFirst.discard(time)
                hasJobs = False
            if partitions is None:
                partitions = [r.topicPartition() for r in ranges]
            if len(partitions) != len(ranges):
                raise ValueError(f"{len(ranges)} ranges but {len(partitions)} partitions")
            batch = _Batch(time, list(partitions), list(map(_from, ranges)),
                           list(map(_until, ranges)), hasJobs)
            late = any(t > time for t in self._batches)
            self._batches[time] = batch
            if late:
                self._batches = dict(sorted(self._batches.items()))

    def owner(self, ranges: Sequence[OffsetRange], threadBatch: int | None) -> int | None:
        """The batch a commit of ``ranges`` belongs to, or None.

        The batch whose output operation calls (``threadBatch``, from the job thread), else
        the latest pending batch that read every one of the ranges.
        """
        with self._lock:
            if threadBatch is not None and threadBatch in self._batches:
                return threadBatch
            for time in reversed(self._batches):
                read = self._batches[time].ranges
                if all(r.topicPartition() in read
                       and read[r.topicPartition()][0] <= r.fromOffset
                       and r.untilOffset <= read[r.topicPartition()][1] for r in ranges):
                    return time
            return None

    def add(self, time: int, ranges: Sequence[OffsetRange],
            callback: CommitCallback | None) -> bool:
        """Queue a commit for batch ``time``.

        Returns:
            False when the queue is closed or the batch is unknown or already committed.
        """
        with self._lock:
            batch = self._batches.get(time)
            if self.closed or batch is None or batch.succeeded:
                return False
            batch.commits.append(QueuedCommit(time, tuple(ranges), callback))
            return True

    def batchSucceeded(self, time: int) -> Release:
        """Mark batch ``time`` successful; release what the successful prefix now allows."""
        with self._lock:
            batch = self._batches.get(time)
            if batch is not None:
                batch.succeeded = True
            elif not self.closed:
                self._completedFirst.add(time)
            return self._release()

    def forget(self, upTo: int) -> None:
        """Forget completions of batch times ``<= upTo`` the stream never computed.

        Called as the stream forgets its old batches: such a time is never computed any
        more (so the set stays as small as the stream's remember duration).
        """
        with self._lock:
            self._completedFirst = {t for t in self._completedFirst if t > upTo}

    def release(self) -> Release:
        """What the successful prefix allows now (nothing new unless a batch succeeded)."""
        with self._lock:
            return self._release()

    def close(self) -> tuple[Release, list[QueuedCommit]]:
        """Stop taking commits: release the successful prefix, drop everything else."""
        with self._lock:
            release = self._release()
            dropped = [c for b in self._batches.values() for c in b.commits]
            self._batches.clear()
            self._completedFirst.clear()
            self.closed = True
            return release, dropped

    def _release(self) -> Release:
        passed: list[_Batch] = []
        waiting: list[_Batch] = []
        for batch in self._batches.values():
            if batch.succeeded:
                passed.extend(waiting)
                passed.append(batch)
                waiting = []
            elif not batch.hasJobs:
                waiting.append(batch)
            else:
                break
        commits: list[QueuedCommit] = []
        asked: dict[TopicPartition, int] = {}
        for batch in passed:
            del self._batches[batch.time]
            self.frontier.update(zip(batch.partitions, batch.untilOffsets, strict=True))
            # Within a batch the largest offset; a later batch's offset replaces an earlier
            # one's (after a data-loss reset it may be lower, and right).
            inBatch: dict[TopicPartition, int] = {}
            for commit in batch.commits:
                for r in commit.ranges:
                    tp = r.topicPartition()
                    inBatch[tp] = max(inBatch.get(tp, r.untilOffset), r.untilOffset)
            asked.update(inBatch)
            commits.extend(batch.commits)
        offsets: dict[TopicPartition, int] = {}
        capped: dict[TopicPartition, tuple[int, int]] = {}
        unread: set[TopicPartition] = set()
        for tp, offset in asked.items():
            end = self.frontier.get(tp)
            if end is None:
                unread.add(tp)
                continue
            offsets[tp] = min(offset, end)
            if offset > end:
                capped[tp] = (offset, end)
        return Release(offsets, commits, capped, unread)


def describe_offsets(ranges: Sequence[OffsetRange]) -> str:
    """``t-0 [3, 9), t-1 [0, 4)``: ranges in log lines and errors."""
    return ", ".join(f"{r.topic}-{r.partition} [{r.fromOffset}, {r.untilOffset})"
                     for r in ranges) or "(no ranges)"


class StreamCommits:
    """A direct stream's commits: queued per batch, committed to its group in batch order.

    Args:
        name: The stream's name, for log lines and errors.
        group: The consumer group committed to.
        driver: Returns the stream's driver consumer (raises once the stream stopped).
    """

    def __init__(self, name: str, group: str, driver: Callable[[], DriverConsumer]) -> None:
        self.name = name
        self.group = group
        self._driver = driver
        self.queue = BatchCommitQueue()
        #: Offsets this stream committed to the group, per partition (the latest).
        self.committedOffsets: dict[TopicPartition, int] = {}
        # Held while a release is computed and committed, so releases reach Kafka in order.
        self._lock = threading.Lock()

    def commitAsync(self, ranges: Sequence[OffsetRange], callback: CommitCallback | None,
                    threadBatch: int | None) -> None:
        """Tie ``ranges`` to their batch (see ``DirectKafkaInputDStream.commitAsync``)."""
        if self.queue.closed:
            self._reject(callback, StreamingStateError(
                f"{self.name} is stopped: offsets {describe_offsets(ranges)} were not "
                "committed"))
            return
        time = self.queue.owner(ranges, threadBatch)
        if time is None:
            self._reject(callback, ConfigurationError(
                f"{self.name}: no pending batch read {describe_offsets(ranges)}; commit a "
                "batch's rdd.offsetRanges() in its output operation"))
        elif not self.queue.add(time, ranges, callback):
            self._reject(callback, StreamingStateError(
                f"{self.name} stopped before batch {time} could commit "
                f"{describe_offsets(ranges)}"))

    def batchSucceeded(self, time: int) -> None:
        """Batch ``time`` succeeded: commit what the successful batches now allow."""
        with self._lock:
            self._commit(self.queue.batchSucceeded(time))

    def flush(self) -> None:
        """Commit what successful batches queued and was not committed yet."""
        with self._lock:
            self._commit(self.queue.release())

    def close(self) -> None:
        """Commit the successful batches' offsets, drop every other batch's, take no more.

        Called once no batch runs any more: a batch that did not succeed by now never will.
        """
        with self._lock:
            release, dropped = self.queue.close()
            self._commit(release)
        for commit in dropped:
            self._reject(commit.callback, KafkaDirectError(
                f"{self.name}: batch {commit.time} did not succeed, so its offsets "
                f"{describe_offsets(commit.ranges)} were not committed", batchTime=commit.time))

    def _commit(self, release: Release) -> None:
        if not release.commits:
            return
        for tp, (asked, end) in sorted(release.capped.items()):
            logger.warning("%s: a commit asked for offset %d of %s, beyond what successful "
                           "batches read; committing %d", self.name, asked, tp, end)
        if release.unread:
            logger.warning("%s does not read %s: their offsets are not committed", self.name,
                           sorted(str(tp) for tp in release.unread))
        offsets, error = release.offsets, None
        try:
            if offsets:
                self._driver().commit(offsets)
                self.committedOffsets.update(offsets)
                logger.info("%s committed %s to group %s", self.name,
                            {str(tp): o for tp, o in sorted(offsets.items())}, self.group)
        except Exception as failure:
            error = failure
            logger.warning("%s could not commit offsets to group %s: %s", self.name,
                           self.group, failure)
        for commit in release.commits:
            _call(commit.callback, None if error else dict(offsets), error)

    @staticmethod
    def _reject(callback: CommitCallback | None, error: Exception) -> None:
        logger.warning("%s", error)
        _call(callback, None, error)


def _call(callback: CommitCallback | None, offsets: dict[TopicPartition, int] | None,
          error: Exception | None) -> None:
    if callback is not None:
        try:
            callback(offsets, error)
        except Exception:
            logger.exception("commit callback failed")
