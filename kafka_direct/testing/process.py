"""Child processes for embedded services: free ports, logs, and no orphans.

Every service process is started with ``PR_SET_PDEATHSIG``, so the kernel signals it when
the thread that started it dies, even by ``kill -9``: a killed test run leaves no server
behind. Start services from a long-lived thread (the main thread, a session fixture).

Where util-linux's ``setpriv`` can set that signal (2.33 and later), the service starts
through it and Python starts no code in the child: with a ``preexec_fn`` Python has to
fork, and a fork in a process that holds gRPC's threads (a Spark Connect client in the same
test process) runs gRPC's fork handlers in the child, which may abort it before ``exec``.
Without ``setpriv`` the child sets the signal itself, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from kafka_direct.errors import ServiceError

__all__ = ["LocalService", "ServiceProcess", "all_stopped", "free_port", "log_tail",
           "wait_for"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_running: weakref.WeakSet[ServiceProcess] = weakref.WeakSet()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_for(check: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Call ``check`` until it returns true or ``timeout`` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if check():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _child_setup(death_signal: int, uid: int | None, gid: int | None) -> Callable[[], None]:
    libc_name = ctypes.util.find_library("c")

    def setup() -> None:
        os.setpgid(0, 0)  # a terminal's Ctrl-C goes to the test run, which then stops us
        if gid is not None:
            os.setgroups([])
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
        # After setuid: a change of credentials clears the parent-death signal.
        if libc_name:
            ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, death_signal)

    return setup


@functools.cache
def _setpriv() -> str | None:
    """util-linux's ``setpriv`` when it can set the parent-death signal, else None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, timeout=10,
                               check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if b"--pdeathsig" in usage else None


def _launch_argv(argv: Sequence[str], death_signal: int, uid: int | None,
                 gid: int | None) -> list[str] | None:
    """``argv`` behind ``setpriv`` (death signal, then user and group), or None without it."""
    setpriv = _setpriv()
    if setpriv is None:
        return None
    try:
        name = signal.Signals(death_signal).name
    except ValueError:  # a number Python does not name (a real-time signal): prctl takes it
        return None
    prefix = [setpriv, "--pdeathsig", name]
    if gid is not None:
        prefix += [f"--regid={gid}", "--clear-groups"]
    if uid is not None:
        prefix.append(f"--reuid={uid}")
    return [*prefix, "--", *argv]


def _wait_past(process: subprocess.Popen[bytes], launcher: str, service: str,
               timeout: float = 10.0) -> None:
    """Wait until ``process`` runs something other than ``launcher`` (or has exited).

    Its executable's link says so first: the kernel sets it before a vfork parent resumes,
    the name only later. Once the service runs as another user, a starter without
    ``CAP_SYS_PTRACE`` may not read the link: then the name, which anyone may read, once it
    is neither the launcher's nor this process's (a child not yet past its first exec). A
    service that is this very interpreter is told only from the launcher.
    """
    try:
        own = os.readlink("/proc/self/exe")
        with open("/proc/self/comm") as comm:
            names = {os.path.basename(launcher)[:15], comm.read().strip()}  # 15: the kernel's
    except OSError:
        return  # no /proc to ask: the race stays as narrow as exec makes it
    before = {os.path.realpath(launcher), own}
    found = shutil.which(service)
    if found is not None and os.path.realpath(found) == own:
        before.discard(own)
        names = {os.path.basename(launcher)[:15]}
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{process.pid}/exe") not in before:
                return
        except PermissionError:
            try:
                with open(f"/proc/{process.pid}/comm") as comm:
                    if comm.read().strip() not in names:
                        return
            except OSError:
                return  # gone
        except OSError:
            return  # gone
        time.sleep(0.001)


class ServiceProcess:
    """One service process with its log file.

    Args:
        name: The service's name, for messages.
        argv: Command line.
        log_path: Where stdout and stderr go.
        env: Environment (default: this process's).
        uid: Run as this user id (needs root).
        gid: Run with this group id (needs root).
        death_signal: What the kernel sends the process when its starter dies.
        stop_signal: What :meth:`stop` sends first.
    """

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *,
                 env: dict[str, str] | None = None, uid: int | None = None,
                 gid: int | None = None, death_signal: int = signal.SIGKILL,
                 stop_signal: int = signal.SIGTERM) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.uid = uid
        self.gid = gid
        self.death_signal = death_signal
        self.stop_signal = stop_signal
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (its log is appended to)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The log's directory may belong to the service's (less trusted) user: never follow
        # a link planted there, and let nobody else read what the service says.
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     0o600)
        launch = _launch_argv(self.argv, self.death_signal, self.uid, self.gid)
        with open(fd, "ab") as log:
            if launch is not None:
                # No Python in the child: a new process group (a terminal's Ctrl-C goes to
                # the test run, which then stops us), the rest done by setpriv before exec.
                self.process = subprocess.Popen(
                    launch, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=self.env, close_fds=True, process_group=0,
                )
                # setpriv sets the death signal after Popen returns, then runs the service:
                # until it has, a starter that dies would leave the service behind.
                _wait_past(self.process, launch[0], self.argv[0])
            else:
                self.process = subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=self.env, close_fds=True,
                    preexec_fn=_child_setup(self.death_signal, self.uid, self.gid),
                )
        _running.add(self)
        logger.info("started %s (pid %d)", self.name, self.process.pid)

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, check: Callable[[], bool], timeout: float) -> None:
        """Wait until ``check`` passes; on death or timeout raise ServiceError with the log."""
        deadline = time.monotonic() + timeout
        while self.alive():
            with contextlib.suppress(Exception):
                if check():
                    return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        code = self.process.poll() if self.process is not None else None
        tail = log_tail(self.log_path)
        self.stop()
        state = f"exited with code {code}" if code is not None else (
            f"did not answer within {timeout:.0f} s")
        raise ServiceError(
            f"{self.name} failed to start: it {state}. Last lines of {self.log_path}:\n"
            f"{tail}", service=self.name, log_tail=tail)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop gracefully with ``stop_signal``, then kill after ``timeout`` seconds."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(self.stop_signal)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop within %.0f s; killing it", self.name, timeout)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait(10)
        self.process = None
        _running.discard(self)

    def kill(self) -> None:
        """Kill the process at once (a crash, for fault tests)."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(10)
        self.process = None
        _running.discard(self)


def all_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (or it is gone, or /proc cannot say)."""
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as status:
                if status.read().rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z", "X"):
                    return False
    except OSError:
        return True
    return True


class LocalService:
    """What an embedded service running as a child process has in common (a mixin).

    Subclasses set ``_process`` when started, ``_root`` to their directory and ``_own_dir``
    when they created it, and implement ``start``.
    """

    _process: ServiceProcess | None = None
    _root: Path
    _own_dir = False

    def start(self) -> LocalService:
        """Start the service."""
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The service's process id while it runs."""
        process = self._process.process if self._process is not None else None
        return process.pid if process is not None and process.poll() is None else None

    def alive(self) -> bool:
        """Whether the service's process runs (paused counts as running)."""
        return self._process is not None and self._process.alive()

    def stop(self) -> None:
        """Stop gracefully; the data stays for :meth:`restart`."""
        if self._process is not None:
            self._process.stop()
            self._process = None

    def send_signal(self, signum: int) -> None:
        """Send a signal to the service process, if it runs."""
        if self._process is not None and self._process.process is not None:
            self._process.process.send_signal(signum)

    def pause(self, timeout: float = 10.0) -> None:
        """Freeze the service (SIGSTOP): connections stay open but nothing answers.

        Returns once every thread of the process has stopped: on a loaded machine a thread
        that has not been scheduled since the signal could still answer a request sent
        right after it (seen: a batch planned after a broker's pause read the log end).
        """
        process = self._process.process if self._process is not None else None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all_stopped(process.pid):
            time.sleep(0.001)

    def resume(self) -> None:
        """Let a paused service run again (SIGCONT)."""
        self.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop and start again on the same port with the same data."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop and delete the data directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self._root, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _stop_all() -> None:
    for service in list(_running):
        with contextlib.suppress(Exception):
            service.stop(timeout=5.0)
