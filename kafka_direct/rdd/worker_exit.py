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
task of ours imports it), only in a process forked by PySpark's daemon; the warm daemon of
:mod:`kafka_direct.runtime.worker_daemon` installs it before it forks
(:func:`quiet_idle_exit_in`).

One worker never runs code of ours: the one that looks for statically registered data
sources (``pyspark.sql.worker.lookup_data_sources``) when a session first touches its data
sources. It is used once and closed idle a minute later, mid-job, with the same traceback.
:func:`end_lookup_daemon` ends its daemon on this machine once the lookup is done: the
daemon hangs its workers up (they exit without a word) and Spark starts a new one if it
ever needs it again.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["end_lookup_daemon", "quiet_idle_exit", "quiet_idle_exit_in"]

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
    quiet_idle_exit_in(main)


def quiet_idle_exit_in(daemon: Any) -> None:
    """Install the quiet exit in ``daemon``, the module whose loop forks the workers.

    For a daemon that runs PySpark's loop from an import of ``pyspark.daemon`` (the warm
    daemon of :mod:`kafka_direct.runtime.worker_daemon`), before it forks: the workers
    inherit it.
    """
    original: Callable[[socket.socket, bool], int] | None = getattr(daemon, "worker", None)
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
    daemon.worker = marked


_LOOKUP_DAEMON = ("pyspark.daemon", "pyspark.sql.worker.lookup_data_sources")


def _descendants(root: int) -> dict[int, str]:
    """Command lines of the processes below ``root`` (Linux ``/proc``; empty elsewhere)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    text = stat.read()
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            parents[int(entry)] = int(text[text.rindex(")") + 2:].split()[1])
            commands[int(entry)] = command
    below, grown = {root}, True
    while grown:
        more = below | {pid for pid, parent in parents.items() if parent in below}
        grown, below = more != below, more
    return {pid: commands[pid] for pid in below - {root} if pid in commands}


def end_lookup_daemon(sc: Any) -> int:
    """End the data source lookup's Python daemon of a local ``sc``; returns how many.

    Call it after the session's data sources were first used (e.g. after registering
    some). Only processes of this machine's Spark JVM are touched: on a cluster the
    executors' daemons are out of reach, and their logs are not the job's stderr.
    """
    proc = getattr(getattr(sc, "_gateway", None), "proc", None)
    jvm = proc.pid if proc is not None else os.getppid()  # under spark-submit: the parent
    ended = 0
    for pid, command in _descendants(jvm).items():
        words = command.split()
        if all(part in words for part in _LOOKUP_DAEMON):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
                ended += 1
    return ended
