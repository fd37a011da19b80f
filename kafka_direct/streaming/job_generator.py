"""JobGenerator: turns timer ticks into batches, and cleans up after them.

Every batch interval the :class:`RecurringTimer` posts ``GenerateJobs(time)`` to the
generator's event loop (one thread, one event at a time). Generating asks the graph for the
batch's jobs (input streams decide their input now, on the driver), submits them as a JobSet
and posts ``DoCheckpoint``. When a batch completes, ``ClearMetadata`` forgets its old RDDs
and, with checkpointing, writes a checkpoint that no longer lists it as pending.
"""

from __future__ import annotations

import logging
import queue
import threading
import time as _time
from typing import TYPE_CHECKING

from kafka_direct.streaming.checkpoint import Checkpoint, CheckpointWriter
from kafka_direct.streaming.clock import ManualClock
from kafka_direct.streaming.durations import conf_time_ms
from kafka_direct.streaming.job import JobSet
from kafka_direct.streaming.recurring_timer import RecurringTimer

if TYPE_CHECKING:
    from kafka_direct.streaming.job_scheduler import JobScheduler

__all__ = ["JobGenerator"]

logger = logging.getLogger(__name__)

_STOP = ("stop", 0, False)


class JobGenerator:
    """Generates a JobSet every batch interval and does the per-batch housekeeping."""

    def __init__(self, scheduler: JobScheduler) -> None:
        self.scheduler = scheduler
        self.ssc = scheduler.ssc
        self.graph = self.ssc.graph
        self.clock = self.ssc.clock
        self.batchDuration = self.graph.batchDuration
        self.timer = RecurringTimer(self.clock, self.batchDuration,
                                    lambda t: self.post(("generate", t, False)), "JobGenerator")
        self.checkpointWriter = (CheckpointWriter(self.ssc.checkpointDir)
                                 if self.ssc.checkpointDir is not None else None)
        self.checkpointDuration = self.ssc.checkpointDuration or self.batchDuration
        self._events: queue.Queue[tuple[str, int, bool]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._progress = threading.Condition()
        self.lastGeneratedTime: int | None = None
        self.lastProcessedBatch: int | None = None
        #: The last batch time handled, with or without jobs (for tests and monitoring).
        self.lastTickTime: int | None = None

    @property
    def shouldCheckpoint(self) -> bool:
        """Whether checkpoints are written."""
        return self.checkpointWriter is not None

    def post(self, event: tuple[str, int, bool]) -> None:
        """Queue an event for the event loop."""
        self._events.put(event)

    def start(self) -> None:
        """Start the event loop, then the first batch or the recovery of a checkpoint."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="JobGenerator", daemon=True)
        self._thread.start()
        if self.ssc.initialCheckpoint is not None:
            self.restart(self.ssc.initialCheckpoint)
        else:
            self.startFirstTime()

    def startFirstTime(self) -> None:
        """Zero time one interval before the first batch, then start the timer."""
        start = self.timer.getStartTime()
        self.graph.start(start - self.batchDuration)
        self.timer.start(start)
        logger.info("Started JobGenerator at %d ms", start)

    def restart(self, checkpoint: Checkpoint) -> None:
        """Re-run the batches a checkpoint left pending or missed while down, then go on."""
        if isinstance(self.clock, ManualClock):
            jump = conf_time_ms(self.ssc._conf, "spark.streaming.manualClock.jump", 0)
            self.clock.setTime(checkpoint.checkpointTime + jump)
        restartTime = self.timer.getRestartTime(checkpoint.zeroTime)
        self.graph.start(checkpoint.zeroTime, restartTime)
        downTimes = list(range(checkpoint.checkpointTime, restartTime, self.batchDuration))
        logger.info("Batches during down time (%d batches): %s", len(downTimes), downTimes)
        pending = sorted(checkpoint.pendingTimes)
        logger.info("Batches pending processing (%d batches): %s", len(pending), pending)
        reschedule = sorted({t for t in [*pending, *downTimes] if t < restartTime})
        logger.info("Batches to reschedule (%d batches): %s", len(reschedule), reschedule)
        for time in reschedule:
            self.post(("generate", time, False))
        self.timer.start(restartTime)
        logger.info("Restarted JobGenerator at %d ms", restartTime)

    def _run(self) -> None:
        while True:
            kind, time, flag = self._events.get()
            if kind == "stop":
                return
            logger.debug("Got event %s(%d)", kind, time)
            try:
                if kind == "generate":
                    self.generateJobs(time)
                elif kind == "clearMetadata":
                    self.clearMetadata(time)
                elif kind == "checkpoint":
                    self.doCheckpoint(time, flag)
            except Exception as error:
                self.scheduler.reportError(f"Error in {kind} for time {time} ms", error)

    def generateJobs(self, time: int) -> None:
        """Build and submit the batch of ``time``; then checkpoint."""
        if self.scheduler.error is not None:
            logger.info("not generating batch %d ms: an earlier batch failed", time)
            return
        try:
            jobs = self.graph.generateJobs(time)
            infos = self.scheduler.inputInfoTracker.getInfo(time)
            self.lastGeneratedTime = time
            self.scheduler.submitJobSet(JobSet(time, jobs, infos))
        except Exception as error:
            self.scheduler.reportError(f"Error generating jobs for time {time} ms", error)
            return
        finally:
            self.lastTickTime = time
        self.doCheckpoint(time, clearCheckpointDataLater=False)

    def onBatchCompletion(self, time: int) -> None:
        """Called by the scheduler when every job of batch ``time`` ended."""
        self.post(("clearMetadata", time, False))

    def clearMetadata(self, time: int) -> None:
        """Forget old RDDs and input infos, or checkpoint first when checkpointing."""
        self.graph.clearMetadata(time)
        if self.shouldCheckpoint:
            self.doCheckpoint(time, clearCheckpointDataLater=True)
            return
        remember = self.graph.getMaxInputStreamRememberDuration()
        self.scheduler.inputInfoTracker.cleanup(time - remember)
        self._markProcessed(time)

    def doCheckpoint(self, time: int, clearCheckpointDataLater: bool) -> None:
        """Write a checkpoint for ``time`` when it is on the checkpoint interval."""
        writer = self.checkpointWriter
        zero = self.graph.zeroTime if self.graph.zeroTime is not None else 0
        if writer is not None and (time - zero) % self.checkpointDuration == 0:
            logger.info("Checkpointing graph for time %d ms", time)
            self.graph.updateCheckpointData(time)
            writer.write(Checkpoint(time, self.batchDuration, zero,
                                    tuple(self.scheduler.getPendingTimes()),
                                    self.graph.checkpointState(), self.ssc.appName))
            if clearCheckpointDataLater:
                self.clearCheckpointData(time)
        elif clearCheckpointDataLater:
            self._markProcessed(time)

    def clearCheckpointData(self, time: int) -> None:
        """Drop checkpoint data the written checkpoint made unnecessary."""
        self.graph.clearCheckpointData(time)
        remember = self.graph.getMaxInputStreamRememberDuration()
        self.scheduler.inputInfoTracker.cleanup(time - remember)
        self._markProcessed(time)

    def _markProcessed(self, time: int) -> None:
        with self._progress:
            if self.lastProcessedBatch is None or time > self.lastProcessedBatch:
                self.lastProcessedBatch = time
            self._progress.notify_all()

    def stop(self, processReceivedData: bool, timeoutMs: int | None = None) -> None:
        """Stop generating; with ``processReceivedData`` wait for generated batches first.

        A graceful stop waits (up to ``spark.streaming.gracefulStopTimeout``, 10 batch
        intervals by default) until every generated batch has been processed. No final batch
        is generated at stop: a direct stream's records stay in Kafka for the next run.
        """
        if self._thread is None:
            return
        self.timer.stop()
        if processReceivedData:
            timeout = timeoutMs if timeoutMs is not None else conf_time_ms(
                self.ssc._conf, "spark.streaming.gracefulStopTimeout", 10 * self.batchDuration)
            logger.info("Waiting for jobs to be processed and checkpoints to be written")
            deadline = _time.monotonic() + timeout / 1000.0
            with self._progress:
                while not self._allProcessed() and self.scheduler.error is None:
                    remaining = deadline - _time.monotonic()
                    if remaining <= 0:
                        logger.warning("Timed out while stopping the job generator "
                                       "(timeout = %d ms)", timeout)
                        break
                    self._progress.wait(min(remaining, 0.1))
        self.graph.stop()
        self.post(_STOP)
        self._thread.join(30)
        self._thread = None
        logger.info("Stopped JobGenerator")

    def _allProcessed(self) -> bool:
        generated = self.lastGeneratedTime
        return generated is None or (self.lastProcessedBatch is not None
                                     and self.lastProcessedBatch >= generated
                                     and self._events.empty()
                                     and not self.scheduler.getPendingTimes())
