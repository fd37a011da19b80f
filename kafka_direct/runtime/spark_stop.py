"""How the driver's Spark ends: a context stopped, a JVM nobody uses let go at once.

- :func:`stop_context` stops a context, then its fork server. PySpark's accumulator server
  stops in a thread beside the caller (its handler sees the shutdown only at its next poll,
  once a second); at exit the socket files of those still stopping are removed
  (:func:`await_stopping`).
- :func:`end_gateway` has a launched JVM exit without waiting for it; :func:`stop_gateway`
  stops one that no context uses (an early launch nobody took) and waits; :func:`end_jvm`
  lets this process's JVM go once its context has stopped, for a command that is done
  with Spark.

How contexts and JVMs are made is :mod:`~kafka_direct.runtime.spark`'s.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import Any

__all__ = ["await_stopping", "end_gateway", "end_jvm", "stop_context", "stop_gateway"]


def end_gateway(gateway: Any) -> Any:
    """Have a launched JVM that no context uses exit; returns its process (None: not ours).

    Py4J's gateway is shut first: its threads (the one accepting connections, those reading
    them) block in native code, and a JDK 17 JVM's exit waits 0.3 s for threads in native
    code to stop (measured: the JVM's exit took 0.5 s, 0.1 s with the gateway shut first).
    Then the pipe the JVM reads closes: PySpark's gateway exits, running Spark's shutdown
    hooks (its temporary folders removed).
    """
    with contextlib.suppress(Exception):
        gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is None:
        return None
    with contextlib.suppress(Exception):
        process.stdin.close()
    return process


def stop_gateway(gateway: Any, server: Any) -> None:
    """Stop a launched JVM that no context uses (PySpark's gateway exits with its pipe)."""
    if server is not None:
        server.stop()
    if gateway is None:
        return
    process = end_gateway(gateway)
    if process is None:
        return
    with contextlib.suppress(Exception):
        process.wait(timeout=10)
    if process.poll() is None:
        process.kill()


def end_jvm() -> Any:
    """End the driver JVM this process launched, now that no context uses it.

    For a process that is done with Spark (a command whose job has ended): the JVM would
    otherwise exit only when this process does, and only then run Spark's shutdown hooks;
    here it exits at once, beside what the caller does next (its summary, its own exit).
    A later context launches a JVM of its own. Nothing happens while a context runs, where
    no JVM was launched, or where the JVM is not this process's (spark-submit's).

    Returns:
        The JVM's process, exiting (the caller may wait for it), or None.
    """
    context = sys.modules.get("pyspark.core.context")
    if context is None:  # PySpark never imported: no JVM
        return None
    made: Any = context.SparkContext
    with made._lock:
        gateway = made._gateway
        if (made._active_spark_context is not None or gateway is None
                or getattr(gateway, "proc", None) is None):
            return None
        made._gateway = None
        made._jvm = None
    return end_gateway(gateway)


#: The accumulator servers of stopped contexts still stopping (see :func:`stop_context`).
_stopping: list[tuple[threading.Thread, Any]] = []


def await_stopping() -> None:
    """At exit: remove the socket files of the accumulator servers still stopping.

    Not waited for (up to a second each, their poll): the contexts stopped, so nothing
    reaches them, and their threads end with the process. A Unix socket's file would stay.
    """
    for thread, server in list(_stopping):
        address = getattr(server, "server_address", None)
        if thread.is_alive() and isinstance(address, str):
            with contextlib.suppress(OSError):
                os.remove(address)


atexit.register(await_stopping)


def _quiet_when_closed(server: Any) -> None:
    """Have a stopping accumulator server ignore the JVM's connection closing under it.

    A JVM that ends before the server's handler saw the shutdown closes the connection
    the handler reads: an EOFError that socketserver would print as a traceback, though
    nothing was lost (the context stopped). Other errors are still reported.
    """
    report = getattr(server, "handle_error", None)
    if report is None:  # not socketserver's
        return

    def handle_error(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], EOFError | ConnectionError):
            report(request, client_address)

    server.handle_error = handle_error


def stop_context(sc: Any, server: Any = None) -> None:
    """Stop ``sc``, then ``server``, its fork server (if any).

    PySpark's accumulator server is stopped in a thread beside the caller: its handler
    sees a shutdown only at its next poll of the JVM's connection, once a second, and the
    caller waited for that (0.8 s at the ingest job's end, measured, before its summary).
    Nothing reaches the server once the context stopped; at exit its socket file (a Unix
    socket's) is removed if it still stops.
    """
    accumulators = getattr(sc, "_accumulatorServer", None)
    if accumulators is not None:
        sc._accumulatorServer = None  # PySpark's stop skips it
        _quiet_when_closed(accumulators)
    try:
        sc.stop()
    finally:
        if accumulators is not None:
            thread = threading.Thread(target=accumulators.shutdown, daemon=True,
                                      name="spark-accumulator-server-stop")
            _stopping[:] = [(t, a) for t, a in _stopping if t.is_alive()] + [
                (thread, accumulators)]
            thread.start()
        if server is not None:
            server.stop()
