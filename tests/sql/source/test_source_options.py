"""The source's options: Spark's checks, each mistake named with its fix; secrets hidden."""

import logging

import pytest

from kafka_direct import ConfigurationError, TopicPartition
from kafka_direct.sql.source.options import parse_duration_ms, parse_source_options

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}


def parse(extra=(), streaming=True, drop=(), **kw):
    options = {k: v for k, v in BASE.items() if k not in drop}
    options.update(dict(extra))
    return parse_source_options(options, streaming=streaming, **kw)


BAD = [
    # (options added, options dropped, streaming, fragments the message must hold)
    ({}, ("subscribe",), True, ["one of the options", "subscribe", "assign"]),
    ({"assign": '{"t": [0]}'}, (), True, ["only one of", "assign, subscribe"]),
    ({"subscribePattern": "t.*", "assign": '{"t": [0]}'}, ("subscribe",), True,
     ["only one of", "assign, subscribePattern"]),
    ({"subscribe": " , "}, (), True, ["'subscribe' names no topic", "comma-separated"]),
    ({"subscribePattern": "  "}, ("subscribe",), True, ["'subscribePattern' is empty"]),
    ({"subscribePattern": "(unclosed"}, ("subscribe",), True,
     ["'subscribePattern'", "not a valid Python regular expression"]),
    ({"assign": "t-0"}, ("subscribe",), True, ["assign", "not valid JSON"]),
    ({}, ("kafka.bootstrap.servers",), True, ["'kafka.bootstrap.servers' must be given"]),
    ({"kafka.bootstrap.servers": "  "}, (), True, ["'kafka.bootstrap.servers' must be given"]),
    ({"kafka.auto.offset.reset": "earliest"}, (), True,
     ["'kafka.auto.offset.reset' is not supported", "startingOffsets"]),
    ({"kafka.key.deserializer": "x"}, (), True, ["not supported", "CAST(key AS STRING)"]),
    ({"kafka.value.deserializer": "x"}, (), True, ["not supported", "CAST(value AS STRING)"]),
    ({"kafka.sasl.jaas.config": "x"}, (), True, ["Java-client setting", "sasl.username"]),
    ({"kafka.no.such.property": "1"}, (), True, ["kafka.* options", "refused by librdkafka",
                                                 "no.such.property"]),
    ({"kafka.fetch.wait.max.ms": "soon"}, (), True, ["refused by librdkafka"]),
    ({"endingOffsets": "latest"}, (), True, ["'endingOffsets' is not valid in streaming",
                                             "availableNow"]),
    ({"endingTimestamp": "1"}, (), True, ["'endingTimestamp' is not valid in streaming"]),
    ({"endingOffsetsByTimestamp": "{}"}, (), True, ["not valid in streaming"]),
    ({"startingOffsets": "latest"}, (), False, ["can't be latest for batch"]),
    ({"endingOffsets": "earliest"}, (), False, ["can't be earliest for batch"]),
    ({"startingOffsets": '{"t": {"0": -1}}'}, (), False, ["t-0 can't be latest"]),
    ({"endingOffsets": '{"t": {"0": -2}}'}, (), False, ["t-0 can't be earliest"]),
    ({"startingOffsets": "earliest1"}, (), True, ["'startingOffsets' must be earliest, latest"]),
    ({"startingOffsets": "{bad"}, (), True, ["'startingOffsets' is not valid JSON"]),
    ({"startingTimestamp": "-1"}, (), True, ["'startingTimestamp'", ">= 0"]),
    ({"startingTimestamp": "yesterday"}, (), True, ["'startingTimestamp'", "whole number"]),
    ({"startingOffsetsByTimestamp": '{"t": {"0": -5}}'}, (), True, ["epoch milliseconds"]),
    ({"startingOffsetsByTimestampStrategy": "nearest"}, (), True,
     ["'startingOffsetsByTimestampStrategy' must be error or latest"]),
    ({"maxOffsetsPerTrigger": "0"}, (), True, ["'maxOffsetsPerTrigger'", ">= 1"]),
    ({"maxOffsetsPerTrigger": "1e6"}, (), True, ["'maxOffsetsPerTrigger'", "whole number"]),
    ({"minOffsetsPerTrigger": "-3"}, (), True, ["'minOffsetsPerTrigger'", ">= 1"]),
    ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, (), True,
     ["'minOffsetsPerTrigger' (10) is higher than 'maxOffsetsPerTrigger' (5)"]),
    ({"maxTriggerDelay": "1.5m"}, (), True, ["'maxTriggerDelay' must be a duration"]),
    ({"maxTriggerDelay": "-1s"}, (), True, ["'maxTriggerDelay' must be a duration"]),
    ({"maxTriggerDelay": "5 fortnights"}, (), True, ["'maxTriggerDelay' must be a duration"]),
    ({"failOnDataLoss": "yes"}, (), True, ["'failOnDataLoss' must be true or false"]),
    ({"includeHeaders": "1"}, (), True, ["'includeHeaders' must be true or false"]),
    ({"minPartitions": "0"}, (), True, ["'minPartitions'", ">= 1"]),
    ({"maxRecordsPerPartition": "x"}, (), True, ["'maxRecordsPerPartition'"]),
    ({"minOffsetsPerTask": "-1"}, (), True, ["'minOffsetsPerTask'", ">= 0"]),
    ({"minOffsetsPerTask": "lots"}, (), False, ["'minOffsetsPerTask'"]),
    ({"maxRangesPerTask": "0"}, (), True, ["'maxRangesPerTask'", ">= 1"]),
    ({"kafkaConsumer.pollTimeoutMs": "0"}, (), True, ["'kafkaConsumer.pollTimeoutMs'"]),
    ({"fetchOffset.numRetries": "-1"}, (), True, ["'fetchOffset.numRetries'"]),
    ({"fetchOffset.retryIntervalMs": "soon"}, (), True, ["'fetchOffset.retryIntervalMs'"]),
    ({"groupIdPrefix": " "}, (), True, ["'groupIdPrefix' is empty"]),
    ({"commitOffsetsToGroup": "true"}, (), True,
     ["'commitOffsetsToGroup' needs 'kafka.group.id'"]),
    ({"commitOffsetsToGroup": "maybe", "kafka.group.id": "g"}, (), True,
     ["'commitOffsetsToGroup' must be true or false"]),
]


@pytest.mark.parametrize("extra, drop, streaming, fragments", BAD)
def test_each_mistake_is_named_with_its_fix(extra, drop, streaming, fragments):
    with pytest.raises(ConfigurationError) as raised:
        parse(extra, streaming=streaming, drop=drop)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_spark_defaults_for_streams_and_batches():
    stream = parse()
    assert (stream.starting.kind, stream.ending) == ("latest", None)
    assert stream.failOnDataLoss and not stream.includeHeaders
    assert (stream.maxOffsetsPerTrigger, stream.minOffsetsPerTrigger) == (None, None)
    assert stream.maxTriggerDelayMs == 15 * 60_000
    assert (stream.pollTimeoutMs, stream.numRetries, stream.retryIntervalMs) == (
        120_000, 3, 1000)
    assert stream.groupId == "spark-kafka-source" and not stream.groupGiven
    assert stream.kafkaParams["group.id"] == "spark-kafka-source"
    assert stream.minOffsetsPerTask == 100_000  # ours: small ranges packed into tasks
    assert parse({"minOffsetsPerTask": "0"}).minOffsetsPerTask == 0  # one task per range
    assert stream.maxRangesPerTask == 1000  # ours: most ranges one task reads
    assert parse({"maxRangesPerTask": "8"}).maxRangesPerTask == 8
    batch = parse(streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.groupId == "spark-kafka-relation"


def test_option_names_are_case_insensitive_as_in_spark():
    options = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubScribe": "a, b,a",
                                    "MAXOFFSETSPERTRIGGER": "7", "includeheaders": "TRUE"},
                                   streaming=True)
    assert options.subscription.topics == ("a", "b")
    assert options.maxOffsetsPerTrigger == 7 and options.includeHeaders


def test_timestamp_beats_by_timestamp_beats_offsets():
    both = {"startingOffsets": "earliest", "startingOffsetsByTimestamp": '{"t": {"0": 5}}'}
    assert parse(both).starting.kind == "timestamps"
    assert parse(both).starting.offsets == {TopicPartition("t", 0): 5}
    assert parse({**both, "startingTimestamp": "9"}).starting.timestamp == 9
    ending = parse({"endingOffsets": '{"t": {"0": 3}}', "endingTimestamp": "4"},
                   streaming=False).ending
    assert (ending.kind, ending.timestamp) == ("timestamp", 4)


def test_pattern_and_assign_subscriptions():
    pattern = parse({"subscribePattern": r"ev\d"}, drop=("subscribe",)).subscription
    assert pattern.matches("ev1") and not pattern.matches("ev1-archive")
    assert not pattern.matches("xev1")  # the whole name, as re.fullmatch
    assign = parse({"assign": '{"t": [1, 0]}'}, drop=("subscribe",)).subscription
    assert assign.partitions == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert assign.covers(TopicPartition("t", 1)) and not assign.covers(TopicPartition("t", 2))


def test_auto_commit_is_forced_off_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING):
        first = parse({"kafka.enable.auto.commit": "true", "kafka.group.id": "g1"})
        parse({"kafka.enable.auto.commit": "true", "kafka.group.id": "g1"})
    assert first.kafkaParams["enable.auto.commit"] is False
    warnings = [r for r in caplog.records if "enable.auto.commit" in r.getMessage()]
    assert len(warnings) == 1


def test_unknown_options_are_ignored_with_a_hint(caplog):
    with caplog.at_level(logging.WARNING):
        options = parse({"maxOffsetPerTrigger": "5", "offsetStore.name": "s"})
    assert options.maxOffsetsPerTrigger is None  # Spark ignores it too
    messages = [r.getMessage() for r in caplog.records]
    assert any("maxoffsetpertrigger" in m and "maxOffsetsPerTrigger" in m for m in messages)
    assert not any("offsetstore" in m for m in messages)  # the link's options are known


def test_a_given_group_is_the_group_and_commits_need_it():
    options = parse({"kafka.group.id": "monitored", "commitOffsetsToGroup": "true",
                     "groupIdPrefix": "ignored"})
    assert options.groupId == "monitored" and options.groupGiven
    assert options.commitOffsetsToGroup


def test_secrets_never_show_in_errors_or_reprs():
    secret = "hunter2-very-secret"
    with pytest.raises(ConfigurationError) as raised:
        parse({"kafka.sasl.password": secret, "kafka.sasl.mechanism": "NOPE",
               "kafka.security.protocol": "SASL_SSL"})
    assert secret not in str(raised.value)
    options = parse({"kafka.sasl.password": secret}, check_client=False)
    assert secret not in repr(options)
    assert options.kafkaParams["sasl.password"] == secret


@pytest.mark.parametrize("text, ms", [("15m", 900_000), ("30s", 30_000), ("500ms", 500),
                                      ("250", 250), ("1h", 3_600_000), ("2d", 172_800_000),
                                      ("1min", 60_000), (" 10 S ", 10_000), ("1500us", 1)])
def test_durations_as_spark_writes_them(text, ms):
    assert parse_duration_ms("maxtriggerdelay", text) == ms


def test_every_option_the_source_reads_is_known(caplog):
    # Each option parse_source_options reads is in the known list (one list, so an option
    # added to the parser is never warned about as unknown).
    with caplog.at_level(logging.WARNING):
        parse({"reader": "python", "maxOffsetsPerPartitionPerTrigger": "5",
               "minPartitions": "2", "includeHeaders": "true", "minOffsetsPerTask": "10"})
    assert not any("unknown option" in r.getMessage() for r in caplog.records)
