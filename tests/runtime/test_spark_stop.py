"""A context's stop does not wait for PySpark's accumulator server to notice it."""

import threading
import time

import pytest

from kafka_direct.runtime.spark import _stop_context


class SlowAccumulatorServer:
    """As PySpark's: its shutdown returns once the handler's next poll (a second) saw it."""

    def __init__(self):
        self.asked = threading.Event()
        self.release = threading.Event()

    def shutdown(self):
        self.asked.set()
        self.release.wait(30)


class Context:
    """Just enough of a SparkContext: its stop shuts the accumulator server down."""

    def __init__(self):
        self._accumulatorServer = SlowAccumulatorServer()
        self.stopped = False

    def stop(self):
        self.stopped = True
        if self._accumulatorServer:
            self._accumulatorServer.shutdown()
            self._accumulatorServer = None


def test_the_accumulator_server_stops_beside_the_caller():
    # The ingest job waited 0.8 s for it at its end, measured, before its summary.
    sc = Context()
    server = sc._accumulatorServer
    started = time.monotonic()
    _stop_context(sc)
    assert sc.stopped and time.monotonic() - started < 10
    assert server.asked.wait(10)  # it is stopped all the same
    server.release.set()


def test_a_context_that_fails_to_stop_still_has_its_accumulator_server_stopped():
    class Failing(Context):
        def stop(self):
            raise RuntimeError("the JVM is gone")

    sc = Failing()
    server = sc._accumulatorServer
    with pytest.raises(RuntimeError, match="the JVM is gone"):
        _stop_context(sc)
    assert server.asked.wait(10)
    server.release.set()


STOP_THEN_END_THE_JVM = """
from kafka_direct.runtime.spark import spark_context
with spark_context(master="local[1]", own_session=True) as sc:
    sc.parallelize(range(2), 1).map(lambda x: x).collect()  # the JVM connects for updates
    gateway = sc._gateway
gateway.shutdown()
gateway.proc.stdin.close()  # the JVM ends while the accumulator server still stops
gateway.proc.wait(60)
print("ENDED", flush=True)
"""


def run_script(tmp_path, source, timeout=180):
    """Run ``source`` as a script of its own with this checkout's package."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "script.py"
    script.write_text(source)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=root)


def test_a_jvm_that_ends_while_the_accumulator_server_stops_prints_nothing(tmp_path):
    # The server's handler then reads the JVM's closed connection: an EOFError that
    # socketserver would print as a traceback, though nothing was lost.
    done = run_script(tmp_path, STOP_THEN_END_THE_JVM)
    assert "ENDED" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_the_exit_does_not_wait_for_a_stopping_server_and_removes_its_socket_file(tmp_path):
    from kafka_direct.runtime import spark_stop

    class UnixServer(SlowAccumulatorServer):
        def __init__(self, path):
            super().__init__()
            self.server_address = str(path)

    path = tmp_path / "accumulators.sock"
    path.write_text("")
    sc = Context()
    sc._accumulatorServer = server = UnixServer(path)
    _stop_context(sc)
    assert server.asked.wait(10)  # still stopping: its poll has not come
    started = time.monotonic()
    spark_stop.await_stopping()
    assert time.monotonic() - started < 0.5
    assert not path.exists()
    server.release.set()


END_THE_IDLE_JVM = """
import os
from kafka_direct.runtime.spark import end_jvm, spark_context
with spark_context(master="local[1]", own_session=True) as sc:
    sc.parallelize(range(2), 1).map(lambda x: x).collect()
    print("WHILE", end_jvm(), flush=True)  # a context runs: its JVM stays
    folder = sc._temp_dir  # Spark's folder for the context: its shutdown hooks remove it
    first = sc._gateway.proc
process = end_jvm()
print("ENDING", process is first, process.wait(60), os.path.exists(folder), flush=True)
print("NONE LEFT", end_jvm(), flush=True)
with spark_context(master="local[1]") as sc:  # a later context launches a JVM of its own
    print("AGAIN", sc.parallelize(range(4), 1).sum(), sc._gateway.proc.pid != first.pid,
          flush=True)
"""


def test_an_idle_jvm_ends_at_once_with_its_shutdown_hooks_and_a_later_context_gets_a_new_one(
        tmp_path):
    # The ingest command ends its JVM as soon as its job's context stopped: the JVM's exit
    # (Spark's shutdown hooks) then runs beside the command's summary, not after its exit.
    done = run_script(tmp_path, END_THE_IDLE_JVM, timeout=240)
    output = done.stdout + done.stderr[-3000:]
    assert "WHILE None" in done.stdout, output
    assert "ENDING True 0 False" in done.stdout, output  # exited cleanly, its folder gone
    assert "NONE LEFT None" in done.stdout, output
    assert "AGAIN 6 True" in done.stdout, output
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
