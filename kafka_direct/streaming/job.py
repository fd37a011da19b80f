"""Streaming jobs: one per output operation and batch, grouped in a JobSet per batch."""

from __future__ import annotations

import threading
import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kafka_direct.redaction import redact_text
from kafka_direct.streaming.batch_info import BatchInfo, OutputOperationInfo, StreamInputInfo

__all__ = ["SKIPPED", "Job", "JobSet"]

#: How the failure reason of an output operation that never ran begins.
SKIPPED = "Skipped: "


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
        #: Why it never ran, if it was skipped.
        self.skipReason: str | None = None
        #: Whether it failed because the context was stopping (a cancellation, not a failure).
        self.endedByStop = False

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

    def skip(self, reason: str) -> None:
        """Mark the job as never run, for ``reason``; it then counts as failed."""
        self.skipReason = reason

    @property
    def succeeded(self) -> bool:
        """Whether it ran and raised nothing."""
        return self.error is None and self.skipReason is None

    def started(self, at: int) -> None:
        """Record the start time."""
        self.info = replace(self.info, startTime=at)

    def ended(self, at: int) -> None:
        """Record the end time and the failure, if any.

        The failure reason is shown on the statistics page, in its JSON and metrics and in
        the batch log line: any secret an error quotes (a DSN, a JAAS line) is redacted here.
        """
        reason = None
        if self.skipReason is not None:
            reason = SKIPPED + self.skipReason
        elif self.error is not None:
            reason = redact_text(f"{type(self.error).__name__}: {self.error}")
            if self.endedByStop:
                reason = f"Cancelled by the stop of the streaming context: {reason}"
        self.info = replace(self.info, endTime=at, failureReason=reason)


class JobSet:
    """The jobs of one batch, with the batch's timing.

    Args:
        time: The batch time.
        jobs: Its jobs, in output operation order.
        streamIdToInputInfo: What each input stream brought into the batch.
        submissionTime: When the batch was due (epoch ms), if it waited before it was
            generated (``spark.streaming.waitForPreviousBatch``); None: now.
    """

    def __init__(self, time: int, jobs: Sequence[Job],
                 streamIdToInputInfo: Mapping[int, StreamInputInfo] | None = None,
                 submissionTime: int | None = None) -> None:
        self.time = time
        self.jobs = list(jobs)
        self.streamIdToInputInfo = dict(streamIdToInputInfo or {})
        self.submissionTime = _now() if submissionTime is None else submissionTime
        self.processingStartTime: int | None = None
        self.processingEndTime: int | None = None
        self._incomplete = set(range(len(self.jobs)))
        self._completed = False
        self._lock = threading.Lock()

    def handleJobStart(self, job: Job) -> bool | None:
        """Mark a job started.

        Returns:
            True if it is the batch's first, False if not; None if :meth:`abandon`
            completed the batch already: the job must not run (nothing changes then).
        """
        now = _now()
        with self._lock:
            if self._completed:
                return None
            job.started(now)
            first = self.processingStartTime is None
            if first:
                self.processingStartTime = now
            return first

    def handleJobCompletion(self, job: Job) -> bool | None:
        """Mark a job done.

        Returns:
            True exactly once, when this makes the batch complete; False while jobs remain;
            None if :meth:`abandon` completed the batch already (nothing changes then).
        """
        now = _now()
        with self._lock:
            if self._completed:
                return None
            job.ended(now)
            self._incomplete.discard(self.jobs.index(job))
            return self._completeIfDone(now)

    def abandon(self, reason: str) -> list[Job] | None:
        """Complete the batch now, marking every job not yet ended as skipped for ``reason``.

        For a stop that cannot wait for a job any longer: the batch still gets its one
        completion.

        Returns:
            The jobs this ended (each owes listeners its completion), or None if the batch
            was complete already.
        """
        now = _now()
        with self._lock:
            if self._completed:
                return None
            ended = [self.jobs[index] for index in sorted(self._incomplete)]
            for job in ended:
                job.skip(reason)
                job.ended(now)
            self._incomplete.clear()
            self._completeIfDone(now)
            return ended

    def _completeIfDone(self, now: int) -> bool:
        if self._incomplete:
            return False
        self._completed = True
        self.processingEndTime = now
        return True

    @property
    def succeeded(self) -> bool:
        """Whether every job ran and raised nothing."""
        return all(job.succeeded for job in self.jobs)

    @property
    def hasCompleted(self) -> bool:
        """Whether every job ended (or the batch was abandoned)."""
        with self._lock:
            return self._completed

    def toBatchInfo(self) -> BatchInfo:
        """The batch as listeners see it."""
        return BatchInfo(self.time, dict(self.streamIdToInputInfo), self.submissionTime,
                         self.processingStartTime, self.processingEndTime,
                         {job.outputOpId: job.info for job in self.jobs})
