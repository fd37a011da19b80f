"""JobScheduler: runs each batch's jobs on a pool of threads and reports on them.

Jobs run on ``spark.streaming.concurrentJobs`` threads (default 1: batches one after the
other, in order). Each output operation's Spark jobs carry a job group and the description
``Streaming job from [output operation N, batch time T]``, so they show in the Spark UI and
can be cancelled. A failed output operation fails its batch: its later output operations
are skipped, listeners hear of the batch's end once, no later batch starts, and the context
stops with the error.

Stopping (Spark's order): stop generating (the timer, then what the event loop was asked to
generate), wait for the generated batches on the job threads (graceful) or cancel them
(immediate), end the generator's loop, and stop the input streams last. Every submitted
batch ends with exactly one ``BatchCompleted``; input streams hear ``onBatchCompleted`` only
for batches that succeeded, and never after their ``stop()``. Batches complete in their
order: with ``spark.streaming.concurrentJobs`` > 1, a batch whose jobs end before an earlier
batch's is completed (its input streams' ``onBatchCompleted``, its ``BatchCompleted``) once
the earlier one is, and its streams do not hear of it if that one failed. A job that fails
because an immediate stop cancelled it is not a failure of the stream.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time as _time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kafka_direct.streaming.durations import format_batch_time
from kafka_direct.streaming.input_info_tracker import InputInfoTracker
from kafka_direct.streaming.job import Job, JobSet
from kafka_direct.streaming.job_generator import JobGenerator
from kafka_direct.streaming.listener import (
    StreamingListenerBatchCompleted,
    StreamingListenerBatchStarted,
    StreamingListenerBatchSubmitted,
    StreamingListenerBus,
    StreamingListenerOutputOperationCompleted,
    StreamingListenerOutputOperationStarted,
)

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext
    from kafka_direct.streaming.rate_controller import RateController

__all__ = ["JobScheduler"]

logger = logging.getLogger(__name__)

BATCH_TIME_PROPERTY = "spark.streaming.internal.batchTime"
OUTPUT_OP_PROPERTY = "spark.streaming.internal.outputOpId"

#: How long an immediate stop waits for cancelled jobs to end (as Spark does).
_CANCEL_WAIT_S = 2.0
_STOPPED_REASON = "the streaming context was stopped before it ran"
#: The least time a graceful stop gives the generator's last housekeeping.
_HOUSEKEEPING_MS = 2000
#: How long a graceful stop waits for the submitted batches in all (Spark's JobScheduler
#: waits an hour for its job executor): gracefulStopTimeout bounds the generator's wait.
GRACEFUL_JOBS_LIMIT_S = 3600.0


class JobScheduler:
    """Schedules the jobs of every batch; owns the listener bus and the input info tracker."""

    def __init__(self, ssc: StreamingContext) -> None:
        self.ssc = ssc
        self.listenerBus = StreamingListenerBus()
        self.inputInfoTracker = InputInfoTracker()
        self.jobSets: dict[int, JobSet] = {}
        self.numConcurrentJobs = int(ssc.conf("spark.streaming.concurrentJobs", "1"))
        self.jobGenerator: JobGenerator | None = None
        self.error: BaseException | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._rateControllers: list[RateController] = []
        self._running: set[str] = set()
        self._futures: set[Future[None]] = set()
        self._lock = threading.Lock()
        #: Notified whenever a batch leaves :attr:`jobSets` (see :meth:`waitForPreviousBatches`).
        self._batchEnded = threading.Condition(self._lock)
        #: Held around everything that changes input streams (start, compute, commits on
        #: batch completion, stop) and while their figures are published for the UI.
        self.inputsLock = threading.RLock()
        # Set once an immediate stop cancels jobs: their failures are the stop's doing.
        self._cancelling = False
        # Set once the stop shut the job threads down: no batch is submitted after that.
        self._closed = False
        self._inputsStopped = False
        # Batches whose jobs all ended, waiting for an earlier batch still running: with
        # spark.streaming.concurrentJobs > 1 a batch may end before an earlier one, and the
        # input streams hear of batches in their order (their commits never pass a batch
        # still running, or one that failed).
        self._ended: set[int] = set()
        # One thread at a time completes the ended batches, in order.
        self._completing = threading.Lock()

    def start(self) -> None:
        """Start the listener bus, rate controllers, job threads and the generator."""
        if self._executor is not None:
            return
        for stream in self.ssc.graph.inputStreams:
            controller = stream.rateController
            if controller is not None:
                self._rateControllers.append(controller)
                self.listenerBus.addListener(controller)
        self.listenerBus.start()
        self._executor = ThreadPoolExecutor(self.numConcurrentJobs,
                                            thread_name_prefix="streaming-job-executor")
        self.jobGenerator = JobGenerator(self)
        self.jobGenerator.start()
        logger.info("Started JobScheduler")

    def getPendingTimes(self) -> list[int]:
        """Batches submitted and not yet completed."""
        with self._lock:
            return sorted(self.jobSets)

    def submitJobSet(self, jobSet: JobSet) -> None:
        """Queue a batch's jobs on the job threads."""
        if not jobSet.jobs:
            logger.info("No jobs added for time %d ms", jobSet.time)
            return
        with self._lock:
            # Atomic with the stop's shutdown of the job threads: a batch is either submitted
            # whole (and the stop then waits for it or abandons it) or not at all.
            executor = self._executor
            if executor is None or self._closed:
                logger.info("not submitting batch %d ms: the scheduler is stopping",
                            jobSet.time)
                return
            self.listenerBus.post(StreamingListenerBatchSubmitted(jobSet.toBatchInfo()))
            self.jobSets[jobSet.time] = jobSet
            for job in jobSet.jobs:
                future = executor.submit(self._handle, job, jobSet)
                self._futures.add(future)
                future.add_done_callback(self._forget)
        logger.info("Added jobs for time %d ms", jobSet.time)

    def waitForPreviousBatches(self, giveUp: Callable[[], bool]) -> None:
        """Wait until every submitted batch completed, or until ``giveUp()`` says to stop.

        ``giveUp`` is asked at least every 50 ms (a stop or a failure elsewhere ends the wait).
        """
        with self._lock:
            while self.jobSets and not giveUp():
                self._batchEnded.wait(0.05)

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def _skipReason(self) -> str | None:
        if self._cancelling:
            return _STOPPED_REASON
        error = self.error
        if error is not None:
            return f"the stream had failed before it ran ({type(error).__name__}: {error})"
        return None

    def _handle(self, job: Job, jobSet: JobSet) -> None:
        sc = self.ssc.sparkContext
        group = f"streaming-{job.time}-{job.outputOpId}"
        with self._lock:
            # Atomic with _cancelJobs: a job either is skipped or is among those cancelled.
            skip = self._skipReason()
            if skip is None:
                self._running.add(group)
        if skip is not None:
            logger.info("skipping %s: %s", job.id, skip)
            job.skip(skip)
            self._handleJobCompletion(job, jobSet)
            return
        description = (f"Streaming job from [output operation {job.outputOpId}, batch time "
                       f"{format_batch_time(job.time, self.ssc.graph.batchDuration)}]")
        try:
            first = jobSet.handleJobStart(job)
            if first is None:  # the stop abandoned the batch: it completed without this job
                logger.info("not running %s: the stop gave up on its batch", job.id)
                return
            sc.setJobGroup(group, description, interruptOnCancel=True)
            sc.setLocalProperty(BATCH_TIME_PROPERTY, str(job.time))
            sc.setLocalProperty(OUTPUT_OP_PROPERTY, str(job.outputOpId))
            if first:
                self.listenerBus.post(StreamingListenerBatchStarted(jobSet.toBatchInfo()))
            self.listenerBus.post(StreamingListenerOutputOperationStarted(job.info))
            logger.info("Starting job %s from job set of time %d ms", job.id, job.time)
            _disableOutputSpecValidation(sc, True)
            job.run()
            with self._lock:
                # Decided when the job ends: a failure before the stop began is genuine.
                job.endedByStop = job.error is not None and self._cancelling
            self._rethrow_typed(job)
        except Exception as error:  # the job could not even be started
            job.error = error
        finally:
            with self._lock:
                self._running.discard(group)
            _disableOutputSpecValidation(sc, False)
            for key in ("spark.jobGroup.id", "spark.job.description", BATCH_TIME_PROPERTY,
                        OUTPUT_OP_PROPERTY):
                try:
                    sc.setLocalProperty(key, None)
                except Exception:
                    logger.debug("could not clear %s (Spark is stopping)", key)
        self._handleJobCompletion(job, jobSet)

    @staticmethod
    def _rethrow_typed(job: Job) -> None:
        # A task's KafkaDirectError arrives as Spark's failure text: give it its type back.
        from kafka_direct.task_errors import carried_error

        if job.error is not None:
            carried = carried_error(job.error)
            if carried is not None and carried is not job.error:
                carried.__cause__ = job.error
                job.error = carried

    def _handleJobCompletion(self, job: Job, jobSet: JobSet) -> None:
        completed = jobSet.handleJobCompletion(job)
        if completed is None:
            logger.info("%s ended after the stop gave up on its batch", job.id)
            return
        self.listenerBus.post(StreamingListenerOutputOperationCompleted(job.info))
        logger.info("Finished job %s from job set of time %d ms", job.id, job.time)
        failure = job.error if job.skipReason is None and not job.endedByStop else None
        if job.endedByStop:
            logger.info("%s was cancelled by the stop: %s", job.id, job.error)
        if failure is not None:
            # Before the batch's completion is posted: whoever sees a failed batch
            # completed also sees the stream failed.
            self.reportError(f"Error running job {job.id}", failure)
        if completed:
            self._handleJobSetCompletion(jobSet)

    def _handleJobSetCompletion(self, jobSet: JobSet) -> None:
        """Batch ``jobSet`` ended: complete it, and the later ones it held, in batch order."""
        with self._lock:
            self._ended.add(jobSet.time)
        with self._completing:
            while True:
                with self._lock:
                    if not self._ended:
                        return  # completed by the thread that held the lock before
                    first = min(self._ended)
                    if any(t < first for t in self.jobSets if t not in self._ended):
                        return  # held: the earlier batch completes it when it ends
                    self._ended.discard(first)
                    due = self.jobSets[first]
                self._completeBatch(due)

    def _completeBatch(self, jobSet: JobSet) -> None:
        # Decided now, after the earlier batches: a later batch held while an earlier one
        # failed is not committed.
        succeeded = jobSet.succeeded and self.error is None
        if succeeded:
            with self.inputsLock:
                # Never after the streams' stop(): a commit then would fail or be lost.
                if not self._inputsStopped:
                    for stream in self.ssc.graph.inputStreams:
                        try:
                            stream.onBatchCompleted(jobSet.time)
                        except Exception:
                            logger.exception("%s failed after batch %d ms", stream.name,
                                             jobSet.time)
                    self.publishInputStatus()
        with self._lock:
            self.jobSets.pop(jobSet.time, None)
            self._batchEnded.notify_all()
        info = jobSet.toBatchInfo()
        logger.info("Total delay: %.3f s for time %d ms (execution: %.3f s)",
                    (info.totalDelay or 0) / 1000.0, jobSet.time,
                    (info.processingDelay or 0) / 1000.0)
        self.listenerBus.post(StreamingListenerBatchCompleted(info))
        if succeeded and self.jobGenerator is not None:
            self.jobGenerator.onBatchCompletion(jobSet.time)

    def publishInputStatus(self) -> None:
        """Publish the input streams' figures for the statistics page, consistently.

        Takes :attr:`inputsLock` without waiting: if input streams are being changed right
        now, whoever changes them publishes when done.
        """
        if not self.inputsLock.acquire(blocking=False):
            return
        try:
            self.ssc.inputStatus.publish(self.ssc.graph.inputStreams)
        except Exception:
            logger.exception("could not describe the input streams for the statistics page")
        finally:
            self.inputsLock.release()

    def reportError(self, message: str, error: BaseException) -> None:
        """Fail the stream: the first error is kept and the context stops."""
        with self._lock:
            first = self.error is None
            if first:
                self.error = error
        if first:
            logger.error("%s: %s", message, error, exc_info=error)
            self.ssc._onError(error)

    def stop(self, processAllReceivedData: bool, timeoutMs: int | None = None) -> None:
        """Stop generating batches, end the generated ones, then stop the input streams.

        Graceful (``processAllReceivedData``): the ticks already posted are generated
        within ``timeoutMs`` (``spark.streaming.gracefulStopTimeout``; ticks left then are
        dropped and read again by the next run), and every submitted batch runs to its end,
        as in Spark, whose job executor waits up to an hour: a backlog (the batches of a
        driver's down time) is processed, not dropped. Only what still runs after
        :data:`GRACEFUL_JOBS_LIMIT_S` is cancelled as by an immediate stop. Immediate:
        batches not yet submitted are dropped, running Spark jobs are cancelled, queued
        ones skipped; a job that fails because of that is
        not reported as the stream's error. Either way each submitted batch gets its
        ``BatchCompleted`` and the input streams are stopped last, exactly once.
        """
        generator, executor = self.jobGenerator, self._executor
        try:
            if generator is not None and executor is not None:
                self._stopBatches(generator, executor, processAllReceivedData, timeoutMs)
        finally:
            # Even if ending the batches failed: the streams' commits are flushed and their
            # consumers closed, exactly once.
            self._stopInputStreams()
            for controller in self._rateControllers:
                controller.stop()
        logger.info("Stopped JobScheduler")

    def _stopBatches(self, generator: JobGenerator, executor: ThreadPoolExecutor,
                     graceful: bool, timeoutMs: int | None) -> None:
        timeout = generator.gracefulStopTimeoutMs(timeoutMs)
        deadline = _time.monotonic() + timeout / 1000.0
        # A generation backlog that outlasts the timeout is dropped (the ticks not yet
        # generated are read again by the next run); what was submitted still runs.
        generator.stopGeneration(graceful, deadline)
        if graceful and not self._waitForJobs(deadline):
            logger.warning("The generated batches did not end within gracefulStopTimeout "
                           "(%d ms); waiting for them up to %.0f s more, as Spark does",
                           timeout, GRACEFUL_JOBS_LIMIT_S)
            if not self._waitForJobs(_time.monotonic() + GRACEFUL_JOBS_LIMIT_S):
                logger.warning("Cancelling the batches still running after %.0f s",
                               GRACEFUL_JOBS_LIMIT_S)
                graceful = False
        if not graceful:
            self._cancelJobs()
        with self._lock:
            self._closed = True
        executor.shutdown(wait=False)
        self._executor = None
        self._abandonJobSets()
        # The last batches' housekeeping (metadata, checkpoints): what is left of the
        # timeout, but at least a moment, as it is quick and writes the final checkpoint.
        left = max(_HOUSEKEEPING_MS, int((deadline - _time.monotonic()) * 1000))
        generator.stop(graceful, left)

    def _waitForJobs(self, deadline: float) -> bool:
        while True:
            with self._lock:
                futures = set(self._futures)
            if not futures:
                return True
            remaining = deadline - _time.monotonic()
            if remaining <= 0:
                return False
            concurrent.futures.wait(futures, timeout=remaining)

    def _cancelJobs(self) -> None:
        with self._lock:
            self._cancelling = True
            running = list(self._running)
        for group in running:
            try:
                self.ssc.sparkContext.cancelJobGroup(group)
            except Exception:
                logger.warning("could not cancel the Spark jobs of %s", group, exc_info=True)
        if not self._waitForJobs(_time.monotonic() + _CANCEL_WAIT_S):
            logger.warning("some streaming jobs did not end within %.0f s of being cancelled",
                           _CANCEL_WAIT_S)

    def _abandonJobSets(self) -> None:
        # Jobs that outlived the stop's waiting still owe their batch its completion.
        with self._lock:
            left = [self.jobSets[t] for t in sorted(self.jobSets)]
        for jobSet in left:
            ended = jobSet.abandon("still running when the streaming context stopped")
            if ended is None:  # its last job completed it meanwhile
                continue
            for job in ended:  # only these: the others reported their completion already
                self.listenerBus.post(StreamingListenerOutputOperationCompleted(job.info))
            self._handleJobSetCompletion(jobSet)

    def _stopInputStreams(self) -> None:
        # Last: the Kafka stream flushes its commits and closes its driver consumer here.
        acquired = self.inputsLock.acquire(timeout=_CANCEL_WAIT_S)
        if not acquired:
            logger.warning("input streams are still busy (a batch being generated); stopping "
                           "them anyway")
        try:
            if self._inputsStopped:
                return
            self._inputsStopped = True
            self.ssc.graph.stop()
            self.ssc.inputStatus.publish(self.ssc.graph.inputStreams)
        except Exception:
            logger.exception("could not stop the input streams")
        finally:
            if acquired:
                self.inputsLock.release()


#: The JVM's output-spec flag, with the gateway it belongs to, looked up once: resolving
#: the class by its package path costs the JVM a class lookup per package segment (about a
#: millisecond of its CPU, twice a batch).
_output_spec_flag: list[Any] = [None, None]


def _disableOutputSpecValidation(sc: Any, disabled: bool) -> None:
    """Let this thread's Spark jobs write into existing output directories, or stop that.

    As Spark's streaming scheduler does for its jobs (SPARK-4835): a batch run again after
    recovery writes ``saveAsTextFiles`` output that its first run may already have written.
    The setting is the JVM thread's (PySpark pins a JVM thread to each Python thread); the
    flag itself (a ``DynamicVariable``) is one object per JVM, kept with its gateway.
    """
    jvm = getattr(sc, "_jvm", None)
    if jvm is None:  # not a classic SparkContext (unit tests' fakes)
        return
    try:
        gateway = getattr(sc, "_gateway", None) or jvm
        owner, flag = _output_spec_flag
        if owner is not gateway or flag is None:
            flag = jvm.org.apache.spark.internal.io.SparkHadoopWriterUtils \
                .disableOutputSpecValidation()
            _output_spec_flag[:] = [gateway, flag]
        getattr(flag, "value_$eq")(disabled)
    except Exception:
        _output_spec_flag[:] = [None, None]
        logger.debug("could not %s output spec validation (Spark is stopping?)",
                     "disable" if disabled else "restore")
