"""JobScheduler: runs each batch's jobs on a pool of threads and reports on them.

Jobs run on ``spark.streaming.concurrentJobs`` threads (default 1: batches one after the
other, in order). Each output operation's Spark jobs carry a job group and the description
``Streaming job from [output operation N, batch time T]``, so they show in the Spark UI and
can be cancelled. A failed output operation fails its batch: listeners hear of it, no later
batch starts, and the context stops with the error.
"""

from __future__ import annotations

import logging
import threading
import time as _time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

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
        self._lock = threading.Lock()

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
        executor = self._executor
        if executor is None:
            return
        self.listenerBus.post(StreamingListenerBatchSubmitted(jobSet.toBatchInfo()))
        with self._lock:
            self.jobSets[jobSet.time] = jobSet
        for job in jobSet.jobs:
            executor.submit(self._handle, job, jobSet)
        logger.info("Added jobs for time %d ms", jobSet.time)

    def _handle(self, job: Job, jobSet: JobSet) -> None:
        if self.error is not None:
            logger.info("skipping %s: an earlier batch failed", job.id)
            return
        sc = self.ssc.sparkContext
        group = f"streaming-{job.time}-{job.outputOpId}"
        description = (f"Streaming job from [output operation {job.outputOpId}, batch time "
                       f"{format_batch_time(job.time, self.ssc.graph.batchDuration)}]")
        sc.setJobGroup(group, description, interruptOnCancel=True)
        sc.setLocalProperty(BATCH_TIME_PROPERTY, str(job.time))
        sc.setLocalProperty(OUTPUT_OP_PROPERTY, str(job.outputOpId))
        with self._lock:
            self._running.add(group)
        try:
            if jobSet.handleJobStart(job):
                self.listenerBus.post(StreamingListenerBatchStarted(jobSet.toBatchInfo()))
            self.listenerBus.post(StreamingListenerOutputOperationStarted(job.info))
            logger.info("Starting job %s from job set of time %d ms", job.id, job.time)
            job.run()
            self._rethrow_typed(job)
        finally:
            with self._lock:
                self._running.discard(group)
            for key in ("spark.jobGroup.id", "spark.job.description", BATCH_TIME_PROPERTY,
                        OUTPUT_OP_PROPERTY):
                sc.setLocalProperty(key, None)
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
        self.listenerBus.post(StreamingListenerOutputOperationCompleted(job.info))
        logger.info("Finished job %s from job set of time %d ms", job.id, job.time)
        if job.error is not None:
            self.reportError(f"Error running job {job.id}", job.error)
        if completed:
            if self.error is None:
                for stream in self.ssc.graph.inputStreams:
                    try:
                        stream.onBatchCompleted(jobSet.time)
                    except Exception:
                        logger.exception("%s failed after batch %d ms", stream.name,
                                         jobSet.time)
            with self._lock:
                self.jobSets.pop(jobSet.time, None)
            info = jobSet.toBatchInfo()
            logger.info("Total delay: %.3f s for time %d ms (execution: %.3f s)",
                        (info.totalDelay or 0) / 1000.0, jobSet.time,
                        (info.processingDelay or 0) / 1000.0)
            self.listenerBus.post(StreamingListenerBatchCompleted(info))
            if not info.failed and self.jobGenerator is not None:
                self.jobGenerator.onBatchCompletion(jobSet.time)

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
        """Stop generating batches, then the job threads.

        With ``processAllReceivedData`` the generated batches finish first; otherwise the
        running Spark jobs are cancelled.
        """
        if self.jobGenerator is not None:
            self.jobGenerator.stop(processAllReceivedData, timeoutMs)
        executor = self._executor
        if executor is not None:
            if not processAllReceivedData:
                with self._lock:
                    running = list(self._running)
                for group in running:
                    self.ssc.sparkContext.cancelJobGroup(group)
                executor.shutdown(wait=False, cancel_futures=True)
                deadline = _time.monotonic() + 2.0
                while _time.monotonic() < deadline:
                    with self._lock:
                        if not self._running:
                            break
                    _time.sleep(0.02)
            else:
                executor.shutdown(wait=True)
            self._executor = None
        for controller in self._rateControllers:
            controller.stop()
        logger.info("Stopped JobScheduler")
