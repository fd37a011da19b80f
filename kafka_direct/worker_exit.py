"""A reused Python worker that Spark closes while it waits for a task leaves quietly.

PySpark's daemon forks one process per worker and, with ``spark.python.worker.reuse`` (the
default), runs task after task in it. When Spark's JVM closes an idle worker (at
``SparkContext.stop()``, which closes idle workers' sockets before it stops the daemon, and
when a worker has been idle for a minute), the worker wakes up
in the middle of reading its next task: PySpark reports the end of the stream back to a
socket that is gone, fails to flush it, and prints a ``BrokenPipeError`` traceback from
``daemon.py`` to Spark's stderr. Nothing is wrong, but a job's user sees a traceback.

:func:`quiet_idle_exit` wraps the daemon's per-task ``worker`` function in the worker
process: before each task it waits for the socket to be readable and, when the JVM closed
it instead of sending a task, returns a non-zero code, which makes the daemon's child leave
its loop and exit without a word. It is installed on import of :mod:`kafka_direct` (every
task of ours imports it), only in a process forked by PySpark's daemon.
"""

from __future__ import annotations

import select
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["quiet_idle_exit"]

_MARK = "_kafka_direct_quiet_idle_exit"


def _closed(sock: socket.socket) -> bool:
    """Wait until ``sock`` has data or is closed; True when it is closed (or broken)."""
    try:
        select.select([sock], [], [])
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def quiet_idle_exit() -> None:
    """In a worker forked by PySpark's daemon: exit silently when Spark closes it idle.

    Does nothing elsewhere (the driver, a plain ``python -m pyspark.worker``, tests).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is None or getattr(spec, "name", None) != "pyspark.daemon":
        return
    original: Callable[[socket.socket, bool], int] | None = getattr(main, "worker", None)
    if original is None or getattr(original, _MARK, False):
        return

    def worker(sock: socket.socket, authenticated: bool) -> int:
        if _closed(sock):
            return 1  # the daemon's child then drains the socket and exits with 0
        return original(sock, authenticated)

    marked: Any = worker
    setattr(marked, _MARK, True)
    # The daemon's loop looks ``worker`` up in its module on every task, so the next task
    # (or the JVM's close) goes through the wrapper.
    main.worker = marked  # type: ignore[attr-defined]
