"""`kafka-direct ingest --table '{topic}'`: a table per topic, each with its own columns and
dead letters, every topic's offsets in the batch's one transaction, on both APIs, against
the real broker and PostgreSQL."""

import decimal
import json

import pytest

from tests.app.test_ingest_typed import columns, ok, query

APIS = ["dstream", "structured"]


def ingest(job_host, kafka, postgres, schema, api, group, *extra):
    return job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--schema", schema, "--batch-interval", "0.5", "--stop-after-idle", "1",
         "--api", api, "--group", group, *extra])


@pytest.mark.parametrize("api", APIS)
def test_topics_go_to_a_table_each_with_their_own_columns_and_dead_letters(
        kafka, kafka_topic, postgres, pg_schema, api, job_host):
    orders = kafka_topic(partitions=2, prefix="orders.eu")
    users = kafka_topic(partitions=1, prefix="users")
    kafka.produce(orders, [json.dumps({"id": i, "amount": i + 0.5}).encode()
                           for i in range(10)], partition=0)
    kafka.produce(orders, [json.dumps({"id": i, "amount": 1.0}).encode()
                           for i in range(10, 15)] + [b"not json"], partition=1)
    kafka.produce(users, [json.dumps({"id": i, "name": f"u{i}"}).encode() for i in range(7)])
    args = ("--topic", orders, "--topic", users, "--table", "t_{topic}", "--value-format",
            "json", "--key-columns", "id", "--on-bad-record", "dead-letter")
    out = ok(ingest(job_host, kafka, postgres, pg_schema, api, f"g-{users}", *args))
    ordersTable = "t_" + orders.replace(".", "_")
    usersTable = f"t_{users}"
    assert f"table {pg_schema}.{ordersTable}: 15 rows, 0 duplicates" in out
    assert f"table {pg_schema}.{usersTable}: 7 rows, 0 duplicates" in out
    assert "stored offsets == log end" in out
    assert set(columns(postgres, pg_schema, ordersTable)) == {
        "topic", "kafka_partition", "kafka_offset", "key", "id", "amount"}
    assert set(columns(postgres, pg_schema, usersTable)) == {
        "topic", "kafka_partition", "kafka_offset", "key", "id", "name"}
    assert query(postgres, f'SELECT topic, kafka_partition, kafka_offset FROM '
                           f'"{pg_schema}"."{ordersTable}_dead_letter"') == [(orders, 1, 5)]
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}"."{usersTable}_dead_letter"'
                 ) == [(0,)]
    # A rerun reads only what is new, in every topic: the offsets of all committed together.
    kafka.produce(users, [json.dumps({"id": 3, "name": "renamed"}).encode()])
    kafka.produce(orders, [json.dumps({"id": 99, "amount": 9.5}).encode()], partition=0)
    again = ok(ingest(job_host, kafka, postgres, pg_schema, api, f"g-{users}", *args))
    assert "2 records read" in again and "stored offsets == log end" in again
    assert query(postgres, f'SELECT name FROM "{pg_schema}"."{usersTable}" WHERE id = 3'
                 ) == [("renamed",)]
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}"."{ordersTable}"') == [(16,)]


@pytest.mark.parametrize("api", APIS)
def test_a_patterns_raw_records_go_to_a_table_per_topic(kafka, kafka_topic, postgres,
                                                        pg_schema, api, job_host):
    first = kafka_topic(partitions=2, prefix=f"pt{api}.a")
    second = kafka_topic(partitions=1, prefix=f"pt{api}.b")
    kafka.produce(first, [b"x%d" % i for i in range(12)], keys=[b"k"] * 12)
    kafka.produce(second, [b"y%d" % i for i in range(5)])
    out = ok(ingest(job_host, kafka, postgres, pg_schema, api, f"g-{first}", "--pattern",
                    rf"pt{api}\.[ab]-{first.split('-')[1]}-\d+|pt{api}\.[ab]-"
                    rf"{second.split('-')[1]}-\d+", "--table", "{topic}"))
    assert "stored offsets == log end" in out
    tables = {t.replace(".", "_"): t for t in (first, second)}
    for table, topic in tables.items():
        assert columns(postgres, pg_schema, table) == {
            "topic": "text", "kafka_partition": "integer", "kafka_offset": "bigint",
            "key": "bytea", "value": "bytea"}
        assert query(postgres, f'SELECT DISTINCT topic FROM "{pg_schema}"."{table}"') == [
            (topic,)]
    values = query(postgres, f'SELECT value FROM "{pg_schema}"."{first.replace(".", "_")}"')
    assert sorted(bytes(v) for (v,) in values) == sorted(b"x%d" % i for i in range(12))
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}"."{second.replace(".", "_")}"'
                 ) == [(5,)]


@pytest.mark.parametrize("api", APIS)
def test_debezium_topics_each_mirror_their_table_truncates_and_kept_values_per_table(
        kafka, kafka_topic, postgres, pg_schema, api, job_host):
    from kafka_direct.app.typed.envelope import PLACEHOLDER
    from tests.app.typed.debezium_events import json_event, sample

    first = kafka_topic(partitions=1, prefix="cdc.a")
    second = kafka_topic(partitions=1, prefix="cdc.b")

    def produce(topic, events):
        pairs = [json_event(*e) for e in events]
        kafka.produce(topic, [v for _, v in pairs], keys=[k for k, _ in pairs])

    produce(first, [("c", 1, None, sample(1)), ("c", 2, None, sample(2)),
                    ("u", 2, None, sample(2, name=PLACEHOLDER)), ("t", None),
                    ("c", 3, None, sample(3))])
    produce(second, [("c", 1, None, sample(1)), ("c", 2, None, sample(2)),
                     ("u", 1, None, sample(1, name=PLACEHOLDER, born=None))])
    args = ("--topic", first, "--topic", second, "--table", "m_{topic}", "--envelope",
            "debezium", "--value-format", "json", "--key-format", "json", "--key-columns",
            "id", "--on-truncate", "truncate")
    out = ok(ingest(job_host, kafka, postgres, pg_schema, api, f"g-{first}", *args))
    assert "stored offsets == log end" in out
    a, b = (f'"{pg_schema}"."m_{t.replace(".", "_")}"' for t in (first, second))
    # The truncate of the first topic empties its table only, up to the truncate.
    assert query(postgres, f"SELECT id, name FROM {a} ORDER BY id") == [(3, "n3")]
    # The second table keeps the name its update did not send (TOAST), within the batch.
    assert query(postgres, f"SELECT id, name, born FROM {b} ORDER BY id") == [
        (1, "n1", None), (2, "n2", sample(2)["born"])]
    # Kept from the table in a later batch; a truncate of the second topic leaves the first's.
    produce(first, [("u", 3, None, sample(3, name=PLACEHOLDER, amount=decimal.Decimal("7.00")))])
    produce(second, [("t", None), ("c", 9, None, sample(9))])
    again = ok(ingest(job_host, kafka, postgres, pg_schema, api, f"g-{first}", *args))
    assert "stored offsets == log end" in again
    assert query(postgres, f"SELECT id, name, amount FROM {a} ORDER BY id") == [
        (3, "n3", decimal.Decimal("7.00"))]
    assert query(postgres, f"SELECT id FROM {b} ORDER BY id") == [(9,)]
