"""`kafka-direct ingest` writing typed rows: JSON and Avro fields as columns, upserts on key
columns, tombstones, dead letters and schema changes, on both APIs, against the real broker,
PostgreSQL and a Schema Registry served over HTTP (Spark's executors are other processes)."""

import decimal
import json
import subprocess
import sys

import psycopg2
import pytest

APIS = ["dstream", "structured"]


def ingest(job_host, kafka, postgres, topic, schema, api, *extra, table="typed",
           process=False):
    """Run the job (in the job host, keeping Spark's JVM; ``process``: as a process)."""
    return job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--topic", topic, "--schema", schema, "--table", table, "--batch-interval", "0.5",
         "--stop-after-idle", "1", "--api", api, "--group", f"g-{topic}", *extra],
        process=process)


def query(postgres, sql):
    connection = psycopg2.connect(postgres.dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall()
    finally:
        connection.close()


def columns(postgres, schema, table):
    return dict(query(postgres, "SELECT column_name, data_type FROM information_schema.columns "
                                f"WHERE table_schema = '{schema}' AND table_name = '{table}'"))


def ok(done):
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def avro_serializer(registry, schema, topic, field="value"):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE if field == "value" else
                                   MessageField.KEY)
    return lambda value: serializer(value, context)


@pytest.mark.parametrize("api", APIS)
def test_json_fields_become_typed_columns_inferred_or_declared(kafka, kafka_topic, postgres,
                                                               pg_schema, api, job_host):
    topic = kafka_topic(partitions=2)
    values = [json.dumps({"id": i, "name": f"n{i}", "price": i + 0.5, "ok": i % 2 == 0,
                          "tags": ["a", i], "ts": "2024-05-01T12:00:00+00:00"}).encode()
              for i in range(40)]
    kafka.produce(topic, values[:20], partition=0, keys=[b"k"] * 20)
    kafka.produce(topic, values[20:], partition=1, keys=[b"k"] * 20)
    out = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json",
                    "--columns", "ts:timestamptz,price:numeric(10,2)"))
    assert f"table {pg_schema}.typed: 40 rows, 0 duplicates" in out
    assert "stored offsets == log end" in out
    assert columns(postgres, pg_schema, "typed") == {
        "topic": "text", "kafka_partition": "integer", "kafka_offset": "bigint",
        "key": "bytea", "id": "bigint", "name": "text", "price": "numeric", "ok": "boolean",
        "tags": "jsonb", "ts": "timestamp with time zone"}
    rows = query(postgres, f'SELECT id, name, price, ok, tags, key FROM "{pg_schema}".typed '
                           "ORDER BY id")
    assert rows[3][:5] == (3, "n3", decimal.Decimal("3.50"), False, ["a", 3])
    assert bytes(rows[3][5]) == b"k"
    assert [r[0] for r in rows] == list(range(40))


@pytest.mark.parametrize("api", APIS)
def test_a_new_field_adds_a_nullable_column(kafka, kafka_topic, postgres, pg_schema, api, job_host):
    topic = kafka_topic()
    kafka.produce(topic, [json.dumps({"id": i}).encode() for i in range(5)])
    ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json"))
    kafka.produce(topic, [json.dumps({"id": i, "extra": f"e{i}"}).encode() for i in range(5, 8)])
    ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json"))
    assert "extra" in columns(postgres, pg_schema, "typed")
    rows = query(postgres, f'SELECT id, extra FROM "{pg_schema}".typed ORDER BY id')
    assert rows == [(i, None) for i in range(5)] + [(i, f"e{i}") for i in range(5, 8)]


@pytest.mark.parametrize("api", APIS)
def test_avro_upserts_and_tombstones_mirror_the_compacted_topic(kafka, kafka_topic, postgres,
                                                                 pg_schema, schema_registry,
                                                                 api, job_host):
    topic = kafka_topic(partitions=2)
    schema = {"type": "record", "name": "Account", "fields": [
        {"name": "id", "type": "long"}, {"name": "owner", "type": "string"},
        {"name": "balance", "type": {"type": "bytes", "logicalType": "decimal",
                                     "precision": 12, "scale": 2}},
        {"name": "updated", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None}]}
    value = avro_serializer(schema_registry, schema, topic)
    key = avro_serializer(schema_registry, {"type": "record", "name": "AccountKey",
                                            "fields": [{"name": "id", "type": "long"}]},
                          topic, "key")
    expected = {}
    for partition in (0, 1):
        keys, values = [], []
        for step in range(30):
            account = partition * 100 + step % 6  # each key six times: latest wins
            keys.append(key({"id": account}))
            if step % 6 == 5 and step % 12 == 5:  # some keys end as tombstones
                values.append(None)
                expected.pop(account, None)
                continue
            balance = decimal.Decimal(step * 10 + partition).scaleb(-2)
            values.append(value({"id": account, "owner": f"o{account}", "balance": balance,
                                 "updated": 1700000000000 + step, "note": None}))
            expected[account] = (f"o{account}", balance)
        kafka.produce(topic, values[:15], partition=partition, keys=keys[:15])
        kafka.produce(topic, values[15:], partition=partition, keys=keys[15:])
    out = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "avro",
                    "--key-format", "avro", "--schema-registry", schema_registry.url,
                    "--key-columns", "id", "--on-tombstone", "delete"))
    assert "stored offsets == log end" in out
    rows = query(postgres, f'SELECT id, owner, balance FROM "{pg_schema}".typed')
    assert {r[0]: (r[1], r[2]) for r in rows} == expected
    cols = columns(postgres, pg_schema, "typed")
    assert cols["balance"] == "numeric" and cols["updated"] == "timestamp with time zone"
    assert cols["note"] == "text"


@pytest.mark.parametrize("api", APIS)
def test_json_schema_values_become_the_schemas_columns(kafka, kafka_topic, postgres, pg_schema,
                                                      schema_registry, api, job_host):
    # Confluent's JSON Schema wire format: magic byte, schema id, JSON text.
    topic = kafka_topic(partitions=1)
    schemaId = schema_registry.register(f"{topic}-value", {
        "type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
            "tags": {"type": "array"}, "note": {"type": ["null", "string"]}}}, "JSON")
    header = b"\x00" + schemaId.to_bytes(4, "big")
    documents = [{"id": 1, "at": "2024-05-01T10:00:00Z", "tags": ["a"], "note": None,
                  "undeclared": 1},
                 {"id": "two"},  # not the schema's type: a dead letter
                 {"id": 3, "note": "n"}]
    kafka.produce(topic, [header + json.dumps(d).encode() for d in documents])
    ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json-schema",
              "--schema-registry", schema_registry.url, "--on-bad-record", "dead-letter"))
    cols = columns(postgres, pg_schema, "typed")
    assert cols["id"] == "bigint" and cols["at"] == "timestamp with time zone"
    assert cols["tags"] == "jsonb" and cols["note"] == "text" and "undeclared" not in cols
    rows = query(postgres, f'SELECT kafka_offset, id, extract(epoch FROM at), note FROM '
                           f'"{pg_schema}".typed ORDER BY 1')
    assert rows == [(0, 1, decimal.Decimal("1714557600"), None), (2, 3, None, "n")]
    dead = query(postgres, f'SELECT kafka_offset, error FROM "{pg_schema}".typed_dead_letter')
    assert [offset for offset, _ in dead] == [1] and "field 'id' is a JSON string" in dead[0][1]


@pytest.mark.parametrize("api", APIS)
def test_bad_records_fail_the_batch_naming_the_record(kafka, kafka_topic, postgres, pg_schema,
                                                      api, job_host):
    topic = kafka_topic()
    kafka.produce(topic, [b'{"id": 1}', b'{"id": 2}', b"not json", b'{"id": 4}'])
    done = ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json")
    assert done.returncode == 65, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kafka-direct ingest stopped: BadRecordError: " in done.stderr, done.stderr[-3000:]
    assert f"record {topic}-0 at offset 2 cannot be a row" in done.stderr
    assert "not JSON" in done.stderr
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}".typed') == [(0,)]


@pytest.mark.parametrize("api", APIS)
def test_bad_records_go_to_the_dead_letter_table_once(kafka, kafka_topic, postgres, pg_schema,
                                                      api, job_host):
    topic = kafka_topic()
    kafka.produce(topic, [b'{"id": 1}', b"not json", b'{"id": "text"}', b'{"id": 4}'],
                  keys=[b"a", b"b", b"c", b"d"])
    out = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json",
                    "--on-bad-record", "dead-letter"))
    assert "stored offsets == log end" in out
    assert query(postgres, f'SELECT id FROM "{pg_schema}".typed ORDER BY id') == [(1,), (4,)]
    dead = query(postgres, f"SELECT kafka_offset, key, value, error FROM "
                           f'"{pg_schema}".typed_dead_letter ORDER BY kafka_offset')
    assert [(o, bytes(k), bytes(v)) for o, k, v, _ in dead] == [
        (1, b"b", b"not json"), (2, b"c", b'{"id": "text"}')]
    assert "not JSON" in dead[0][3] and "field 'id': text is not an integer" in dead[1][3]
    kafka.produce(topic, [b'{"id": 5}'])  # a rerun reads only what is new
    again = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--value-format", "json",
                      "--on-bad-record", "dead-letter"))
    assert "1 records read" in again
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}".typed_dead_letter') == [(2,)]
    assert query(postgres, f'SELECT id FROM "{pg_schema}".typed ORDER BY id') == [
        (1,), (4,), (5,)]


@pytest.mark.parametrize("api", APIS)
def test_an_incompatible_schema_change_stops_the_job_naming_field_and_types(
        kafka, kafka_topic, postgres, pg_schema, schema_registry, api, job_host):
    topic = kafka_topic()
    first = avro_serializer(schema_registry, {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "int"}, {"name": "n", "type": "int"}]}, topic)
    kafka.produce(topic, [first({"id": i, "n": i}) for i in range(3)])
    args = ("--value-format", "avro", "--schema-registry", schema_registry.url)
    ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, *args))
    second = avro_serializer(schema_registry, {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "int"}, {"name": "n", "type": "string"}]}, topic)
    kafka.produce(topic, [second({"id": 9, "n": "nine"})])
    done = ingest(job_host, kafka, postgres, topic, pg_schema, api, *args)
    assert done.returncode == 66, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kafka-direct ingest stopped: SchemaChangeError: field 'n'" in done.stderr, \
        done.stderr[-3000:]
    assert "type text" in done.stderr and "(type integer)" in done.stderr
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}".typed') == [(3,)]


@pytest.mark.parametrize("api", APIS)
def test_raw_keys_mirrored_with_deletes_and_ignored_tombstones(kafka, kafka_topic, postgres,
                                                               pg_schema, api, job_host):
    # --key-columns key: raw records upserted on their key bytes, a compacted topic's view.
    topic = kafka_topic()
    kafka.produce(topic, [b"a1", b"b1", b"a2", None, b"c1", b"b2", None],
                  keys=[b"a", b"b", b"a", b"c", b"c", b"b", b"d"])
    ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--key-columns", "key",
              "--on-tombstone", "delete", table="mirror"))
    rows = query(postgres, f'SELECT key, value, kafka_offset FROM "{pg_schema}".mirror')
    assert sorted((bytes(k), bytes(v), o) for k, v, o in rows) == [
        (b"a", b"a2", 2), (b"b", b"b2", 5), (b"c", b"c1", 4)]
    ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, "--on-tombstone", "ignore",
              "--group", f"ignore-{topic}", table="no_tombstones"))
    assert query(postgres, f'SELECT count(*), count(value) FROM "{pg_schema}".no_tombstones'
                 ) == [(5, 5)]


def test_registry_login_from_the_environment_never_shows(kafka, kafka_topic, postgres,
                                                         pg_schema):
    import os

    from kafka_direct.testing.schema_registry import LocalSchemaRegistry

    secret = "pw-9f8e7d6c"
    with LocalSchemaRegistry(user="loader", password=secret) as registry:
        topic = kafka_topic()
        registry.register(f"{topic}-value", {"type": "record", "name": "R", "fields": [
            {"name": "id", "type": "long"}]})
        kafka.produce(topic, [b"\x00\x00\x00\x00\x01\x02", b"\x00\x00\x00\x00\x01\x04"])
        argv = [sys.executable, "-m", "kafka_direct.app.cli", "-v", "ingest",
                "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
                "--topic", topic, "--schema", pg_schema, "--table", "authed",
                "--batch-interval", "0.5", "--stop-after-idle", "1", "--value-format", "avro",
                "--schema-registry", registry.url, "--schema-registry-auth", "env:REG_AUTH"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "REG_AUTH": f"loader:{secret}"})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert query(postgres, f'SELECT id FROM "{pg_schema}".authed ORDER BY id') == [
            (1,), (2,)]
        refused = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "REG_AUTH": "loader:wrong-pw"})
    for text in (done.stdout, done.stderr, refused.stdout, refused.stderr):
        assert secret not in text and "wrong-pw" not in text


def test_option_mistakes_are_one_line_and_exit_2(kafka, kafka_topic, postgres, pg_schema, job_host):
    topic = kafka_topic()
    done = ingest(job_host, kafka, postgres, topic, pg_schema, "dstream", "--value-format", "avro",
                  process=True)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "kafka-direct ingest: ConfigurationError: --value-format avro needs --schema-registry "
        "URL: such records name their schema by its id in a Confluent-compatible Schema "
        "Registry")
    with psycopg2.connect(postgres.dsn) as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".keyless (topic text, kafka_partition int, '
                       "kafka_offset bigint, id bigint)")
    connection.close()
    done = ingest(job_host, kafka, postgres, topic, pg_schema, "structured", "--value-format",
                  "json", "--key-columns", "id", table="keyless", process=True)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "has no unique constraint or index on exactly them: ALTER TABLE" in done.stderr
