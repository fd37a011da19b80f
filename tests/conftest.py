"""Which tests run (``slow`` ones only when asked for, ``services`` exact), shared fixtures.

``slow`` (long fault and soak runs) are left out unless the ``-m`` expression names them
(``-m slow``, ``-m "slow or not slow"``), so ``-m "not services"`` is the quick unit run.

``services``: the kafka_direct plugin marks the tests that use its service fixtures
(``kafka``, ``postgres``, ``spark``...). Here the fixtures of this suite that start services
of their own are added; tests that start services themselves (``local_kafka()``, a
SparkContext, a job in a subprocess) carry the mark in their module, class or parameters. A
test without the mark that starts a service process or a Spark JVM in this process fails at
once, naming the mark, so a missing one shows in the default run too.
"""

import shutil
import tempfile
from pathlib import Path

import pytest

from kafka_direct.testing import local_kafka

#: Fixtures of this suite that start a service without using the plugin's fixtures.
OWN_SERVICE_FIXTURES = frozenset({"own_kafka"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if OWN_SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)
    if "slow" not in (config.getoption("markexpr") or ""):
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def _refuse(what):
    def refuse(*args, **kwargs):
        raise AssertionError(f"this test starts {what} but is not marked 'services' "
                             f"(add @pytest.mark.services, or use the service fixtures)")

    return refuse


@pytest.fixture(autouse=True)
def _services_only_when_marked(request, monkeypatch):
    if request.node.get_closest_marker("services") is not None:
        return
    from kafka_direct.testing.process import ServiceProcess

    monkeypatch.setattr(ServiceProcess, "start", _refuse("a service process"))
    try:
        import pyspark.core.context
        import pyspark.java_gateway
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return
    from kafka_direct.runtime import driver_launch

    # PySpark's launch, and the driver JVM started without Spark's launcher.
    for module in (pyspark.core.context, pyspark.java_gateway, driver_launch):
        monkeypatch.setattr(module, "launch_gateway", _refuse("a Spark JVM"))


@pytest.fixture
def scratch():
    """A private directory (0700) of the test's own, for a PostgreSQL data directory.

    Not pytest's tmp_path: every new pytest session (another worker, a child pytest) closes
    its per-user root again, which would lock the server's user out of a data directory
    below it mid-test.
    """
    path = Path(tempfile.mkdtemp(prefix="kafka-direct-pg-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def params(kafka):
    return kafka.params(**{"group.id": "it"})


@pytest.fixture
def own_kafka():
    """A broker of the test's own, for tests that stop, pause or break it."""
    with local_kafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark_session(spark):
    """A classic SparkSession over the session's SparkContext (``spark``), registered.

    For the Structured Streaming tests, with kafka-direct's formats registered.
    """
    from pyspark.sql import SparkSession

    import kafka_direct.sql

    session = SparkSession.builder.getOrCreate()
    # Few shuffle partitions: the tests' aggregations are tiny, and each task costs.
    session.conf.set("spark.sql.shuffle.partitions", "2")
    kafka_direct.sql.register(session)
    return session



def pytest_configure(config):
    # The order of the tests on xdist's workers: tests/schedule.py (a plugin of its own, as
    # its hook must run after every other that selects or marks tests).
    from tests import schedule

    config.pluginmanager.register(schedule, "kafka-direct-test-order")
