"""`kafka-direct ingest --value-format protobuf --key-format protobuf`: Protobuf records from
a Schema Registry as typed columns, upserted and deleted by key, on both APIs, against the
real broker, PostgreSQL and a registry served over HTTP."""

import datetime
import decimal

import pytest

from tests.app.test_ingest_typed import APIS, columns, ingest, ok, query
from tests.app.typed.protobuf_messages import an_order, classes, serializer


@pytest.mark.parametrize("api", APIS)
def test_protobuf_values_and_keys_become_typed_columns(kafka, kafka_topic, postgres, pg_schema,
                                                      schema_registry, api, job_host):
    topic = kafka_topic(partitions=2)
    Order, OrderKey, _ = classes(f"shop{api}")
    value = serializer(schema_registry.url, Order, topic)
    key = serializer(schema_registry.url, OrderKey, topic, "key")
    for partition in (0, 1):
        ids = range(partition * 10, partition * 10 + 10)
        kafka.produce(topic, [value(an_order(Order, i)) for i in ids], partition=partition,
                      keys=[key(OrderKey(id=i)) for i in ids])
    kafka.produce(topic, [None], partition=1, keys=[key(OrderKey(id=11))])  # deletes 11
    out = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format",
                    "protobuf", "--key-format", "protobuf", "--schema-registry",
                    schema_registry.url, "--key-columns", "id", "--on-tombstone", "delete"))
    assert "stored offsets == log end" in out
    cols = columns(postgres, pg_schema, "typed")
    assert {name: cols[name] for name in ("id", "small", "big", "price", "ratio", "paid",
                                          "blob", "status", "at", "took", "coupon", "first",
                                          "lines")} == {
        "id": "bigint", "small": "integer", "big": "numeric", "price": "double precision",
        "ratio": "real", "paid": "boolean", "blob": "bytea", "status": "text",
        "at": "timestamp with time zone", "took": "interval", "coupon": "bigint",
        "first": "jsonb", "lines": "jsonb"}
    rows = query(postgres, f'SELECT id, big, status, at, took, coupon, lines, tags FROM '
                           f'"{pg_schema}".typed ORDER BY id')
    assert [r[0] for r in rows] == [i for i in range(20) if i != 11]
    assert rows[3] == (3, decimal.Decimal(2**64 - 4), "NEW", datetime.datetime.fromtimestamp(
        1_700_000_003, datetime.UTC), datetime.timedelta(seconds=1.5), 30,
        [{"sku": "a", "qty": 3}], {"t": "v"})
    assert rows[2][5] is None  # an unset wrapper: NULL
