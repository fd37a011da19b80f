"""Runs PySpark tests that start SparkContexts of their own in a Python process of their own.

A process can hold one SparkContext at a time, and the rest of the session shares one; PySpark's
``CheckpointTests`` create and stop theirs (in their ``setup()`` functions), so each of those
tests runs alone in a fresh interpreter, with the master given as spark-submit would give it.
The test passes or fails with that process; its output is shown when it fails.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.runtime.spark import driver_java_options, spark_context
from kafka_direct.runtime.spark_home import compiled_spark_home, only_this_interpreter
from kafka_direct.runtime.warm_daemon import daemon_module
from tests.conformance.kafka_sql_utils import REFERENCE

_CHILD = "KAFKA_DIRECT_OWN_PROCESS_TEST"
_ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT_S = 240


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "own_process: the test starts SparkContexts itself; it runs in a process "
        "of its own")


def _run_alone(item: pytest.Item) -> None:
    env = dict(os.environ)
    env[_CHILD] = "1"
    # Spark's Python workers run this interpreter, as the suite's own contexts have them
    # (kafka_direct.testing.spark_context), not whatever python3 is first on the PATH.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    # The driver JVM as the suite's others: quick to start (kafka_direct.runtime.spark).
    home = compiled_spark_home("local[2]")  # Spark's Python processes import PySpark compiled
    if home is not None and not env.get("SPARK_HOME"):
        env["SPARK_HOME"] = str(home)
    # Their Python workers fork from the suite's warm daemon (kafka_direct.runtime.warm_daemon).
    module = daemon_module() if only_this_interpreter("local[2]") else None
    daemon = f"--conf spark.python.daemon.module={module} " if module else ""
    env["PYSPARK_SUBMIT_ARGS"] = ("--master local[2] --driver-java-options "
                                  f"{shlex.quote(driver_java_options())} {daemon}pyspark-shell")
    # Every test the node id names, slow or not (tests/conftest.py leaves slow ones out
    # unless -m names them).
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-m", "slow or not slow", "--timeout", str(_TIMEOUT_S - 20), item.nodeid]
    try:
        done = subprocess.run(command, cwd=_ROOT, env=env, capture_output=True, text=True,
                              timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"{item.nodeid} did not end in {_TIMEOUT_S} s in its own process:\n"
                    f"{timeout.stdout or ''}{timeout.stderr or ''}"[-6000:], pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"{item.nodeid} failed in its own process (exit {done.returncode}):\n"
                    + (done.stdout + done.stderr)[-6000:], pytrace=False)
    if " passed" not in done.stdout:
        pytest.fail(f"{item.nodeid} did not pass in its own process:\n{done.stdout[-3000:]}",
                    pytrace=False)


def _starts_spark(item: pytest.Item) -> bool:
    """Whether the test starts Spark itself: in its own process, or in its class's set-up."""
    if item.get_closest_marker("own_process") is not None:
        return True
    cls = getattr(item, "cls", None)
    return cls is not None and any(base.__name__ == "PySparkStreamingTestCase"
                                   for base in cls.__mro__)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _starts_spark(item):
            item.add_marker(pytest.mark.services)
    if os.environ.get(_CHILD):
        return
    for item in items:
        if item.get_closest_marker("own_process") is None:
            continue

        def runtest(item: Any = item) -> None:
            _run_alone(item)

        item.runtest = runtest  # type: ignore[method-assign]


if REFERENCE:
    @pytest.fixture(scope="session")
    def spark() -> Any:
        """The reference run's SparkContext (KAFKA_DIRECT_CONFORMANCE_FORMAT=kafka): the
        plugin's, with Spark's own Kafka connector of PySpark's release on its class path
        (resolved into the user's cache the first time; Maven Central serves only some
        releases, kafka_direct.testing.jvm_peers names them). Only under the switch: the
        default run resolves nothing and keeps the plugin's fixture."""
        import pyspark

        from kafka_direct.testing.jvm_peers import spark_jars_option

        version = pyspark.__version__
        jars = spark_jars_option(version, Path(pyspark.__file__).resolve().parent)
        with spark_context(conf={"spark.jars": jars}) as sc:
            yield sc


@pytest.fixture(scope="session")
def spark_session(spark: Any) -> Any:
    """A classic SparkSession over the session's SparkContext, kafka-direct's formats registered.

    For the translated kafka-0-10-sql suites (``test_kafka_*.py``).
    """
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    session = SparkSession.builder.getOrCreate()
    session.conf.set("spark.sql.shuffle.partitions", "2")
    kafka_direct.sql.register(session)
    return session
