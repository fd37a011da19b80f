"""The fork server: Spark's ``python -m ...`` processes forked with their imports done."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from kafka_direct.runtime import fork_server
from kafka_direct.runtime.fork_server import ForkServer

PROBE = textwrap.dedent("""
    import json, os, sys, time
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "name": __name__,
                      "ppid": os.getppid(), "asked": os.environ.get("ASKED"),
                      "loaded": "pyarrow" in sys.modules, "path0": sys.path[0],
                      "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
    sys.stdout.flush()
    if sys.argv[1:2] == ["sleep"]:
        time.sleep(60)
    sys.exit(int(os.environ.get("EXIT_CODE", "0")))
""")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    probes = tmp_path_factory.mktemp("probes")
    (probes / "fork_probe.py").write_text(PROBE)
    path = os.pathsep.join([str(probes), *filter(None, [os.environ.get("PYTHONPATH")])])
    environ = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    started = ForkServer(sys.executable, environ)
    yield started, environ
    started.stop()


def run(server, args, cwd, **extra):
    started, environ = server
    return subprocess.run([started.launcher, *args], input="from the launcher",
                          capture_output=True, text=True, cwd=cwd, timeout=60,
                          env={**environ, **started.environment(), **extra})


def facts(output):
    lines = [line for line in output.splitlines() if line.startswith("{")]
    return json.loads(lines[0]) if lines else {}


def test_a_module_runs_in_a_fork_of_the_server_as_in_a_new_interpreter(server, tmp_path):
    done = run(server, ["-m", "fork_probe", "a", "b c"], tmp_path, ASKED="yes", EXIT_CODE="3")
    assert done.returncode == 3, done.stderr
    seen = facts(done.stdout)
    assert seen["argv"] == ["a", "b c"]
    assert (seen["cwd"], seen["name"], seen["asked"]) == (str(tmp_path), "__main__", "yes")
    assert seen["ppid"] == server[0].process.pid  # forked by the server
    assert seen["loaded"] and seen["path0"] == str(tmp_path)  # the server's imports
    assert seen["stdin"] == "from the launcher"
    assert done.stderr == "to stderr\n"


def test_pysparks_daemon_in_a_fork_lets_a_worker_closed_idle_leave_quietly(server, tmp_path):
    # A fork has this package imported already, so the quiet exit its import installs in a
    # new interpreter's daemon workers must be there before the daemon forks.
    started, environ = server
    # The daemon's socket path must stay under the 108 bytes of a Unix socket's address.
    sockets = tempfile.TemporaryDirectory(prefix="kd-")
    env = {**environ, **started.environment(), "PYTHON_UNIX_DOMAIN_ENABLED": "true",
           "PYTHON_WORKER_FACTORY_SOCK_DIR": sockets.name, "SPARK_REUSE_WORKER": "1",
           "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE": "true"}
    daemon = subprocess.Popen([started.launcher, "-m", "pyspark.daemon", "pyspark.worker"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        header = daemon.stdout.read(4)
        if len(header) != 4:
            daemon.kill()
            pytest.fail(f"the daemon did not start: {daemon.stderr.read().decode()}")
        (length,) = struct.unpack("!i", header)
        with socket.socket(socket.AF_UNIX) as worker:
            worker.connect(daemon.stdout.read(length).decode())
            (pid,) = struct.unpack("!i", worker.recv(4))
            assert pid > 0
        # Spark closed the idle worker; the daemon ends when its stdin closes.
        time.sleep(1)
        daemon.stdin.close()
        daemon.wait(30)
        assert daemon.stderr.read().decode() == ""  # as a new interpreter's daemon
    finally:
        daemon.kill()
        daemon.wait()
        sockets.cleanup()


@pytest.mark.parametrize("args, extra", [
    (["-c", "import json, os; print(json.dumps({'ppid': os.getppid()}))"], {}),
    (["-m", "fork_probe"], {"PYTHONHASHSEED": "1"}),  # a hash seed a fork cannot have
    (["-m", "fork_probe"], {"PYTHONPATH": "more"}),  # another place to import from
    # Read when PySpark's serializers are imported (the server imported them without it).
    (["-m", "fork_probe"], {"PYSPARK_ENABLE_NAMEDTUPLE_PATCH": "1"}),
])
def test_what_a_fork_cannot_be_runs_the_interpreter_itself(server, tmp_path, args, extra):
    if extra.get("PYTHONPATH") == "more":
        extra = {"PYTHONPATH": os.pathsep.join([str(tmp_path), server[1]["PYTHONPATH"]])}
    done = run(server, args, tmp_path, **extra)
    ppid = facts(done.stdout).get("ppid")
    assert ppid is not None and ppid != server[0].process.pid, done.stdout + done.stderr


def test_sparks_version_question_is_answered_without_a_new_interpreter(server, tmp_path):
    # Spark's JVM asks the interpreter's version before it looks up the Python data sources:
    # the launcher is that interpreter, so it answers (a new one, run with the import-time
    # report asked for, would write the report).
    done = run(server, ["-c", fork_server.VERSION_QUESTION], tmp_path,
               PYTHONPROFILEIMPORTTIME="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{sys.version_info[0]}.{sys.version_info[1]}\n"
    assert done.stderr == ""
    # Any other code still runs in the interpreter itself.
    other = run(server, ["-c", fork_server.VERSION_QUESTION + " "], tmp_path,
                PYTHONPROFILEIMPORTTIME="1")
    assert other.stdout == f"{sys.version_info[0]}.{sys.version_info[1]}\n"
    assert "import time:" in other.stderr


def test_no_server_runs_the_interpreter_itself(server, tmp_path):
    done = run(server, ["-m", "fork_probe"], tmp_path,
               **{fork_server.SOCKET_ENV: str(tmp_path / "none")})
    assert done.returncode in (0, 1)  # the probe is not on this path: import error, not a hang
    assert str(server[0].process.pid) not in done.stdout


def test_a_launcher_outlives_its_stopped_server_and_runs_the_interpreter_itself(tmp_path):
    # A JVM outlives the context that started the server (PySpark keeps it for the next
    # context of the process) and still starts Python processes with the launcher it was
    # given: they must run, as new interpreters, not fail as a program that is not there.
    started = ForkServer(sys.executable)
    started.stop()
    (tmp_path / "fork_probe.py").write_text(PROBE)
    done = subprocess.run([started.launcher, "-m", "fork_probe"], input="", text=True,
                          capture_output=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, **started.environment(),
                               "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert facts(done.stdout)["name"] == "__main__"
    assert not os.path.exists(started.socket)


def children(server):
    """The server's children: (pid, state) from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue  # gone meanwhile
        state, parent = text[text.rindex(")") + 2:].split()[:2]
        if int(parent) == server.process.pid:
            found.append((int(entry), state))
    return found


def child_of(server, launcher):
    """The forked child serving ``launcher`` (a child of the server that is not a daemon)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for pid, _ in children(server):
            return pid
        time.sleep(0.05)
    raise AssertionError("no child")


def gone(pid, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(") ")[1].startswith("Z"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sent, code", [(signal.SIGTERM, -signal.SIGTERM),
                                        (signal.SIGKILL, -signal.SIGKILL)])
def test_the_child_ends_with_its_launcher(server, tmp_path, sent, code):
    started, environ = server
    launcher = subprocess.Popen([started.launcher, "-m", "fork_probe", "sleep"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                env={**environ, **started.environment()}, cwd=tmp_path)
    child = child_of(started, launcher)
    launcher.send_signal(sent)  # SIGTERM is relayed; SIGKILL: the server kills the child
    assert launcher.wait(timeout=20) == code
    assert gone(child)


def test_stopping_the_server_ends_its_children(tmp_path):
    (tmp_path / "fork_probe.py").write_text(PROBE)
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    environ = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    started = ForkServer(sys.executable, environ)
    launcher = subprocess.Popen([started.launcher, "-m", "fork_probe", "sleep"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                env={**environ, **started.environment()}, cwd=tmp_path)
    child = child_of(started, launcher)
    started.stop()
    assert gone(child)
    assert launcher.wait(timeout=20) != 0
    # The socket goes with the server; the launcher stays while this process lives (its
    # JVM may still start it: see the next test), and its folder goes when it exits.
    assert not os.path.exists(started.socket) and os.path.exists(started.launcher)


def test_a_stopped_servers_folder_goes_when_its_driver_exits_and_with_a_killed_driver():
    script = textwrap.dedent("""
        import os, signal, sys
        from kafka_direct.runtime.fork_server import ForkServer
        started = ForkServer(sys.executable)
        if sys.argv[1] == "stop":
            started.stop()
        print(started.directory, flush=True)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    for how in ("stop", "kill"):
        done = subprocess.run([sys.executable, "-c", script, how], capture_output=True,
                              text=True, timeout=60)
        folder = done.stdout.strip()
        assert folder.startswith(tempfile.gettempdir()), done.stderr
        deadline = time.monotonic() + 20  # a killed driver's server notices, then removes it
        while os.path.exists(folder) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(folder), how


@pytest.mark.parametrize("value", ["off", "0", "false", "NO"])
def test_the_switch_turns_it_off(monkeypatch, value):
    monkeypatch.setenv(fork_server.SWITCH, value)
    assert fork_server.wanted() is False


SPARK_JOB = textwrap.dedent("""
    import os
    from kafka_direct.runtime.spark import spark_context

    def parents(_):
        import os
        with open(f"/proc/{os.getppid()}/stat") as stat:
            text = stat.read()
        yield int(text[text.rindex(")") + 2:].split()[1])  # the daemon's parent

    with spark_context("local[2]", "fork-server-test", fork_server=True) as sc:
        from kafka_direct.runtime.spark import _servers
        server = _servers[id(sc)].process.pid
        found = set(sc.parallelize(range(2), 2).mapPartitions(parents).collect())
        print("forked" if found == {server} else f"not forked: {found} vs {server}")
""")


@pytest.mark.slow
def test_sparks_workers_fork_from_the_server(tmp_path):
    done = subprocess.run([sys.executable, "-c", SPARK_JOB], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert "forked" in done.stdout.splitlines(), done.stdout + done.stderr[-3000:]
    assert "not forked" not in done.stdout



def live_children(server):
    """The server's children that run (not zombies)."""
    return [pid for pid, state in children(server) if state != "Z"]


def test_a_launcher_gone_before_it_learnt_its_child_leaves_no_child(server, tmp_path):
    # A launcher killed (Spark's destroy()) after it asked but before the server answered:
    # the child must not outlive it (it would run with the launcher's streams).
    import array
    import marshal
    import socket
    import struct

    started, environ = server
    output = tmp_path / "output"
    request = (["-m", "fork_probe", "sleep"], {**environ, **started.environment()},
               str(tmp_path))
    blob = marshal.dumps(request)
    with open(os.devnull, "rb") as stdin, open(output, "wb") as out:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(started.socket)
        connection.sendmsg([struct.pack("!I", len(blob)) + blob], [(
            socket.SOL_SOCKET, socket.SCM_RIGHTS,
            array.array("i", [stdin.fileno(), out.fileno(), out.fileno()]))])
        connection.close()  # gone before reading the child's pid
    time.sleep(3)  # the probe prints at once, then sleeps a minute
    deadline = time.monotonic() + 10
    while live_children(started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not live_children(started), output.read_text()
