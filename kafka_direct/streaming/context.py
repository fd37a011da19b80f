"""StreamingContext: the entry point of a streaming application.

States: ``INITIALIZED`` (building the graph) -> ``ACTIVE`` (batches run) -> ``STOPPED``. Only
one context may be active in a process. Starting twice warns; starting after a stop raises.
A failed batch stops the context, and :meth:`awaitTermination` raises that failure; a stop
is not a failure (jobs it cancels do not make awaitTermination raise).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from kafka_direct.errors import CheckpointError, ConfigurationError, StreamingStateError
from kafka_direct.heap import freeze_at_start, thaw_at_stop
from kafka_direct.streaming.callables import with_time
from kafka_direct.streaming.checkpoint import Checkpoint, CheckpointReader
from kafka_direct.streaming.clock import Clock, clock_from_conf
from kafka_direct.streaming.dstream import DStream
from kafka_direct.streaming.dstream_graph import DStreamGraph
from kafka_direct.streaming.durations import batch_datetime, to_ms
from kafka_direct.streaming.file_input_dstream import FileInputDStream
from kafka_direct.streaming.input_dstream import ConstantInputDStream, QueueInputDStream
from kafka_direct.streaming.job_scheduler import JobScheduler
from kafka_direct.streaming.listener import (
    StreamingListener,
    StreamingListenerStreamingStarted,
    StreamingListenerStreamingStopped,
)
from kafka_direct.streaming.stop_signals import StopSignals
from kafka_direct.streaming.transformed_dstream import TransformedDStream, UnionDStream
from kafka_direct.streaming.ui.input_status import InputStatusBoard
from kafka_direct.streaming.ui.progress_listener import StreamingJobProgressListener

__all__ = ["StreamingContext"]

logger = logging.getLogger(__name__)


class StreamingContext:
    """Runs a graph of DStreams in batches of ``batchDuration`` seconds.

    Args:
        sparkContext: A SparkContext, or a SparkConf to create one from.
        batchDuration: The batch interval in seconds (e.g. 0.5, 2, 10).
        clock: Where time comes from (default: ``spark.streaming.clock``, the wall clock);
            a :class:`~kafka_direct.streaming.clock.ManualClock` makes tests deterministic.
        conf: Spark settings for this context only (``spark.streaming.*``), over those of
            the SparkContext.
    """

    _active: ClassVar[StreamingContext | None] = None
    _activeLock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, sparkContext: Any, batchDuration: float,
                 clock: Clock | None = None, conf: Mapping[str, Any] | None = None) -> None:
        from pyspark import SparkConf, SparkContext

        if isinstance(sparkContext, SparkConf):
            sparkContext = SparkContext.getOrCreate(sparkContext)
        if sparkContext is None:
            raise ConfigurationError("StreamingContext needs a SparkContext or a SparkConf")
        self.sparkContext = sparkContext
        self._conf = sparkContext.getConf()
        for key, value in (conf or {}).items():
            self._conf.set(key, str(value).lower() if isinstance(value, bool) else str(value))
        self.appName = str(self._conf.get("spark.app.name", ""))
        self.graph = DStreamGraph(to_ms(batchDuration, "batchDuration"))
        self.clock = clock or clock_from_conf(self._conf)
        self.state = "INITIALIZED"
        self.checkpointDir: str | None = None
        self.checkpointDuration: int | None = None
        self.initialCheckpoint: Checkpoint | None = None
        self._dstreamIds = itertools.count()
        self._inputStreamIds = itertools.count()
        self.scheduler = JobScheduler(self)
        self._terminated = threading.Event()
        self._error: BaseException | None = None
        self._stopLock = threading.Lock()
        self._stopBegun = False
        self._signals = StopSignals(self._stopOnSignal, lambda: self._stopBegun)
        # The statistics page's settings, refused here by name (not later as a bare
        # ValueError at start).
        retained = self._intSetting("spark.streaming.ui.retainedBatches", "1000", 1, 2**31 - 1)
        self._uiPort = self._intSetting("spark.streaming.ui.port", "4050", 0, 65535)
        self.progressListener = StreamingJobProgressListener(retained)
        #: The input streams' figures, as the engine last published them (for the UI).
        self.inputStatus = InputStatusBoard()
        self.scheduler.listenerBus.addListener(self.progressListener)
        from kafka_direct.streaming.batch_log import BatchLogListener

        self.scheduler.listenerBus.addListener(BatchLogListener(self.graph.batchDuration / 1000))
        self._ui: Any = None
        directory = self._conf.get("spark.streaming.checkpoint.directory", None)
        if directory:
            self.checkpoint(directory)

    # -- settings ---------------------------------------------------------------------------

    def conf(self, key: str, default: str) -> str:
        """A Spark setting of the context's SparkContext."""
        return str(self._conf.get(key, default))

    def _intSetting(self, key: str, default: str, minimum: int, maximum: int) -> int:
        """A whole-number Spark setting in ``[minimum, maximum]``.

        Raises:
            ConfigurationError: It is not one; the message names the setting.
        """
        raw = self.conf(key, default).strip()
        try:
            value = int(raw)
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            bound = (f"an integer >= {minimum}" if value is None or value < minimum
                     else f"an integer <= {maximum}")
            raise ConfigurationError(f"{key} must be {bound}, got {raw!r}; set it to a whole "
                                     f"number from {minimum} to {maximum}")
        return value

    @property
    def batchDuration(self) -> int:
        """The batch interval in milliseconds."""
        return self.graph.batchDuration

    def remember(self, duration: float) -> None:
        """Keep every stream's RDDs for at least ``duration`` seconds (before start)."""
        self._requireState("INITIALIZED", "remember")
        self.graph.remember(to_ms(duration, "remember duration"))

    def checkpoint(self, directory: str | None) -> None:
        """Checkpoint metadata (and stateful RDDs) into ``directory``; None disables."""
        if directory is None:
            self.checkpointDir = None
            return
        path = os.path.abspath(str(directory))
        os.makedirs(path, exist_ok=True)
        self.sparkContext.setCheckpointDir(path)
        self.checkpointDir = path
        self.checkpointDuration = self.checkpointDuration or self.graph.batchDuration

    def addStreamingListener(self, streamingListener: StreamingListener) -> None:
        """Deliver streaming events to ``streamingListener``."""
        if not isinstance(streamingListener, StreamingListener):
            raise ConfigurationError(
                f"addStreamingListener takes a StreamingListener, got {streamingListener!r}")
        self.scheduler.listenerBus.addListener(streamingListener)

    # -- input and composition --------------------------------------------------------------

    def queueStream(self, rdds: Iterable[Any], oneAtATime: bool = True,
                    default: Any = None) -> DStream:
        """A stream of the queued RDDs (or lists): one per batch, or all at once.

        Pass a ``collections.deque`` to keep adding RDDs while the stream runs.
        """
        queue = rdds if isinstance(rdds, collections.deque) else collections.deque(rdds)
        if default is not None and not hasattr(default, "mapPartitions"):
            default = self.sparkContext.parallelize(list(default))
        return QueueInputDStream(self, queue, oneAtATime, default)

    def constantStream(self, rdd: Any) -> DStream:
        """A stream with the same RDD every batch."""
        return ConstantInputDStream(self, rdd)

    def textFileStream(self, directory: str) -> DStream:
        """The lines of the files that appear in ``directory``, batch by batch (Spark's).

        Each batch reads the files whose modification time falls in its interval and that
        no earlier batch read; files already there when the stream is created, and hidden
        ones (``.`` or ``_`` first), are ignored. Files must appear whole (moved in). See
        :mod:`kafka_direct.streaming.file_input_dstream`.
        """
        return FileInputDStream(self, directory)

    def binaryRecordsStream(self, directory: str, recordLength: int) -> DStream:
        """The ``recordLength``-byte records of the files that appear in ``directory``.

        Files are picked up as by :meth:`textFileStream`; each record is ``bytes``.
        """
        return FileInputDStream(self, directory, recordLength)

    def union(self, *dstreams: DStream) -> DStream:
        """The union of streams with the same slide duration."""
        if not dstreams:
            raise ConfigurationError("union needs at least one DStream")
        return UnionDStream(self, list(dstreams))

    def transform(self, dstreams: list[DStream], transformFunc: Callable[..., Any],
                  withTime: bool | None = None) -> DStream:
        """``transformFunc(rdds)`` or ``transformFunc(time, rdds)`` over several streams."""
        call = with_time(transformFunc, 1, withTime, "StreamingContext.transform")
        return TransformedDStream(self, list(dstreams),
                                  lambda t, rdds: call(batch_datetime(t), rdds))

    # -- lifecycle --------------------------------------------------------------------------

    def _requireState(self, state: str, what: str) -> None:
        if self.state != state:
            raise StreamingStateError(
                f"{what} is only possible while the StreamingContext is {state}; it is "
                f"{self.state}")

    def start(self) -> None:
        """Validate the graph and start running batches.

        Holds the stop lock throughout: a stop requested meanwhile (another thread, a batch
        failing already) waits for the start to finish, then stops what it started.
        """
        with self._stopLock:
            if self.state == "ACTIVE":
                logger.warning("StreamingContext has already been started")
                return
            if self.state == "STOPPED":
                raise StreamingStateError("StreamingContext has already been stopped")
            with StreamingContext._activeLock:
                active = StreamingContext._active
                if active is not None and active is not self:
                    raise StreamingStateError(
                        "Only one StreamingContext may be started in this process; stop the "
                        "running one first")
                self.graph.validate()
                self._startUI()
                try:
                    self.scheduler.start()
                except BaseException:
                    # Nothing half-started stays behind; the error says what was wrong.
                    self._stopUI()
                    self.scheduler.stop(False)
                    self.scheduler.listenerBus.stop()
                    self.state = "STOPPED"
                    self._terminated.set()
                    raise
                self.state = "ACTIVE"
                StreamingContext._active = self
            # Everything the start built lives as long as the context: out of the full
            # collections that would otherwise land in a batch's planning.
            freeze_at_start()
            if self.conf("spark.streaming.stopGracefullyOnShutdown",
                         "false").lower() == "true":
                self._signals.install()
        self.scheduler.listenerBus.post(
            StreamingListenerStreamingStarted(self.clock.getTimeMillis()))
        logger.info("StreamingContext started")

    def _startUI(self) -> None:
        if self.conf("spark.streaming.ui.enabled", "false").lower() != "true":
            return
        from kafka_direct.streaming.ui.server import StreamingUI

        host = self.conf("spark.streaming.ui.host", "127.0.0.1")
        port = self._uiPort
        try:
            self._ui = StreamingUI(self, self.progressListener, host, port)
        except OSError as error:
            raise ConfigurationError(
                f"the streaming statistics page cannot listen on {host}:{port}: {error}; set "
                "spark.streaming.ui.port to a free port (0 picks one)") from error
        self._ui.start()

    def _stopUI(self) -> None:
        ui, self._ui = self._ui, None
        if ui is not None:
            ui.stop()

    @property
    def uiWebUrl(self) -> str | None:
        """The statistics page's address while it is served (``spark.streaming.ui.enabled``)."""
        return None if self._ui is None else str(self._ui.url)

    def stop(self, stopSparkContext: bool | None = None, stopGracefully: bool | None = None,
             *, stopGraceFully: bool | None = None) -> None:
        """Stop batches; gracefully waits for generated batches, else cancels running jobs.

        Either way: no batch is generated after the stop began, each submitted batch ends
        with one ``BatchCompleted``, and the input streams are stopped last (the Kafka stream
        commits the batches that succeeded, then closes). A graceful stop runs every batch
        generated or being generated to its end (within
        ``spark.streaming.gracefulStopTimeout``; what still runs then is cancelled). An
        immediate stop drops batches not yet submitted and cancels running Spark jobs; their
        failures are not the stream's. Signal handlers installed by ``start()`` are
        restored (if stopped off the main thread: at the next ``awaitTermination`` on it, and
        a signal arriving meanwhile goes to the previous handler).

        Args:
            stopSparkContext: Stop the SparkContext too (default
                ``spark.streaming.stopSparkContextByDefault``, true).
            stopGracefully: Finish the generated batches first (within
                ``spark.streaming.gracefulStopTimeout``); default False.
            stopGraceFully: PySpark's spelling of ``stopGracefully`` (keyword only).

        Raises:
            ConfigurationError: ``stopGracefully`` and ``stopGraceFully`` are both given and
                disagree.
        """
        if stopGracefully is not None and stopGraceFully is not None and (
                bool(stopGracefully) != bool(stopGraceFully)):
            raise ConfigurationError(
                f"stop() got stopGracefully={stopGracefully!r} and stopGraceFully="
                f"{stopGraceFully!r}, which disagree; pass one of them (stopGraceFully is "
                "PySpark's spelling of stopGracefully)")
        gracefully = bool(stopGracefully if stopGracefully is not None else stopGraceFully)
        if stopSparkContext is None:
            stopSparkContext = self.conf("spark.streaming.stopSparkContextByDefault",
                                         "true").lower() == "true"
        self._stopBegun = True
        with self._stopLock:
            if self.state == "INITIALIZED":
                logger.warning("StreamingContext has not been started yet")
            elif self.state == "STOPPED":
                logger.warning("StreamingContext has already been stopped")
            else:
                # As Spark: a step that fails is logged and the others still run, and the
                # state is STOPPED only at the end, so a stop cut short (KeyboardInterrupt)
                # can be called again; every step is idempotent.
                graceful = gracefully and self.scheduler.error is None
                _logFailure("stopping the scheduler", self.scheduler.stop, graceful)
                self.scheduler.listenerBus.post(
                    StreamingListenerStreamingStopped(self.clock.getTimeMillis()))
                _logFailure("stopping the listener bus", self.scheduler.listenerBus.stop)
                _logFailure("stopping the statistics page", self._stopUI)
                thaw_at_stop()
                logger.info("StreamingContext stopped successfully")
            self.state = "STOPPED"
            self._signals.restore()
            with StreamingContext._activeLock:
                if StreamingContext._active is self:
                    StreamingContext._active = None
            try:
                if stopSparkContext:
                    self.sparkContext.stop()
            finally:
                self._terminated.set()

    def _onError(self, error: BaseException) -> None:
        """A batch failed: remember the error and stop.

        The stop runs on a thread of its own: this may be called on a job thread, which the
        stop waits for.
        """
        if self._error is None:
            self._error = error
        threading.Thread(target=self.stop, kwargs={"stopSparkContext": False},
                         name="streaming-stop-on-error", daemon=True).start()

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait until the context stops (True) or ``timeout`` seconds pass (False).

        Raises:
            The error that stopped the context, if a batch failed.
        """
        stopped = self._terminated.wait(timeout)
        if stopped:
            # A stop on another thread (after an error, on a signal) cannot touch signals.
            self._signals.restore()
        if self._error is not None and stopped:
            raise self._error
        return stopped

    def awaitTerminationOrTimeout(self, timeout: float) -> bool:
        """:meth:`awaitTermination` with a required timeout."""
        return self.awaitTermination(timeout)

    def _stopOnSignal(self) -> None:
        self.stop(stopSparkContext=False, stopGracefully=True)

    # -- recovery ---------------------------------------------------------------------------

    @staticmethod
    def getOrCreate(checkpointPath: str, setupFunc: Callable[[], StreamingContext]
                    ) -> StreamingContext:
        """Recover from the newest checkpoint in ``checkpointPath``, or create afresh.

        Either way ``setupFunc()`` builds the context and its graph (checkpoints hold data,
        not code); with a checkpoint, the streams then get their state back and the batches
        it left pending, and those missed while down, run first.

        Raises:
            CheckpointError: The directory cannot be read, every checkpoint in it is damaged,
                or it was written with another batch interval.
        """
        checkpoint = CheckpointReader.read(checkpointPath)
        ssc = setupFunc()
        if not isinstance(ssc, StreamingContext):
            raise ConfigurationError(f"setupFunc must return a StreamingContext, got {ssc!r}")
        if checkpoint is None:
            if ssc.checkpointDir is None:
                ssc.checkpoint(checkpointPath)
            return ssc
        if checkpoint.batchDuration != ssc.batchDuration:
            raise CheckpointError(
                f"the checkpoint in {checkpointPath} was written with a batch interval of "
                f"{checkpoint.batchDuration} ms, the application now uses "
                f"{ssc.batchDuration} ms; restore the interval or delete the checkpoint",
                directory=str(checkpointPath))
        if ssc.checkpointDir is None:
            ssc.checkpoint(checkpointPath)
        ssc.graph.restoreCheckpointState(checkpoint.streams)
        ssc.initialCheckpoint = checkpoint
        logger.info("Recovered StreamingContext from checkpoint of %d ms (%d pending batches)",
                    checkpoint.checkpointTime, len(checkpoint.pendingTimes))
        return ssc

    @staticmethod
    def getActive() -> StreamingContext | None:
        """The active context of this process, if any."""
        return StreamingContext._active

    @staticmethod
    def getActiveOrCreate(checkpointPath: str | None,
                          setupFunc: Callable[[], StreamingContext]) -> StreamingContext:
        """The active context if there is one; else recovered or created, as PySpark does.

        With no active context: :meth:`getOrCreate` from ``checkpointPath``, or without a
        path, ``setupFunc()``. ``setupFunc`` is not called when a context is active.

        Args:
            checkpointPath: Where checkpoints are (None: create without recovering).
            setupFunc: Builds the context and its graph.

        Returns:
            The active, recovered or new context.

        Raises:
            ConfigurationError: ``setupFunc`` is None or does not return a StreamingContext.
            CheckpointError: As :meth:`getOrCreate`.
        """
        if setupFunc is None:
            raise ConfigurationError("getActiveOrCreate needs a setupFunc, got None")
        active = StreamingContext.getActive()
        if active is not None:
            return active
        if checkpointPath is not None:
            return StreamingContext.getOrCreate(checkpointPath, setupFunc)
        ssc = setupFunc()
        if not isinstance(ssc, StreamingContext):
            raise ConfigurationError(f"setupFunc must return a StreamingContext, got {ssc!r}")
        return ssc

    # -- internals for streams --------------------------------------------------------------

    def _hasRDDCheckpointDir(self) -> bool:
        """Whether the SparkContext has a checkpoint directory (streams can checkpoint RDDs)."""
        if self.checkpointDir is not None:
            return True
        getCheckpointDir = getattr(self.sparkContext, "getCheckpointDir", None)
        return getCheckpointDir is not None and getCheckpointDir() is not None

    def _newDStreamId(self) -> int:
        return next(self._dstreamIds)

    def _newInputStreamId(self) -> int:
        return next(self._inputStreamIds)

    def _restoreCheckpointedRDD(self, path: str) -> Any:
        return self.sparkContext._checkpointFile(path, self.sparkContext.serializer)

    def _deleteCheckpointFile(self, path: str) -> None:
        import shutil
        from urllib.parse import urlparse

        local = urlparse(path).path if path.startswith("file:") else path
        shutil.rmtree(local, ignore_errors=True)


def _logFailure(step: str, action: Callable[..., object], *args: object) -> None:
    """Run one step of a stop; a failure is logged, and the stop goes on with the next."""
    try:
        action(*args)
    except Exception:
        logger.exception("StreamingContext.stop: %s failed; going on with the stop", step)
