"""--starting-offsets: read by the one offsets-JSON codec, once per run.

The source and the offset link refuse a partition spelled "007"; the ingest job's option
once took it (a third reader of the same JSON). No service is needed.
"""

import json

import pytest

from kafka_direct.app import ingest_arguments, ingest_command, ingest_options, structured_ingest
from kafka_direct.app.ingest_options import IngestOptions, parse_starting_offsets
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets_json import offsets_from_json
from kafka_direct.topic_partition import TopicPartition


@pytest.mark.parametrize("partition", ["007", "07", "+7", " 7", "\u0667"])
def test_a_partition_spelled_other_than_the_source_spells_it_is_refused(partition):
    text = json.dumps({"t": {partition: 1}})
    with pytest.raises(ConfigurationError, match="is not a partition number") as raised:
        IngestOptions(topics=("t",), startingOffsets=text)
    assert raised.value.context.get("topic") == "t"
    # The same words as the source's and the link's reader.
    with pytest.raises(ConfigurationError) as codec:
        offsets_from_json({"t": {partition: 1}}, "starting offsets")
    assert str(raised.value) == str(codec.value)


def test_json_offsets_start_the_partitions_they_name_the_rest_at_the_earliest():
    assert parse_starting_offsets('{"t": {"3": 42, "0": 7}}') == (
        "earliest", {TopicPartition("t", 3): 42, TopicPartition("t", 0): 7})
    assert parse_starting_offsets("latest") == ("latest", {})


@pytest.mark.parametrize("offset", ["1.9", "true", "-3", "\"5\"", "99999999999999999999"])
def test_an_offset_that_is_not_a_next_offset_to_read_is_refused(offset):
    with pytest.raises(ConfigurationError, match="must be an integer >= 0"):
        parse_starting_offsets(f'{{"t": {{"0": {offset}}}}}')


def test_the_options_carry_the_parsed_offsets_and_nothing_parses_them_again(monkeypatch):
    options = IngestOptions(topics=("t",), startingOffsets='{"t": {"1": 5}}')
    assert options.starting == ("earliest", {TopicPartition("t", 1): 5})

    def parsed_again(*args, **kwargs):
        raise AssertionError("--starting-offsets parsed a second time")

    for module in (ingest_options, ingest_arguments, ingest_command, structured_ingest):
        if hasattr(module, "parse_starting_offsets"):
            monkeypatch.setattr(module, "parse_starting_offsets", parsed_again)
    monkeypatch.setattr(ingest_options, "offsets_from_json", parsed_again, raising=False)

    class Cluster:
        def topics(self):
            return {"t": 1}

    with pytest.raises(ConfigurationError, match="partitions that do not exist: \\['t-1'\\]"):
        ingest_command._check_starting_partitions(options, Cluster())
    assert structured_ingest._spark_starting_offsets(options) == '{"t": {"1": 5}}'
