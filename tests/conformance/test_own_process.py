"""PySpark tests that start their own SparkContext get the suite's quick Spark (conftest.py)."""

import pytest

from kafka_direct.runtime.spark_home import compiled_spark_home, only_this_interpreter
from kafka_direct.runtime.warm_daemon import DAEMON_MODULE, daemon_module


def _facts(_):
    import os

    import pyspark

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
        yield cmdline.read().replace(b"\0", b" ").decode(), pyspark.__file__


@pytest.mark.own_process
def test_a_context_of_its_own_forks_workers_from_the_warm_daemon():
    from pyspark import SparkConf, SparkContext

    if daemon_module() is None or not only_this_interpreter("local[2]"):
        pytest.skip("the warm daemon does not apply to this interpreter")
    sc = SparkContext(conf=SparkConf())
    try:
        (parent, pyspark_file), = sc.parallelize([0], 1).mapPartitions(_facts).collect()
    finally:
        sc.stop()
    assert DAEMON_MODULE in parent, parent
    if compiled_spark_home("local[2]") is not None:
        assert ".zip" not in pyspark_file  # the compiled Spark home, as the suite's own
