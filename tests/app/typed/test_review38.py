"""Review of issue 38 (primitive keys, start-time checks, the Debezium envelope): each test
states a defect found by experiment and fails on the code as reviewed.

Findings:

1. Exact decimals read from JSON lose digits. JSON values are parsed with Python floats,
   so a Connect ``Decimal`` written as a JSON number (JsonConverter's
   ``decimal.format=NUMERIC``) or a plain JSON field declared ``--columns x:numeric(p,s)``
   is rounded to a double's 17 digits before it is written: a silently wrong value.
2. A ``--key-format float`` key never agrees with its value field: the key's 4-byte float
   is widened to a double (0.1 -> 0.10000000149011612) and compared with the field's
   double, so every record whose value repeats its key is a bad record.
3. ``--key-format uuid`` with ``--columns id:varchar(10)`` is accepted at start and then
   every record is a bad record (a UUID's text is 36 characters): a configuration
   mismatch found mid-run.
4. A null primitive key beside a value field of its column is reported as "the value's
   field contradicts the key" instead of "key column is null".
"""

import json
import struct
import uuid

import pytest

from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.rows import ROW, RowBuilder
from kafka_direct.errors import BadRecordError, ConfigurationError

_DECIMAL_SCHEMA = {"type": "struct", "fields": [
    {"field": "before", "type": "struct", "optional": True, "fields": []},
    {"field": "after", "type": "struct", "optional": True, "fields": [
        {"field": "id", "type": "int32"},
        {"field": "amount", "type": "bytes", "optional": True,
         "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "20"}}]},
    {"field": "op", "type": "string"}]}
_KEY_SCHEMA = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}


# Finding 1 (high: silently wrong values).
def test_review38_debezium_decimal_as_a_json_number_keeps_its_digits():
    options = TypedOptions(valueFormat="json", keyFormat="json", keyColumns=("id",),
                           onTombstone="delete", envelope="debezium")
    rows = RowBuilder(options, "s.t", None)
    key = json.dumps({"schema": _KEY_SCHEMA, "payload": {"id": 1}}).encode()
    # decimal.format=NUMERIC: the Decimal is a JSON number with its exact digits.
    value = (b'{"schema": ' + json.dumps(_DECIMAL_SCHEMA).encode()
             + b', "payload": {"before": null, "after": {"id": 1, '
               b'"amount": 123456789012345678.91}, "op": "c"}}')
    kind, fields = rows.build("t", 0, 0, key, value)
    assert kind == ROW
    assert str(fields["amount"]) == "123456789012345678.91"


# Finding 1, without the envelope: a declared numeric column of a JSON field.
def test_review38_plain_json_numeric_column_keeps_its_digits():
    options = TypedOptions(valueFormat="json", columns=(("amount", "numeric(20,2)"),))
    kind, fields = RowBuilder(options, "s.t", None).build(
        "t", 0, 0, None, b'{"amount": 123456789012345678.91}')
    assert kind == ROW
    assert str(fields["amount"]) == "123456789012345678.91"


# Finding 2 (low: a legitimate record refused).
def test_review38_a_float_key_agrees_with_the_same_number_in_its_value():
    options = TypedOptions(valueFormat="json", keyFormat="float", keyColumns=("x",))
    kind, fields = RowBuilder(options, "s.t", None).build(
        "t", 0, 0, struct.pack(">f", 0.1), b'{"x": 0.1, "n": 1}')
    assert kind == ROW and fields["n"] == 1


# Finding 3 (medium: a configuration mismatch found mid-run, every record bad).
def test_review38_a_uuid_key_into_a_too_short_varchar_is_refused_at_start():
    try:
        options = TypedOptions(valueFormat="json", keyFormat="uuid", keyColumns=("id",),
                               columns=(("id", "varchar(10)"),))
    except ConfigurationError:
        return  # refused at start: what the issue asks
    with pytest.raises(BadRecordError) as caught:  # what happens instead, at the first record
        RowBuilder(options, "s.t", None).build("t", 0, 0, str(uuid.uuid4()).encode(),
                                               b'{"n": 1}')
    pytest.fail(f"accepted at start, then every record is a bad record: {caught.value}")


# Finding 4 (low: a misleading bad-record reason).
def test_review38_a_null_primitive_key_is_reported_as_null():
    options = TypedOptions(valueFormat="json", keyFormat="string", keyColumns=("id",))
    with pytest.raises(BadRecordError) as caught:
        RowBuilder(options, "s.t", None).build("t", 0, 0, None, b'{"id": 5}')
    assert "null" in str(caught.value), str(caught.value)
