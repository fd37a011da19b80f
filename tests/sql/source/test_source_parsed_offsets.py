"""The source's offsets JSON, read once per value: the same offsets, the same checks."""

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

import kafka_direct.sql.source.parsed_offsets as parsed_offsets
from kafka_direct import ConfigurationError, TopicPartition
from kafka_direct.offsets_json import offsets_from_json
from kafka_direct.sql.source.parsed_offsets import ParsedOffsets
from tests.sql.source.test_source_stream_reader import cluster_with, make_reader, ranges_of

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def reads(monkeypatch):
    """Counts the codec's reads behind ParsedOffsets."""
    calls = []

    def counted(data, what="source offset"):
        calls.append(data)
        return offsets_from_json(data, what)

    monkeypatch.setattr(parsed_offsets, "offsets_from_json", counted)
    return calls


def test_equal_json_is_read_once_and_answers_a_fresh_dict(reads):
    codec = ParsedOffsets()
    first = codec.read({"t": {"0": 4, "1": 7}}, "start")
    assert first == {T0: 4, T1: 7}
    first[T0] = 99  # the caller's dict: the remembered offsets do not change
    again = codec.read(json.loads('{"t": {"0": 4, "1": 7}}'), "start")
    assert again == {T0: 4, T1: 7} and again is not first
    assert len(reads) == 1


def test_what_the_source_wrote_is_read_back_without_the_codec(reads):
    codec = ParsedOffsets()
    data = codec.written({T1: 3, T0: 2})
    assert json.dumps(data) == '{"t": {"0": 2, "1": 3}}'
    data["t"]["0"] = 5  # the engine's copy may change: the remembered one does not
    assert codec.read(json.loads('{"t": {"0": 2, "1": 3}}'), "end") == {T0: 2, T1: 3}
    assert reads == []
    assert codec.read({"t": {"0": 5, "1": 3}}, "end") == {T0: 5, T1: 3}
    assert len(reads) == 1


@pytest.mark.parametrize("offset", [42.0, True])
def test_a_value_equal_to_a_remembered_one_but_not_an_int_is_still_refused(offset):
    # 42.0 == 42 and True == 1 in Python; the codec refuses both.
    codec = ParsedOffsets()
    codec.read({"t": {"0": int(offset)}}, "start")
    with pytest.raises(ConfigurationError, match="the batch's start"):
        codec.read({"t": {"0": offset}}, "the batch's start")


def test_offsets_the_codec_would_refuse_are_not_remembered_when_written():
    codec = ParsedOffsets()
    codec.written({TopicPartition("t", 2**31): 1})
    with pytest.raises(ConfigurationError, match="not a partition number"):
        codec.read({"t": {str(2**31): 1}}, "end")


def test_bad_json_is_refused_as_the_codec_refuses_it():
    codec = ParsedOffsets()
    for bad in ({"t": {"007": 1}}, {"t": {"0": -1}}, ["t"], {"t": 3}):
        with pytest.raises(ConfigurationError):
            codec.read(bad, "start")


def test_only_the_last_few_values_are_remembered(reads):
    codec = ParsedOffsets()
    for offset in range(6):
        codec.read({"t": {"0": offset}}, "start")
    codec.read({"t": {"0": 5}}, "start")
    codec.read({"t": {"0": 0}}, "start")
    assert len(reads) == 7


def test_a_trigger_reads_the_offsets_json_it_gets_back_only_once(reads):
    # The engine hands back, as JSON, the end latestOffset returned (to partitions, then to
    # commit and the next latestOffset): at a thousand partitions each read by the codec
    # cost about 3 ms.
    cluster = cluster_with(partitions=3, records=5)
    reader = make_reader(cluster, startingOffsets="earliest")
    start = json.loads(json.dumps(reader.initialOffset()))
    for batch in range(3):
        for p in range(3):
            cluster.produce(TopicPartition("t", p), 2)
        end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
        assert ranges_of(reader, start, end) == [
            ("t", p, 5 + 2 * batch if batch else 0, 7 + 2 * batch) for p in range(3)]
        reader.commit(end)
        start = end
    assert len(reads) == 1  # the first start only
