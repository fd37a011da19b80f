"""Run ``kafka-direct`` command lines in one long-lived process that keeps Spark's JVM.

A structured ingest run as a fresh process spends 20-25 s of its 30 s starting Spark's JVM
and the Python processes PySpark starts once per JVM (the data source lookup, creation,
planning and write daemons); the batches themselves take about a second. Tests that are
about what the job *does* with records (typed columns, upserts, dead letters, schema
changes, lag, reruns) run their command lines here instead: :func:`kafka_direct.app.cli.main`
with the same arguments, in a host process that keeps one SparkContext for every run with
the same master, as a PySpark application that runs the job several times would.

What stays a real process of its own (``JobHost.run(..., process=True)``, or a plain
``subprocess.run``): what a user sees of the command as a process (exit codes of start-up
mistakes, Spark's own error output, signals, kills), other masters, and runs that need
their own environment (the JVM's environment is the host's).

Protocol: the host listens on a Unix socket; each request is ``(argv, cwd)`` and each answer
``(returncode, stdout, stderr)`` with the run's ``sys.stdout``/``sys.stderr`` and log lines
(Spark's own error output goes to the host's, which is the test session's), or
:data:`JVM_GONE` when the host found its JVM dead before the run: it then exits, and the
client starts a new host and asks again. A run that leaves a streaming query active fails.
The host's environment is the test session's when it starts.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Client, Listener
from pathlib import Path
from typing import Any

_CLI = [sys.executable, "-m", "kafka_direct.app.cli"]


#: The host's answer when its JVM died since the last run (it exits; ask a new host).
JVM_GONE = "jvm-gone"
#: Below pytest's own timeout (300 s, fixtures included): the host is ended first.
RUN_TIMEOUT_S = 240.0
#: Exit code of a run that left a streaming query active.
LEFT_ACTIVE = 70


class JobHost:
    """A client of one host process, started on first use and again after it ended."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="kafka-direct-job-host-")
        self._address = os.path.join(self._dir, "socket")
        self._key = secrets.token_bytes(16)
        self._process: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def _start(self) -> None:
        self.close()
        environment = {**os.environ, "JOB_HOST_KEY": self._key.hex(),
                       "PYTHONPATH": os.pathsep.join(
                           filter(None, [str(Path(__file__).resolve().parents[2]),
                                         os.environ.get("PYTHONPATH")]))}
        self._process = subprocess.Popen(
            [sys.executable, __file__, self._address], env=environment,
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(self._address):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the job host did not start")
            time.sleep(0.05)

    def run(self, args: list[str], *, timeout: float = RUN_TIMEOUT_S, process: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``kafka-direct <args>``; like ``subprocess.run(..., capture_output=True)``.

        ``process`` or ``env``: as a process of its own (see the module). Whatever
        interrupts the wait (a timeout, pytest's own) ends the host: a run never goes on
        behind the next test.
        """
        argv = [*_CLI, *args]
        if process or env is not None:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  env=env)
        for _ in range(2):
            if self._process is None or self._process.poll() is not None:
                self._start()
            self.runs += 1
            try:
                connection = Client(self._address, authkey=self._key)
            except (ConnectionRefusedError, FileNotFoundError):  # it ended just now
                self.close()
                continue
            try:
                with connection:
                    connection.send((list(args), os.getcwd()))
                    if not connection.poll(timeout):
                        raise subprocess.TimeoutExpired(argv, timeout)
                    answer = connection.recv()
            except BaseException:
                self.close()
                raise
            if answer != JVM_GONE:
                code, out, err = answer
                return subprocess.CompletedProcess(argv, code, out, err)
            self.close()
        raise RuntimeError("the job host's Spark JVM died twice in a row")

    def close(self) -> None:
        """End the host process (a later run starts another)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        if self._process is not None:
            self._process.wait()
        self._process = None
        with contextlib.suppress(OSError):
            os.unlink(self._address)

    def shutdown(self) -> None:
        """End the host and remove its directory."""
        self.close()
        shutil.rmtree(self._dir, ignore_errors=True)


#: The order of the runs' contexts within a module: the direct stream's, a local cluster's
#: (both APIs' runs on one: the tests marked ``cluster``), those of tests that name no API
#: in their parameters, then the structured job's.
API_ORDER = {"dstream": 0, "local-cluster": 1, None: 2, "structured": 3}


def grouped_by_api(items: list[Any], module: Any, api: Any) -> list[Any]:
    """``items`` with each module's tests grouped by the API their runs use (stable).

    The host keeps one SparkContext and makes another when a run needs a different
    configuration: the structured job's context sets a default parallelism, the direct
    stream's does not. Tests parametrized over both APIs, collected one after the other,
    made the host stop one context and start the other before nearly every run. A module
    starts with the API the module before it ended with. Only the order within a module
    changes (its tests stay together); modules keep their order.

    Args:
        items: The collected tests.
        module: A test's module.
        api: The ``api`` a test is parametrized with (``"dstream"``, ``"structured"``),
            ``"local-cluster"`` for a test whose runs use that master, or None.
    """
    result: list[Any] = []
    last = None  # the API the previous module's runs ended with: the next module's first
    start = 0
    while start < len(items):
        end = start + 1
        while end < len(items) and module(items[end]) == module(items[start]):
            end += 1
        order = API_ORDER if last != "structured" else {
            name: len(API_ORDER) - 1 - rank for name, rank in API_ORDER.items()}
        group = sorted(items[start:end], key=lambda item: order.get(api(item), API_ORDER[None]))
        result.extend(group)
        last = next((api(item) for item in reversed(group) if api(item) is not None), last)
        start = end
    return result


def _serve(address: str) -> None:
    import kafka_direct.runtime.spark as spark_module

    make_context = spark_module._make_context
    shared: dict[str, Any] = {}

    @contextlib.contextmanager
    def kept_context(master: str = "local[2,2]", app_name: str = "kafka-direct-test",
                     conf: Any = None, test_conf: bool = True, loopback: Any = None,
                     defaults: Any = None, own_session: bool = False,
                     archive: bool = False, fork_server: bool = False) -> Iterator[Any]:
        key = repr((master, conf, test_conf, loopback, defaults, archive, fork_server))
        sc = shared.get("sc")
        if sc is not None and (shared.get("key") != key or sc._jsc is None):
            spark_module._stop_context(sc)
            sc = None
        if sc is None:
            # This process has a session of its own: no need for the JVM to have one.
            sc = make_context(master, app_name, conf, test_conf, loopback, defaults, False,
                              archive, fork_server)
            shared.update(sc=sc, key=key)
        yield sc

    @contextlib.contextmanager
    def no_launch_ahead(**_: Any) -> Iterator[None]:
        yield  # the kept context's JVM serves every run

    spark_module.spark_context = kept_context  # type: ignore[assignment]
    spark_module.launch_ahead = no_launch_ahead  # type: ignore[assignment]
    with Listener(address, authkey=bytes.fromhex(os.environ["JOB_HOST_KEY"])) as listener:
        while True:
            with listener.accept() as connection:
                try:
                    argv, cwd = connection.recv()
                except (EOFError, OSError):
                    continue
                if not _jvm_alive(shared.get("sc")):
                    with contextlib.suppress(OSError):
                        connection.send(JVM_GONE)
                    return
                answer = _run(argv, cwd)
                with contextlib.suppress(OSError):  # the client gave up: nobody to tell
                    connection.send(answer)
                if not _jvm_alive(shared.get("sc")):
                    return


def _run(argv: list[str], cwd: str) -> tuple[int, str, str]:
    """One command line, as ``kafka-direct`` would run it; never raises."""
    from kafka_direct.app import cli

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    for handler in list(root.handlers):  # main() binds a new one to this run's err
        root.removeHandler(handler)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            os.chdir(cwd)
            code = cli.main(argv)
        except SystemExit as exit_:  # as the interpreter would exit
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
                code = 1
        except BaseException:  # a crash: the traceback a process would print
            traceback.print_exc()
            code = 1
        if _stop_leftover_queries():
            code = LEFT_ACTIVE
    return code, out.getvalue(), err.getvalue()


def _jvm_alive(sc: Any) -> bool:
    if sc is None:
        return True
    try:
        sc._jvm.java.lang.System.currentTimeMillis()
    except Exception:
        return False
    return True


def _stop_leftover_queries() -> bool:
    """Stop the queries a run left active, saying so; returns whether there were any."""
    try:
        from pyspark.sql import SparkSession

        session = SparkSession._instantiatedSession
        left = list(session.streams.active) if session is not None else []
        for query in left:
            print(f"job host: the run left query {query.name} active", file=sys.stderr)
            query.stop()
    except Exception:  # a dead JVM: found before the next run
        traceback.print_exc()
        return False
    return bool(left)


if __name__ == "__main__":
    _serve(sys.argv[1])
