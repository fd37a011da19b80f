"""Protobuf values and keys in Confluent's wire format: message indexes, columns from the
message's fields, well-known types, nested messages as jsonb (no protoc)."""

import datetime
import decimal
import json

import pytest

from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.protobuf import message_indexes
from kafka_direct.app.typed.rows import BAD, ROW, RowBuilder
from kafka_direct.app.typed.schema_registry import RegistrySettings, registry_client
from tests.app.typed.protobuf_messages import an_order, classes, serializer


@pytest.mark.parametrize(("data", "indexes"), [
    (b"\x00\x00\x00\x00\x07\x00rest", [0]),
    (b"\x00\x00\x00\x00\x07\x02\x02rest", [1]),
    (b"\x00\x00\x00\x00\x07\x04\x00\x02rest", [0, 1]),
])
def test_message_indexes_of_the_wire_format(data, indexes):
    assert message_indexes(data) == (indexes, len(data) - 4)


def test_cut_message_indexes_are_refused():
    with pytest.raises(ValueError, match="cut short"):
        message_indexes(b"\x00\x00\x00\x00\x07\x04\x00")


def test_a_protobuf_value_and_key_become_typed_columns():
    Order, OrderKey, _ = classes("unitshop")
    registry = RegistrySettings("mock://protobuf-rows")
    value = serializer(registry_client(registry), Order, "t")
    key = serializer(registry_client(registry), OrderKey, "t", "key")
    options = TypedOptions(valueFormat="protobuf", keyFormat="protobuf", registry=registry,
                           keyColumns=("id",), onBadRecord="dead-letter")
    builder = RowBuilder(options, "s.t", None)
    kind, row = builder.build("t", 0, 5, key(OrderKey(id=1)), value(an_order(Order, 1)))
    assert kind == ROW
    assert json.loads(row.pop("extra")) == {"k": 1.0, "s": "x"}  # a Struct: keys unordered
    assert row == {
        "id": 1, "small": -1, "big": decimal.Decimal(2**64 - 2), "price": 1.25, "ratio": 0.5,
        "paid": False, "note": "n1", "blob": b"\x01", "status": "PAID",
        "at": datetime.datetime.fromtimestamp(1_700_000_001, datetime.UTC).isoformat(),
        "took": "1.500000000 seconds", "coupon": 10,
        "first": '{"sku":"first"}', "lines": '[{"sku":"a","qty":1}]', "tags": '{"t":"v"}',
        "maybe": 1}
    assert {name: info[0] for name, info in builder.new.items()} == {
        "id": "bigint", "small": "integer", "big": "numeric(20,0)",
        "price": "double precision", "ratio": "real", "paid": "boolean", "note": "text",
        "blob": "bytea", "status": "text", "at": "timestamptz", "took": "interval",
        "coupon": "bigint", "extra": "jsonb", "first": "jsonb", "lines": "jsonb",
        "tags": "jsonb", "maybe": "integer"}
    _, unset = builder.build("t", 0, 6, key(OrderKey(id=2)), value(Order(id=2)))
    assert (unset["coupon"], unset["maybe"], unset["at"], unset["first"]) == (None,) * 4
    assert (unset["note"], unset["small"], unset["lines"]) == ("", 0, "[]")  # proto3 defaults
    kind, reason = builder.build("t", 0, 7, key(OrderKey(id=3)), b"\x00\x00\x00\x00\x01\x00\xff")
    assert kind == BAD and "Protobuf schema" in reason
    kind, reason = builder.build("t", 0, 8, key(OrderKey(id=3)), b'{"id": 3}')
    assert kind == BAD and "not Protobuf in the Confluent wire format" in reason


def test_a_nested_message_is_found_by_its_indexes():
    _, _, Line = classes("nestshop")
    registry = RegistrySettings("mock://protobuf-nested")
    data = serializer(registry_client(registry), Line, "n")(Line(sku="s", qty=3))
    assert message_indexes(data)[0] == [0, 0]
    builder = RowBuilder(TypedOptions(valueFormat="protobuf", registry=registry), "s.n", None)
    assert builder.build("n", 0, 0, None, data) == (ROW, {"key": None, "sku": "s", "qty": 3})


def test_a_protobuf_schema_that_is_avro_is_a_bad_record():
    from kafka_direct.app.typed import formats

    registry = RegistrySettings("mock://protobuf-not")
    from confluent_kafka.schema_registry import Schema

    schemaId = formats.registry_client(registry).register_schema("x-value", Schema(json.dumps(
        {"type": "record", "name": "R", "fields": []}), "AVRO"))
    builder = RowBuilder(TypedOptions(valueFormat="protobuf", registry=registry,
                                      onBadRecord="dead-letter"), "s.x", None)
    kind, reason = builder.build("x", 0, 0, None, b"\x00" + schemaId.to_bytes(4, "big") + b"\x00")
    assert kind == BAD and "is a AVRO schema, not Protobuf" in reason


def test_protobuf_without_the_package_is_refused_naming_the_flag(monkeypatch):
    import sys

    from kafka_direct.errors import ConfigurationError

    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    with pytest.raises(ConfigurationError, match=r"--key-format protobuf needs the protobuf "
                                                 r"package: pip install 'confluent-kafka\[avro,"
                                                 r"protobuf\]'"):
        TypedOptions(keyFormat="protobuf", registry=RegistrySettings("mock://no-protobuf"))
