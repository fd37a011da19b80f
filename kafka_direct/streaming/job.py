"""Streaming jobs: one per output operation and batch, grouped in a JobSet per batch."""

from __future__ import annotations

import threading
import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kafka_direct.streaming.batch_info import BatchInfo, OutputOperationInfo, StreamInputInfo

__all__ = ["Job", "JobSet"]


def _now() -> int:
    return int(_time.time() * 1000)


class Job:
    """An output operation's work for one batch.

    Args:
        time: The batch time.
        outputOpId: The output operation's index in the graph.
        func: The work (Spark jobs happen inside).
        name: Short name for people (``foreachRDD at app.py:12``).
        description: Longer description.
    """

    def __init__(self, time: int, outputOpId: int, func: Callable[[], None], name: str,
                 description: str) -> None:
        self.time = time
        self.outputOpId = outputOpId
        self.func = func
        self.info = OutputOperationInfo(time, outputOpId, name, description)
        self.error: BaseException | None = None

    @property
    def id(self) -> str:
        """``streaming job <time>.<outputOpId>``, as Spark names it in logs."""
        return f"streaming job {self.time} ms.{self.outputOpId}"

    def run(self) -> None:
        """Do the work; an error is kept (``self.error``), not raised."""
        try:
            self.func()
        except BaseException as error:
            self.error = error

    def started(self, at: int) -> None:
        """Record the start time."""
        self.info = replace(self.info, startTime=at)

    def ended(self, at: int) -> None:
        """Record the end time and the failure, if any."""
        reason = None
        if self.error is not None:
            reason = f"{type(self.error).__name__}: {self.error}"
        self.info = replace(self.info, endTime=at, failureReason=reason)


class JobSet:
    """The jobs of one batch, with the batch's timing.

    Args:
        time: The batch time.
        jobs: Its jobs, in output operation order.
        streamIdToInputInfo: What each input stream brought into the batch.
    """

    def __init__(self, time: int, jobs: Sequence[Job],
                 streamIdToInputInfo: Mapping[int, StreamInputInfo] | None = None) -> None:
        self.time = time
        self.jobs = list(jobs)
        self.streamIdToInputInfo = dict(streamIdToInputInfo or {})
        self.submissionTime = _now()
        self.processingStartTime: int | None = None
        self.processingEndTime: int | None = None
        self._incomplete = set(range(len(self.jobs)))
        self._lock = threading.Lock()

    def handleJobStart(self, job: Job) -> bool:
        """Mark a job started; True if it is the batch's first."""
        now = _now()
        job.started(now)
        with self._lock:
            first = self.processingStartTime is None
            if first:
                self.processingStartTime = now
            return first

    def handleJobCompletion(self, job: Job) -> bool:
        """Mark a job done; True if the batch is now complete."""
        now = _now()
        job.ended(now)
        with self._lock:
            self._incomplete.discard(self.jobs.index(job))
            if not self._incomplete:
                self.processingEndTime = now
                return True
            return False

    @property
    def hasCompleted(self) -> bool:
        """Whether every job ended."""
        with self._lock:
            return not self._incomplete

    def toBatchInfo(self) -> BatchInfo:
        """The batch as listeners see it."""
        return BatchInfo(self.time, dict(self.streamIdToInputInfo), self.submissionTime,
                         self.processingStartTime, self.processingEndTime,
                         {job.outputOpId: job.info for job in self.jobs})
