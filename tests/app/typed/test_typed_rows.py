"""Typed rows without Spark: options, type mapping and conversion, decoding, latest per key."""

import argparse
import datetime
import decimal
import io
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_direct.app.typed.columns import convert, fits, infer_type, normalise_type, widest
from kafka_direct.app.typed.formats import avro_type
from kafka_direct.app.typed.options import (
    TypedOptions,
    add_arguments,
    options_from_args,
    parse_columns,
)
from kafka_direct.app.typed.rows import BAD, DELETE, ROW, RowBuilder, latest_per_key
from kafka_direct.app.typed.schema_registry import RegistrySettings
from kafka_direct.errors import (
    BadRecordError,
    ConfigurationError,
    SchemaChangeError,
    SchemaRegistryError,
)
from kafka_direct.task_errors import decode_error, encode_error


def parse(*argv, environ=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--sink", default="transactional")
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv), environ or {})


@pytest.mark.parametrize(("argv", "words"), [
    (["--value-format", "avro"], "--value-format avro needs --schema-registry"),
    (["--key-format", "avro"], "--key-format avro needs --schema-registry"),
    (["--schema-registry", "http://r:8081"],
     "--schema-registry is for --value-format/--key-format avro, json-schema or protobuf"),
    (["--key-columns", "id"], "--key-columns id: with --key-format raw and --value-format raw"),
    (["--on-tombstone", "delete"], "--on-tombstone delete deletes the row"),
    (["--dead-letter-table", "dl"], "--dead-letter-table is for --on-bad-record dead-letter"),
    (["--columns", "id:bigint"], "--columns declares the types of JSON fields"),
    (["--value-format", "json", "--columns", "id"], "--columns must be name:type pairs"),
    (["--value-format", "json", "--columns", "id:money"], "type 'money' is not one the job"),
    (["--value-format", "json", "--columns", "topic:text"], "Kafka coordinates column"),
    (["--value-format", "json", "--key-columns", "a,,b"], "--key-columns must be column names"),
    (["--value-format", "json", "--key-columns", "kafka_direct_x"], "the job's own"),
    (["--value-format", "json", "--sink", "idempotent"], "--sink idempotent writes raw"),
    (["--schema-registry-auth", "u:p"], "--schema-registry-auth needs --schema-registry URL"),
    (["--value-format", "avro", "--schema-registry", "r:8081"], "must be the registry's URL"),
    (["--value-format", "avro", "--schema-registry", "http://r", "--schema-registry-auth",
      "nocolon"], "must be USER:PASSWORD"),
])
def test_option_mistakes_name_the_flag_and_the_fix(argv, words):
    with pytest.raises(ConfigurationError, match=None) as caught:
        parse(*argv)
    assert words in str(caught.value)


def test_options_that_work_and_their_defaults():
    assert parse() == TypedOptions()
    assert not parse().active
    raw_mirror = parse("--key-columns", "key", "--on-tombstone", "delete")
    assert raw_mirror.active and raw_mirror.keyColumns == ("key",)
    typed = parse("--value-format", "json", "--columns", "amount:numeric(12,2),ts:timestamptz",
                  "--on-bad-record", "dead-letter")
    assert typed.columns == (("amount", "numeric(12,2)"), ("ts", "timestamptz"))
    assert typed.dead_letter_table("events") == "events_dead_letter"
    assert parse("--value-format", "json").dead_letter_table("events") is None


def test_registry_secrets_come_from_the_environment_and_never_show():
    options = parse("--value-format", "avro", "--schema-registry", "https://reg:8081",
                    "--schema-registry-auth", "env:REG_AUTH", "--schema-registry-param",
                    "max.retries=2", environ={"REG_AUTH": "alice:s3cret-pw"})
    conf = options.registry.client_conf()
    assert conf["basic.auth.user.info"] == "alice:s3cret-pw"
    assert conf["max.retries"] == 2
    for shown in (repr(options), repr(options.registry), str(options)):
        assert "s3cret" not in shown
    in_url = RegistrySettings("https://bob:hunter2@reg:8081")
    assert "hunter2" not in repr(in_url)
    with pytest.raises(ConfigurationError, match="REG_AUTH"):
        parse("--value-format", "avro", "--schema-registry", "https://reg:8081",
              "--schema-registry-auth", "env:REG_AUTH")
    with pytest.raises(ConfigurationError, match="refuses its settings: Unrecognized "
                                                 "properties: no.such.setting"):
        parse("--value-format", "avro", "--schema-registry", "https://reg:8081",
              "--schema-registry-param", "no.such.setting=1")
    with pytest.raises(ConfigurationError, match="refuses its settings"):
        parse("--value-format", "avro", "--schema-registry", "https://reg:8081",
              "--schema-registry-param", "ssl.ca.location=/no/such/ca.pem")


def test_columns_split_on_commas_outside_parentheses():
    assert parse_columns("a:numeric(10, 2), b:varchar(5),c:int8") == (
        ("a", "numeric(10,2)"), ("b", "varchar(5)"), ("c", "bigint"))


@pytest.mark.parametrize(("column", "value", "expected"), [
    ("bigint", "integer", True), ("integer", "bigint", False), ("numeric", "bigint", True),
    ("numeric(12,2)", "numeric(10,2)", True), ("numeric(10,2)", "numeric(12,2)", False),
    ("numeric(10,0)", "integer", True), ("numeric(9,0)", "integer", False),
    ("double precision", "real", True), ("real", "double precision", False),
    ("text", "varchar(3)", True), ("varchar(3)", "text", False), ("jsonb", "json", True),
    ("timestamptz", "timestamp", False), ("bigint", "text", False),
])
def test_what_fits_a_column(column, value, expected):
    assert fits(column, value) is expected


def test_the_type_of_a_new_column_seen_with_two():
    assert widest("bigint", "double precision") == "numeric"
    assert widest("integer", "double precision") == "double precision"
    assert widest("bigint", "integer") == "bigint"
    assert widest("bigint", "text") is None
    assert normalise_type("timestamp with time zone") == "timestamptz"
    assert normalise_type("character varying(20)") == "varchar(20)"
    assert normalise_type("numeric(10,2)") == "numeric(10,2)"


@pytest.mark.parametrize(("kind", "value", "expected"), [
    ("bigint", 7, 7), ("double precision", 2, 2.0), ("numeric(6,2)", 1.005, "1.01"),
    ("numeric", decimal.Decimal("1.50"), "1.50"), ("boolean", True, True),
    ("text", "x", "x"), ("bytea", b"\x00", b"\x00"), ("jsonb", {"a": [1, None]}, '{"a":[1,null]}'),
    ("date", "2024-02-29", "2024-02-29"), ("time", "10:00:01", "10:00:01"),
    ("timestamptz", "2024-01-01T00:00:00", "2024-01-01T00:00:00+00:00"),
    ("timestamp", datetime.datetime(2024, 1, 1, 1, tzinfo=datetime.timezone(
        datetime.timedelta(hours=1))), "2024-01-01T00:00:00"),
    ("uuid", "12345678123456781234567812345678", "12345678-1234-5678-1234-567812345678"),
])
def test_values_converted_for_their_column(kind, value, expected):
    converted = convert(kind, value)
    assert (str(converted) if isinstance(converted, decimal.Decimal) else converted) == expected


@pytest.mark.parametrize(("kind", "value", "reason"), [
    ("bigint", "7", "text is not an integer"), ("integer", 2**31, "out of the range"),
    ("bigint", True, "a boolean is not an integer"), ("boolean", 1, "not a boolean"),
    ("text", "a\x00b", "NUL"), ("varchar(2)", "abc", "longer than varchar(2)"),
    ("numeric(4,2)", 123.4, "more digits"), ("jsonb", {"a": "\x00"}, "NUL"),
    ("date", "yesterday", "not an ISO 8601 date"), ("bytea", "ab", "not bytes"),
])
def test_values_that_do_not_fit_say_why_without_quoting_them(kind, value, reason):
    with pytest.raises(ValueError, match=re.escape(reason)) as caught:
        convert(kind, value)
    assert "yesterday" not in str(caught.value) and "abc" not in str(caught.value)


def test_avro_types_map_to_postgresql_types():
    named = {"Address": {"type": "record", "name": "Address", "fields": []}}
    cases = {
        "boolean": "boolean", "int": "integer", "long": "bigint", "float": "real",
        "double": "double precision", "bytes": "bytea", "string": "text",
        "Address": "jsonb", ("null", "long"): "bigint", ("int", "string"): "jsonb",
        ("null", "Address"): "jsonb",
    }
    for schema, expected in cases.items():
        assert avro_type(list(schema) if isinstance(schema, tuple) else schema,
                         named) == expected
    logical = {("bytes", "decimal"): "numeric(9,3)", ("string", "uuid"): "uuid",
               ("int", "date"): "date", ("int", "time-millis"): "time",
               ("long", "timestamp-micros"): "timestamptz",
               ("long", "local-timestamp-millis"): "timestamp"}
    for (base, name), expected in logical.items():
        assert avro_type({"type": base, "logicalType": name, "precision": 9, "scale": 3},
                         named) == expected
    assert avro_type({"type": "enum", "name": "E", "symbols": ["A"]}, named) == "text"
    assert avro_type({"type": "fixed", "name": "F", "size": 2}, named) == "bytea"
    assert avro_type({"type": "array", "items": "int"}, named) == "jsonb"


def builder(**options):
    return RowBuilder(TypedOptions(**options), "s.t", options.pop("existing", None))


def test_json_records_become_rows_deletes_or_bad_records():
    rows = RowBuilder(TypedOptions(valueFormat="json", keyFormat="json", keyColumns=("id",),
                                   onTombstone="delete", onBadRecord="dead-letter"), "s.t",
                      None)
    assert rows.build("t", 0, 1, b'{"id": 1}', b'{"id": 1, "n": 2.5}') == (
        ROW, {"id": 1, "n": 2.5})
    assert rows.build("t", 0, 2, b'{"id": 1}', None) == (DELETE, {"id": 1})
    kind, reason = rows.build("t", 0, 3, b'{"id": 1}', b'{"id": 2}')
    assert kind == BAD and "differ" in reason
    kind, reason = rows.build("t", 0, 4, b"{}", b'{"n": 1}')
    assert kind == BAD and "key column 'id'" in reason
    kind, reason = rows.build("t", 0, 5, b'{"id": 3}', b'{"topic": "x"}')
    assert kind == BAD and "coordinates" in reason
    assert rows.new["n"][0] == "double precision"


def test_a_new_json_column_widens_while_a_task_sees_it_and_text_does_not_fit():
    rows = RowBuilder(TypedOptions(valueFormat="json", onBadRecord="dead-letter"), "s.t", None)
    rows.build("t", 0, 0, None, b'{"n": 1}')
    rows.build("t", 0, 1, None, b'{"n": 1.5}')
    assert rows.new["n"][0] == "numeric"
    kind, reason = rows.build("t", 0, 2, None, b'{"n": "x"}')
    assert kind == BAD and "field 'n'" in reason and "not a number" in reason


def test_a_bad_record_fails_with_its_coordinates_and_crosses_as_data():
    rows = RowBuilder(TypedOptions(valueFormat="json"), "s.t", None)
    with pytest.raises(BadRecordError) as caught:
        rows.build("events", 3, 41, None, b"\xff\xfe")
    error = caught.value
    assert (error.topic, error.partition, error.offset) == ("events", 3, 41)
    assert "not JSON" in error.cause and "events-3 at offset 41" in str(error)
    carried = decode_error(encode_error(error))
    assert type(carried) is BadRecordError and carried.offset == 41


def test_an_avro_field_that_no_longer_fits_is_a_schema_change(monkeypatch):
    from kafka_direct.app.typed import formats

    registry = RegistrySettings("mock://typed-rows")
    client = formats.registry_client(registry)
    from confluent_kafka.schema_registry import Schema

    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    schemaId = client.register_schema("t-value", Schema(json.dumps(schema), "AVRO"))
    from fastavro import parse_schema, schemaless_writer

    body = io.BytesIO()
    schemaless_writer(body, parse_schema(schema), {"n": 2**40})
    record = b"\x00" + schemaId.to_bytes(4, "big") + body.getvalue()
    rows = RowBuilder(TypedOptions(valueFormat="avro", registry=registry, onBadRecord=
                                   "dead-letter"), "s.t", {"n": "boolean"})
    with pytest.raises(SchemaChangeError) as caught:
        rows.build("t", 0, 7, None, record)
    error = caught.value
    assert (error.field, error.columnType, error.newType) == ("n", "boolean", "bigint")
    assert (error.topic, error.partition, error.offset) == ("t", 0, 7)
    assert "ALTER TABLE s.t ALTER COLUMN n TYPE bigint" in str(error)
    # A widening (int -> long) is no stop: the row carries the wider type for the commit.
    widened = RowBuilder(TypedOptions(valueFormat="avro", registry=registry), "s.t",
                         {"n": "integer"})
    assert widened.build("t", 0, 7, None, record) == (ROW, {"key": None, "n": 2**40})
    assert widened.new["n"] == ("bigint", True, "t", 0, 7)
    fine = RowBuilder(TypedOptions(valueFormat="avro", registry=registry), "s.t",
                      {"n": "numeric"})
    assert fine.build("t", 0, 7, None, record) == (ROW, {"key": None, "n": 2**40})
    kind, reason = RowBuilder(TypedOptions(valueFormat="avro", registry=registry,
                                           onBadRecord="dead-letter"), "s.t", None).build(
        "t", 0, 8, None, b"\x00\x00\x00\x03\xe7\x02")
    assert kind == BAD and "schema id 999" in reason and "not in the Schema Registry" in reason


def test_an_unreachable_registry_is_not_a_bad_record():
    registry = RegistrySettings("http://127.0.0.1:9")
    rows = RowBuilder(TypedOptions(valueFormat="avro", registry=registry,
                                   onBadRecord="dead-letter"), "s.t", None)
    with pytest.raises(SchemaRegistryError, match="is the registry up"):
        rows.build("t", 0, 0, None, b"\x00\x00\x00\x00\x01\x02")


def test_tombstones_as_rows_or_ignored():
    assert builder(valueFormat="json").build("t", 0, 0, b"k", None) == (ROW, {"key": b"k"})
    assert builder(onTombstone="ignore").build("t", 0, 0, b"k", None) is None
    assert builder(keyColumns=("key",)).build("t", 0, 0, b"k", None) == (
        ROW, {"key": b"k", "value": None})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 50)),
                max_size=40))
def test_latest_per_key_keeps_the_highest_offset_of_each_key(records):
    items = [((key,), partition, offset, (partition, offset)) for key, partition, offset
             in records]
    latest = latest_per_key(items)
    for key, row in latest.items():
        same = [(o, p) for k, p, o, _ in items if k == key]
        assert (row[1], row[0]) == max(same)
    assert set(latest) == {(k,) for k, _, _ in records}


def test_infer_type_of_json_values():
    assert [infer_type(v) for v in (None, True, 1, 1.5, "x", [1], {"a": 1})] == [
        None, "boolean", "bigint", "double precision", "text", "jsonb", "jsonb"]


def test_a_null_field_gets_no_column_until_a_value_gives_it_a_type():
    rows = RowBuilder(TypedOptions(valueFormat="json"), "s.t", None)
    assert rows.build("t", 0, 0, None, b'{"a": null, "b": 1}') == (
        ROW, {"key": None, "a": None, "b": 1})
    assert "a" not in rows.columns and "a" not in rows.new
    rows.build("t", 0, 1, None, b'{"a": "x"}')
    assert rows.new["a"][0] == "text" and list(rows.columns) == ["key", "b", "a"]


def test_a_bad_record_neither_adds_nor_widens_columns():
    rows = RowBuilder(TypedOptions(valueFormat="json", keyColumns=("id",),
                                   onBadRecord="dead-letter"), "s.t", None)
    rows.build("t", 0, 0, None, b'{"id": 1, "n": 1}')
    kind, _ = rows.build("t", 0, 1, None, b'{"n": 1.5, "m": 2}')  # no key: bad
    assert kind == BAD and rows.new["n"][0] == "bigint" and "m" not in rows.new


def test_schemas_given_by_the_driver_need_no_registry_and_fetched_ones_come_back():
    from fastavro import parse_schema, schemaless_writer

    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(schema), {"n": 3})
    record = b"\x00" + (77).to_bytes(4, "big") + body.getvalue()
    nowhere = RegistrySettings("http://127.0.0.1:9")  # nothing listens: asking would fail
    given = RowBuilder(TypedOptions(valueFormat="avro", registry=nowhere), "s.t", None,
                       {77: (json.dumps(schema),)})
    assert given.build("t", 0, 0, None, record) == (ROW, {"key": None, "n": 3})
    assert given.fetched == {}
    registry = RegistrySettings("mock://typed-rows-fetched")
    from confluent_kafka.schema_registry import Schema

    from kafka_direct.app.typed import formats

    schemaId = formats.registry_client(registry).register_schema(
        "t-value", Schema(json.dumps(schema), "AVRO"))
    asked = RowBuilder(TypedOptions(valueFormat="avro", registry=registry), "s.t", None)
    asked.build("t", 0, 0, None, b"\x00" + schemaId.to_bytes(4, "big") + body.getvalue())
    assert list(asked.fetched) == [schemaId]
    assert formats.fetch_schemas(TypedOptions(valueFormat="avro", registry=registry),
                                 ["t", "no-such-topic"]) == asked.fetched


# -- JSON Schema records (Confluent's wire format, the schema in a registry) ------------------

JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    "properties": {
        "id": {"type": "integer"}, "price": {"type": "number"},
        "name": {"type": ["string", "null"]}, "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"$ref": "#/definitions/kind"}, "any": {},
    },
    "required": ["id"],
    "definitions": {"kind": {"enum": ["a", "b"]}},
}


def json_schema_record(schemaId, document):
    return b"\x00" + schemaId.to_bytes(4, "big") + json.dumps(document).encode()


def registered_json_schema(name, schema=JSON_SCHEMA, subject="t-value"):
    from confluent_kafka.schema_registry import Schema

    from kafka_direct.app.typed import formats

    registry = RegistrySettings(f"mock://{name}")
    schemaId = formats.registry_client(registry).register_schema(
        subject, Schema(json.dumps(schema), "JSON"))
    return registry, schemaId


def test_json_schema_types_map_to_postgresql_types():
    from kafka_direct.app.typed.formats import json_schema_type

    root = {"$defs": {"n": {"type": "integer"}, "loop": {"$ref": "#/$defs/loop"}}}
    cases = [
        ({"type": "integer"}, "bigint"), ({"type": "number"}, "double precision"),
        ({"type": ["integer", "number"]}, "double precision"),
        ({"type": "boolean"}, "boolean"), ({"type": "string"}, "text"),
        ({"type": "string", "format": "date-time"}, "timestamptz"),
        ({"type": "string", "format": "date"}, "date"),
        ({"type": "string", "format": "uuid"}, "uuid"),
        ({"type": ["null", "string"], "format": "time"}, "time"),
        ({"oneOf": [{"type": "null"}, {"type": "string", "format": "date-time"}]},
         "timestamptz"),
        ({"type": "object"}, "jsonb"), ({"type": "array"}, "jsonb"),
        ({"type": ["integer", "string"]}, "jsonb"), ({}, "jsonb"), (True, "jsonb"),
        ({"type": "null"}, "text"), ({"enum": ["x", "y"]}, "text"), ({"const": 3}, "bigint"),
        ({"$ref": "#/$defs/n"}, "bigint"), ({"$ref": "#/$defs/loop"}, "jsonb"),
        ({"$ref": "other.json#/n"}, "jsonb"), ({"$ref": "#/$defs/missing"}, "jsonb"),
    ]
    for schema, expected in cases:
        assert json_schema_type(schema, root) == expected, schema


def test_json_schema_records_become_typed_rows_checked_against_their_schema():
    registry, schemaId = registered_json_schema("typed-rows-json-schema")
    options = TypedOptions(valueFormat="json-schema", registry=registry,
                           onBadRecord="dead-letter")
    rows = RowBuilder(options, "s.t", None)
    document = {"id": 7, "price": 2, "name": None, "at": "2024-01-02T03:04:05Z",
                "tags": ["x"], "kind": "a", "any": {"deep": [1]}, "undeclared": 1}
    kind, row = rows.build("t", 0, 0, None, json_schema_record(schemaId, document))
    assert kind == ROW
    assert row["id"] == 7 and row["price"] == 2.0 and row["name"] is None
    assert row["at"] == datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC).isoformat()
    assert "undeclared" not in row  # the schema's columns only
    assert {name: entry[0] for name, entry in rows.new.items() if name != "key"} == {
        "id": "bigint", "price": "double precision", "name": "text", "at": "timestamptz",
        "tags": "jsonb", "kind": "text", "any": "jsonb"}
    for bad, words in (({"id": "7"}, "field 'id' is a JSON string, but its schema"),
                       ({"id": True}, "field 'id' is a JSON boolean"),
                       ({"id": 1, "kind": 3}, "field 'kind' is a JSON integer"),
                       ({"id": 1, "at": None}, "field 'at' is a JSON null"),
                       ({"price": 1.5}, "lacks field 'id', which its schema"),
                       ([1, 2], "is a JSON array, but its schema")):
        kind, reason = rows.build("t", 0, 1, None, json_schema_record(schemaId, bad))
        assert kind == BAD and words in reason and f"id {schemaId}" in reason, (bad, reason)
    kind, reason = rows.build("t", 0, 2, None, json.dumps({"id": 1}).encode())
    assert kind == BAD and "not JSON Schema JSON in the Confluent wire format" in reason
    kind, reason = rows.build("t", 0, 3, None, b"\x00" + schemaId.to_bytes(4, "big") + b"{")
    assert kind == BAD and "not JSON" in reason


def test_a_json_schema_id_of_an_avro_schema_is_a_bad_record_and_the_driver_fetches_json():
    from confluent_kafka.schema_registry import Schema

    from kafka_direct.app.typed import formats

    registry, schemaId = registered_json_schema("typed-rows-json-fetch")
    avroId = formats.registry_client(registry).register_schema("other-value", Schema(
        json.dumps({"type": "record", "name": "R", "fields": []}), "AVRO"))
    options = TypedOptions(valueFormat="json-schema", registry=registry,
                           onBadRecord="dead-letter")
    kind, reason = RowBuilder(options, "s.t", None).build(
        "t", 0, 0, None, json_schema_record(avroId, {"id": 1}))
    assert kind == BAD and "is a AVRO schema, not JSON Schema" in reason
    fetched = formats.fetch_schemas(options, ["t", "other"])
    assert list(fetched) == [schemaId]  # the Avro subject is not a JSON Schema one
    given = RowBuilder(options, "s.t", None, fetched)
    assert given.build("t", 0, 0, None, json_schema_record(schemaId, {"id": 4}))[0] == ROW
    assert given.fetched == {}


def test_a_json_schema_key_and_a_value_that_is_not_an_object():
    schema = {"type": "integer"}
    registry, keyId = registered_json_schema("typed-rows-json-key", schema, "t-key")
    rows = RowBuilder(TypedOptions(keyFormat="json-schema", valueFormat="json-schema",
                                   registry=registry, keyColumns=("key",),
                                   onBadRecord="dead-letter"), "s.t", None)
    assert rows.build("t", 0, 0, json_schema_record(keyId, 5),
                      json_schema_record(keyId, 6)) == (ROW, {"key": 5, "value": 6})
    kind, reason = rows.build("t", 0, 1, json_schema_record(keyId, "x"), None)
    assert kind == BAD and "field 'key' is a JSON string" in reason


def test_json_schema_needs_a_registry():
    with pytest.raises(ConfigurationError, match="--value-format json-schema needs "
                                                 "--schema-registry"):
        parse("--value-format", "json-schema")
    options = parse("--key-format", "json-schema", "--schema-registry", "http://r:8081")
    assert options.keyFormat == "json-schema" and options.registry is not None


def test_json_schema_review_findings():
    # An outside review's findings, each failing before its fix.
    from kafka_direct.app.typed.formats import json_schema_type

    # A schema referring to itself through oneOf/anyOf allows any value (no RecursionError).
    looping = {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
               "$defs": {"x": {"oneOf": [{"$ref": "#/$defs/x"}, {"type": "null"}]}}}
    registry, schemaId = registered_json_schema("review-loop", looping)
    rows = RowBuilder(TypedOptions(valueFormat="json-schema", registry=registry,
                                   onBadRecord="dead-letter"), "s.t", None)
    assert rows.build("t", 0, 0, None, json_schema_record(schemaId, {"a": 1}))[0] == ROW
    assert json_schema_type({"anyOf": [{"$ref": "#"}]}, {"anyOf": [{"$ref": "#"}]}) == "jsonb"
    # An integer beyond any double in a number column is a bad record, not an OverflowError.
    registry, schemaId = registered_json_schema("review-overflow", {
        "type": "object", "properties": {"x": {"type": "number"}, "n": {"type": "integer"}}})
    rows = RowBuilder(TypedOptions(valueFormat="json-schema", registry=registry,
                                   onBadRecord="dead-letter"), "s.t", None)
    kind, reason = rows.build("t", 0, 0, None, b"\x00" + schemaId.to_bytes(4, "big")
                              + b'{"x": 1' + b"0" * 400 + b"}")
    assert kind == BAD and "out of the range of double precision" in reason
    # 3.0 is an integer to JSON Schema: stored as 3.
    assert rows.build("t", 0, 1, None, json_schema_record(schemaId, {"n": 3.0})) == (
        ROW, {"key": None, "n": 3})
    # One schema as key and as value: each part types its own column, whichever came first.
    from confluent_kafka.schema_registry import Schema

    from kafka_direct.app.typed import formats

    registry = RegistrySettings("mock://review-parts")
    text = json.dumps({"type": "string", "format": "date-time"})
    client = formats.registry_client(registry)
    keyId = client.register_schema("t-key", Schema(text, "JSON"))  # the value uses it too
    rows = RowBuilder(TypedOptions(keyFormat="json-schema", valueFormat="json-schema",
                                   registry=registry), "s.t", None)
    record = json_schema_record(keyId, "2024-01-01T00:00:00Z")
    assert rows.build("t", 0, 0, record, record)[0] == ROW
    assert rows.new["key"][0] == rows.new["value"][0] == "timestamptz"
    # A value field named like the raw key's column is a clear bad record.
    registry, schemaId = registered_json_schema("review-key-name", {
        "type": "object", "properties": {"key": {"type": "string"}}})
    rows = RowBuilder(TypedOptions(valueFormat="json-schema", registry=registry,
                                   onBadRecord="dead-letter"), "s.t", None)
    kind, reason = rows.build("t", 0, 0, b"rk", json_schema_record(schemaId, {"key": "x"}))
    assert kind == BAD and "the name of the raw key's column" in reason
    # Object schemas behind nullable types, oneOf with null, or a lone allOf give columns.
    for name, schema in (
            ("nullable", {"type": ["object", "null"], "properties": {"i": {"type": "integer"}}}),
            ("one-of", {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/r"}],
                        "$defs": {"r": {"type": "object",
                                        "properties": {"i": {"type": "integer"}}}}}),
            ("all-of", {"allOf": [{"$ref": "#/definitions/r"}],
                        "definitions": {"r": {"properties": {"i": {"type": "integer"}}}}})):
        registry, schemaId = registered_json_schema(f"review-{name}", schema)
        rows = RowBuilder(TypedOptions(valueFormat="json-schema", registry=registry), "s.t",
                          None)
        assert rows.build("t", 0, 0, None, json_schema_record(schemaId, {"i": 2})) == (
            ROW, {"key": None, "i": 2}), name
    # A lone surrogate escape is a bad record (PostgreSQL would refuse the whole batch).
    rows = RowBuilder(TypedOptions(valueFormat="json", onBadRecord="dead-letter"), "s.t", None)
    kind, reason = rows.build("t", 0, 0, None, b'{"s": "\\ud800"}')
    assert kind == BAD and "lone UTF-16 surrogate" in reason
    assert rows.build("t", 0, 1, None, b'{"s": "\\ud83d\\ude00"}') == (
        ROW, {"key": None, "s": "\U0001f600"})
