"""The sink's options for reading offset ranges, and the ranges its rows name.

A DataFrame of the source's ``emit=offsetRanges`` rows comes with ``kafka.*`` options (and
``recordColumns``, ``failOnDataLoss``, ``kafkaConsumer.pollTimeoutMs``, ``reader``); the
sink reads the records itself and writes them with their claims. Every mistake is refused
when the query starts, named with its fix, and no secret shows.
"""

import pickle

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType

from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.sql.range_rows import range_batch, range_schema, ranges_of
from kafka_direct.sql.sink.options import parse_options
from kafka_direct.sql.sink.range_reads import RangeReads, parse_range_reads

RANGES = [(f.name, f.dataType) for f in range_schema().fields]
RECORDS = [("key", BinaryType()), ("value", BinaryType()), ("topic", StringType()),
           ("partition", IntegerType()), ("offset", LongType())]
BASE = {"table": "events", "kafka.bootstrap.servers": "broker:9092"}
SECRET = "hunter2-Very-Secret"


def reads(fields=RANGES, **options):
    return parse_range_reads({**BASE, **options}, fields)


def sink(overwrite=False, **options):
    """The sink's options as it checks them: the reads, then the rest on the record columns."""
    given = {**BASE, **options}
    read = parse_range_reads(given, RANGES)
    assert read is not None
    return parse_options(given, [name for name, _ in read.record_fields()], overwrite, read)


def test_defaults_read_the_sources_default_columns_and_claim_them():
    read = reads()
    assert read.recordColumns == ("key", "value", "topic", "partition", "offset",
                                  "timestamp", "timestampType")
    assert [name for name, _ in read.record_fields()] == list(read.recordColumns)
    settings = read.settings
    assert not settings.includeHeaders and settings.planned
    assert settings.read.failOnDataLoss and settings.read.pollTimeoutMs == 120_000
    # Executors' parameters: never the group's offsets, never a silent reset.
    assert settings.read.params["enable.auto.commit"] is False
    assert settings.read.params["auto.offset.reset"] == "error"
    options = sink()
    assert options.reads == read and options.direct and options.mode == "append"
    assert options.offsetColumns == ("topic", "partition", "offset")


def test_reading_options_any_case_as_spark_hands_them():
    read = reads(RECORDCOLUMNS="offset,topic,partition,value", FailOnDataLoss="FALSE",
                 **{"KAFKACONSUMER.POLLTIMEOUTMS": "500", "Reader": "Python"})
    assert read.recordColumns == ("offset", "topic", "partition", "value")
    assert not read.settings.read.failOnDataLoss and read.settings.read.pollTimeoutMs == 500
    assert read.settings.impl == "python"
    assert reads(recordColumns=" key , headers,topic ").settings.includeHeaders


def test_the_claims_follow_the_record_columns_to_their_target_columns():
    options = sink(recordColumns="value,offset,partition,topic", columns="v,o,p,t")
    assert options.offsetColumns == ("t", "p", "o")


def test_a_dataframe_of_records_takes_no_reading_option():
    assert parse_range_reads({"table": "events"}, RECORDS) is None
    for option in ("kafka.bootstrap.servers", "KAFKA.group.id", "recordColumns",
                   "failOnDataLoss", "kafkaConsumer.pollTimeoutMs", "reader"):
        with pytest.raises(ConfigurationError) as raised:
            parse_range_reads({"table": "events", option: "x"}, RECORDS)
        message = str(raised.value)
        assert "emit=offsetRanges" in message and "remove them" in message
        assert "['key', 'value', 'topic', 'partition', 'offset']" in message
    with pytest.raises(ConfigurationError) as raised:
        parse_range_reads({"kafka.bootstrap.servers": "b", "recordColumns": "key",
                           "reader": "c"}, RECORDS)
    assert "['kafka.*', 'reader', 'recordColumns']" in str(raised.value)
    assert raised.value.setting == "kafka.*"


def test_a_range_schema_of_other_types_is_no_dataframe_of_ranges():
    # The types too: a long partition is not the source's output (nothing is read). Given
    # the reading options, the error names the types and the cast.
    longs = [(n, LongType() if n == "partition" else t) for n, t in RANGES]
    assert parse_range_reads({"table": "events"}, longs) is None
    with pytest.raises(ConfigurationError, match=r"typed .*partition bigint.*cast"):
        parse_range_reads(BASE, longs)


@pytest.mark.parametrize("options", [{}, {"recordColumns": "key,topic,partition,offset"},
                                     {"kafka.group.id": "g"},
                                     {"kafka.bootstrap.servers": " "}])
def test_ranges_need_the_brokers(options):
    given = {"table": "events", **options}
    with pytest.raises(ConfigurationError) as raised:
        parse_range_reads(given, RANGES)
    assert "kafka.bootstrap.servers" in str(raised.value)


@pytest.mark.parametrize("options, words", [
    ({"recordColumns": "nope"}, "'nope', which is not a Kafka column"),
    ({"recordColumns": "Key"}, "'Key', which is not a Kafka column"),
    ({"recordColumns": "key,key"}, "'key' twice"),
    ({"recordColumns": " , "}, "one or more of the Kafka columns"),
    ({"failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true or false"),
    ({"kafkaConsumer.pollTimeoutMs": "0"}, "'kafkaConsumer.pollTimeoutMs'"),
    ({"kafkaConsumer.pollTimeoutMs": "soon"}, "'kafkaConsumer.pollTimeoutMs'"),
    ({"reader": "java"}, "option 'reader' must be 'c' or 'python'"),
    ({"kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset' is not supported"),
    ({"kafka.value.deserializer": "x"}, "CAST(value AS STRING)"),
    ({"kafka.no.such.property": "1"}, "refused by librdkafka"),
])
def test_bad_reading_options_are_refused_with_their_fix(options, words):
    with pytest.raises(ConfigurationError) as raised:
        reads(**options)
    assert words in str(raised.value)


@pytest.mark.parametrize("recordColumns, missing", [
    ("key,value", "['topic', 'partition', 'offset']"),
    ("key,topic,partition", "['offset']"),
    ("offset,value", "['topic', 'partition']"),
])
def test_record_columns_must_hold_the_claimed_coordinates(recordColumns, missing):
    with pytest.raises(ConfigurationError) as raised:
        sink(recordColumns=recordColumns)
    assert f"lacks {missing}" in str(raised.value)
    assert raised.value.setting == "recordColumns"


@pytest.mark.parametrize("offsetColumns", ["d,e,c", "c,b,a", "a,b,d"])
def test_given_offset_columns_must_be_the_records_coordinates(offsetColumns):
    # topic -> a, partition -> b, offset -> c: claims taken from the key or value columns
    # would claim offsets the task never wrote.
    with pytest.raises(ConfigurationError) as raised:
        sink(recordColumns="topic,partition,offset,key,value", columns="a,b,c,d,e",
             offsetColumns=offsetColumns)
    assert "['a', 'b', 'c']" in str(raised.value)
    assert raised.value.setting == "offsetColumns"
    options = sink(recordColumns="topic,partition,offset,key,value", columns="a,b,c,d,e",
                   offsetColumns="a,b,c")
    assert options.offsetColumns == ("a", "b", "c")


def test_given_offset_columns_need_the_coordinates_among_the_records():
    with pytest.raises(ConfigurationError) as raised:
        sink(recordColumns="key,value,timestamp", columns="a,b,c", offsetColumns="a,b,c")
    assert "lacks ['topic', 'partition', 'offset']" in str(raised.value)


@pytest.mark.parametrize("options, overwrite", [
    ({"mode": "update"}, False), ({"mode": "update", "keyColumns": "offset"}, False),
    ({"mode": "UPSERT", "keyColumns": "topic,partition,offset"}, False),
    ({"mode": "complete"}, True), ({}, True),
])
def test_only_appends_read_ranges(options, overwrite):
    with pytest.raises(ConfigurationError) as raised:
        sink(overwrite=overwrite, **options)
    message = str(raised.value)
    assert "reading offset ranges" in message and "for mode=append" in message
    assert "emit=records" in message
    assert raised.value.setting == "mode"


def test_an_unknown_option_names_the_reading_options_too():
    with pytest.raises(ConfigurationError) as raised:
        sink(recordColumn="key")
    message = str(raised.value)
    assert "unknown options ['recordcolumn']" in message and raised.value.setting == \
        "recordcolumn"
    for known in ("kafka.*", "recordColumns", "failOnDataLoss",
                  "kafkaConsumer.pollTimeoutMs", "reader"):
        assert known in message


def test_range_reads_are_equal_and_hashed_by_value():
    first, second = reads(**{"kafka.sasl.password": SECRET}), reads(
        **{"kafka.sasl.password": SECRET})
    assert first == second and hash(first) == hash(second)
    assert len({first, second}) == 1
    others = [reads(**{"kafka.sasl.password": "other"}), reads(recordColumns="offset,topic,"
                                                               "partition"),
              reads(failOnDataLoss="false"), reads(reader="python"),
              reads(**{"kafkaConsumer.pollTimeoutMs": "5"}),
              reads(**{"kafka.bootstrap.servers": "elsewhere:9092"})]
    for other in others:
        assert other != first
    assert len({first, *others}) == 1 + len(others)
    shipped = pickle.loads(pickle.dumps(first))
    assert shipped == first and hash(shipped) == hash(first)
    # The sink's options holding them hash too (a target is prepared once per process).
    assert hash(sink()) == hash(sink()) and sink() == sink()
    assert {sink(), sink()} == {sink()}


def test_range_reads_need_record_columns():
    with pytest.raises(ConfigurationError, match="naming the record columns"):
        RangeReads("settings")


def test_no_secret_in_any_repr_or_message():
    secrets = {"kafka.sasl.password": SECRET, "kafka.ssl.key.password": SECRET + "k",
               "dsn": f"host=db password={SECRET}d", "password": SECRET + "p",
               "kafka.sasl.username": "app"}
    options = sink(**secrets)
    read = options.reads
    for shown in (repr(options), str(options), repr(read), str(read), repr(read.settings),
                  repr(read.settings.read)):
        assert SECRET not in shown
    assert read.settings.read.params["sasl.password"] == SECRET  # kept for the consumer
    mistakes = [{"mode": "update"}, {"recordColumns": "nope"}, {"reader": "java"},
                {"recordColumns": "key,value"}, {"bogus": "1"},
                {"kafka.sasl.mechanism": "NOPE", "kafka.security.protocol": "SASL_SSL"},
                {"kafka.auto.offset.reset": "earliest"}, {"failOnDataLoss": "maybe"},
                {"columns": "a,b"}, {"offsetColumns": "key,value,topic"}]
    for mistake in mistakes:
        with pytest.raises(ConfigurationError) as raised:
            sink(**secrets, **mistake)
        shown = f"{raised.value} {raised.value!r} {getattr(raised.value, 'value', '')}"
        assert SECRET not in shown, mistake
    with pytest.raises(ConfigurationError) as raised:
        parse_range_reads({"table": "events", **secrets}, RECORDS)
    assert SECRET not in str(raised.value)


def test_ranges_of_arrow_batches_tables_and_rows_in_order():
    ranges = [OffsetRange("t", 2, 5, 9), OffsetRange("u", 0, 3, 3), OffsetRange("t", 0, 0, 1)]
    batch = range_batch(ranges)
    assert list(ranges_of([batch])) == ranges
    assert list(ranges_of([pa.Table.from_batches([batch])])) == ranges
    assert list(ranges_of([batch, range_batch([]), batch])) == ranges + ranges
    assert list(ranges_of([Row(topic="t", partition=1, fromOffset=2, untilOffset=4)])) == [
        OffsetRange("t", 1, 2, 4)]


@pytest.mark.parametrize("row", [
    (None, 0, 0, 1), ("", 0, 0, 1), ("t", None, 0, 1), ("t", -1, 0, 1), ("t", 0, None, 1),
    ("t", 0, -1, 1), ("t", 0, 5, None), ("t", 0, 5, 4), ("t", 0.0, 0, 1), ("t", 0, "0", 1),
    (b"t", 0, 0, 1),
])
def test_a_row_that_is_no_offset_range_is_refused(row):
    with pytest.raises(ConfigurationError) as raised:
        list(ranges_of([row]))
    message = str(raised.value)
    assert "no offset range" in message and "emit=offsetRanges output as it comes" in message
    assert raised.value.setting == "emit"
    # The same row in an Arrow batch of the range columns.
    names = ["topic", "partition", "fromOffset", "untilOffset"]
    batch = pa.RecordBatch.from_arrays([pa.array([v]) for v in row], names=names)
    with pytest.raises(ConfigurationError, match="no offset range"):
        list(ranges_of([batch]))


@pytest.mark.parametrize("row", [("t", 0, 1), ("t",), ()])
def test_a_row_of_too_few_values_is_refused_as_no_offset_range(row):
    with pytest.raises(ConfigurationError, match="no offset range"):
        list(ranges_of([row]))


def test_batches_of_other_columns_are_refused_naming_them():
    other = pa.RecordBatch.from_pydict({"topic": ["t"], "partition": [0], "offset": [4],
                                        "value": [b"v"]})
    with pytest.raises(ConfigurationError) as raised:
        list(ranges_of([other]))
    assert "['topic', 'partition', 'offset', 'value']" in str(raised.value)
    renamed = range_batch([OffsetRange("t", 0, 0, 1)]).rename_columns(
        ["topic", "partition", "from", "until"])
    with pytest.raises(ConfigurationError, match="not \\['topic', 'partition', "):
        list(ranges_of([renamed]))
