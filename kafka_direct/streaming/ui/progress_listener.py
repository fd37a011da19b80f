"""StreamingJobProgressListener: what the statistics page and the metrics show.

It listens to the context's bus and keeps the waiting, running and last completed batches
(``spark.streaming.ui.retainedBatches``, default 1000, as in Spark), the totals since the
start, and the last completed batch. Readers take a consistent :meth:`snapshot`.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from kafka_direct.streaming.batch_info import BatchInfo
from kafka_direct.streaming.listener import (
    StreamingListener,
    StreamingListenerBatchCompleted,
    StreamingListenerBatchStarted,
    StreamingListenerBatchSubmitted,
    StreamingListenerStreamingStarted,
)

__all__ = ["ProgressSnapshot", "StreamingJobProgressListener"]


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """The listener's state at one moment (times in epoch ms).

    Attributes:
        startTime: When the stream started (None before).
        waiting: Submitted batches not started, oldest first.
        running: Started batches not completed, oldest first.
        completed: Retained completed batches, oldest first.
        totalCompletedBatches: Completed batches since the start.
        totalFailedBatches: Of them, those with a failed output operation.
        totalProcessedRecords: Records of the completed batches.
        totalReceivedRecords: Records of every submitted batch.
        lastReceivedRecords: Records of the newest submitted batch.
    """

    startTime: int | None
    waiting: tuple[BatchInfo, ...]
    running: tuple[BatchInfo, ...]
    completed: tuple[BatchInfo, ...]
    totalCompletedBatches: int
    totalFailedBatches: int
    totalProcessedRecords: int
    totalReceivedRecords: int
    lastReceivedRecords: int = 0

    @property
    def lastCompleted(self) -> BatchInfo | None:
        """The newest completed batch."""
        return self.completed[-1] if self.completed else None

    def batch(self, batchTime: int) -> BatchInfo | None:
        """A retained batch by its time."""
        for info in (*self.running, *self.waiting, *reversed(self.completed)):
            if info.batchTime == batchTime:
                return info
        return None


class StreamingJobProgressListener(StreamingListener):
    """Keeps the batches and totals of one StreamingContext.

    Args:
        retainedBatches: Completed batches kept for the page (the totals count all).
    """

    def __init__(self, retainedBatches: int = 1000) -> None:
        if retainedBatches <= 0:
            raise ValueError(f"spark.streaming.ui.retainedBatches must be > 0, got "
                             f"{retainedBatches}")
        self._lock = threading.Lock()
        self._startTime: int | None = None
        self._waiting: dict[int, BatchInfo] = {}
        self._running: dict[int, BatchInfo] = {}
        self._completed: deque[BatchInfo] = deque(maxlen=retainedBatches)
        self._completedCount = 0
        self._failedCount = 0
        self._processed = 0
        self._received = 0
        self._lastReceived = 0

    def onStreamingStarted(self, streamingStarted: StreamingListenerStreamingStarted) -> None:
        """Remember when the stream started."""
        with self._lock:
            self._startTime = streamingStarted.time

    def onBatchSubmitted(self, batchSubmitted: StreamingListenerBatchSubmitted) -> None:
        """A batch waits."""
        info = batchSubmitted.batchInfo
        with self._lock:
            self._waiting[info.batchTime] = info
            self._received += info.numRecords
            self._lastReceived = info.numRecords

    def onBatchStarted(self, batchStarted: StreamingListenerBatchStarted) -> None:
        """A batch runs."""
        info = batchStarted.batchInfo
        with self._lock:
            self._waiting.pop(info.batchTime, None)
            self._running[info.batchTime] = info

    def onBatchCompleted(self, batchCompleted: StreamingListenerBatchCompleted) -> None:
        """A batch completed."""
        info = batchCompleted.batchInfo
        with self._lock:
            self._waiting.pop(info.batchTime, None)
            self._running.pop(info.batchTime, None)
            self._completed.append(info)
            self._completedCount += 1
            self._failedCount += info.failed
            self._processed += info.numRecords

    def snapshot(self) -> ProgressSnapshot:
        """The current state."""
        with self._lock:
            return ProgressSnapshot(
                self._startTime, tuple(v for _, v in sorted(self._waiting.items())),
                tuple(v for _, v in sorted(self._running.items())), tuple(self._completed),
                self._completedCount, self._failedCount, self._processed, self._received,
                self._lastReceived)
