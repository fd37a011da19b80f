"""Offset stores on a real PostgreSQL server and a real broker."""

import pickle
import threading

import pytest

from kafka_direct import ConfigurationError, OffsetMismatchError, OffsetRange, TopicPartition
from kafka_direct.postgres import connection as connections
from offsets import KafkaOffsetStore, PostgresOffsetStore

T0, T1 = TopicPartition("events", 0), TopicPartition("events", 1)


@pytest.fixture
def store(postgres, pg_schema):
    store = PostgresOffsetStore(postgres.dsn, table='odd "name"', schema=pg_schema)
    store.ensure_schema()
    store.ensure_schema()  # safe to repeat
    return store


def test_seed_load_and_commit_advance_the_next_offset(store):
    assert store.load("g") == {}
    store.seed("g", {T0: 0, T1: 10})
    store.seed("g", {T0: 99})  # existing rows keep their offset
    assert store.load("g") == {T0: 0, T1: 10}
    store.commit("g", [OffsetRange("events", 0, 0, 5), OffsetRange("events", 1, 10, 12)])
    assert store.load("g") == {T0: 5, T1: 12}
    assert store.load("g", topics=["other"]) == {}
    assert store.load("other-group") == {}


def test_a_repeated_commit_is_a_no_op_and_a_gap_or_overlap_writes_nothing(store):
    store.seed("g", {T0: 0, T1: 0})
    first = [OffsetRange("events", 0, 0, 5), OffsetRange("events", 1, 0, 3)]
    store.commit("g", first)
    store.commit("g", first)  # a retried task: already applied
    assert store.load("g") == {T0: 5, T1: 3}
    with pytest.raises(OffsetMismatchError, match="a gap, records would be lost") as gap:
        store.commit("g", [OffsetRange("events", 0, 5, 8), OffsetRange("events", 1, 4, 9)])
    error = gap.value
    assert (error.group, error.topic, error.partition, error.stored, error.fromOffset,
            error.untilOffset) == ("g", "events", 1, 3, 4, 9)
    assert store.load("g") == {T0: 5, T1: 3}  # the valid range of the failed commit too
    with pytest.raises(OffsetMismatchError, match="an overlap"):
        store.commit("g", [OffsetRange("events", 0, 2, 7)])
    with pytest.raises(OffsetMismatchError, match="seed the partition"):
        store.commit("g", [OffsetRange("events", 7, 0, 1)])


def test_claim_and_advance_inside_the_callers_transaction(store, postgres):
    store.seed("g", {T0: 0})
    connection = postgres.connect()
    try:
        with connection.cursor() as cursor:
            assert store.claim(cursor, "g", OffsetRange("events", 0, 0, 4)) is True
            store.advance(cursor, "g", OffsetRange("events", 0, 0, 4))
        connection.rollback()  # the results failed: the offset must not move
        assert store.load("g") == {T0: 0}
        with connection.cursor() as cursor:
            assert store.claim(cursor, "g", OffsetRange("events", 0, 0, 4)) is True
            store.advance(cursor, "g", OffsetRange("events", 0, 0, 4))
        connection.commit()
        with connection.cursor() as cursor:
            assert store.claim(cursor, "g", OffsetRange("events", 0, 0, 4)) is False
        connection.rollback()
    finally:
        connection.close()
    assert store.load("g") == {T0: 4}


def test_concurrent_writers_of_one_partition_wait_and_only_one_applies(store, postgres):
    store.seed("g", {T0: 0})
    holder = postgres.connect()
    outcomes = []
    try:
        with holder.cursor() as cursor:
            assert store.claim(cursor, "g", OffsetRange("events", 0, 0, 10))

            def second_writer(rng):
                try:
                    store.commit("g", [rng])
                    outcomes.append("committed")
                except OffsetMismatchError as error:
                    outcomes.append(f"refused at {error.stored}")

            duplicate = threading.Thread(target=second_writer,
                                         args=(OffsetRange("events", 0, 0, 10),))
            conflicting = threading.Thread(target=second_writer,
                                           args=(OffsetRange("events", 0, 0, 7),))
            duplicate.start()
            conflicting.start()
            duplicate.join(0.5)
            assert duplicate.is_alive() and conflicting.is_alive()  # waiting on the lock
            store.advance(cursor, "g", OffsetRange("events", 0, 0, 10))
        holder.commit()
        duplicate.join(10)
        conflicting.join(10)
    finally:
        holder.close()
    assert sorted(outcomes) == ["committed", "refused at 10"]  # the duplicate was a no-op
    assert store.load("g") == {T0: 10}


def _session(store):  # the kept session's backend
    with store.transaction(kept=True) as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_store_keeps_one_connection_and_connects_again_after_the_session_ended(
        postgres, pg_schema, monkeypatch):
    opened = []
    real = connections.connect
    monkeypatch.setattr(connections, "connect", lambda dsn: opened.append(1) or real(dsn))
    store = PostgresOffsetStore(postgres.dsn, table="kept", schema=pg_schema)
    store.seed("g", {T0: 0})
    for n in range(3):
        store.commit("g", [OffsetRange("events", 0, n, n + 1)])
        assert store.load("g") == {T0: n + 1}
    first = _session(store)
    assert len(opened) == 1
    # PostgreSQL ended the idle session (restarted, or an administrator terminated it): the
    # next transaction runs on a new one.
    admin = postgres.connect()
    try:
        with admin, admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 10000)", (first,))
            assert cursor.fetchone() == (True,)
    finally:
        admin.close()
    assert store.load("g") == {T0: 3}
    assert len(opened) == 2 and _session(store) != first
    # A failed transaction leaves the session usable, rolled back.
    with pytest.raises(OffsetMismatchError):
        store.commit("g", [OffsetRange("events", 0, 0, 1), OffsetRange("events", 0, 5, 6)])
    assert store.load("g") == {T0: 3} and len(opened) == 2
    # A copy (a pickled sink or store) connects on its own; the original keeps its session.
    copy = pickle.loads(pickle.dumps(store))
    assert copy.load("g") == {T0: 3} and len(opened) == 3
    assert _session(copy) != _session(store)
    store.close()
    assert store.load("g") == {T0: 3} and len(opened) == 4  # closed: a new one on next use
    store.close()
    copy.close()


def test_bad_configuration_and_no_credentials_in_repr(postgres):
    with pytest.raises(ConfigurationError, match="dsn or a connect function"):
        PostgresOffsetStore()
    with pytest.raises(ConfigurationError, match="table"):
        PostgresOffsetStore("host=x", table="")
    secret = PostgresOffsetStore("host=127.0.0.1 password=hunter2 dbname=x")
    assert "hunter2" not in repr(secret)


def test_kafka_offset_store_commits_to_the_group(kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"x"] * 5, partition=0)
    store = KafkaOffsetStore(kafka.params())
    group = f"store-{topic}"
    assert store.load(group, [topic]) == {}
    store.seed(group, {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0})
    store.commit(group, [OffsetRange(topic, 0, 0, 5)])
    store.commit(group, [OffsetRange(topic, 0, 0, 5)])  # repeated: no change
    assert store.load(group, [topic]) == {TopicPartition(topic, 0): 5,
                                          TopicPartition(topic, 1): 0}
    with pytest.raises(OffsetMismatchError):
        store.commit(group, [OffsetRange(topic, 0, 2, 4)])  # committed is 5: an overlap


def test_a_kafka_store_keeps_one_client_for_its_group(kafka, kafka_topic, monkeypatch):
    import offsets.kafka_offset_store as kafka_store

    made = []

    class Counted(kafka_store.DriverConsumer):
        def __init__(self, params, *args, **kwargs):
            made.append(params["group.id"])
            super().__init__(params, *args, **kwargs)

    monkeypatch.setattr(kafka_store, "DriverConsumer", Counted)
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 5)
    store = KafkaOffsetStore(kafka.params())
    group, tp = f"kept-{topic}", TopicPartition(topic, 0)
    store.seed(group, {tp: 0})
    for n in range(3):
        store.commit(group, [OffsetRange(topic, 0, n, n + 1)])
        assert store.load(group, [topic]) == {tp: n + 1}
    with pytest.raises(OffsetMismatchError):
        store.commit(group, [OffsetRange(topic, 0, 0, 1)])
    assert made == [group]
    # Another group: its own client (the first one's closed).
    assert store.load(f"{group}-other", [topic]) == {}
    assert made == [group, f"{group}-other"]
    # A copy (a pickled store) connects on its own.
    copy = pickle.loads(pickle.dumps(store))
    assert copy.load(group, [topic]) == {tp: 3} and len(made) == 3
    store.close()
    copy.close()
    assert store.load(group, [topic]) == {tp: 3} and len(made) == 4  # a new one after close
    store.close()

