"""Debezium change events (``--envelope debezium``) without Spark: the options refused at start,
each format's events decoded into rows, deletes and truncates, semantic types converted, and
the batch's move on a real PostgreSQL (key changes, unavailable TOAST values, truncates)."""

import argparse
import datetime
import decimal
import json

import psycopg2
import pytest

from kafka_direct.app.typed.commit import move_parts
from kafka_direct.app.typed.envelope import KEEP, PLACEHOLDER
from kafka_direct.app.typed.options import TypedOptions, add_arguments, options_from_args
from kafka_direct.app.typed.rows import BAD, DELETE, ROW, TRUNCATE, RowBuilder
from kafka_direct.app.typed.schema_registry import RegistrySettings
from kafka_direct.app.typed.stage import Stager
from kafka_direct.app.typed.table import prepare_tables
from kafka_direct.errors import BadRecordError, ConfigurationError
from tests.app.test_ingest_typed import query
from tests.app.typed.debezium_events import AVRO_SCHEMAS, avro_event, json_event, sample

FORMATS = ["json-schemas", "json-plain", "avro"]


def parse(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--sink", default="transactional")
    add_arguments(parser)
    return options_from_args(parser.parse_args(argv), {})


@pytest.mark.parametrize(("argv", "setting", "words"), [
    (["--envelope", "debezium", "--value-format", "json", "--key-format", "json"],
     "--envelope", "give --key-columns"),
    (["--envelope", "debezium", "--key-format", "json", "--key-columns", "id"],
     "--envelope", "not --value-format raw: add --value-format json"),
    (["--envelope", "debezium", "--value-format", "json", "--key-columns", "id"],
     "--envelope", "--key-format raw cannot read: add --key-format json"),
    (["--envelope", "debezium", "--value-format", "json", "--key-format", "json",
      "--key-columns", "id", "--on-tombstone", "row"], "--on-tombstone", "is no row"),
    (["--value-format", "json", "--on-truncate", "truncate"], "--on-truncate",
     "--on-truncate is for --envelope debezium"),
])
def test_envelope_mistakes_are_refused_at_start_naming_the_option(argv, setting, words):
    with pytest.raises(ConfigurationError) as caught:
        parse(*argv)
    assert words in str(caught.value) and caught.value.setting == setting


def test_the_envelope_deletes_on_tombstones_by_default_and_needs_no_more():
    options = parse("--envelope", "debezium", "--value-format", "json", "--key-format", "json",
                    "--key-columns", "id")
    assert (options.envelope, options.onTombstone, options.onTruncate) == (
        "debezium", "delete", "fail")
    assert options.active
    assert parse("--value-format", "json").onTombstone == "row"  # unchanged without it
    assert parse("--envelope", "debezium", "--value-format", "json", "--key-format", "json",
                 "--key-columns", "id", "--on-tombstone", "ignore",
                 "--on-truncate", "truncate").onTruncate == "truncate"


def options(fmt, **more):
    kind = "avro" if fmt == "avro" else "json"
    registry = RegistrySettings("mock://debezium-events") if fmt == "avro" else None
    return TypedOptions(valueFormat=kind, keyFormat=kind, registry=registry,
                        keyColumns=("id",), onTombstone=more.pop("onTombstone", "delete"),
                        envelope="debezium", **more)


def event(fmt, op, key, before=None, after=None):
    if fmt == "avro":
        return avro_event(op, key, before, after)
    return json_event(op, key, before, after, schemas=fmt == "json-schemas")


def builder(fmt, existing=None, **more):
    return RowBuilder(options(fmt, **more), "s.t", existing,
                      AVRO_SCHEMAS if fmt == "avro" else None)


def build(rows, fmt, offset, op, key, before=None, after=None):
    k, v = event(fmt, op, key, before, after)
    return rows.build("t", 0, offset, k, v)


@pytest.mark.parametrize("fmt", ["json-schemas", "avro"])
def test_events_with_a_schema_give_postgresql_types_and_values(fmt):
    rows = builder(fmt)
    row = sample(3)
    kind, fields = build(rows, fmt, 0, "c", 3, after=row)
    assert kind == ROW
    assert fields["born"] == "1990-01-04"  # as COPY takes it
    assert fields["seen"] == "2024-05-01T12:00:00.123456"
    assert datetime.datetime.fromisoformat(fields["at"]) == row["at"]
    assert fields["amount"] == decimal.Decimal("-1231.50")
    assert fields["loose"] == decimal.Decimal("3.14159")
    assert json.loads(fields["doc"]) == {"a": [1, 2.5], "i": 3} and "2.5" in fields["doc"]
    assert fields["blob"] == bytes([0, 255, 3]) and fields["alarm"] == "23:59:58.000001"
    assert fields["uid"].endswith("5673") and fields["id"] == 3 and fields["name"] == "n3"
    types = {name: info[0] for name, info in rows.new.items()}
    assert types == {"id": "integer", "name": "text", "born": "date", "seen": "timestamp",
                     "at": "timestamptz", "amount": "numeric(10,2)", "loose": "numeric",
                     "doc": "jsonb", "uid": "uuid", "blob": "bytea", "alarm": "time"}
    assert all(info[1] for info in rows.new.values())  # from the schema


@pytest.mark.parametrize("fmt", FORMATS)
def test_ops_become_rows_deletes_truncates_and_skips(fmt):
    rows = builder(fmt, onTruncate="truncate")
    assert build(rows, fmt, 0, "r", 1, after=sample(1))[0] == ROW
    kind, fields = build(rows, fmt, 1, "u", 1, before=sample(1), after=sample(1, name="x"))
    assert (kind, fields["name"]) == (ROW, "x")
    kind, fields = build(rows, fmt, 2, "d", 1, before=sample(1))
    assert (kind, fields) == (DELETE, {"id": 1})  # by the key; the before image is not used
    key, _ = event(fmt, "d", 1)
    assert rows.build("t", 0, 3, key, None) == (DELETE, {"id": 1})  # the tombstone after it
    assert build(rows, fmt, 4, "t", None) == (TRUNCATE, {})
    ignoring = builder(fmt, onTombstone="ignore", onTruncate="ignore")
    assert ignoring.build("t", 0, 3, key, None) is None
    assert build(ignoring, fmt, 4, "t", None) is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_truncate_fails_unless_the_option_says_what_to_do(fmt):
    with pytest.raises(BadRecordError) as caught:
        build(builder(fmt), fmt, 7, "t", None)
    assert "--on-truncate truncate" in str(caught.value) and caught.value.offset == 7
    kind, reason = build(builder(fmt, onBadRecord="dead-letter"), fmt, 7, "t", None)
    assert kind == BAD and "truncate" in reason


def test_json_without_schemas_keeps_the_values_as_debezium_wrote_them():
    rows = builder("json-plain")
    kind, fields = build(rows, "json-plain", 0, "c", 2, after=sample(2))
    assert kind == ROW and fields["born"] == 7307 and fields["name"] == "n2"
    assert rows.new["born"][:2] == ("bigint", False)  # inferred


@pytest.mark.parametrize("fmt", FORMATS)
def test_unavailable_toast_values_are_kept_not_written(fmt):
    rows = builder(fmt)
    after = sample(5, doc=PLACEHOLDER, name=PLACEHOLDER, blob=PLACEHOLDER.encode())
    kind, fields = build(rows, fmt, 0, "u", 5, after=after)
    assert kind == ROW and fields["doc"] is None and fields["name"] is None
    assert set(json.loads(fields[KEEP])) == {"doc", "name", "blob"}
    assert set(rows.kept) == {"doc", "name", "blob"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_that_are_not_debezium_events_are_bad_records(fmt):
    rows = builder("json-schemas", onBadRecord="dead-letter")
    kind, reason = rows.build("t", 0, 0, json_event("c", 1)[0], b'{"id": 1, "name": "x"}')
    assert kind == BAD and "not a Debezium change event" in reason
    kind, reason = rows.build("t", 0, 1, json_event("c", 1)[0], json.dumps(
        {"op": "c", "after": None}).encode())
    assert kind == BAD and "no after image" in reason


def apply(postgres, schema, opts, batches):
    """Stage each batch's partitions' events and move them, one transaction per batch."""
    for number, batch in enumerate(batches, 1):
        parts = []
        for partition, events in batch.items():
            records = [("t", partition, offset, key, value) for offset, key, value in events]
            parts.append(Stager(postgres.dsn, schema, "t", opts, "test", number).stage(
                partition, records))
        connection = psycopg2.connect(postgres.dsn)
        try:
            with connection, connection.cursor() as cursor:
                move_parts(cursor, schema, "t", opts, parts)
        finally:
            connection.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_key_changes_toast_placeholders_and_truncates_on_postgresql(postgres, pg_schema, fmt):
    opts = options(fmt, onTruncate="truncate")
    prepare_tables(postgres.dsn, pg_schema, "t", opts)
    big = "x" * 5000
    unavailable = {"doc": PLACEHOLDER, "name": PLACEHOLDER}

    def ev(offset, op, key, before=None, after=None):
        return (offset, *event(fmt, op, key, before, after))

    def tombstone(offset, key):
        return offset, event(fmt, "d", key)[0], None

    apply(postgres, pg_schema, opts, [
        {0: [ev(0, "r", 1, after=sample(1, name=big)), ev(1, "c", 2, after=sample(2)),
             ev(2, "u", 1, after=sample(1, alarm=None, **unavailable)),  # kept in the batch
             ev(3, "c", 3, after=sample(3))],
         1: [ev(0, "c", 10, after=sample(10))]},
        {0: [ev(4, "u", 2, after=sample(2, amount=decimal.Decimal("9.99"), **unavailable)),
             ev(5, "d", 3, before=sample(3)), tombstone(6, 3),  # delete and its tombstone
             ev(7, "d", 1, before=sample(1)), tombstone(8, 1),  # key 1 becomes key 4
             ev(9, "c", 4, after=sample(4, name=big))]},
    ])
    rows = query(postgres, f'SELECT id, name, doc FROM "{pg_schema}".t ORDER BY id')
    assert [(r[0], r[1]) for r in rows] == [(2, "n2"), (4, big), (10, "n10")]  # 2: kept
    assert (rows[0][2] if fmt != "json-plain" else json.loads(rows[0][2])) == {
        "a": [1, 2.5], "i": 2}
    types = query(postgres, 'SELECT data_type FROM information_schema.columns WHERE '
                            f"table_schema = '{pg_schema}' AND table_name = 't' AND "
                            "column_name IN ('amount', 'at', 'born', 'doc', 'seen') "
                            "ORDER BY column_name")
    if fmt == "json-plain":  # inferred from the values as Debezium wrote them
        assert types == [("text",), ("text",), ("bigint",), ("text",), ("bigint",)]
    else:
        assert types == [("numeric",), ("timestamp with time zone",), ("date",), ("jsonb",),
                         ("timestamp without time zone",)]
        assert query(postgres, f'SELECT amount, alarm FROM "{pg_schema}".t ORDER BY id') == [
            (decimal.Decimal("9.99"), datetime.time(23, 59, 58, 1)),
            (decimal.Decimal("-1230.50"), datetime.time(23, 59, 58, 1)),
            (decimal.Decimal("-1224.50"), datetime.time(23, 59, 58, 1))]
    # A truncate in partition 0: the table's rows and partition 0's earlier rows go; later
    # rows and other partitions' rows of the batch stay (Kafka orders only a partition).
    apply(postgres, pg_schema, opts, [
        {0: [ev(10, "c", 20, after=sample(20)), ev(11, "t", None),
             ev(12, "c", 21, after=sample(21)), ev(13, "u", 21, after=sample(21, name="b"))],
         1: [ev(1, "c", 11, after=sample(11))]},
    ])
    assert query(postgres, f'SELECT id, name FROM "{pg_schema}".t ORDER BY id') == [
        (11, "n11"), (21, "b")]


def test_a_kept_column_takes_the_keys_value_from_the_target_across_batches(postgres,
                                                                           pg_schema):
    opts = options("json-schemas")
    prepare_tables(postgres.dsn, pg_schema, "t", opts)

    def ev(offset, op, key, after):
        return (offset, *json_event(op, key, after=after))

    apply(postgres, pg_schema, opts, [
        {0: [ev(0, "c", 1, sample(1, doc=json.dumps({"big": "y" * 3000})))]},
        {0: [ev(1, "u", 1, sample(1, name="changed", doc=PLACEHOLDER))]},
        {0: [ev(2, "u", 1, sample(1, name="again", doc=PLACEHOLDER)),
             ev(3, "u", 1, sample(1, name="last", doc=PLACEHOLDER))]},
        {0: [ev(4, "c", 2, sample(2, doc=PLACEHOLDER))]},  # nothing to keep: NULL
    ])
    rows = query(postgres, f'SELECT id, name, length(doc::text) FROM "{pg_schema}".t '
                           "ORDER BY id")
    assert rows == [(1, "last", 3011), (2, "n2", None)]
