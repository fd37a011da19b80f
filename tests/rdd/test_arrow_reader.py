"""Arrow rows of the source, and a task's read of a range through KafkaRDD's reader."""

import pyarrow as pa
import pytest

from kafka_direct import ConfigurationError, ConsumerRecord, DataLossError, OffsetRange, RecordError
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.columnar import ColumnarConsumerCache
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, read_partition
from kafka_direct.rdd.arrow_rows import RecordBatchBuilder, arrow_schema, source_schema
from kafka_direct.rdd.dataframe import record_to_row
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.task_errors import CarriedTaskError, carried_error, carry_errors
from tests.fakes.fake_kafka import FakeConsumer, FakeLog, FakeNativeConsumer

PARAMS = {"bootstrap.servers": "fake:1", "group.id": "spark-executor-g"}


class Message:
    def __init__(self, offset, key=None, value=None, kind=1, ms=1_700_000_000_123,
                 headers=None):
        self._o, self._k, self._v, self._kind, self._ms = offset, key, value, kind, ms
        self._h = headers

    def offset(self):
        return self._o

    def key(self):
        return self._k

    def value(self):
        return self._v

    def timestamp(self):
        return (self._kind, self._ms if self._kind else -1)

    def headers(self):
        return self._h

    def error(self):
        return None


def test_columns_follow_sparks_kafka_source():
    builder = RecordBatchBuilder("events", 3, includeHeaders=False)
    batch = builder.build([
        Message(7, key=b"k", value=b"v"),
        Message(8, value=None, kind=2, ms=5),
        Message(9, key=b"", value=b"x", kind=0),
    ])
    assert batch.schema.equals(arrow_schema(False))
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [b"k", None, b""]
    assert [r["value"] for r in rows] == [b"v", None, b"x"]
    assert {r["topic"] for r in rows} == {"events"} and {r["partition"] for r in rows} == {3}
    assert [r["offset"] for r in rows] == [7, 8, 9]
    assert [r["timestampType"] for r in rows] == [0, 1, -1]
    stamps = [r["timestamp"] for r in rows]
    assert stamps[0].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert stamps[1].timestamp() == 0.005 and stamps[2] is None


def test_headers_when_asked_and_null_without_any():
    builder = RecordBatchBuilder("t", 0, includeHeaders=True)
    batch = builder.build([Message(0, headers=[("a", b"1"), ("b", None)]),
                           Message(1, headers=None), Message(2, headers=[])])
    assert batch.schema.equals(arrow_schema(True))
    assert batch.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None, None]
    assert "headers" not in arrow_schema(False).names
    assert source_schema(True).fieldNames()[-1] == "headers"


def test_an_empty_list_is_an_empty_batch_of_the_schema():
    batch = RecordBatchBuilder("t", 0, includeHeaders=True).build([])
    assert batch.num_rows == 0 and batch.schema.equals(arrow_schema(True))


def test_the_schema_is_exactly_what_spark_checks():
    # PySpark refuses record batches whose schema differs from to_arrow_schema's.
    schema = arrow_schema(True)
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("partition").type == pa.int32()
    assert schema.field("headers").type.value_field.name == "element"


def settings(failOnDataLoss=True, includeHeaders=False):
    return PartitionReadSettings(ReadSettings(dict(PARAMS), pollTimeoutMs=2000,
                                              failOnDataLoss=failOnDataLoss),
                                 includeHeaders=includeHeaders)


@pytest.fixture(params=["python", "c"])
def reader(request):
    """Both executor readers: the Python one and the native one's loop over a fake."""
    return request.param


def cache_over(log, reader="python"):
    fakes = []

    def factory(params):
        fakes.append(FakeConsumer(log) if reader == "python" else FakeNativeConsumer(log))
        return fakes[-1]

    if reader == "c":
        return ColumnarConsumerCache(factory=factory), fakes
    return ConsumerCache(factory=factory), fakes


def offsets(batches):
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_range_with_gaps_reads_its_records_and_reuses_the_consumer(reader):
    log = FakeLog([0, 1, 2, 4, 5, 7, 8, 9], high=12)  # 3, 6, 10, 11: markers
    cache, fakes = cache_over(log, reader)
    first = list(read_partition(OffsetRange("t", 0, 1, 8), settings(), cache=cache))
    assert offsets(first) == [1, 2, 4, 5, 7]
    assert offsets(read_partition(OffsetRange("t", 0, 8, 12), settings(), cache=cache)) == [
        8, 9]
    assert len(fakes) == 1 and fakes[0].assigns == [1, 8]  # each range assigned at its start
    assert list(read_partition(OffsetRange("t", 0, 5, 5), settings(), cache=cache)) == []


def test_small_consumer_batches_are_joined_into_bigger_record_batches(monkeypatch):
    import kafka_direct.rdd.arrow_reader as module

    monkeypatch.setattr(module, "ROWS_PER_BATCH", 10)
    log = FakeLog(range(25))
    cache, _ = cache_over(log)

    class Small(FakeConsumer):
        def consume(self, num, timeout):
            return super().consume(min(num, 3), timeout)

    cache.factory = lambda params: Small(log)
    batches = list(read_partition(OffsetRange("t", 0, 0, 25), settings(), cache=cache))
    assert [b.num_rows for b in batches] == [12, 12, 1]
    assert offsets(batches) == list(range(25))


def test_deleted_offsets_are_data_loss_carried_as_data_or_skipped(reader):
    log = FakeLog(range(10, 20), low=10)
    cache, fakes = cache_over(log, reader)
    with pytest.raises(CarriedTaskError) as raised:
        list(carry_errors(read_partition(OffsetRange("t", 0, 5, 15), settings(),
                                         cache=cache)))
    error = carried_error(raised.value)
    assert isinstance(error, DataLossError)
    assert (error.fromOffset, error.untilOffset, error.logStartOffset) == (5, 15, 10)
    assert fakes[0].closed  # a failed read never leaves its consumer in the cache
    lenient = list(read_partition(OffsetRange("t", 0, 5, 15), settings(failOnDataLoss=False),
                                  cache=cache))
    assert offsets(lenient) == list(range(10, 15))


@pytest.mark.parametrize("begin", [5, 12])  # the start below or beyond the new end
def test_a_range_beyond_a_shrunk_log_end_is_data_loss_or_skipped(begin, reader):
    log = FakeLog(range(10))  # the range was planned when the log reached 15
    cache, fakes = cache_over(log, reader)
    with pytest.raises(CarriedTaskError) as raised:
        list(carry_errors(read_partition(OffsetRange("t", 0, begin, 15), settings(),
                                         cache=cache)))
    error = carried_error(raised.value)
    assert isinstance(error, DataLossError)
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset,
            error.logEndOffset) == ("t", 0, begin, 15, 10)
    assert "failOnDataLoss=false" in str(error)
    assert fakes[0].closed
    lenient = list(read_partition(OffsetRange("t", 0, begin, 15),
                                  settings(failOnDataLoss=False), cache=cache))
    assert offsets(lenient) == list(range(begin, 10))


def test_an_abandoned_read_closes_its_consumer(reader):
    import kafka_direct.rdd.arrow_reader as module

    log = FakeLog(range(100))
    cache, fakes = cache_over(log, reader)
    reading = read_partition(OffsetRange("t", 0, 0, 100), settings(), cache=cache)
    original = module.ROWS_PER_BATCH
    try:
        module.ROWS_PER_BATCH = 5
        next(reading)
    finally:
        module.ROWS_PER_BATCH = original
    reading.close()
    assert fakes[0].closed and len(cache) == 0


def reference_rows(topic, partition, messages):
    """What each row must hold, computed one record at a time (no fast path)."""
    rows = []
    for m in messages:
        kind, ms = m.timestamp()
        rows.append({"key": m.key(), "value": m.value(), "topic": topic,
                     "partition": partition, "offset": m.offset(),
                     "timestamp": ms * 1000 if kind else None, "timestampType": kind - 1})
    return rows


def built_rows(batch):
    columns = batch.to_pydict()
    columns["timestamp"] = batch.column("timestamp").cast(pa.int64()).to_pylist()
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(),
                                                                       strict=True)]


@pytest.mark.parametrize("offsets", [
    [0], [41, 42, 43, 44], [5, 6, 8, 9], [0, 1, 2, 100], [7, 9], list(range(3, 40, 3))])
@pytest.mark.parametrize("kinds", [[1], [2], [0], [1, 2], [2, 0, 1], [0, 1]])
def test_every_column_matches_the_record_by_record_reading(offsets, kinds):
    # Offsets with and without gaps (markers, compaction) and timestamp types uniform or
    # mixed: the shortcuts of build must give exactly what reading each record gives.
    messages = [Message(o, key=(b"k%d" % o if o % 2 else None), value=b"v" * (o % 4),
                        kind=kinds[i % len(kinds)], ms=1_000 * o + 7)
                for i, o in enumerate(offsets)]
    batch = RecordBatchBuilder("t", 2, includeHeaders=False).build(messages)
    assert batch.schema.equals(arrow_schema(False))
    assert built_rows(batch) == reference_rows("t", 2, messages)


def test_keyless_records_and_records_without_timestamps_are_null_columns():
    batch = RecordBatchBuilder("t", 0, includeHeaders=False).build(
        [Message(o, value=b"x", kind=0) for o in range(10, 15)])
    assert batch.schema.equals(arrow_schema(False))
    assert batch.column("key").null_count == 5 and batch.column("timestamp").null_count == 5
    assert batch.column("timestampType").to_pylist() == [-1] * 5
    assert batch.column("offset").to_pylist() == [10, 11, 12, 13, 14]


#: The largest and smallest Kafka timestamps (ms) whose microseconds fit Spark's int64.
MAX_MS = (2**63 - 1) // 1000
MIN_MS = -(2**63 // 1000)


@pytest.mark.parametrize("kinds", [[1], [2], [1, 0], [0, 2, 1]])
@pytest.mark.parametrize("bad", [1_795_680_024_634_000_000, MAX_MS + 1, 2**63 - 1,
                                 MIN_MS - 1])
def test_a_timestamp_beyond_sparks_range_is_a_record_error_never_wrapped(kinds, bad):
    # 1_795_680_024_634_000_000: nanoseconds (time.time_ns()) where Kafka wants
    # milliseconds; times 1000 it wraps around int64 (to the year -99483).
    messages = [Message(o, value=b"v", kind=kinds[o % len(kinds)], ms=1_700_000_000_000 + o)
                for o in range(40, 50)]
    messages.insert(6, Message(46, value=b"v", kind=1, ms=bad))
    for later, message in enumerate(messages[7:], 47):
        message._o = later
    builder = RecordBatchBuilder("events", 3, includeHeaders=False)
    with pytest.raises(RecordError) as raised:
        builder.build(messages)
    error = raised.value
    assert (error.topic, error.partition, error.offset) == ("events", 3, 46)
    assert error.timestamp == bad
    assert "events-3" in str(error) and "offset 46" in str(error) and str(bad) in str(error)
    assert "milliseconds" in error.cause


def test_the_extreme_timestamps_that_fit_are_delivered_exactly():
    messages = [Message(0, kind=1, ms=MAX_MS), Message(1, kind=2, ms=MIN_MS),
                Message(2, kind=0), Message(3, kind=1, ms=0)]
    batch = RecordBatchBuilder("t", 0, includeHeaders=False).build(messages)
    # (As integers: Python's datetime ends at the year 9999, Spark's timestamp does not.)
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        MAX_MS * 1000, MIN_MS * 1000, None, 0]
    uniform = RecordBatchBuilder("t", 0, includeHeaders=False).build(
        [Message(0, ms=MAX_MS), Message(1, ms=MIN_MS)])
    assert uniform.column("timestamp").cast(pa.int64()).to_pylist() == [MAX_MS * 1000,
                                                                          MIN_MS * 1000]


def test_a_record_error_reaches_the_driver_as_data_from_a_task(reader):
    log = FakeLog(range(5), timestamps={3: 2**62})
    cache, fakes = cache_over(log, reader)
    with pytest.raises(CarriedTaskError) as raised:
        list(carry_errors(read_partition(OffsetRange("t", 0, 0, 5), settings(),
                                         cache=cache)))
    error = carried_error(raised.value)
    assert isinstance(error, RecordError)
    assert (error.topic, error.partition, error.offset, error.timestamp) == ("t", 0, 3, 2**62)
    assert fakes[0].closed


@pytest.mark.parametrize("bad", [1_795_680_024_634_000_000, 253_402_300_800_000])
def test_a_python_row_names_a_record_whose_timestamp_does_not_fit(bad):
    # record_to_row builds rows in Python (createDataFrame takes datetimes): years 1 to 9999.
    record = ConsumerRecord("t", 1, 8, bad, 0, None, b"v")
    with pytest.raises(RecordError) as raised:
        record_to_row(record)
    assert (raised.value.topic, raised.value.partition, raised.value.offset,
            raised.value.timestamp) == ("t", 1, 8, bad)
    good = record_to_row(record._replace(timestamp=253_402_300_799_999))
    assert good[5].isoformat() == "9999-12-31T23:59:59.999000+00:00"
    assert record_to_row(record._replace(timestamp=-1, timestampType=-1))[5] is None


@pytest.mark.parametrize("columns", [("value",), ("offset", "key"), ("timestampType",),
                                     ("headers", "partition", "topic")])
def test_only_the_columns_asked_for_are_built_in_their_order(columns):
    messages = [Message(7, key=b"k", value=b"v", headers=[("h", b"1")]),
                Message(8, value=None, kind=2, ms=5), Message(9, key=b"", value=b"x", kind=0)]
    full = RecordBatchBuilder("events", 3, includeHeaders=True).build(messages)
    pruned = RecordBatchBuilder("events", 3, includeHeaders=True, columns=columns)
    batch = pruned.build(messages)
    assert batch.schema.names == list(columns) == list(pruned.columns)
    assert batch.schema.equals(arrow_schema(True, columns))
    assert batch.equals(full.select(list(columns)))


def test_a_timestamp_spark_cannot_hold_fails_only_a_read_of_the_timestamp_column():
    messages = [Message(0, value=b"a"), Message(1, value=b"b", kind=1, ms=2**62)]
    for columns in (None, ("value", "timestamp")):
        with pytest.raises(RecordError):
            RecordBatchBuilder("t", 0, False, columns).build(messages)
    batch = RecordBatchBuilder("t", 0, False, ("offset", "value", "timestampType")).build(
        messages)
    assert batch.to_pylist() == [{"offset": 0, "value": b"a", "timestampType": 0},
                                 {"offset": 1, "value": b"b", "timestampType": 0}]


@pytest.mark.parametrize(("columns", "headers", "fault"), [
    ((), False, "one or more"), (("value", "nope"), False, "'nope', which is not"),
    (("value", "value"), False, "twice"), (("Value",), False, "exact names"),
    (("headers",), False, "includeHeaders=true"), ("key,,value", False, "one or more"),
    (("value", 3), False, "'3', which is not")])
def test_a_wrong_column_selection_is_a_configuration_error_naming_it(columns, headers, fault):
    with pytest.raises(ConfigurationError, match=fault):
        PartitionReadSettings(ReadSettings({}), includeHeaders=headers, columns=columns)


def test_a_comma_separated_selection_is_read_as_names():
    settings = PartitionReadSettings(ReadSettings({}), columns=" value , offset")  # type: ignore[arg-type]
    assert settings.columns == ("value", "offset")


def test_a_seek_librdkafka_refuses_assigns_the_partition_again(reader):
    # A topic deleted and re-created while a cached consumer idled paused: librdkafka
    # refuses to seek the partition (ERR__STATE, "Local: Erroneous state"). The next range
    # must still be read, by assigning again, and never end in the raw native error.
    if reader == "c":
        _columnar = pytest.importorskip("kafka_direct.client._columnar")
        refusal = _columnar.NativeError(-172, "Local: Erroneous state")
    else:
        from confluent_kafka import KafkaError, KafkaException

        refusal = KafkaException(KafkaError(KafkaError._STATE))
    log = FakeLog(range(10))
    cache, fakes = cache_over(log, reader)
    assert offsets(read_partition(OffsetRange("t", 0, 0, 4), settings(), cache=cache)) == [
        0, 1, 2, 3]

    def refused(*args):
        raise refusal

    fakes[0].seek = refused  # the next range continues where this one ended: a seek
    assert offsets(read_partition(OffsetRange("t", 0, 4, 10), settings(), cache=cache)) == [
        4, 5, 6, 7, 8, 9]
    assert fakes[0].assigns == [0, 4]

