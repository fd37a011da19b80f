"""The Structured Streaming side refuses a PySpark too old for it, with the fix."""

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


def test_register_wants_a_session():
    with pytest.raises(ConfigurationError, match="register needs a SparkSession"):
        register(object())
