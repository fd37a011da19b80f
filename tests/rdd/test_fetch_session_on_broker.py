"""A task of many small ranges read in one fetch session, on the real broker: exact records."""

import pytest
from confluent_kafka import Producer

from kafka_direct import DataLossError, OffsetRange
from kafka_direct.client.params import executor_params
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, in_session, read_task
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.task_errors import CarriedTaskError, carried_error

PARTITIONS = 12


def settings(kafka, reader="python", failOnDataLoss=True, includeHeaders=True):
    return PartitionReadSettings(
        ReadSettings(executor_params(kafka.params(**{"group.id": "g"})), pollTimeoutMs=30_000,
                     failOnDataLoss=failOnDataLoss),
        includeHeaders=includeHeaders, impl=reader)


def rows(batches):
    return [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["headers"])
            for batch in batches for r in batch.to_pylist()]


@pytest.fixture
def transactional_topic(kafka, kafka_topic):
    """A topic whose partitions hold records, committed and aborted transactions' markers."""
    topic = kafka_topic(partitions=PARTITIONS)
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    for round_ in range(3):
        producer.begin_transaction()
        for p in range(PARTITIONS):
            for i in range(p % 4 + 1):
                producer.produce(topic, f"{p}:{round_}:{i}".encode(), key=f"k{i}".encode(),
                                 partition=p, headers=[("h", bytes([i]))])
        if round_ == 1:
            producer.abort_transaction(30)  # its records and marker: offsets without rows
        else:
            producer.commit_transaction(30)
    return topic


def planned(kafka, topic):
    ends = kafka.end_offsets(topic, range(PARTITIONS))
    # Ranges starting and ending on markers and aborted records, some after a gap.
    return [OffsetRange(topic, p, p % 3, ends[p][1]) for p in range(PARTITIONS)]


@pytest.mark.parametrize("reader", ["python", "c"])
def test_a_grouped_task_reads_exactly_its_ranges_and_the_same_records_on_retry(
        kafka, transactional_topic, reader, monkeypatch):
    import kafka_direct.rdd.arrow_reader as arrow_reader

    ranges = planned(kafka, transactional_topic)
    assert in_session(ranges)
    grouped = rows(read_task(ranges, settings(kafka, reader)))
    # The same ranges, each read on its own by the chosen reader: the same rows, in order.
    alone = [row for r in ranges for row in rows(read_task(r, settings(kafka, reader)))]
    assert grouped == alone
    assert {row[4].split(b":")[1] for row in grouped} == {b"0", b"2"}  # nothing aborted
    for r in ranges:
        offsets = [row[2] for row in grouped if row[1] == r.partition]
        assert all(r.fromOffset <= o < r.untilOffset for o in offsets)
    # A retried task (a later attempt, after an abandoned first one) reads the same rows.
    abandoned = read_task(ranges, settings(kafka, reader))
    next(abandoned)
    abandoned.close()
    monkeypatch.setattr(arrow_reader, "task_attempt", lambda: 1)
    assert rows(read_task(ranges, settings(kafka, reader))) == grouped


def test_data_loss_in_a_grouped_task_is_decided_as_for_a_range_read_alone(kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    for p in range(3):
        kafka.produce(topic, [f"{p}:{i}".encode() for i in range(6)], partition=p)
    kafka.delete_records(topic, 1, 4)
    ranges = [OffsetRange(topic, p, 1, 6) for p in range(3)]
    with pytest.raises(CarriedTaskError) as raised:
        list(read_task(ranges, settings(kafka)))
    lost = carried_error(raised.value)
    assert isinstance(lost, DataLossError)
    assert (lost.topic, lost.partition) == (topic, 1)
    # failOnDataLoss=false: a warning, and the rest of the partition from its log start.
    lenient = rows(read_task(ranges, settings(kafka, failOnDataLoss=False)))
    assert [(row[1], row[2]) for row in lenient] == (
        [(0, o) for o in range(1, 6)] + [(1, 4), (1, 5)] + [(2, o) for o in range(1, 6)])


@pytest.mark.parametrize("reader", ["python", "c"])
def test_a_workers_tasks_share_one_session_consumer_and_read_exactly_their_ranges(
        kafka, kafka_topic, reader, monkeypatch):
    import kafka_direct.client.fetch_session as fetch_session

    consumers = fetch_session.SessionConsumers()
    monkeypatch.setattr(fetch_session, "session_consumers", consumers)
    topic = kafka_topic(partitions=3)
    for p in range(3):
        kafka.produce(topic, [f"{p}:{i}".encode() for i in range(40)], partition=p)
    # Batches of 5 offsets per partition: the consumer prefetches far past each range.
    plan = [[OffsetRange(topic, p, b * 5, (b + 1) * 5) for p in range(3)] for b in range(4)]
    read = [rows(read_task(ranges, settings(kafka, reader))) for ranges in plan]
    for ranges, got in zip(plan, read, strict=True):
        assert [(row[1], row[2]) for row in got] == [
            (r.partition, o) for r in ranges for o in range(r.fromOffset, r.untilOffset)]
    # One consumer for the worker's four tasks, idle (nothing assigned) between them.
    assert (consumers.created, consumers.reused, len(consumers)) == (1, 3, 1)
    # A batch read again after later ones (a restart replays it): the same records, though
    # the reused consumer had fetched past them.
    assert rows(read_task(plan[1], settings(kafka, reader))) == read[1]
    # A retried task reads with a new consumer, closed after; the idle one stays.
    monkeypatch.setattr("kafka_direct.rdd.arrow_reader.task_attempt", lambda: 1)
    assert rows(read_task(plan[2], settings(kafka, reader))) == read[2]
    assert (consumers.created, consumers.reused, len(consumers)) == (2, 4, 1)
    consumers.clear()
