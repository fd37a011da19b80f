"""The source's option ``emit``: its records (the default) or its batches' offset ranges.

With ``emit=offsetRanges`` the source's DataFrame has one row per planned offset range
(``topic``, ``partition``, ``fromOffset``, ``untilOffset``), which a sink reading them
turns into records; a read task builds no consumer and reads no record.
"""

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kafka_direct import ConfigurationError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.sql.range_rows import RANGE_COLUMNS, range_schema
from kafka_direct.sql.source import stream_reader
from kafka_direct.sql.source.options import SourceOptions, parse_source_options
from kafka_direct.sql.source.planning import KafkaInputPartition
from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader
from tests.sql.source.test_source_datasource import BASE, refused, source


def parse(streaming=True, schema=None, **extra):
    return parse_source_options({**BASE, **extra}, streaming=streaming, schema=schema,
                                check_client=False)


@pytest.mark.parametrize("given, emit", [
    ("records", "records"), ("RECORDS", "records"), (" Records ", "records"),
    ("offsetRanges", "offsetRanges"), ("offsetranges", "offsetRanges"),
    ("OFFSETRANGES", "offsetRanges"), ("  offsetRanges\t", "offsetRanges"),
])
def test_emit_takes_its_two_values_in_any_case(given, emit):
    options = parse(emit=given)
    assert options.emit == emit
    assert options.emitsRanges is (emit == "offsetRanges")
    # And as Spark hands the option over, its name lower case.
    assert parse_source_options({**BASE, "EMIT": given}, streaming=True,
                                check_client=False).emit == emit


def test_records_are_the_default():
    options = parse()
    assert options.emit == "records" and not options.emitsRanges


@pytest.mark.parametrize("given", ["", "  ", "ranges", "offsets", "offset_ranges", "rows"])
def test_any_other_emit_is_refused_naming_both_values(given):
    with pytest.raises(ConfigurationError) as raised:
        parse(emit=given)
    message = str(raised.value)
    assert "'emit'" in message and "records" in message and "offsetRanges" in message


def test_a_source_options_of_another_emit_is_refused():
    valid = parse()
    fields = {name: getattr(valid, name) for name in SourceOptions.__dataclass_fields__}
    with pytest.raises(ConfigurationError, match="'emit' must be one of"):
        SourceOptions(**{**fields, "emit": "ranges"})


def test_offset_ranges_are_for_streaming_queries_only():
    with pytest.raises(ConfigurationError, match="for streaming queries") as raised:
        parse(streaming=False, emit="offsetRanges")
    assert "batch read emits records" in str(raised.value)
    # Through the data source: spark.read's reader refuses it, readStream's takes it.
    assert "for streaming queries" in refused(
        lambda: source(emit="offsetRanges").reader(None))
    assert source(emit="offsetRanges").streamReader(None).options.emitsRanges
    # A batch read of records is as before.
    assert parse(streaming=False, emit="records").emit == "records"


@pytest.mark.parametrize("extra", [{"columns": "key,value"}, {"columns": "offset"},
                                   {"includeHeaders": "true"},
                                   {"includeHeaders": "TRUE", "columns": "headers"}])
def test_record_columns_do_not_apply_to_offset_ranges(extra):
    with pytest.raises(ConfigurationError) as raised:
        parse(emit="offsetRanges", **extra)
    message = str(raised.value)
    assert "emits no record columns" in message and "recordColumns" in message
    assert "emits no record columns" in refused(
        lambda: source(emit="offsetRanges", **extra).schema())


def test_headers_off_is_no_record_column():
    options = parse(emit="offsetRanges", includeHeaders="false")
    assert options.emitsRanges and options.columns is None and not options.includeHeaders


def test_the_schema_is_the_range_schema():
    schema = source(emit="offsetRanges").schema()
    assert schema == range_schema()
    assert tuple(schema.fieldNames()) == RANGE_COLUMNS
    assert [f.dataType for f in schema.fields] == [StringType(), IntegerType(), LongType(),
                                                   LongType()]
    # Any case of the value, and the records' schema again without it.
    assert source(emit="OFFSETRANGES").schema() == range_schema()
    assert source(emit="records").schema().fieldNames()[0] == "key"


def test_a_given_schema_must_be_the_range_schema():
    assert parse(schema=range_schema(), emit="offsetRanges").emitsRanges
    reader = source(emit="offsetRanges").streamReader(range_schema())
    assert reader.options.emitsRanges and reader.options.columns is None
    wrong = [
        source().schema(),  # the records' schema
        # Other types (a long partition):
        StructType([StructField(n, t) for n, t in zip(
            RANGE_COLUMNS, [StringType(), LongType(), LongType(), LongType()], strict=True)]),
        StructType(list(reversed(range_schema().fields))),  # the order
        StructType(range_schema().fields[:3]),  # a column short
        StructType([*range_schema().fields, StructField("extra", StringType())]),
        StructType([StructField(n.lower(), f.dataType)
                    for n, f in zip(RANGE_COLUMNS, range_schema().fields, strict=True)]),
        # (the names are exact, as Spark's schema names are)
    ]
    for schema in wrong:
        with pytest.raises(ConfigurationError, match="drop .schema()"):
            parse(schema=schema, emit="offsetRanges")
        assert "drop .schema()" in refused(
            lambda schema=schema: source(emit="offsetRanges").streamReader(schema))


def test_the_range_schema_without_emit_is_no_kafka_schema():
    assert "not a Kafka column" in refused(lambda: source().streamReader(range_schema()))


def partition(*ranges, planId=None):
    return KafkaInputPartition(tuple(OffsetRange(*r) for r in ranges), planId)


def range_reader(monkeypatch, **extra):
    # A read task of offset ranges must not read Kafka: any record read fails the test.
    def no_records(*args, **kwargs):
        raise AssertionError("a task emitting offset ranges read records")

    monkeypatch.setattr(stream_reader, "read_task", no_records)
    return KafkaDirectStreamReader(parse(emit="offsetRanges", **extra))


def test_a_task_emits_its_ranges_as_one_arrow_batch_in_order(monkeypatch):
    reader = range_reader(monkeypatch)
    task = partition(("t", 3, 10, 20), ("t", 0, 0, 5), ("other", 1, 7, 7), ("t", 1, 9, 9))
    batches = list(reader.read(task))
    assert len(batches) == 1
    batch = batches[0]
    assert isinstance(batch, pa.RecordBatch)
    assert tuple(batch.schema.names) == RANGE_COLUMNS
    assert [f.type for f in batch.schema] == [pa.string(), pa.int32(), pa.int64(), pa.int64()]
    # Empty ranges (a task that only binds its batch's plan) are rows too.
    assert batch.to_pylist() == [
        {"topic": "t", "partition": 3, "fromOffset": 10, "untilOffset": 20},
        {"topic": "t", "partition": 0, "fromOffset": 0, "untilOffset": 5},
        {"topic": "other", "partition": 1, "fromOffset": 7, "untilOffset": 7},
        {"topic": "t", "partition": 1, "fromOffset": 9, "untilOffset": 9}]


def test_a_task_on_an_executor_emits_the_ranges_too(monkeypatch):
    reader = range_reader(monkeypatch)
    shipped = pickle.loads(pickle.dumps(reader))
    task = pickle.loads(pickle.dumps(partition(("t", 0, 2**40, 2**40 + 3))))
    [batch] = list(shipped.read(task))
    assert batch.to_pylist() == [{"topic": "t", "partition": 0, "fromOffset": 2**40,
                                  "untilOffset": 2**40 + 3}]


def test_a_linked_task_binds_its_plan_before_it_emits(monkeypatch):
    reader = range_reader(monkeypatch)
    bound = []
    monkeypatch.setattr(stream_reader, "bind_plan", lambda link, planId: bound.append(planId))
    reader._link = object()
    [batch] = list(reader.read(partition(("t", 0, 4, 4), planId=17)))
    assert bound == [17]
    assert batch.num_rows == 1
    # Without a plan (no store), nothing is bound.
    list(reader.read(partition(("t", 0, 4, 6))))
    assert bound == [17]


def test_a_record_source_still_reads_records(monkeypatch):
    read = []
    monkeypatch.setattr(stream_reader, "read_task",
                        lambda ranges, settings: read.append(ranges) or iter(()))
    reader = KafkaDirectStreamReader(parse())
    assert list(reader.read(partition(("t", 0, 0, 3)))) == []
    assert read == [(OffsetRange("t", 0, 0, 3),)]
