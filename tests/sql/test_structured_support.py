"""The Structured Streaming side refuses a PySpark too old for it, with the fix."""

import sys

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql import check_structured_support, register


@pytest.mark.parametrize("version", ["3.5.1", "4.0.0", "4.1.4", "4.1.0.dev0", "4.2.0.dev1"])
def test_a_pyspark_before_4_2_is_refused_with_the_fix(version):
    if version.startswith("4.2"):
        check_structured_support(version)  # a 4.2 pre-release has the API
        return
    with pytest.raises(ConfigurationError, match=r"PySpark 4\.2 or newer.*createDirectStream"):
        check_structured_support(version)


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0", "4.10.1", "5.0.0"])
def test_a_recent_pyspark_passes(version):
    check_structured_support(version)


def test_the_installed_version_is_read_without_importing_pyspark(monkeypatch):
    import pyspark

    from kafka_direct.sql import formats

    monkeypatch.delitem(sys.modules, "pyspark")  # as in a command that has not imported it
    assert formats._pyspark_version() == pyspark.__version__
    assert "pyspark" not in sys.modules


def test_a_missing_pyarrow_is_refused_with_the_fix(monkeypatch):
    from kafka_direct.sql import formats

    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    monkeypatch.setattr(formats.importlib.util, "find_spec",
                        lambda name: None if name == "pyarrow" else object())
    with pytest.raises(ConfigurationError, match=r"need pyarrow: pip install"):
        check_structured_support("4.3.0")


def test_register_wants_a_session():
    with pytest.raises(ConfigurationError, match="register needs a SparkSession"):
        register(object())


class _Conf:
    def __init__(self, settings):
        self.settings = settings

    def get(self, name, default=None):
        return self.settings.get(name, default)


class _Context:
    def __init__(self, parallelism, settings):
        self.defaultParallelism = parallelism
        self._conf = _Conf(settings)

    def getConf(self):
        return self._conf


class _Session:
    """What registration reads of a session: a classic one, or a Connect client (no
    SparkContext, settings through ``conf``)."""

    def __init__(self, parallelism=None, **settings):
        self._parallelism = parallelism
        self.conf = _Conf(settings)

    @property
    def sparkContext(self):
        if self._parallelism is None:
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] no SparkContext over Connect")
        return _Context(self._parallelism, self.conf.settings)


@pytest.mark.parametrize(("session", "expected"), [
    (_Session(8), 8),
    # Executors promised but not joined yet: what they will bring.
    (_Session(2, **{"spark.executor.instances": "10", "spark.executor.cores": "4"}), 40),
    # Dynamic allocation starts small: its maximum counts, or no bound without one.
    (_Session(2, **{"spark.dynamicAllocation.enabled": "true",
                    "spark.dynamicAllocation.maxExecutors": "6"}), 6),
    (_Session(2, **{"spark.dynamicAllocation.enabled": "true"}), 1_000_000),
    (_Session(None, **{"spark.default.parallelism": "12"}), 12),
    (_Session(None), None),
])
def test_the_parallelism_packed_batches_keep_is_what_the_cluster_promises(session, expected):
    from kafka_direct.sql.registration import _default_parallelism

    assert _default_parallelism(session) == expected
