"""The native columnar reader against the Python reader on the real broker: identical tables.

Random logs (several producers, committed and aborted transactions, null keys and values,
empty ones, headers with null values, records of many sizes, a truncated log start) and
random ranges, read by both readers of :func:`read_partition`: the same Arrow table or the
same error, under both isolation levels, with and without headers, and with only some
columns (pruned: equal to those columns of a full read).
"""

import logging
import random
import sys
from dataclasses import replace

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from kafka_direct import DataLossError, OffsetRange
from kafka_direct.client import columnar
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.columnar import ColumnarConsumerCache, choose_impl
from kafka_direct.client.params import executor_params
from kafka_direct.errors import ConfigurationError
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, read_partition
from kafka_direct.rdd.arrow_rows import arrow_schema
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.kafka_schema import all_columns
from kafka_direct.testing.kafka import ANY_TIMESTAMP

needs_native = pytest.mark.skipif(not columnar.native_status()[0],
                                  reason=f"no native reader: {columnar.native_status()[1]}")


def random_record(rng):
    key = rng.choice([None, b"", b"k%d" % rng.randrange(1000), rng.randbytes(rng.randrange(40))])
    size = rng.choice([0, 1, 10, 100, 1000, 20_000])
    value = None if rng.random() < 0.1 else rng.randbytes(size)
    headers = rng.choice([None, [], [("h", b"1")],
                          [("a", None), ("b", b""), ("é", rng.randbytes(5)), ("a", b"2")]])
    # A timestamp of the producer's now (0), or explicit ones far apart.
    stamp = rng.choice([0, 0, 1, 1_000_000_000_000, 4_102_444_800_000])
    return key, value, headers, stamp


def produce_random_log(kafka, topic, partitions, rng, rounds=12):
    """A log of plain, idempotent, compressed and transactional batches, with far timestamps.

    The topic must take any timestamp (``ANY_TIMESTAMP``). One transactional producer writes
    every transaction, as applications do; the log is stable (every marker written) on return.
    """
    transactional = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    transactional.init_transactions(30)
    plain = [Producer(kafka.params(**{"linger.ms": 5})),
             Producer(kafka.params(**{"enable.idempotence": True, "compression.type": "lz4"})),
             Producer(kafka.params(**{"compression.type": "gzip", "batch.size": 2000}))]
    for _round in range(rounds):
        partition = rng.randrange(partitions)
        count = rng.randrange(1, 60)
        if rng.random() < 0.4:
            producer = transactional
            producer.begin_transaction()
            for _ in range(count):
                key, value, headers, stamp = random_record(rng)
                producer.produce(topic, value=value, key=key, headers=headers,
                                 partition=partition, timestamp=stamp)
            if rng.random() < 0.5:
                producer.commit_transaction(30)
            else:
                # Sent first: librdkafka drops what it has not sent when a transaction
                # aborts, and the log would hold no aborted record at all.
                assert producer.flush(30) == 0
                producer.abort_transaction(30)
        else:
            producer = rng.choice(plain)
            for _ in range(count):
                key, value, headers, stamp = random_record(rng)
                producer.produce(topic, value=value, key=key, headers=headers,
                                 partition=partition, timestamp=stamp)
            assert producer.flush(30) == 0
    for producer in plain:
        assert producer.flush(30) == 0
    # One aborted transaction in every log, whatever the draw: sent, then aborted.
    transactional.begin_transaction()
    for i in range(5):
        transactional.produce(topic, value=b"aborted-%d" % i, partition=0)
    assert transactional.flush(30) == 0
    transactional.abort_transaction(30)
    kafka.await_stable(topic, range(partitions))


def read_both(offsetRange, settings, caches):
    """Each reader's table, or its error's type and offsets."""
    outcomes = []
    for cache in caches:
        try:
            batches = list(read_partition(offsetRange, settings, cache=cache))
            table = pa.Table.from_batches(
                batches, schema=arrow_schema(settings.includeHeaders, settings.columns))
            outcomes.append(table.combine_chunks())
        except DataLossError as error:
            outcomes.append((type(error), error.fromOffset, error.untilOffset,
                             error.context.get("logStartOffset"),
                             error.context.get("logEndOffset")))
    return outcomes


@needs_native
@pytest.mark.parametrize(("seed", "stamps"), [(1, "CreateTime"), (2, "LogAppendTime")])
def test_both_readers_give_identical_tables_for_random_logs_and_ranges(kafka, kafka_topic,
                                                                       seed, stamps):
    rng = random.Random(seed)
    partitions = 2
    topic = kafka_topic(partitions=partitions,
                        config={"message.timestamp.type": stamps, **ANY_TIMESTAMP})
    produce_random_log(kafka, topic, partitions, rng)
    for partition in range(partitions):  # the log starts move up
        kafka.delete_records(topic, partition, rng.randrange(1, 20))
    bounds = kafka.end_offsets(topic, range(partitions))
    compared = rows = losses = gaps = headers = pruned = 0
    for isolation in ("read_committed", "read_uncommitted"):
        params = executor_params(kafka.params(**{"group.id": f"diff-{seed}",
                                                 "isolation.level": isolation}))
        # Cached consumers on both sides: consecutive ranges take the seek path.
        caches = (ConsumerCache(), ColumnarConsumerCache())
        for _ in range(14):
            partition = rng.randrange(partitions)
            low, high = bounds[partition]
            # Some ranges start below the log start (deleted records: data loss).
            start = rng.randrange(0, low + 2 if rng.random() < 0.3 else high)
            end = rng.randrange(start + 1, high + 1)
            with_headers = rng.random() < 0.5
            columns = None
            if rng.random() < 0.4:  # column pruning: some columns, in any order
                columns = tuple(rng.sample(all_columns(with_headers),
                                           rng.randint(1, 3 + with_headers)))
            settings = PartitionReadSettings(
                ReadSettings(params, pollTimeoutMs=20_000,
                             failOnDataLoss=rng.random() < 0.5),
                includeHeaders=with_headers, columns=columns)
            # A range, then the next one from where it ended (the cached consumer's seek).
            for offsetRange in (OffsetRange(topic, partition, start, end),
                                OffsetRange(topic, partition, end, min(high, end + 37))):
                python, native = read_both(offsetRange, settings, caches)
                if isinstance(python, pa.Table):
                    assert isinstance(native, pa.Table), (offsetRange, native)
                    assert native.schema.equals(python.schema)
                    assert native.equals(python), (offsetRange, isolation)
                    if columns is not None:  # the columns of a full read, and only them
                        assert python.column_names == list(columns)
                        full = replace(settings, columns=None)
                        whole, = read_both(offsetRange, full, (ConsumerCache(),))
                        assert python.equals(whole.select(list(columns))), offsetRange
                        pruned += 1
                    rows += python.num_rows
                    gaps += python.num_rows < offsetRange.count()
                    headers += settings.includeHeaders and python.num_rows > 0
                else:
                    assert native == python, offsetRange
                    losses += 1
                compared += 1
        for cache in caches:
            cache.clear()
    print(f"seed {seed}: {compared} ranges, {rows} rows, {gaps} with gaps, {losses} data "
          f"losses, {headers} with headers, {pruned} pruned")
    assert compared == 56 and rows > 0 and gaps > 0 and headers > 0 and pruned > 0


@pytest.mark.parametrize("reader", ["python", "c"])
def test_a_consumer_handed_over_between_partitions_reads_each_range_exactly(
        kafka, kafka_topic, reader):
    # A cache of one consumer: every change of partition hands it over (retarget), with
    # the last partition unassigned at its range's end and records of it possibly queued.
    if reader == "c" and not columnar.native_status()[0]:
        pytest.skip(f"no native reader: {columnar.native_status()[1]}")
    first, second = kafka_topic(partitions=3), kafka_topic(partitions=1)
    for topic, partitions in ((first, 3), (second, 1)):
        for p in range(partitions):
            kafka.produce(topic, [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(300)],
                          partition=p)
    params = executor_params(kafka.params(**{"group.id": "handover"}))
    settings = PartitionReadSettings(ReadSettings(params, pollTimeoutMs=20_000), impl=reader)
    cache = (ColumnarConsumerCache if reader == "c" else ConsumerCache)(capacity=1)
    # Back to a partition read before: it must be read from the range's start; the same
    # partition number of another topic: none of the first topic's records.
    plan = [(first, 0, 0, 100), (first, 1, 0, 300), (first, 0, 100, 250),
            (second, 0, 0, 300), (first, 0, 250, 300), (first, 2, 5, 290),
            (second, 0, 0, 7)]
    for topic, partition, begin, end in plan:
        batches = list(read_partition(OffsetRange(topic, partition, begin, end), settings,
                                      cache=cache))
        table = pa.Table.from_batches(batches, schema=arrow_schema(False))
        assert table.column("offset").to_pylist() == list(range(begin, end))
        assert set(table.column("topic").to_pylist()) == {topic}
        assert table.column("value").to_pylist() == [
            b"%s-%d-%d" % (topic.encode(), partition, i) for i in range(begin, end)]
    assert cache.created == 1 and cache.handedOver == 6
    cache.clear()


@needs_native
def test_a_chunk_needs_no_copy_of_the_readers_buffers(kafka, kafka_topic):
    topic = kafka_topic()
    kafka.produce(topic, [b"v%d" % i for i in range(50)], partition=0,
                  keys=[None] * 50)
    params = executor_params(kafka.params(**{"group.id": "nocopy"}))
    settings = PartitionReadSettings(ReadSettings(params, pollTimeoutMs=10_000))
    batches = list(read_partition(OffsetRange(topic, 0, 0, 50), settings,
                                  cache=ColumnarConsumerCache()))
    assert sum(b.num_rows for b in batches) == 50
    assert batches[0].column("key").null_count == 50
    assert batches[0].column("value").to_pylist()[:2] == [b"v0", b"v1"]


@needs_native
def test_the_native_reader_copies_only_the_columns_asked_for(kafka, kafka_topic):
    topic = kafka_topic()
    kafka.produce(topic, [b"v%d" % i for i in range(30)], keys=[b"k"] * 30, partition=0,
                  headers=[("h", b"1")])
    params = executor_params(kafka.params(**{"group.id": "mask"}))
    cache = ColumnarConsumerCache()
    for mask, present in [(0, ()), (columnar.WANT_KEY, ("key",)),
                          (columnar.WANT_VALUE, ("value",)),
                          (columnar.WANT_VALUE | columnar.WANT_HEADERS, ("value", "headers")),
                          (7, ("key", "value", "headers"))]:
        with cache.lease(topic, 0, params) as consumer:
            chunks = list(consumer.read_chunks(0, 30, 10_000, columns=mask))
        assert sum(chunk.count for chunk in chunks) == 30
        for chunk in chunks:
            b = chunk.buffers
            copied = {"key": b[columnar.KEY_DATA] is not None,
                      "value": b[columnar.VALUE_DATA] is not None,
                      "headers": b[columnar.HKEY_DATA] is not None}
            assert {name for name, there in copied.items() if there} == set(present), mask
            assert b[columnar.OFFSETS] is not None and b[columnar.STAMPS] is not None
    # Without a mask, as before masks: key and value, and the headers if included.
    for include, present in ((False, (True, True, False)), (True, (True, True, True))):
        with cache.lease(topic, 0, params) as consumer:
            chunk, = list(consumer.read_chunks(0, 1, 10_000, True, include))
        b = chunk.buffers
        assert (b[columnar.KEY_DATA] is not None, b[columnar.VALUE_DATA] is not None,
                b[columnar.HKEY_DATA] is not None) == present
    cache.clear()


@needs_native
def test_the_native_reader_reports_data_loss_as_the_python_one(kafka, kafka_topic):
    topic = kafka_topic()
    kafka.produce(topic, [b"%d" % i for i in range(10)], partition=0)
    kafka.delete_records(topic, 0, 6)
    params = executor_params(kafka.params(**{"group.id": "loss"}))
    strict = PartitionReadSettings(ReadSettings(params, pollTimeoutMs=10_000), impl="c")
    with pytest.raises(DataLossError) as raised:
        list(read_partition(OffsetRange(topic, 0, 2, 8), strict,
                            cache=ColumnarConsumerCache()))
    assert raised.value.logStartOffset == 6
    lenient = PartitionReadSettings(ReadSettings(params, pollTimeoutMs=10_000,
                                                 failOnDataLoss=False), impl="c")
    batches = list(read_partition(OffsetRange(topic, 0, 2, 12), lenient,
                                  cache=ColumnarConsumerCache()))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == [6, 7, 8, 9]


def test_kafka_direct_impl_python_reads_with_the_python_reader(monkeypatch):
    monkeypatch.setenv("KAFKA_DIRECT_IMPL", "python")
    assert choose_impl() == "python"
    assert choose_impl("python") == "python"
    monkeypatch.setenv("KAFKA_DIRECT_IMPL", "rust")
    with pytest.raises(ConfigurationError, match="KAFKA_DIRECT_IMPL"):
        choose_impl()


@pytest.fixture
def without_extension(monkeypatch):
    """The extension made unavailable, as an install without a C compiler has it."""
    import kafka_direct.client

    monkeypatch.setitem(sys.modules, "kafka_direct.client._columnar", None)
    monkeypatch.delattr(kafka_direct.client, "_columnar", raising=False)
    monkeypatch.setattr(columnar, "_status", None)
    monkeypatch.setattr(columnar, "_fallback_logged", False)
    monkeypatch.delenv("KAFKA_DIRECT_IMPL", raising=False)


def test_without_the_extension_reads_fall_back_with_one_info_line(
        without_extension, monkeypatch, caplog, kafka, kafka_topic):
    import kafka_direct.rdd.arrow_reader as module

    topic = kafka_topic()
    kafka.produce(topic, [b"a", None, b"c"], partition=0)
    params = executor_params(kafka.params(**{"group.id": "fallback"}))
    settings = PartitionReadSettings(ReadSettings(params, pollTimeoutMs=10_000),
                                     includeHeaders=True)
    monkeypatch.setattr(module, "consumer_cache", ConsumerCache())
    monkeypatch.setattr(module, "columnar_cache", None)  # must not be touched
    with caplog.at_level(logging.INFO, logger="kafka_direct.client.columnar"):
        for _ in range(2):
            batches = list(read_partition(OffsetRange(topic, 0, 0, 3), settings))
            assert [v for b in batches for v in b.column("value").to_pylist()] == [
                b"a", None, b"c"]
    lines = [r for r in caplog.records if r.name == "kafka_direct.client.columnar"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "Python reader" in lines[0].getMessage()
    assert "ImportError" in lines[0].getMessage() or "ModuleNotFound" in lines[0].getMessage()
    assert columnar.native_status()[0] is False


def test_forcing_the_native_reader_without_it_is_a_configuration_error(without_extension):
    with pytest.raises(ConfigurationError, match="KAFKA_DIRECT_IMPL=c") as raised:
        choose_impl("c")
    assert "python" in str(raised.value)
    settings = PartitionReadSettings(ReadSettings({"bootstrap.servers": "x:1",
                                                   "group.id": "g"}), impl="c")
    with pytest.raises(ConfigurationError):
        list(read_partition(OffsetRange("t", 0, 0, 5), settings))


def test_callbacks_in_the_parameters_take_the_python_reader():
    with pytest.raises(columnar.UnsupportedConfigError, match="error_cb"):
        columnar.native_config({"bootstrap.servers": "x:1", "error_cb": print})
    assert columnar.native_config({"a": True, "b": 5, "c": "x"}) == [
        ("a", "true"), ("b", "5"), ("c", "x")]


def test_the_native_reader_is_built_wherever_a_c_compiler_is():
    # The install builds it where gcc exists; a silent build failure would otherwise only
    # show as skipped native tests.
    import shutil

    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler here: the pure-Python reader is the one installed")
    available, why = columnar.native_status()
    assert available, why
