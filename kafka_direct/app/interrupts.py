"""Ctrl-C and SIGTERM for a long-running job: the first asks politely, the second insists.

The first SIGINT or SIGTERM sets :attr:`TwoStageInterrupt.requested`: the job stops after
the running batch, which finishes and commits its offsets with its rows; no batch starts
after it. A second signal raises :class:`KeyboardInterrupt` in the main thread: the job
stops at once, cancelling the running batch (its committed partitions stay committed, the
rest is read again by the next run, so nothing is lost or written twice).

The engine's :class:`kafka_direct.streaming.stop_signals.StopSignals` is the
StreamingContext's own (``spark.streaming.stopGracefullyOnShutdown``); the ingest job
handles the signals itself, around the whole run (services, Spark, the summary).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

__all__ = ["TwoStageInterrupt"]

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TwoStageInterrupt:
    """SIGINT/SIGTERM handlers for the block: first a graceful stop, then an immediate one.

    Use as a context manager on the main thread; elsewhere it installs nothing (Python
    delivers signals to the main thread only) and :attr:`requested` is only set by hand.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            logger.warning("%s again: stopping at once", name)
            raise KeyboardInterrupt(name)
        self.signal_name = name
        self.requested.set()
        logger.warning("%s: stopping after the running batch (again to stop at once)", name)

    def install(self) -> None:
        """Install the handlers; again after code that replaced them.

        PySpark's SparkContext installs a SIGINT handler of its own.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _SIGNALS:
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> TwoStageInterrupt:
        self.install()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.restore()
