"""The statistics page's settings are refused by name when the context is made."""

import pytest

from kafka_direct import ConfigurationError
from kafka_direct.streaming import StreamingContext
from tests.fakes.fake_cluster import FakeSparkContext


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("spark.streaming.ui.port", "abc", "spark.streaming.ui.port must be an integer >= 0"),
    ("spark.streaming.ui.port", "70000", "spark.streaming.ui.port must be an integer <= 65535"),
    ("spark.streaming.ui.retainedBatches", "lots",
     "spark.streaming.ui.retainedBatches must be an integer >= 1"),
])
def test_a_bad_statistics_page_setting_is_a_typed_error_naming_it(key, value, fragment):
    with pytest.raises(ConfigurationError, match=fragment):
        StreamingContext(FakeSparkContext(), 1, conf={"spark.streaming.ui.enabled": "true",
                                                       key: value})


def test_good_settings_are_taken():
    ssc = StreamingContext(FakeSparkContext(), 1, conf={"spark.streaming.ui.port": "0"})
    assert ssc._uiPort == 0
