"""Primitive keys as columns and key mistakes refused at start, without Spark or services."""

import argparse
import struct
import uuid

import pytest

from kafka_direct.app.typed.options import TypedOptions, add_arguments, options_from_args
from kafka_direct.app.typed.rows import BAD, DELETE, ROW, RowBuilder
from kafka_direct.app.typed.table import known_columns
from kafka_direct.errors import BadRecordError, ConfigurationError


def parse(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--sink", default="transactional")
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv), {})


def rows(existing=None, **options):
    options.setdefault("onBadRecord", "dead-letter")
    return RowBuilder(TypedOptions(**options), "s.t", existing)


@pytest.mark.parametrize(("kind", "data", "value", "column"), [
    ("string", "é5".encode(), "é5", "text"),
    ("long", struct.pack(">q", -2**40), -2**40, "bigint"),
    ("int", struct.pack(">i", -7), -7, "integer"),
    ("short", struct.pack(">h", 300), 300, "smallint"),
    ("double", struct.pack(">d", 2.5), 2.5, "double precision"),
    ("float", struct.pack(">f", 0.5), 0.5, "real"),
    ("bytes", b"\x00\xff", b"\x00\xff", "bytea"),
    ("uuid", b"3F2504E0-4F89-11D3-9A0C-0305E82C3301",
     "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "uuid"),
])
def test_primitive_keys_decode_as_kafkas_serializers_write_them(kind, data, value, column):
    built = rows(keyFormat=kind, valueFormat="json", keyColumns=("id",))
    assert built.build("t", 0, 0, data, b'{"n": 1}') == (ROW, {"id": value, "n": 1})
    assert built.new["id"][0] == column
    assert dict(known_columns(built.options))["id"] == column
    plain = rows(keyFormat=kind)  # no --key-columns: the key's column is named key
    assert plain.build("t", 0, 1, data, b"v") == (ROW, {"key": value, "value": b"v"})


@pytest.mark.parametrize(("kind", "data", "reason"), [
    ("long", b"5", "the key has 1 bytes, not the 8 bytes of a long"),
    ("int", struct.pack(">q", 5), "the key has 8 bytes, not the 4 bytes of an int"),
    ("short", b"", "the key has 0 bytes, not the 2 bytes of a short"),
    ("double", b"1234", "not the 8 bytes of a double"),
    ("float", b"12345678", "not the 4 bytes of a float"),
    ("string", b"\xff\xfe", "the key is not UTF-8 text"),
    ("string", b"a\x00b", "NUL"),
    ("uuid", b"not-a-uuid", "the key is not a UUID"),
])
def test_a_key_that_does_not_fit_its_format_is_a_bad_record(kind, data, reason):
    kind_, why = rows(keyFormat=kind, valueFormat="json", keyColumns=("id",)).build(
        "t", 0, 0, data, b'{"n": 1}')
    assert kind_ == BAD and reason in why, why
    with pytest.raises(BadRecordError, match="at offset 3 cannot be a row"):
        rows(keyFormat=kind, valueFormat="json", keyColumns=("id",),
             onBadRecord="fail").build("t", 0, 3, data, b'{"n": 1}')


def test_a_string_keyed_json_topic_upserts_and_tombstones_delete_by_the_key():
    # The topic: keyed by str(id), the fields (id too) in a JSON value.
    built = rows(keyFormat="string", valueFormat="json", keyColumns=("id",),
                 onTombstone="delete")
    assert built.build("t", 0, 0, b"5", b'{"id": 5, "name": "a"}') == (
        ROW, {"id": "5", "name": "a"})
    assert built.build("t", 0, 1, b"5", None) == (DELETE, {"id": "5"})
    assert built.build("t", 0, 2, b"6", b'{"name": "b"}') == (ROW, {"id": "6", "name": "b"})
    assert built.build("t", 0, 3, b"7", b'{"id": null}') == (ROW, {"id": "7"})
    assert built.build("t", 0, 4, b"8", b'{"id": "8"}') == (ROW, {"id": "8"})
    assert built.new["id"][0] == "text" and "id" in built.columns


def test_the_keys_value_wins_and_a_value_field_that_says_otherwise_is_a_bad_record():
    built = rows(keyFormat="string", valueFormat="json", keyColumns=("id",))
    kind, reason = built.build("t", 0, 0, b"5", b'{"id": 6}')
    assert kind == BAD and "the key gives column 'id'" in reason and "field 'id'" in reason
    assert "6" not in reason  # never the record's data
    kind, reason = built.build("t", 0, 1, b"5", b'{"id": 5.5}')
    assert kind == BAD
    longs = rows(keyFormat="long", valueFormat="json", keyColumns=("id",))
    key = struct.pack(">q", 5)
    assert longs.build("t", 0, 0, key, b'{"id": "5"}') == (ROW, {"id": 5})
    assert longs.build("t", 0, 1, key, b'{"id": 5}') == (ROW, {"id": 5})
    assert longs.build("t", 0, 2, key, b'{"id": 4}')[0] == BAD
    assert longs.build("t", 0, 3, key, b'{"id": [5]}')[0] == BAD


def test_a_declared_or_existing_column_type_reads_the_string_key_as_that_type():
    built = rows(keyFormat="string", valueFormat="json", keyColumns=("id",),
                 columns=(("id", "bigint"),))
    assert built.build("t", 0, 0, b"5", b'{"id": 5}') == (ROW, {"id": 5})
    assert built.build("t", 0, 1, b"-12", None) == (ROW, {"id": -12})
    kind, reason = built.build("t", 0, 2, b"5x", b'{"n": 1}')
    assert kind == BAD and "column 'id' (bigint)" in reason and "not an integer" in reason
    assert dict(known_columns(built.options))["id"] == "bigint"
    table = rows(keyFormat="string", valueFormat="json", keyColumns=("id",),
                 existing={"topic": "text", "kafka_partition": "integer",
                           "kafka_offset": "bigint", "id": "uuid"})
    key = str(uuid.uuid4()).encode()
    assert table.build("t", 0, 0, key, b"{}") == (ROW, {"id": key.decode()})
    assert table.build("t", 0, 1, b"x", b"{}")[0] == BAD


def test_a_null_key_cannot_be_upserted_but_can_be_appended():
    kind, reason = rows(keyFormat="string", valueFormat="json", keyColumns=("id",)).build(
        "t", 0, 0, None, b'{"n": 1}')
    assert kind == BAD and "key column 'id' is null" in reason
    assert rows(keyFormat="long", valueFormat="json").build("t", 0, 0, None, b"{}") == (
        ROW, {"key": None})


@pytest.mark.parametrize(("argv", "words"), [
    # The reproducer: a raw key cannot supply id, which every tombstone deletes by.
    (["--value-format", "json", "--key-columns", "id", "--on-tombstone", "delete"],
     "--key-columns id with --on-tombstone delete: a tombstone has no value, so its key "
     "must supply id, and --key-format raw gives one column, key (bytea)"),
    (["--value-format", "json", "--key-columns", "id", "--on-tombstone", "delete"],
     "--key-format string"),
    (["--key-format", "string", "--value-format", "json", "--key-columns", "id,region"],
     "--key-columns id,region: a string key is one column"),
    (["--key-format", "long", "--key-columns", "id", "--columns", "id:uuid"],
     "--columns id:uuid: a long key cannot be read as uuid"),
    (["--key-format", "bytes", "--key-columns", "id", "--columns", "id:bigint"],
     "a bytes key cannot be read as bigint"),
    (["--key-format", "string", "--key-columns", "id", "--columns", "n:bigint"],
     "--columns declares the types of JSON fields"),
    (["--key-format", "string", "--key-columns", "value"],
     "--key-columns value: the raw value's column"),
    (["--value-format", "json", "--key-columns", "topic,kafka_partition,kafka_offset",
      "--on-tombstone", "delete"], "no column of the key"),
    (["--key-format", "avro", "--value-format", "json", "--key-columns", "id,topic",
      "--on-tombstone", "delete", "--schema-registry", "http://r"], None),
])
def test_key_mistakes_are_refused_at_start_naming_the_option_and_the_fix(argv, words):
    if words is None:  # a JSON-or-registry key may carry several fields: records decide
        assert parse(*argv).keyColumns == ("id", "topic")
        return
    with pytest.raises(ConfigurationError) as caught:
        parse(*argv)
    assert words in str(caught.value), str(caught.value)


def test_key_options_that_work():
    reproducer = parse("--value-format", "json", "--key-format", "string", "--key-columns",
                       "id", "--on-tombstone", "delete")
    assert (reproducer.keyFormat, reproducer.keyColumns) == ("string", ("id",))
    assert parse("--key-format", "string", "--key-columns", "id", "--columns",
                 "id:bigint").columns == (("id", "bigint"),)
    assert parse("--key-format", "long", "--key-columns", "id,topic", "--on-tombstone",
                 "delete").keyColumns == ("id", "topic")
    assert parse("--key-format", "string", "--key-columns", "key", "--on-tombstone",
                 "delete").active
    assert parse("--key-format", "int").active
    # Upserting on a value's field without deleting stays possible (no tombstones needed).
    assert parse("--value-format", "json", "--key-columns", "id").keyColumns == ("id",)
    with pytest.raises(SystemExit):
        parse("--value-format", "long")  # primitive formats are for keys
    with pytest.raises(ConfigurationError, match="--value-format must be one of"):
        TypedOptions(valueFormat="long")


def test_a_tombstone_written_as_a_row_without_its_key_columns_says_how_to_skip_it():
    # Upserting on a value's field with a raw key: a tombstone has no id to be a row by.
    kind, reason = rows(valueFormat="json", keyColumns=("id",)).build("t", 0, 0, b"5", None)
    assert kind == BAD and "key column 'id' is not a field of the key" in reason
    assert "--on-tombstone ignore skips it" in reason
    assert rows(valueFormat="json", keyColumns=("id",), onTombstone="ignore").build(
        "t", 0, 1, b"5", None) is None
