"""The DataSource's entry points: version check, schema, option checks, batch planning."""

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kafka_direct import ConfigurationError, TopicPartition
from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.source.batch_reader import KafkaDirectBatchReader
from kafka_direct.sql.source.kafka_source import KafkaDirectSource
from kafka_direct.sql.source.metadata import SourceMetadata
from kafka_direct.sql.source.options import parse_source_options
from kafka_direct.sql.source.stream_reader import KafkaDirectStreamReader
from kafka_direct.task_errors import CarriedTaskError, carried_error
from tests.fakes.fake_cluster import FakeCluster, FakeDriverConsumer

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}


def source(**options):
    return KafkaDirectSource({**BASE, **options})


def refused(call):
    with pytest.raises(CarriedTaskError) as raised:
        call()
    error = carried_error(raised.value)
    assert isinstance(error, ConfigurationError)
    return str(error)


def test_an_old_pyspark_is_refused_even_when_registered_directly(monkeypatch):
    import pyspark

    assert KafkaDirectSource.name() == "kafka-direct"
    monkeypatch.setattr(pyspark, "__version__", "4.1.1")
    with pytest.raises(ConfigurationError, match="PySpark 4.2 or newer"):
        KafkaDirectSource.name()
    with pytest.raises(ConfigurationError, match="PySpark 4.2 or newer"):
        source().streamReader(None)


def test_the_schema_is_sparks_with_headers_only_when_asked():
    assert source().schema().fieldNames() == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert source(includeHeaders="true").schema().fieldNames()[-1] == "headers"


def test_mistakes_are_found_when_the_schema_is_asked():
    assert "only one of the options" in refused(lambda: source(assign='{"t": [0]}').schema())


def test_stream_and_batch_checks_apply_to_their_reader():
    assert "not valid in streaming" in refused(
        lambda: source(endingOffsets="latest").streamReader(None))
    assert "can't be latest for batch" in refused(
        lambda: source(startingOffsets="latest").reader(None))
    assert isinstance(source(endingOffsets="latest").reader(None), KafkaDirectBatchReader)


def test_a_schema_of_other_types_or_columns_is_refused_naming_the_field():
    mine = StructType([StructField("value", StringType())])
    assert "types column 'value' as string" in refused(lambda: source().streamReader(mine))
    assert "cast after load()" in refused(lambda: source().reader(mine))
    other = StructType([StructField("payload", BinaryType())])
    assert "'payload', which is not a Kafka column" in refused(
        lambda: source().reader(other))
    headers = source(includeHeaders="true").schema()
    assert "includeHeaders=true" in refused(lambda: source().reader(headers))
    assert source().reader(source().schema()).settings.columns is None


@pytest.mark.parametrize("field", [
    StructField("value", BinaryType(), nullable=False),
    StructField("offset", LongType(), nullable=False),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                  StructField("value", BinaryType())]),
                                     containsNull=False))])
def test_a_not_null_field_is_refused_as_kafkas_columns_may_be_null(field):
    # Spark would fail every read, or drop "value IS NULL" filters as always false.
    message = refused(lambda: source(includeHeaders="true").reader(StructType([field])))
    assert f"column {field.name!r} (or a part of it) NOT NULL" in message
    assert "declare it nullable" in message


def test_a_schema_name_is_exact_not_trimmed():
    spaced = StructType([StructField(" value", BinaryType())])
    assert "' value', which is not a Kafka column" in refused(lambda: source().reader(spaced))


def test_a_schema_of_some_kafka_columns_selects_them_in_its_order():
    # Column pruning: Spark's Python data sources are not told a query's columns.
    mine = StructType([StructField("offset", LongType()), StructField("value", BinaryType())])
    batch = source(endingOffsets="latest").reader(mine)
    assert batch.settings.columns == ("offset", "value")
    assert source().streamReader(mine).settings.columns == ("offset", "value")


def test_the_columns_option_selects_columns_and_must_agree_with_a_schema():
    chosen = source(columns="value, partition")
    assert chosen.schema().fieldNames() == ["value", "partition"]
    assert chosen.streamReader(chosen.schema()).settings.columns == ("value", "partition")
    assert "disagree" in refused(lambda: chosen.streamReader(source().schema()))
    assert "which is not a Kafka column" in refused(lambda: source(columns="value,v").schema())
    assert "includeHeaders=true" in refused(lambda: source(columns="headers").schema())
    assert source(columns="headers", includeHeaders="true").schema().fieldNames() == [
        "headers"]


def test_the_stream_reader_links_to_an_offset_store_without_connecting():
    reader = source(**{"offsetStore.name": "orders",
                       "offsetStore.dsn": "host=nowhere.invalid"}).streamReader(None)
    assert isinstance(reader, KafkaDirectStreamReader)
    assert isinstance(reader._link, SourceLink) and reader._link.store == "orders"
    assert source().streamReader(None)._link is None
    # The link's own checks: offsetStore options without a name.
    assert "offsetStore.name" in refused(
        lambda: source(**{"offsetStore.dsn": "host=x"}).streamReader(None))


def batch_reader(cluster, **options):
    parsed = parse_source_options({**BASE, **options}, streaming=False, check_client=False)
    metadata = SourceMetadata(parsed, lambda params: FakeDriverConsumer(cluster, params))
    return KafkaDirectBatchReader(parsed, metadata)


def test_batch_planning_from_start_to_end():
    cluster = FakeCluster()
    cluster.create("t", 2)
    cluster.produce(TopicPartition("t", 0), 10)
    cluster.produce(TopicPartition("t", 1), 4)
    plan = batch_reader(cluster, startingOffsets='{"t": {"0": 2, "1": -2}}',
                        endingOffsets='{"t": {"0": 7, "1": -1}}', minPartitions=3).partitions()
    ranges = [[(r.partition, r.fromOffset, r.untilOffset) for r in p.offsetRanges]
              for p in plan]
    # t-1's 4 offsets round to one task; t-0's 5 are cut in two (minPartitions: no packing).
    assert ranges == [[(0, 2, 4)], [(0, 4, 7)], [(1, 0, 4)]]
    assert "starting offset 8 of t-0 is after its ending offset 7" in refused(
        lambda: batch_reader(cluster, startingOffsets='{"t": {"0": 8, "1": 0}}',
                             endingOffsets='{"t": {"0": 7, "1": 4}}').partitions())
    assert list(batch_reader(cluster).read(InputPartition(None))) == []
