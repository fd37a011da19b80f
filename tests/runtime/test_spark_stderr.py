"""The JVM's error output reaches an application's terminal without Spark's start-up notes."""

import contextlib
import io
import os
import threading

from kafka_direct.runtime.spark import _relay_stderr

NOISE = [
    "WARNING: Using incubator modules: jdk.incubator.vector",
    "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties",
    'Setting default log level to "WARN".',
    "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use "
    "setLogLevel(newLevel).",
    "26/11/26 14:56:54 WARN NativeCodeLoader: Unable to load native-hadoop library for your "
    "platform... using builtin-java classes where applicable",
]
KEPT = [
    "26/11/26 14:57:01 WARN TaskSetManager: Lost task 0.0 in stage 1.0: boom",
    "Traceback (most recent call last):",
    "WARNING: Using incubator modules in a sentence of a user's own",
    "caf\u00e9 \ufffd bytes",
    # A note with something else on its line is not the note.
    "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use "
    "setLogLevel(newLevel).26/11/26 ERROR SparkContext: boom",
]


def pipe_with(lines):
    """A pipe the lines are written into (by a thread: more than a pipe's buffer holds)."""
    read, write = os.pipe()

    def feed():
        with os.fdopen(write, "wb") as writer:
            writer.write("".join(f"{line}\n" for line in lines).encode())

    threading.Thread(target=feed, daemon=True).start()
    return os.fdopen(read, "rb")


def test_the_start_up_notes_are_dropped_and_everything_else_is_relayed():
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    lines = [NOISE[0], KEPT[0], *NOISE[1:], *KEPT[1:]]
    _relay_stderr(pipe_with(lines), out)
    out.flush()
    assert out.buffer.getvalue().decode().splitlines() == KEPT


def test_a_text_only_stderr_gets_text_and_a_broken_one_does_not_stop_the_draining():
    text = io.StringIO()
    _relay_stderr(pipe_with(KEPT), text)
    assert text.getvalue().splitlines() == KEPT

    class Broken:
        writes = 0

        def write(self, data):
            Broken.writes += 1
            raise OSError("gone")

        def flush(self):
            pass

    stream = pipe_with(KEPT * 1000)
    _relay_stderr(stream, Broken())
    assert Broken.writes == len(KEPT) * 1000 and stream.closed


LAUNCH = """
import sys
from kafka_direct.runtime import spark
try:
    spark._make_context("local[1]", "x", None, own_session=True)
except Exception as error:
    print("RAISED", type(error).__name__, flush=True)
"""


def fake_spark_home(tmp_path, script):
    submit = tmp_path / "bin" / "spark-submit"
    submit.parent.mkdir()
    submit.write_text("#!/bin/sh\n" + script)
    submit.chmod(0o755)
    return tmp_path


def launch_with(home, timeout):
    import subprocess
    import sys

    env = {**os.environ, "SPARK_HOME": str(home)}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return subprocess.run([sys.executable, "-c", LAUNCH], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_jvm_that_dies_at_start_has_its_last_words_shown(tmp_path):
    home = fake_spark_home(tmp_path, "echo 'Unrecognized VM option Foo' >&2\n"
                                     "echo 'Error: Could not create the Java Virtual "
                                     "Machine.' >&2\nexit 1\n")
    done = launch_with(home, 60)
    assert "RAISED" in done.stdout
    assert "Unrecognized VM option Foo" in done.stderr
    assert "Could not create the Java Virtual Machine" in done.stderr


def test_a_jvm_writing_much_before_it_answers_is_not_blocked(tmp_path):
    import subprocess

    marker = tmp_path / "wrote-everything"
    home = fake_spark_home(tmp_path, "head -c 300000 /dev/zero | tr '\\0' x >&2\n"
                                     f"touch {marker}\nexit 1\n")
    # The defect: the launch blocked on a pipe nobody read, and timed out.
    with contextlib.suppress(subprocess.TimeoutExpired):
        launch_with(home, 60)
    assert marker.exists()


HOSTNAME = [
    "26/12/05 15:52:05 WARN Utils: Your hostname, vm, resolves to a loopback address: "
    "127.0.0.1; using 192.0.2.2 instead (on interface eth0)",
    "26/12/05 15:52:05 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address",
]


def test_the_machines_notes_are_shown_only_when_verbose(caplog):
    import logging

    quiet = io.StringIO()
    _relay_stderr(pipe_with([*HOSTNAME, *KEPT]), quiet)
    assert quiet.getvalue().splitlines() == KEPT
    verbose = io.StringIO()
    with caplog.at_level(logging.INFO, logger="kafka_direct.runtime.spark"):
        _relay_stderr(pipe_with([*HOSTNAME, *KEPT]), verbose)
    assert verbose.getvalue().splitlines() == [*HOSTNAME, *KEPT]
