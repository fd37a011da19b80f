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
``(returncode, stdout, stderr)`` with the run's ``sys.stdout``/``sys.stderr`` and log lines.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Client, Listener
from pathlib import Path

_CLI = [sys.executable, "-m", "kafka_direct.app.cli"]


class JobHost:
    """A client of one host process, started on first use and restarted after it dies."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="kafka-direct-job-host-")
        self._address = os.path.join(self._dir, "socket")
        self._key = secrets.token_bytes(16)
        self._process: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def _start(self) -> None:
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
                raise RuntimeError("the job host did not start")
            time.sleep(0.05)

    def run(self, args: list[str], *, timeout: float = 300, process: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``kafka-direct <args>``; like ``subprocess.run(..., capture_output=True)``.

        ``process`` or ``env``: as a process of its own (see the module).
        """
        if process or env is not None:
            return subprocess.run([*_CLI, *args], capture_output=True, text=True,
                                  timeout=timeout, env=env)
        if self._process is None or self._process.poll() is not None:
            if self._process is not None:
                os.unlink(self._address)
            self._start()
        self.runs += 1
        with Client(self._address, authkey=self._key) as connection:
            connection.send((list(args), os.getcwd()))
            if not connection.poll(timeout):
                self.close()
                raise subprocess.TimeoutExpired([*_CLI, *args], timeout)
            code, out, err = connection.recv()
        return subprocess.CompletedProcess([*_CLI, *args], code, out, err)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None
        with contextlib.suppress(OSError):
            os.unlink(self._address)


def _serve(address: str) -> None:
    import kafka_direct.testing.spark as spark_module
    from kafka_direct.app import cli

    make_context = spark_module._make_context
    shared: dict[str, object] = {}

    @contextlib.contextmanager
    def kept_context(master: str = "local[2,2]", app_name: str = "kafka-direct-test",
                     conf: object = None, test_conf: bool = True, loopback: object = None,
                     defaults: object = None, own_session: bool = False):  # type: ignore[no-untyped-def]
        key = repr((master, conf, test_conf, loopback, defaults))
        sc = shared.get("sc")
        if sc is not None and (shared.get("key") != key or sc._jsc is None):  # type: ignore[attr-defined]
            sc.stop()  # type: ignore[attr-defined]
            sc = None
        if sc is None:
            # This process has a session of its own: no need for the JVM to have one.
            sc = make_context(master, app_name, conf, test_conf, loopback, defaults, False)
            shared.update(sc=sc, key=key)
        yield sc

    spark_module.spark_context = kept_context
    with Listener(address, authkey=bytes.fromhex(os.environ["JOB_HOST_KEY"])) as listener:
        while True:
            with listener.accept() as connection:
                argv, cwd = connection.recv()
                os.chdir(cwd)
                out, err = io.StringIO(), io.StringIO()
                root = logging.getLogger()
                for handler in list(root.handlers):  # main() binds a new one to this run's err
                    root.removeHandler(handler)
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    try:
                        code = cli.main(argv)
                    except SystemExit as exit_:  # argparse's mistakes
                        code = exit_.code if isinstance(exit_.code, int) else 1
                    except BaseException as error:  # reported as a crash
                        import traceback

                        traceback.print_exc()
                        code = 1 if not isinstance(error, KeyboardInterrupt) else 130
                    _stop_leftover_queries()
                connection.send((code, out.getvalue(), err.getvalue()))


def _stop_leftover_queries() -> None:
    """Stop a query a run left active, saying so in its error output (a test sees it)."""
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is not None:
        for query in session.streams.active:
            print(f"job host: the run left query {query.name} active", file=sys.stderr)
            query.stop()


if __name__ == "__main__":
    _serve(sys.argv[1])
