"""Schema evolution past ADD COLUMN, end to end on both APIs: a schema's widened field
alters its column, a field made nullable drops NOT NULL, in the batch's transaction."""

import decimal

import pytest

from tests.app.test_ingest_typed import APIS, avro_serializer, ingest, ok, query


@pytest.mark.parametrize("api", APIS)
def test_widened_and_nullable_fields_alter_the_table(kafka, kafka_topic, postgres, pg_schema,
                                                    schema_registry, api, job_host):
    topic = kafka_topic(partitions=2)
    query(postgres, f'CREATE TABLE "{pg_schema}".typed (topic text NOT NULL, kafka_partition '
                    "integer NOT NULL, kafka_offset bigint NOT NULL, key bytea, n integer NOT "
                    "NULL, s varchar(5) NOT NULL, d numeric(5,2), PRIMARY KEY (topic, "
                    "kafka_partition, kafka_offset)); SELECT 1")
    value = avro_serializer(schema_registry, {"type": "record", "name": "R", "fields": [
        {"name": "n", "type": "long"}, {"name": "s", "type": ["null", "string"]},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12,
                               "scale": 2}}]}, topic)
    kafka.produce(topic, [value({"n": 2**40 + i, "s": None if i % 2 else "longer than 5",
                                 "d": decimal.Decimal("1234567.50")}) for i in range(6)],
                  partition=0)
    kafka.produce(topic, [value({"n": 1, "s": "x", "d": decimal.Decimal("0.01")})],
                  partition=1)
    out = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "avro",
                    "--schema-registry", schema_registry.url))
    assert "stored offsets == log end" in out
    assert query(postgres, "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM "
                           f"pg_attribute WHERE attrelid = '\"{pg_schema}\".typed'::regclass "
                           "AND attname IN ('n', 's', 'd') ORDER BY attname") == [
        ("d", "numeric(12,2)", False), ("n", "bigint", True), ("s", "text", False)]
    rows = query(postgres, f'SELECT n, s, d FROM "{pg_schema}".typed ORDER BY n')
    assert rows[0] == (1, "x", decimal.Decimal("0.01"))
    assert rows[1:] == [(2**40 + i, None if i % 2 else "longer than 5",
                         decimal.Decimal("1234567.50")) for i in range(6)]
