"""Spark's Python processes forked from a server that has their imports done.

Spark starts a Python process, one after another, for each step of a Structured Streaming
query's first batch: the data source lookup, the source's creation, the stream reader's
runner, the read planning, the write planning, the workers' daemon, the commit. Each is a new
interpreter that imports PySpark, pyarrow and this package: about a third of a CPU-second
each, and the first batch waits for every one of them in turn.

:class:`ForkServer` starts, beside the driver, an interpreter that imports all of that once
(:data:`PRELOAD`) and listens on a Unix socket in a private directory. The interpreter
Spark is told to run (``PYSPARK_PYTHON`` of its JVM and of the context) is a small launcher
in that directory (:data:`LAUNCHER`, an interpreter started without ``site``): for a
``python -m <module> ...`` it hands its standard streams, arguments, environment and
working directory to the server, which forks a child that becomes that process (the
module run as ``__main__``); the launcher relays signals to the child and exits as it
does. So Spark's process handle (its pipes, its ``destroy()``) keeps working, and each
process starts in milliseconds with its imports done.

A request is served only where a fork is the process a new interpreter would be: the same
``PYTHON*`` settings as the server's (hash seed, optimisation...; ``PYTHONUNBUFFERED`` is
honoured), the same ``PYTHONPATH`` entries (py4j's zip aside, which the server imports from
the installed package); anything else (``-c``, other options) and any failure to reach the
server: the launcher runs the real interpreter instead. A child dies with the server
(``PR_SET_PDEATHSIG``) and with its launcher (the server kills it when the launcher's
connection closes first); the server ends when the driver's pipe to it closes.

:func:`kafka_direct.runtime.spark.spark_context` starts one where it is asked for
(``fork_server=True``, the ingest job's) and applies: a local master and every Python
process Spark starts being this interpreter (as for the warm daemon), Linux, and
``KAFKA_DIRECT_FORK_SERVER`` not ``off``.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import logging
import marshal
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LAUNCHER", "PRELOAD", "SOCKET_ENV", "SWITCH", "VERSION_QUESTION", "ForkServer",
           "serve", "wanted"]

logger = logging.getLogger(__name__)

#: The environment variable that turns the server off (``off``, ``0``, ``false``, ``no``).
SWITCH = "KAFKA_DIRECT_FORK_SERVER"

#: The environment variable naming the server's socket (the launcher's only input).
SOCKET_ENV = "KAFKA_DIRECT_FORK_SERVER_SOCKET"

#: What the server imports before it serves: the modules Spark's Python processes run or
#: import (PySpark's planners and workers, pyarrow, pandas, this package's source and
#: sink). Modules run with ``-m`` are imported as ``__main__`` by each child, not here.
PRELOAD = ("pyspark.worker", "pyspark.serializers", "pyspark.sql.worker.lookup_data_sources",
           "pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read",
           "pyspark.sql.worker.write_into_data_source",
           "pyspark.sql.worker.python_streaming_sink_runner",
           "pyspark.sql.worker.commit_data_source_write",
           "pyspark.sql.streaming.python_streaming_source_runner", "pyarrow", "pandas",
           "pyspark.sql.pandas.serializers", "pyspark.sql.conversion", "confluent_kafka",
           "psycopg2", "psycopg2.extensions", "psycopg2.sql", "kafka_direct.rdd.kafka_rdd",
           "kafka_direct.rdd.dataframe", "kafka_direct.rdd.worker_exit",
           "kafka_direct.sql.source.kafka_source", "kafka_direct.sql.source.stream_reader",
           "kafka_direct.client.driver_consumer", "kafka_direct.sql.sink.postgres_sink",
           "kafka_direct.sql.sink.commit", "kafka_direct.postgres.direct_write")

#: What the driver writes to the server before it stops it while living on.
_KEEP = b"keep the launcher"

#: The code Spark's JVM runs (``python -c``) to learn the interpreter's version before it
#: looks up the Python data sources: the launcher answers it itself, as the interpreter it
#: would start (a new interpreter with ``site`` took 24 ms of CPU, 70-110 ms on a machine
#: at load 17; the launcher's answer 10 ms), on the way to the query.
VERSION_QUESTION = "import sys; print('%d.%d' % sys.version_info[:2])"

#: The launcher's file name in the server's directory.
LAUNCHER = "python"

_OFF = ("off", "0", "false", "no")

#: The settings read at start (CPython's environment variables) or by the preloaded modules'
#: imports: a forked child has the server's, so a request must have the same.
#: ``PYTHONPATH`` is compared apart; ``PYTHONUNBUFFERED`` the child honours itself.
_AT_START = ("PYTHONHOME", "PYTHONSAFEPATH", "PYTHONPLATLIBDIR", "PYTHONOPTIMIZE",
             "PYTHONDEBUG", "PYTHONINSPECT", "PYTHONVERBOSE", "PYTHONCASEOK",
             "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONHASHSEED",
             "PYTHONINTMAXSTRDIGITS", "PYTHONIOENCODING", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
             "PYTHONEXECUTABLE", "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC",
             "PYTHONPROFILEIMPORTTIME", "PYTHONMALLOC", "PYTHONMALLOCSTATS", "PYTHONCOERCECLOCALE",
             "PYTHONDEVMODE", "PYTHONUTF8", "PYTHONWARNDEFAULTENCODING", "PYTHONNODEBUGRANGES",
             # Read when the preloaded modules are imported (PySpark's serializers, its
             # worker utilities): a fork has what the server's imports saw.
             "PYSPARK_ENABLE_NAMEDTUPLE_PATCH", "SPARK_TESTING")

_LAUNCHER_SOURCE = '''#!{python} -IS
# Spark's Python processes as forks of a server with their imports done (see
# kafka_direct/runtime/fork_server.py); anything it does not serve runs {python}.
import os
import sys

REAL = {python!r}


def _read(connection, size):
    data = b""
    while len(data) < size:
        more = connection.recv(size - len(data))
        if not more:
            raise OSError("the fork server closed the connection")
        data += more
    return data


def main():
    args = sys.argv[1:]
    if args == ["-c", {version_question!r}]:  # the same interpreter: its answer
        print("%d.%d" % sys.version_info[:2])
        return
    address = os.environ.get({socket_env!r})
    if address and len(args) >= 2 and args[0] == "-m":
        import array, marshal, signal, socket, struct
        try:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(address)
            blob = marshal.dumps((args, dict(os.environ), os.getcwd()))
            connection.sendmsg([struct.pack("!I", len(blob)) + blob], [(
                socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
            pid = struct.unpack("!i", _read(connection, 4))[0]
        except OSError:
            pid = 0
        if pid > 0:
            def forward(signum, frame):
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass

            for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
                signal.signal(getattr(signal, name), forward)
            try:
                status = struct.unpack("!i", _read(connection, 4))[0]
            except OSError:
                os._exit(1)
            if status < 0:  # killed by a signal: so is this process
                signal.signal(-status, signal.SIG_DFL)
                os.kill(os.getpid(), -status)
            os._exit(status & 0xFF)
    os.execv(REAL, [REAL, *args])


main()
'''


def wanted() -> bool:
    """Whether the server may be used here: Linux, and :data:`SWITCH` not ``off``."""
    if os.environ.get(SWITCH, "").strip().lower() in _OFF:
        return False
    return sys.platform.startswith("linux")


class ForkServer:
    """The fork server of one SparkContext: its process, directory, launcher and socket.

    Args:
        python: The interpreter it runs and the launcher falls back to.
        environ: The server's environment (the driver's, with Spark's hash seed).
    """

    def __init__(self, python: str = sys.executable,
                 environ: Mapping[str, str] | None = None) -> None:
        self.directory = tempfile.mkdtemp(prefix="kafka-direct-fork-")
        self._removal = False
        self.socket = os.path.join(self.directory, "server")
        self.launcher = os.path.join(self.directory, LAUNCHER)
        with open(self.launcher, "w", encoding="utf-8") as script:
            script.write(_LAUNCHER_SOURCE.format(python=python, socket_env=SOCKET_ENV,
                                                 version_question=VERSION_QUESTION))
        os.chmod(self.launcher, 0o700)
        environment = dict(os.environ if environ is None else environ)
        # Listening before the server runs: a launcher that comes while it still imports
        # waits in the backlog.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.socket)
            listener.listen(128)
            # The driver's pipe is the server's standard input: it ends when the driver does.
            self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
                [python, "-m", __name__, self.socket, str(listener.fileno())],
                stdin=subprocess.PIPE, env=environment, start_new_session=True,
                pass_fds=(listener.fileno(),))
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        finally:
            listener.close()

    def environment(self) -> dict[str, str]:
        """What the JVM's and the context's environment need: the launcher, the socket."""
        return {"PYSPARK_PYTHON": self.launcher, SOCKET_ENV: self.socket}

    def stop(self) -> None:
        """End the server (its children end with it) and remove its socket.

        The launcher stays until this process exits: a JVM outlives the context that
        started the server (PySpark keeps it for the next context of the process) and still
        starts Python processes with it, which then run the interpreter itself.
        """
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.write(_KEEP)
                    process.stdin.flush()
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.socket)
        if not self._removal:
            self._removal = True
            atexit.register(shutil.rmtree, self.directory, ignore_errors=True)


def _entries(path: str | None) -> list[str]:
    return [entry for entry in (path or "").split(os.pathsep) if entry]


def _importing(entry: str) -> bool:
    """Whether a ``PYTHONPATH`` entry Spark gives may hold modules a fork would not have.

    Not: py4j's zip (the server has py4j from the installed package), Spark's jars, and
    entries that do not exist (the compiled Spark home has no ``pyspark.zip``).
    """
    name = os.path.basename(entry)
    if (name.startswith("py4j-") and name.endswith(".zip")) or name.endswith(".jar"):
        return False
    return os.path.exists(entry)


def _fits(args: Sequence[str], environ: Mapping[str, str], own: Mapping[str, str]) -> bool:
    """Whether a fork of this server is the process ``python *args`` with ``environ`` is."""
    if len(args) < 2 or args[0] != "-m" or not args[1] or args[1].startswith("-"):
        return False
    if any(environ.get(key) != own.get(key) for key in _AT_START):
        return False
    asked = [entry for entry in _entries(environ.get("PYTHONPATH")) if _importing(entry)]
    return set(asked) == {entry for entry in _entries(own.get("PYTHONPATH")) if _importing(entry)}


def _receive(connection: socket.socket) -> tuple[Any, list[int]]:
    """A launcher's request (arguments, environment, directory) and its three streams."""
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if len(data) < 4:
        raise OSError("a short request")
    size = struct.unpack("!I", data[:4])[0]
    blob = data[4:]
    while len(blob) < size:
        more = connection.recv(size - len(blob))
        if not more:
            raise OSError("a short request")
        blob += more
    return marshal.loads(blob), list(fds)


#: PySpark's daemon runs as the warm daemon runs it: its reused workers must leave quietly
#: when Spark closes them idle (:mod:`kafka_direct.rdd.worker_exit`). A new interpreter's
#: daemon has that installed when a task first imports this package; in a fork of this
#: server the package is imported already, so it is installed before the daemon forks.
_DAEMONS = {"pyspark.daemon": "kafka_direct.runtime.worker_daemon"}


def _become(request: Any, fds: list[int], base: list[str]) -> None:
    """In the forked child: become ``python -m module args`` as asked; never returns."""
    import atexit
    import ctypes
    import runpy
    import traceback

    code: Any = 1
    try:
        args, environ, directory = request
        # Dies with the server (its parent), as a process of the JVM dies with it.
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        for number, fd in enumerate(fds[:3]):
            os.dup2(fd, number)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(environ)
        unbuffered = bool(environ.get("PYTHONUNBUFFERED"))
        # The process's own streams, for its life (as an interpreter's are).
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        if unbuffered:
            sys.stdout.reconfigure(write_through=True)
            sys.stderr.reconfigure(write_through=True)
        module = _DAEMONS.get(args[1], args[1])
        sys.argv = [args[0], *args[2:]]  # run_module puts the module's file first
        sys.path[:] = [directory, *_entries(environ.get("PYTHONPATH")), *base]
        # Run as __main__, as ``-m`` does: not the copy a package may have imported.
        sys.modules.pop(module, None)
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:  # a new interpreter's numpy seeds from the OS
            numpy_random.seed()
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as leaving:
            code = leaving.code
        except BaseException:
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        if code is None:
            code = 0
        elif not isinstance(code, int):
            with contextlib.suppress(BaseException):
                print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    finally:
        os._exit(code if isinstance(code, int) else 1)


def _preload() -> None:
    import gc
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(Exception):  # the child imports it again and reports
            importlib.import_module(name)
    # Out of the garbage collector's walks in every child (PySpark collects after tasks).
    gc.freeze()


def serve(address: str, listening: int) -> None:
    """Serve launchers on the socket ``listening`` until standard input closes (see the module).

    Then ``address``'s directory goes (the launcher's, whoever stopped the server), or only
    the socket when the driver said :data:`_KEEP` first (:meth:`ForkServer.stop`: the
    driver lives on, and so may its JVM, which knows the launcher).
    """
    own = dict(os.environ)
    mine = set(_entries(own.get("PYTHONPATH")))
    base = [entry for entry in sys.path[1:] if entry not in mine]
    listener = socket.socket(fileno=listening)
    kept = False
    try:
        kept = _serve(listener, own, base)
    finally:
        if kept:
            with contextlib.suppress(OSError):
                os.unlink(address)
        else:
            shutil.rmtree(os.path.dirname(address), ignore_errors=True)


def _serve(listener: socket.socket, own: dict[str, str], base: list[str]) -> bool:
    """Serve until standard input closes; whether the driver asked to keep the launcher."""
    _preload()
    said = b""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    os.set_blocking(wake_read, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    control = sys.stdin.fileno()
    while True:
        watched = [listener.fileno(), wake_read, control,
                   *(connection.fileno() for connection in waiting.values())]
        try:
            readable = set(select.select(watched, [], [])[0])
        except InterruptedError:
            continue
        if control in readable:
            told = os.read(control, 4096)
            if not told:
                return said.endswith(_KEEP)  # the driver is gone, or stopped the server
            said = (said + told)[-len(_KEEP):]
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 4096)
        _reap(waiting)
        for pid, connection in list(waiting.items()):
            if connection.fileno() in readable:
                with contextlib.suppress(OSError):
                    if connection.recv(1):
                        continue
                # The launcher is gone (killed): its process goes with it.
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if listener.fileno() in readable:
            _accept(listener, waiting, own, base, wake_read, wake_write)


def _reap(waiting: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = waiting.pop(pid, None)
        if connection is None:
            continue
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        with contextlib.suppress(OSError):
            connection.sendall(struct.pack("!i", code))
        connection.close()


def _accept(listener: socket.socket, waiting: dict[int, socket.socket], own: dict[str, str],
            base: list[str], wake_read: int, wake_write: int) -> None:
    connection, _ = listener.accept()
    fds: list[int] = []
    try:
        request, fds = _receive(connection)
        args, environ, _ = request
        if len(fds) < 3 or not _fits(args, environ, own):
            connection.sendall(struct.pack("!i", 0))  # the launcher runs the interpreter
            connection.close()
            return
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for other in waiting.values():
                other.close()
            listener.close()
            os.close(wake_read)
            os.close(wake_write)
            connection.close()
            _become(request, fds, base)
        try:
            connection.sendall(struct.pack("!i", pid))
        except OSError:
            # The launcher went (Spark destroyed it) before it learnt its child: nobody
            # would end the child, which runs with the launcher's streams.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            raise
        waiting[pid] = connection
    except (OSError, ValueError, EOFError, TypeError):
        logger.debug("a launcher's request failed", exc_info=True)
        with contextlib.suppress(OSError):
            connection.close()
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
    # Not the interpreter's own exit: it would tear every preloaded module down (PySpark,
    # pyarrow, pandas: 0.05-0.1 s, measured, which the context's stop waits for), and the
    # server has nothing left to close.
    for _stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            _stream.flush()
    os._exit(0)
