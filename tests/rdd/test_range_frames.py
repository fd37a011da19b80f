"""The frames a batch's ranges reach the JVM in: what PySpark's reader takes back, exactly.

Each KafkaRDD partition's element is a range's ``(topic, partition, from, until)``, written
as one frame each (its length, then the pickle of a list holding it). A partition's topic
and number are the same batch after batch: their part of the pickle is made once, and only
the offsets are written each batch.
"""

from __future__ import annotations

import io
import pickle

import pytest
from pyspark.serializers import BatchedSerializer, PickleSerializer

from kafka_direct.conf_values import MAX_OFFSET
from kafka_direct.rdd import spark_support


def _written(elements):
    stream = io.BytesIO()
    spark_support._FramesInOneWrite().dump_stream(iter(elements), stream)
    return stream.getvalue()


def _read(data):
    serializer = BatchedSerializer(PickleSerializer(), 1)
    return list(serializer.load_stream(io.BytesIO(data)))


def _standard(elements):
    """What PySpark's own serializer writes for ``elements``."""
    stream = io.BytesIO()
    BatchedSerializer(PickleSerializer(), 1).dump_stream(iter(elements), stream)
    return stream.getvalue()


@pytest.mark.parametrize("elements", [
    [("t", 0, 0, 0)],
    [("topic-a", 3, 5, 9), ("topic-a", 4, 0, MAX_OFFSET), ("b", 2**31, 2**40, 2**62)],
    [("ä.é-ü" * 20, 1, 7, 8), ("x" * 300, 0, 1, 2), ("日本" * 90, 5, 0, 1)],
    [("t", 0, 1, 2), ("not", "a range"), 42, ("t", 1, 2, 3)],  # any element still goes
    [("t", 0, -1, 2), ("t", 1, 2**64, 2**65), ("t", True, 1, 2)],
    # Every width the offsets and the partition number may take, at its bounds.
    [("w", 255, 0, 2**31 - 1), ("w", 256, -2**31, 5), ("w", 65535, 1, 2)],
    [("w", 65536, 0, 2**31), ("w", 2**31 - 1, 3, 4), ("w", 2**31, -2**31 - 1, 0)],
    [("w", 2**63 - 1, 2**63 - 1, 2**63 - 1), ("w", -1, -(2**63), 0)],
    [("w", 2**63, 0, 1)],
])
def test_the_jvm_gets_back_exactly_the_elements(elements):
    written = _written(elements)
    assert _read(written) == elements
    assert [type(e) for e in _read(written)] == [type(e) for e in elements]
    assert [type(part) for e in _read(written) if isinstance(e, tuple)
            for part in e] == [type(part) for e in elements if isinstance(e, tuple)
                               for part in e]
    # Twice: the second time from the kept heads.
    assert _read(_written(elements)) == elements
    assert _read(_standard(elements)) == elements


def test_a_frame_is_short():
    # Py4J sends the bytes as base64 that the JVM decodes at about 30 ns a byte.
    frames = _written([("scale-abcdef-0", 7, 1_000_000, 1_000_005)] * 10)
    assert len(frames) == 10 * (4 + 2 + 2 + 14 + 2 + 5 + 5 + 3)


def test_a_batch_of_the_same_partitions_pickles_nothing_again(monkeypatch):
    first = [(f"topic-{i // 100}", i % 100, i, i + 5) for i in range(1000)]
    _written(first)
    calls = []
    dumps = pickle.dumps

    def counted(*args, **kwargs):
        calls.append(args[0])
        return dumps(*args, **kwargs)

    monkeypatch.setattr(spark_support.pickle, "dumps", counted)
    second = [(topic, partition, until, until + 3) for topic, partition, _, until in first]
    assert _read(_written(second)) == second
    assert calls == []
    third = [*second, ("topic-new", 0, 0, 1)]  # a new partition: its head, once
    assert _read(_written(third)) == third
    assert len(calls) <= 1
