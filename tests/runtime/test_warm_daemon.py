"""The warm daemon: Spark's Python workers fork from a daemon that has their imports done."""

import os
import shutil
import subprocess
import sys

import pytest

from kafka_direct.runtime import warm_daemon, worker_daemon
from kafka_direct.runtime.spark_home import only_this_interpreter


def _worker_facts(_):
    import gc
    import os
    import sys

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
        parent = cmdline.read().replace(b"\0", b" ").decode()
    # Loaded before the task's own code ran: by the daemon, before the fork.
    daemon = sys.modules.get("pyspark.daemon")
    yield (parent, "pyarrow" in sys.modules, "kafka_direct.sql.source" in sys.modules,
           gc.get_freeze_count(),
           getattr(getattr(daemon, "worker", None), "_kafka_direct_quiet_idle_exit", False))


_CONTEXT_OF_ITS_OWN = """
import json
from kafka_direct.runtime.spark import spark_context
from tests.runtime.test_warm_daemon import _worker_facts
with spark_context("local[2]", "warm-daemon-test") as sc:
    print(json.dumps(sc.parallelize(range(2), 2).mapPartitions(_worker_facts).collect()))
"""


@pytest.mark.services
def test_workers_fork_from_the_warm_daemon_with_their_imports_done():
    # A context of its own, without the fork server the tests' session context has: the
    # warm daemon is what PySpark's own launch of its workers gets.
    import json
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", _CONTEXT_OF_ITS_OWN], capture_output=True,
                          text=True, timeout=240, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts
    for parent, arrow, source, frozen, quiet in facts:
        assert warm_daemon.DAEMON_MODULE in parent, parent
        assert arrow and source
        assert quiet  # closed idle, it leaves without a traceback
        # What it inherited is out of the collections PySpark runs after every task.
        assert frozen > 10_000, frozen


def test_the_daemon_module_is_found_by_a_new_process_of_this_interpreter():
    assert warm_daemon.daemon_module() == warm_daemon.DAEMON_MODULE


@pytest.mark.parametrize("value", ["off", "0", "false", "NO"])
def test_the_switch_keeps_pysparks_own_daemon(monkeypatch, value):
    monkeypatch.setenv(warm_daemon.SWITCH, value)
    assert warm_daemon.daemon_module() is None


def test_an_interpreter_that_cannot_import_it_is_not_given_it(tmp_path, monkeypatch):
    # Another interpreter (here the system's, without this package): Spark would start the
    # daemon with it, and it would fail to start. (A PYTHONPATH naming the package would
    # give it the package.)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    warm_daemon._importable_at_start.cache_clear()
    other = shutil.which("python3") if sys.base_prefix != sys.prefix else None
    if other is None or os.path.realpath(other) == os.path.realpath(sys.executable):
        pytest.skip("needs a second interpreter without this package")
    assert warm_daemon._importable_at_start(other, str(tmp_path)) is False
    assert warm_daemon._importable_at_start(sys.executable, str(tmp_path)) is True


def test_only_local_masters_running_this_interpreter(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    assert only_this_interpreter("local[2]")
    assert only_this_interpreter("local-cluster[2,1,1024]")
    assert not only_this_interpreter("yarn")
    assert not only_this_interpreter("spark://host:7077")
    assert not only_this_interpreter("local[2]", {"spark.pyspark.python": "/usr/bin/python3"})
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    assert not only_this_interpreter("local[2]")


def test_a_preload_that_fails_is_left_to_the_worker(monkeypatch):
    # The daemon still runs PySpark's loop when a preloaded module cannot be imported.
    ran = []
    monkeypatch.setattr(worker_daemon, "PRELOAD", ("no_such_module_here", "json"))
    monkeypatch.setattr(sys, "argv", ["daemon", "pyspark.no_such_worker"])
    import pyspark.daemon

    monkeypatch.setattr(pyspark.daemon, "manager", lambda: ran.append(True))
    monkeypatch.setattr(pyspark.daemon, "worker", pyspark.daemon.worker)  # restored after
    monkeypatch.setattr(worker_daemon.gc, "freeze", lambda: ran.append("frozen"))
    worker_daemon.main()
    assert ran == ["frozen", True]
    # A worker Spark closes idle leaves quietly, as under PySpark's daemon.
    assert getattr(pyspark.daemon.worker, "_kafka_direct_quiet_idle_exit", False)


def test_the_package_does_not_import_the_daemon_it_runs():
    # Run with -m, a module its package had imported already would run twice, and Python
    # prints a RuntimeWarning in every Spark worker's log (and the ingest job's terminal).
    import subprocess

    done = subprocess.run(
        [sys.executable, "-W", "error", "-c",
         "import sys, kafka_direct.testing, kafka_direct.testing.pytest_plugin; "
         f"sys.exit({warm_daemon.DAEMON_MODULE!r} in sys.modules)"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("settings", "wanted"), [
    ({}, True),
    ({"spark.python.daemon.module": "mine"}, False),
    ({"spark.submit.pyFiles": "shipped.zip"}, False),
    ({"spark.pyspark.python": "/usr/bin/python3"}, False),
])
def test_a_context_gets_the_warm_daemon_unless_its_settings_say_otherwise(
        monkeypatch, settings, wanted):
    from pyspark import SparkConf

    from kafka_direct.runtime.spark import warm_daemon_for

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.setIfMissing(key, value)  # as defaults are set, after the caller's settings
    expected = warm_daemon.DAEMON_MODULE if wanted else None
    assert warm_daemon_for("local[2]", conf) == expected
    assert warm_daemon_for("yarn", conf) is None


@pytest.mark.parametrize("line", ["spark.python.daemon.module  pyspark.daemon",
                                  "spark.submit.pyFiles=shipped.zip",
                                  "spark.python.daemon.module: mine"])
def test_a_daemon_or_files_in_spark_defaults_conf_keep_pysparks(monkeypatch, tmp_path, line):
    from pyspark import SparkConf

    from kafka_direct.runtime.spark import warm_daemon_for

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    conf = SparkConf(loadDefaults=False)
    assert warm_daemon_for("local[2]", conf) == warm_daemon.DAEMON_MODULE
    (tmp_path / "spark-defaults.conf").write_text(f"# comment\n{line}\n")
    assert warm_daemon_for("local[2]", conf) is None


def test_the_check_started_ahead_is_the_one_the_decision_waits_for(monkeypatch, tmp_path):
    # A context's start runs the check (a new interpreter importing the daemon) while it
    # imports PySpark: the decision then waits for that process instead of starting one.
    monkeypatch.chdir(tmp_path)
    warm_daemon._importable_at_start.cache_clear()
    monkeypatch.setattr(warm_daemon, "_checked", set())
    started = []
    popen = subprocess.Popen

    def recorded(*args, **kwargs):
        started.append(args[0])
        return popen(*args, **kwargs)

    def not_again(*args, **kwargs):
        raise AssertionError("the check ran a second time")

    monkeypatch.setattr(warm_daemon.subprocess, "Popen", recorded)
    monkeypatch.setattr(warm_daemon.subprocess, "run", not_again)
    warm_daemon.check_ahead()
    warm_daemon.check_ahead()  # one check per interpreter and folder
    assert started == [[sys.executable, "-c", f"import {warm_daemon.DAEMON_MODULE}"]]
    assert warm_daemon.daemon_module() == warm_daemon.DAEMON_MODULE
    warm_daemon.check_ahead()  # answered: nothing more to start
    assert len(started) == 1
    warm_daemon._importable_at_start.cache_clear()


def test_a_contexts_settings_start_the_check_before_pyspark_is_imported(monkeypatch):
    from kafka_direct.runtime import spark

    asked = []
    monkeypatch.setattr(spark, "check_ahead", lambda: asked.append(True))
    spark._context_conf("local[1]", "x", None, True, True, None, False)
    assert asked == [True]
    asked.clear()
    spark._context_conf("local[1]", "x", None, False, True, None, False)
    assert asked == []  # no quick settings, no warm daemon: no check
