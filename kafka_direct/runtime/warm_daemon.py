"""Where Spark's Python workers fork from a daemon with their imports done once.

The daemon itself is :mod:`kafka_direct.runtime.worker_daemon`; this module decides where it
is used. Why it exists:

Spark forks every Python worker from a daemon (``pyspark.daemon``), and each forked worker
then imports what its task needs: PySpark's worker, pyarrow, pandas (PySpark's Arrow paths
import it), this package. Measured on the structured source and sink tests: about half a
CPU-second a worker, for workers that often run one short task. The daemon imports them
first, so that forked workers start with them loaded (copy-on-write), freezes them out of the
garbage collector's walks (PySpark has a reused worker collect garbage after every task, a
walk over everything it holds: 70-100 ms a task with these modules), then runs PySpark's own
daemon loop unchanged.

PySpark imports the worker module only after the fork, because a library that starts threads
when imported would leave a forked child with locks held by threads it does not have. The
libraries preloaded here start only threads that are made for forking: pyarrow's jemalloc
background thread and numpy's OpenBLAS pool both stop or reset themselves around a fork
(their own at-fork handlers). Nothing else is preloaded, and a module that fails to import
is left to the worker, as before.

Modules a worker has loaded before its task are the ones it uses: code shipped with
``--py-files`` (``spark.submit.pyFiles``) that shadows a preloaded module would be ignored,
so a context given such files keeps PySpark's daemon; after ``sc.addPyFile`` of such code,
set ``KAFKA_DIRECT_WARM_DAEMON=off`` before the context starts.

:func:`kafka_direct.runtime.spark.spark_context` names this daemon (``spark.python.daemon.module``)
only where every Python process Spark starts is this interpreter and finds this package at
start (:func:`daemon_module`); ``KAFKA_DIRECT_WARM_DAEMON=off`` (or ``0``, ``false``, ``no``)
keeps PySpark's own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import threading

__all__ = ["DAEMON_MODULE", "SWITCH", "check_ahead", "daemon_module"]

#: The environment variable that keeps PySpark's own daemon.
SWITCH = "KAFKA_DIRECT_WARM_DAEMON"

#: The daemon's module, as ``spark.python.daemon.module`` takes it. Nothing imports it: run
#: with ``-m``, a module its package had imported already would run twice.
DAEMON_MODULE = "kafka_direct.runtime.worker_daemon"

#: The checks started ahead (:func:`check_ahead`), by interpreter and working directory.
_ahead: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
_ahead_lock = threading.Lock()

#: The checks done (their answers are :func:`_importable_at_start`'s cache).
_checked: set[tuple[str, str]] = set()


def _switched_off() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def _check_command(executable: str) -> list[str]:
    return [executable, "-c", f"import {DAEMON_MODULE}"]


def check_ahead() -> None:
    """Start :func:`daemon_module`'s check now, in a process of its own; it waits for it.

    The check is a new interpreter importing the daemon (50-100 ms): a context's start
    that needs it runs it while it imports PySpark, instead of after. Nothing when
    :data:`SWITCH` is off, or a check for this interpreter and folder is running or done.
    """
    if _switched_off():
        return
    key = (sys.executable, os.getcwd())
    with _ahead_lock:
        if key in _ahead or key in _checked:
            return
        # Failing to start, the check runs again when it is needed.
        with contextlib.suppress(OSError):
            _ahead[key] = subprocess.Popen(_check_command(key[0]), cwd=key[1],
                                           stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)


@functools.cache
def _importable_at_start(executable: str, cwd: str) -> bool:
    # A new process of the interpreter, as Spark starts the daemon: this package on its path
    # at start, not only on this process's (a path added at run time).
    with _ahead_lock:
        started = _ahead.pop((executable, cwd), None)
        _checked.add((executable, cwd))
    if started is not None:
        try:
            return started.wait(timeout=60) == 0
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait()
            return False
    try:
        done = subprocess.run(_check_command(executable), cwd=cwd, capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def daemon_module() -> str | None:
    """:data:`DAEMON_MODULE` when a new process of this interpreter can import it, else None.

    None as well when :data:`SWITCH` is ``off``, ``0``, ``false`` or ``no``.
    """
    if _switched_off():
        return None
    return DAEMON_MODULE if _importable_at_start(sys.executable, os.getcwd()) else None
