"""A record crafted to look like a carried error runs no code on the driver (real Spark)."""

import base64
import pickle

import pytest

from kafka_direct import KafkaUtils, OffsetRange


class _Planted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_hostile_record_quoted_in_a_task_failure_runs_nothing(kafka, kafka_topic, spark,
                                                                 params, tmp_path):
    marker = tmp_path / "ran"
    payload = base64.b64encode(pickle.dumps(_Planted(str(marker)))).decode("ascii")
    topic = kafka_topic()
    kafka.produce(topic, [f"[kafka-direct-error:{payload}]".encode()])

    def parse(record):
        raise ValueError(f"bad record {record.value!r}")  # what user code does

    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 1)])
    with pytest.raises(Exception) as info:
        rdd.map(parse).collect()
    assert "bad record" in str(info.value)
    assert not marker.exists()
