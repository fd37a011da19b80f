"""Hand-made Debezium change events, as the PostgreSQL connector writes them: JSON with and
without ``schemas.enable``, and Avro in Confluent's wire format (the schema given by id)."""

import base64
import datetime
import decimal
import io
import json

#: A table (id integer primary key, name text, born date, seen timestamp(6), at timestamptz,
#: amount numeric(10,2), loose numeric, doc jsonb, uid uuid, blob bytea, alarm time(6)).
COLUMNS = [
    ("id", {"type": "int32", "optional": False}),
    ("name", {"type": "string", "optional": True}),
    ("born", {"type": "int32", "optional": True, "name": "io.debezium.time.Date",
              "version": 1}),
    ("seen", {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
              "version": 1}),
    ("at", {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
            "version": 1}),
    ("amount", {"type": "bytes", "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                "parameters": {"scale": "2", "connect.decimal.precision": "10"}}),
    ("loose", {"type": "struct", "optional": True,
               "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
               "fields": [{"type": "int32", "optional": False, "field": "scale"},
                          {"type": "bytes", "optional": False, "field": "value"}]}),
    ("doc", {"type": "string", "optional": True, "name": "io.debezium.data.Json",
             "version": 1}),
    ("uid", {"type": "string", "optional": True, "name": "io.debezium.data.Uuid",
             "version": 1}),
    ("blob", {"type": "bytes", "optional": True}),
    ("alarm", {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime",
               "version": 1}),
]

#: The PostgreSQL types the job gives those columns.
TYPES = {"id": "integer", "name": "text", "born": "date", "seen": "timestamp without time zone",
         "at": "timestamp with time zone", "amount": "numeric", "loose": "numeric",
         "doc": "jsonb", "uid": "uuid", "blob": "bytea", "alarm": "time without time zone"}


def _unscaled(value, scale):
    number = int(decimal.Decimal(value).scaleb(scale))
    return number.to_bytes((number.bit_length() + 8) // 8, "big", signed=True)


def wire(row):
    """A row of Python values as the connector's JSON payload (semantic types encoded)."""
    if row is None:
        return None
    out = dict(row)
    for name, value in row.items():
        if value is None or value == "__debezium_unavailable_value":
            continue
        if name == "born":
            out[name] = (value - datetime.date(1970, 1, 1)).days
        elif name == "seen":
            out[name] = (value - datetime.datetime(1970, 1, 1)) // datetime.timedelta(
                microseconds=1)
        elif name == "at":
            out[name] = value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
        elif name == "amount":
            out[name] = base64.b64encode(_unscaled(value, 2)).decode()
        elif name == "loose":
            exponent = -decimal.Decimal(value).as_tuple().exponent
            out[name] = {"scale": exponent,
                         "value": base64.b64encode(_unscaled(value, exponent)).decode()}
        elif name == "blob":
            out[name] = base64.b64encode(value).decode()
        elif name == "alarm":
            out[name] = (value.hour * 3600 + value.minute * 60 + value.second) * 1_000_000 \
                + value.microsecond
    return out


def _struct(name, columns, optional=True, field=None):
    schema = {"type": "struct", "fields": [dict(spec, field=column) for column, spec in
                                           columns], "optional": optional, "name": name}
    if field is not None:
        schema["field"] = field
    return schema


KEY_SCHEMA = _struct("srv.public.t.Key", COLUMNS[:1], optional=False)
VALUE_SCHEMA = {"type": "struct", "optional": False, "name": "srv.public.t.Envelope",
                "fields": [_struct("srv.public.t.Value", COLUMNS, field="before"),
                           _struct("srv.public.t.Value", COLUMNS, field="after"),
                           {"type": "struct", "field": "source", "optional": False,
                            "fields": [{"type": "string", "field": "table"}]},
                           {"type": "string", "optional": False, "field": "op"},
                           {"type": "int64", "optional": True, "field": "ts_ms"}]}


def json_event(op, key, before=None, after=None, schemas=True):
    """(key bytes, value bytes) of one event in JSON (``schemas``: schemas.enable)."""
    keyPayload = {"id": key}
    valuePayload = {"before": wire(before), "after": wire(after), "source": {"table": "t"},
                    "op": op, "ts_ms": 1700000000000}
    if op == "t":
        keyPayload, valuePayload["before"], valuePayload["after"] = None, None, None
    if schemas:
        keyDocument = {"schema": KEY_SCHEMA, "payload": keyPayload}
        valueDocument = {"schema": VALUE_SCHEMA, "payload": valuePayload}
    else:
        keyDocument, valueDocument = keyPayload, valuePayload
    return (None if op == "t" else json.dumps(keyDocument).encode(),  # a truncate has no key
            json.dumps(valueDocument).encode())


def _avro_field(name, spec):
    kind = spec["type"]
    primitive = {"int32": "int", "int64": "long", "string": "string", "bytes": "bytes"}
    semantic = spec.get("name")
    if semantic == "org.apache.kafka.connect.data.Decimal":
        avro = {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                "connect.parameters": spec["parameters"], "connect.name": semantic,
                "logicalType": "decimal"}
    elif semantic == "io.debezium.data.VariableScaleDecimal":
        avro = {"type": "record", "name": "VariableScaleDecimal",
                "namespace": "io.debezium.data", "connect.name": semantic,
                "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}
    elif semantic is not None:
        avro = {"type": primitive[kind], "connect.version": 1, "connect.name": semantic}
    else:
        avro = primitive[kind]
    if spec.get("optional"):
        return {"name": name, "type": ["null", avro], "default": None}
    return {"name": name, "type": avro}


AVRO_KEY = {"type": "record", "name": "Key", "namespace": "srv.public.t",
            "fields": [_avro_field(n, s) for n, s in COLUMNS[:1]]}
AVRO_VALUE = {"type": "record", "name": "Envelope", "namespace": "srv.public.t", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        _avro_field(n, s) for n, s in COLUMNS]}], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
AVRO_KEY_ID, AVRO_VALUE_ID = 41, 42


def _avro_row(row):
    if row is None:
        return None
    out = wire(row)
    for name in ("amount",):
        if row.get(name) is not None:
            out[name] = decimal.Decimal(row[name])
    if isinstance(out.get("loose"), dict):
        out["loose"] = {"scale": out["loose"]["scale"],
                        "value": base64.b64decode(out["loose"]["value"])}
    if isinstance(row.get("blob"), bytes):
        out["blob"] = row["blob"]
    return out


def avro_event(op, key, before=None, after=None, ids=None):
    """(key bytes, value bytes) of one event in Confluent's Avro wire format.

    ``ids``: the (key, value) schema ids (default: those of :data:`AVRO_SCHEMAS`).
    """
    from fastavro import parse_schema, schemaless_writer

    def encode(schemaId, schema, record):
        buffer = io.BytesIO()
        schemaless_writer(buffer, parse_schema(schema), record)
        return b"\x00" + schemaId.to_bytes(4, "big") + buffer.getvalue()

    keyId, valueId = ids or (AVRO_KEY_ID, AVRO_VALUE_ID)
    key_ = None if op == "t" else encode(keyId, AVRO_KEY, {"id": key})
    return key_, encode(valueId, AVRO_VALUE, {
        "before": _avro_row(before), "after": _avro_row(after), "op": op,
        "ts_ms": 1700000000000})


AVRO_SCHEMAS = {AVRO_KEY_ID: (json.dumps(AVRO_KEY),), AVRO_VALUE_ID: (json.dumps(AVRO_VALUE),)}


def sample(i, **changes):
    """A full row of the table for key ``i``."""
    row = {"id": i, "name": f"n{i}", "born": datetime.date(1990, 1, 1) + datetime.timedelta(i),
           "seen": datetime.datetime(2024, 5, 1, 12, 0, 0, 123456),
           "at": datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC),
           "amount": decimal.Decimal("-1234.5") + i, "loose": decimal.Decimal("3.14159"),
           "doc": json.dumps({"a": [1, 2.50], "i": i}), "uid":
               "12345678-1234-5678-1234-56781234567" + str(i % 10),
           "blob": bytes([0, 255, i % 256]), "alarm": datetime.time(23, 59, 58, 1)}
    row.update(changes)
    return row
