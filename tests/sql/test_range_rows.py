"""Offset ranges as rows: the source's option ``emit`` and the sink's reading options, checked.

No service: the options and the rows are checked on the driver (and in the tasks) before
any read.
"""

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.sql.range_rows import RANGE_COLUMNS, range_batch, range_schema, ranges_of
from kafka_direct.sql.sink.options import parse_options
from kafka_direct.sql.sink.range_reads import parse_range_reads
from kafka_direct.sql.source.options import parse_source_options

SECRET = "pw-9f2e-secret"
SOURCE = {"kafka.bootstrap.servers": "host:9092", "subscribe": "t", "emit": "offsetRanges"}
READING = {"kafka.bootstrap.servers": "host:9092", "kafka.security.protocol": "SASL_SSL",
           "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u",
           "kafka.sasl.password": SECRET,
           "recordColumns": "topic,partition,offset,key,value"}
FIELDS = [(f.name, f.dataType) for f in range_schema().fields]


def test_ranges_go_through_an_arrow_batch_as_they_are():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 3, 7, 7), OffsetRange("u", 1, 5, 9)]
    batch = range_batch(ranges)
    assert tuple(batch.schema.names) == RANGE_COLUMNS
    assert list(ranges_of([batch])) == ranges


@pytest.mark.parametrize("row", [("t", 0, -1, 3), ("t", 0, 5, 3), ("t", -1, 0, 3),
                                 ("", 0, 0, 3), (None, 0, 0, 3), ("t", None, 0, 3),
                                 ("t", 0, 0, None)])
def test_a_row_that_is_no_offset_range_is_refused_naming_it(row):
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(RANGE_COLUMNS, row, strict=True))], schema=range_batch([]).schema)
    with pytest.raises(ConfigurationError, match="no offset range") as raised:
        list(ranges_of([batch]))
    assert f"fromOffset={row[2]!r}" in str(raised.value)


def test_rows_of_other_columns_are_refused():
    batch = pa.record_batch({"topic": ["t"], "partition": [0], "offset": [1]})
    with pytest.raises(ConfigurationError, match="emit=offsetRanges output as it comes"):
        list(ranges_of([batch]))


def test_the_source_emits_ranges_in_any_spelling_and_only_when_streaming():
    assert parse_source_options({**SOURCE, "EMIT": "OFFSETRANGES"}, streaming=True,
                                check_client=False).emitsRanges
    assert not parse_source_options({**SOURCE, "emit": "records"}, streaming=True,
                                    check_client=False).emitsRanges
    with pytest.raises(ConfigurationError, match="records or offsetRanges, got 'ranges'"):
        parse_source_options({**SOURCE, "emit": "ranges"}, streaming=True, check_client=False)
    with pytest.raises(ConfigurationError, match="is for streaming queries"):
        parse_source_options(SOURCE, streaming=False, check_client=False)


@pytest.mark.parametrize("extra", [{"columns": "key,value"}, {"includeHeaders": "true"}])
def test_the_source_refuses_record_columns_with_ranges(extra):
    with pytest.raises(ConfigurationError, match="recordColumns"):
        parse_source_options({**SOURCE, **extra}, streaming=True, check_client=False)


def test_the_source_refuses_a_schema_other_than_the_ranges():
    with pytest.raises(ConfigurationError, match="drop .schema()"):
        parse_source_options(SOURCE, streaming=True, check_client=False,
                             schema=StructType([StructField("value", StringType())]))


def test_the_sink_reads_ranges_only_with_the_kafka_options():
    assert parse_range_reads({"table": "t"}, [("v", StringType())]) is None
    with pytest.raises(ConfigurationError, match="kafka.bootstrap.servers"):
        parse_range_reads({"table": "t"}, FIELDS)
    with pytest.raises(ConfigurationError, match="remove them"):
        parse_range_reads(READING, [("v", StringType())])


def test_a_hand_made_frame_of_ranges_with_long_partitions_is_told_the_types():
    # spark.createDataFrame([(topic, 0, 0, 10)], [...names]) infers a long partition.
    fields = [("topic", StringType()), ("partition", LongType()), ("fromOffset", LongType()),
              ("untilOffset", LongType())]
    with pytest.raises(ConfigurationError) as raised:
        parse_range_reads(READING, fields)
    message = str(raised.value)
    assert "partition" in message and "int" in message and "remove them" not in message


def test_a_sink_reading_ranges_shows_no_secret():
    reads = parse_range_reads(READING, FIELDS)
    assert reads is not None and reads.recordColumns == ("topic", "partition", "offset",
                                                         "key", "value")
    options = parse_options({**READING, "dsn": "host=db", "table": "t"},
                            list(reads.recordColumns), False, reads)
    assert options.offsetColumns == ("topic", "partition", "offset")
    assert SECRET not in repr(options) and SECRET not in str(reads)
    for bad in ({"recordColumns": "key,value"}, {"recordColumns": "nope"},
                {"kafka.nope": "1"}, {"kafka.auto.offset.reset": "earliest"}):
        with pytest.raises(ConfigurationError) as raised:
            reads = parse_range_reads({**READING, **bad}, FIELDS)
            parse_options({**READING, **bad, "dsn": "host=db", "table": "t"},
                          list(reads.recordColumns), False, reads)
        assert SECRET not in str(raised.value)


def test_a_sink_reading_ranges_appends_only():
    reads = parse_range_reads(READING, FIELDS)
    with pytest.raises(ConfigurationError, match="mode=append"):
        parse_options({**READING, "dsn": "host=db", "table": "t", "mode": "update",
                       "keyColumns": "offset"}, list(reads.recordColumns), False, reads)


def test_the_range_schema_is_the_documented_one():
    assert range_schema() == StructType([
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("fromOffset", LongType()), StructField("untilOffset", LongType())])
