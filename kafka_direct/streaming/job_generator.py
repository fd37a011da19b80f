"""JobGenerator: turns timer ticks into batches, and cleans up after them.

Every batch interval the :class:`RecurringTimer` posts ``GenerateJobs(time)`` to the
generator's event loop (one thread, one event at a time). Generating asks the graph for the
batch's jobs (input streams decide their input now, on the driver), submits them as a JobSet
and posts ``DoCheckpoint``. When a batch completes, ``ClearMetadata`` forgets its old RDDs
and, with checkpointing, writes a checkpoint that no longer lists it as pending.

With ``spark.streaming.waitForPreviousBatch=true`` (not Spark's: its batches read their
input at their tick and queue), a tick that comes while an earlier batch has not completed
waits for it before its batch is generated: every tick is still a batch, in order, but it
reads its input when it can run. A stream that fell behind (a slow first batch, a pause of
the machine) then catches up, its next batch reading everything that came meanwhile, instead
of running one queued batch of one interval's input after another, each as late as the
first. The wait counts as the batch's scheduling delay.

Stopping is in two steps the :class:`JobScheduler` puts around waiting for the job threads:
:meth:`JobGenerator.stopGeneration` (no new ticks; every generate event already posted is
handled, or, for an immediate stop, dropped) and :meth:`JobGenerator.stop` (the loop
finishes its housekeeping and ends). The input streams are stopped after both.
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
_DRAIN = ("drain", 0, False)

#: How long an immediate stop waits for a batch being generated (compute on the driver).
_IMMEDIATE_GENERATION_WAIT_S = 10.0


class JobGenerator:
    """Generates a JobSet every batch interval and does the per-batch housekeeping."""

    def __init__(self, scheduler: JobScheduler) -> None:
        self.scheduler = scheduler
        self.ssc = scheduler.ssc
        self.graph = self.ssc.graph
        self.clock = self.ssc.clock
        self.batchDuration = self.graph.batchDuration
        self.timer = RecurringTimer(self.clock, self.batchDuration,
                                    self._tick, "JobGenerator")
        self.checkpointWriter = (CheckpointWriter(self.ssc.checkpointDir)
                                 if self.ssc.checkpointDir is not None else None)
        self.checkpointDuration = self.ssc.checkpointDuration or self.batchDuration
        self._events: queue.Queue[tuple[str, int, bool]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._progress = threading.Condition()
        # Events posted and handled so far: the loop is single-threaded and FIFO, so the
        # n-th posted event has been handled once ``_handled >= n``.
        self._posted = 0
        self._handled = 0
        # Set by an immediate stop: batches not yet submitted are dropped, not run.
        self._discarding = False
        self._generationStopped = False
        self.lastGeneratedTime: int | None = None
        self.lastProcessedBatch: int | None = None
        #: The last batch time handled, with or without jobs (for tests and monitoring).
        self.lastTickTime: int | None = None
        #: ``spark.streaming.waitForPreviousBatch``: generate a batch once the earlier ones
        #: completed, not at its tick.
        self.waitForPreviousBatch = self.ssc.conf(
            "spark.streaming.waitForPreviousBatch", "false").strip().lower() == "true"

    @property
    def stopping(self) -> bool:
        """Whether an immediate stop drops the batches not yet submitted."""
        return self._discarding

    @property
    def shouldCheckpoint(self) -> bool:
        """Whether checkpoints are written."""
        return self.checkpointWriter is not None

    def _tick(self, time: int) -> None:
        self.post(("generate", time, False))

    def post(self, event: tuple[str, int, bool]) -> int:
        """Queue an event for the event loop; returns its sequence number."""
        with self._progress:
            self._posted += 1
            self._events.put(event)
            return self._posted

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
        self.scheduler.publishInputStatus()

    def startFirstTime(self) -> None:
        """Zero time one interval before the first batch, then start the timer."""
        start = self.timer.getStartTime()
        with self.scheduler.inputsLock:
            self.graph.start(start - self.batchDuration)
        self.timer.start(start)
        logger.info("Started JobGenerator at %d ms", start)

    def restart(self, checkpoint: Checkpoint) -> None:
        """Re-run the batches a checkpoint left pending or missed while down, then go on."""
        if isinstance(self.clock, ManualClock):
            jump = conf_time_ms(self.ssc._conf, "spark.streaming.manualClock.jump", 0)
            self.clock.setTime(checkpoint.checkpointTime + jump)
        restartTime = self.timer.getRestartTime(checkpoint.zeroTime)
        with self.scheduler.inputsLock:
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
            try:
                if kind == "stop":
                    return
                logger.debug("Got event %s(%d)", kind, time)
                self._handle(kind, time, flag)
            finally:
                with self._progress:
                    self._handled += 1
                    self._progress.notify_all()

    def _handle(self, kind: str, time: int, flag: bool) -> None:
        try:
            if kind == "generate":
                self.generateJobs(time)
            elif kind == "clearMetadata":
                self.clearMetadata(time)
                # The batch's commits are done: show them.
                self.scheduler.publishInputStatus()
            elif kind == "checkpoint":
                self.doCheckpoint(time, flag)
        except Exception as error:
            self._reportError(f"Error in {kind} for time {time} ms", error)

    def _reportError(self, message: str, error: Exception) -> None:
        if self._discarding:
            # The input streams may be stopping under an immediate stop's feet.
            logger.info("%s while stopping (ignored): %s", message, error)
            return
        self.scheduler.reportError(message, error)

    def generateJobs(self, time: int) -> None:
        """Build and submit the batch of ``time``; then checkpoint.

        Nothing is generated after the stream failed, nor submitted once an immediate stop
        began (its input is read again by the next run).
        """
        refused = self._refusal()
        if refused is not None:
            logger.info("not generating batch %d ms: %s", time, refused)
            return
        due = None
        if self.waitForPreviousBatch:
            due = int(_time.time() * 1000)
            self.scheduler.waitForPreviousBatches(lambda: self._refusal() is not None)
            refused = self._refusal()
            if refused is not None:
                logger.info("not generating batch %d ms, which waited for the batch before "
                            "it: %s", time, refused)
                return
        try:
            with self.scheduler.inputsLock:
                jobs = self.graph.generateJobs(time)
                self.scheduler.publishInputStatus()
            infos = self.scheduler.inputInfoTracker.getInfo(time)
            if self.stopping:  # an immediate stop began while the input was computed
                logger.info("dropping batch %d ms, generated while stopping immediately",
                            time)
                return
            self.lastGeneratedTime = time
            self.scheduler.submitJobSet(JobSet(time, jobs, infos, submissionTime=due))
        except Exception as error:
            self._reportError(f"Error generating jobs for time {time} ms", error)
            return
        finally:
            self.lastTickTime = time
        self.doCheckpoint(time, clearCheckpointDataLater=False)

    def _refusal(self) -> str | None:
        """Why no batch may be generated now (None: it may)."""
        if self.scheduler.error is not None:
            return "an earlier batch failed"
        if self._discarding:
            return "the context is stopping"
        return None

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

    def stopGeneration(self, processReceivedData: bool, deadline: float) -> bool:
        """Stop the timer, then wait until the event loop handled every generate event.

        Graceful (``processReceivedData``): the batches of the ticks already posted are
        generated and submitted. Immediate: they are dropped, and only the generation under
        way is waited for (at most a few seconds), its batch dropped too.

        Args:
            processReceivedData: Generate what was posted (graceful) or drop it.
            deadline: ``time.monotonic()`` limit of a graceful wait.

        Returns:
            True if the loop is drained; False if the wait ran out (the caller then goes
            on as an immediate stop).
        """
        if self._thread is None or self._generationStopped:
            return True
        self._generationStopped = True
        last = self.timer.stop()
        logger.info("Stopped generation timer after %d ms", last)
        if processReceivedData:
            # Batches whose time had come when the stop began are due, even if the timer's
            # thread had not woken up for them yet.
            due, now = self.timer.nextTime, self.clock.getTimeMillis()
            while 0 <= due <= now:
                self.post(("generate", due, False))
                due += self.batchDuration
            logger.info("Waiting for the posted batches to be generated")
        else:
            self._discarding = True
            deadline = _time.monotonic() + _IMMEDIATE_GENERATION_WAIT_S
        if self._waitHandled(self.post(_DRAIN), deadline):
            return True
        logger.warning("Timed out waiting for batch generation to end while stopping")
        self._discarding = True
        return False

    def stop(self, processReceivedData: bool, timeoutMs: int | None = None) -> None:
        """End the event loop: gracefully after its pending housekeeping, else at once.

        Call :meth:`stopGeneration` first (this does it if not done), and after the job
        threads ended, so the last batches' metadata and checkpoints are written.

        Args:
            processReceivedData: Handle the queued events (clear metadata, checkpoints).
            timeoutMs: Limit of the graceful wait (``spark.streaming.gracefulStopTimeout``,
                10 batch intervals by default).
        """
        thread = self._thread
        if thread is None:
            return
        deadline = _time.monotonic() + self.gracefulStopTimeoutMs(timeoutMs) / 1000.0
        self.stopGeneration(processReceivedData, deadline)
        if processReceivedData and not self._waitHandled(self.post(_DRAIN), deadline):
            logger.warning("Timed out while stopping the job generator")
        self.post(_STOP)
        if thread is not threading.current_thread():
            thread.join(_IMMEDIATE_GENERATION_WAIT_S)
            if thread.is_alive():
                logger.warning("the job generator's thread is still busy; leaving it behind")
        self._thread = None
        logger.info("Stopped JobGenerator")

    def gracefulStopTimeoutMs(self, timeoutMs: int | None = None) -> int:
        """``timeoutMs``, else ``spark.streaming.gracefulStopTimeout`` (10 batch intervals)."""
        if timeoutMs is not None:
            return timeoutMs
        return conf_time_ms(self.ssc._conf, "spark.streaming.gracefulStopTimeout",
                            10 * self.batchDuration)

    def _waitHandled(self, sequence: int, deadline: float) -> bool:
        if threading.current_thread() is self._thread:
            # A stop from the loop itself (an output's transform stopping the context)
            # cannot wait for the loop: it goes on as an immediate stop.
            return False
        with self._progress:
            while self._handled < sequence:
                remaining = deadline - _time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.1))
            return True
