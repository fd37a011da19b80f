"""Staging and the batch's move on a real PostgreSQL, without Spark: the commit's SQL against
the Python model (latest record per key), casts into every column type, columns added and
refused, and nothing left behind."""

import json
import random

import psycopg2
import pytest

from kafka_direct.app.typed.commit import move_parts
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.rows import latest_per_key
from kafka_direct.app.typed.stage import Stager
from kafka_direct.app.typed.table import prepare_tables
from kafka_direct.errors import SchemaChangeError


def commit(postgres, schema, options, parts, table="t"):
    connection = psycopg2.connect(postgres.dsn)
    try:
        with connection, connection.cursor() as cursor:
            return move_parts(cursor, schema, table, options, parts)
    finally:
        connection.close()


def query(postgres, sql):
    connection = psycopg2.connect(postgres.dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall()
    finally:
        connection.close()


def stage(postgres, schema, options, records, partition=0, batch=1, table="t"):
    return Stager(postgres.dsn, schema, table, options, "test", batch).stage(partition, records)


def test_upserts_and_deletes_keep_each_keys_latest_record_like_the_model(postgres, pg_schema):
    options = TypedOptions(valueFormat="json", keyFormat="json", keyColumns=("id",),
                           onTombstone="delete")
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    chooser = random.Random(7)
    model = {}
    for batch in range(1, 6):
        parts, everything = [], []
        for partition in range(3):
            records = []
            for offset in range(batch * 100, batch * 100 + chooser.randint(0, 30)):
                key = chooser.randint(0, 9)
                value = None if chooser.random() < 0.2 else json.dumps(
                    {"id": key, "v": offset, "p": partition}).encode()
                records.append(("t", partition, offset, json.dumps({"id": key}).encode(),
                                value))
                everything.append(((key,), partition, offset, value))
            parts.append(stage(postgres, pg_schema, options, records, partition, batch))
        commit(postgres, pg_schema, options, parts)
        for (key,), value in latest_per_key(everything).items():
            if value is None:
                model.pop(key, None)
            else:
                model[key] = json.loads(value)["v"]
        assert dict(query(postgres, f'SELECT id, v FROM "{pg_schema}".t')) == model


def test_every_column_type_round_trips_through_staging(postgres, pg_schema):
    options = TypedOptions(valueFormat="json", columns=(
        ("n", "numeric(8,3)"), ("d", "date"), ("ts", "timestamptz"), ("u", "uuid"),
        ("r", "real"), ("tm", "time")))
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    document = {"i": 5, "f": 1.25, "b": False, "s": "tab\tnew\nline\\", "j": {"a": [1, "x"]},
                "n": 3.14159, "d": "2024-02-29", "ts": "2024-01-01T10:00:00+02:00",
                "u": "12345678-1234-5678-1234-567812345678", "r": 0.5, "tm": "23:59:59"}
    part = stage(postgres, pg_schema, options, [("t", 0, 0, b"\x00\xff", json.dumps(
        document).encode())])
    commit(postgres, pg_schema, options, [part])
    row = query(postgres, f'SELECT key, i, f, b, s, j, n::text, d::text, ts = '
                          f"'2024-01-01T08:00:00Z', u::text, r, tm::text FROM "
                          f'"{pg_schema}".t')[0]
    assert bytes(row[0]) == b"\x00\xff"
    assert row[1:] == (5, 1.25, False, "tab\tnew\nline\\", {"a": [1, "x"]}, "3.142",
                       "2024-02-29", True, "12345678-1234-5678-1234-567812345678", 0.5,
                       "23:59:59")


def test_columns_new_in_a_batch_are_added_and_a_type_clash_refused(postgres, pg_schema):
    options = TypedOptions(valueFormat="json")
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    first = stage(postgres, pg_schema, options, [("t", 0, 0, None, b'{"a": 1}')])
    commit(postgres, pg_schema, options, [first])
    both = [stage(postgres, pg_schema, options, [("t", 0, 1, None, b'{"a": 2, "b": "x"}')]),
            stage(postgres, pg_schema, options, [("t", 1, 0, None, b'{"b": "y", "c": 1.5}')],
                  partition=1)]
    counts = commit(postgres, pg_schema, options, both)
    assert set(counts.added) == {"b", "c"} and counts.written == 2
    assert query(postgres, f'SELECT a, b, c FROM "{pg_schema}".t ORDER BY kafka_partition, '
                           "kafka_offset") == [(1, None, None), (2, "x", None), (None, "y", 1.5)]
    clash = [stage(postgres, pg_schema, options, [("t", 0, 2, None, b'{"d": 1}')]),
             stage(postgres, pg_schema, options, [("t", 1, 1, None, b'{"d": "one"}')],
                   partition=1)]
    with pytest.raises(SchemaChangeError) as caught:
        commit(postgres, pg_schema, options, clash)
    assert caught.value.field == "d" and {caught.value.columnType, caught.value.newType} == {
        "bigint", "text"}
    assert "d" not in [c for (c,) in query(
        postgres, "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                  f"'{pg_schema}' AND table_name = 't'")]


def test_a_template_stages_each_topics_rows_for_its_own_table(postgres, pg_schema):
    from kafka_direct.app.typed.commit import move_tables

    options = TypedOptions(valueFormat="json", keyFormat="json", keyColumns=("id",),
                           onTombstone="delete", onBadRecord="dead-letter")
    prepare_tables(postgres.dsn, pg_schema, "{topic}", options, topics=["a.x"])
    records = [("a.x", 0, 0, b'{"id": 1}', b'{"id": 1, "name": "one"}'),
               ("b", 0, 0, b'{"id": 1}', b'{"id": 1, "price": 2.5}'),
               ("a.x", 0, 1, b'{"id": 2}', b'{"id": 2, "name": "two"}'),
               ("b", 0, 1, b'{"id": 9}', b"not json"),
               ("a.x", 0, 2, b'{"id": 1}', None)]
    part = stage(postgres, pg_schema, options, records, table="{topic}")
    assert sorted(part.targets) == ["a_x", "b"] and part.rows == 5
    other = stage(postgres, pg_schema, options, [("b", 1, 0, b'{"id": 3}', b'{"id": 3}')],
                  partition=1, table="{topic}")
    connection = psycopg2.connect(postgres.dsn)
    try:
        with connection, connection.cursor() as cursor:
            counts = move_tables(cursor, pg_schema, "{topic}", options, [part, other])
    finally:
        connection.close()
    assert (counts.written, counts.deadLetters) == (3, 1)  # id 1 of a.x: deleted in the batch
    assert query(postgres, f'SELECT id, name FROM "{pg_schema}".a_x') == [(2, "two")]
    assert query(postgres, f'SELECT id, price FROM "{pg_schema}".b ORDER BY id') == [
        (1, 2.5), (3, None)]
    assert query(postgres, f'SELECT topic, kafka_offset FROM "{pg_schema}".b_dead_letter') == [
        ("b", 1)]
    assert query(postgres, f'SELECT count(*) FROM "{pg_schema}".a_x_dead_letter') == [(0,)]
    assert query(postgres, "SELECT column_name FROM information_schema.columns WHERE "
                           f"table_schema = '{pg_schema}' AND table_name = 'a_x' AND "
                           "column_name = 'price'") == []


def test_a_template_refuses_two_topics_of_a_batch_onto_one_table(postgres, pg_schema):
    from kafka_direct.app.typed.commit import move_tables
    from kafka_direct.errors import ConfigurationError

    options = TypedOptions(valueFormat="json")
    prepare_tables(postgres.dsn, pg_schema, "{topic}", options)
    parts = [stage(postgres, pg_schema, options, [(topic, 0, 0, None, b'{"a": 1}')],
                   partition=i, table="{topic}") for i, topic in enumerate(("a.b", "a_b"))]
    connection = psycopg2.connect(postgres.dsn)
    try:
        with pytest.raises(ConfigurationError, match="onto one table 'a_b'"), connection, \
                connection.cursor() as cursor:
            move_tables(cursor, pg_schema, "{topic}", options, parts)
    finally:
        connection.close()
    assert query(postgres, f"SELECT to_regclass('\"{pg_schema}\".a_b')") == [(None,)]


def test_debezium_topics_in_one_staging_table_truncate_and_keep_per_table(postgres, pg_schema):
    # One task read two Debezium topics of a table per topic: a truncate of one empties its
    # table only (and its own earlier events), an unavailable value of the other is kept
    # from its own table.
    from kafka_direct.app.typed.commit import move_tables
    from kafka_direct.app.typed.envelope import PLACEHOLDER
    from tests.app.typed.debezium_events import json_event

    options = TypedOptions(valueFormat="json", keyFormat="json", keyColumns=("id",),
                           onTombstone="delete", envelope="debezium", onTruncate="truncate")
    prepare_tables(postgres.dsn, pg_schema, "{topic}", options, topics=["a", "b"])

    def events(*specs):
        return [(topic, 0, offset, *json_event(op, key, None, after, schemas=False))
                for topic, offset, op, key, after in specs]

    def move(batch, records):
        part = stage(postgres, pg_schema, options, records, batch=batch, table="{topic}")
        connection = psycopg2.connect(postgres.dsn)
        try:
            with connection, connection.cursor() as cursor:
                return part, move_tables(cursor, pg_schema, "{topic}", options, [part])
        finally:
            connection.close()

    move(1, events(("a", 0, "c", 1, {"id": 1, "name": "a1"}),
                   ("b", 0, "c", 1, {"id": 1, "name": "b1"}),
                   ("a", 1, "c", 9, {"id": 9, "name": "a9"})))
    part, _ = move(2, events(("a", 2, "c", 2, {"id": 2, "name": "a2"}),
                             ("b", 1, "u", 1, {"id": 1, "name": PLACEHOLDER}),
                             ("a", 3, "t", None, None),
                             ("b", 2, "c", 2, {"id": 2, "name": "b2"}),
                             ("a", 4, "c", 3, {"id": 3, "name": "a3"})))
    assert sorted(part.targets) == ["a", "b"]
    assert [(s.table, s.truncates, s.kept) for s in sorted(part.shares, key=lambda s: s.table)
            ] == [("a", (("a", 0, 3),), ()), ("b", (), ("name",))]
    assert query(postgres, f'SELECT id, name FROM "{pg_schema}".a ORDER BY id') == [(3, "a3")]
    assert query(postgres, f'SELECT id, name FROM "{pg_schema}".b ORDER BY id') == [
        (1, "b1"), (2, "b2")]


def avro_record(schemaId, schema, value):
    import io

    from fastavro import parse_schema, schemaless_writer

    body = io.BytesIO()
    schemaless_writer(body, parse_schema(schema), value)
    return b"\x00" + schemaId.to_bytes(4, "big") + body.getvalue()


def test_widened_and_nullable_schema_fields_alter_the_table_in_the_batch(postgres, pg_schema):
    from kafka_direct.app.typed.schema_registry import RegistrySettings

    query(postgres, f'CREATE TABLE "{pg_schema}".t (topic text NOT NULL, kafka_partition '
                    "integer NOT NULL, kafka_offset bigint NOT NULL, key bytea, n integer NOT "
                    "NULL, s varchar(5) NOT NULL, f real, d numeric(5,2), "
                    "PRIMARY KEY (topic, kafka_partition, kafka_offset)); SELECT 1")
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "n", "type": "long"}, {"name": "s", "type": ["null", "string"]},
        {"name": "f", "type": "double"},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
                               "scale": 2}}]}
    options = TypedOptions(valueFormat="avro",
                           registry=RegistrySettings("http://127.0.0.1:9"))  # never asked
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    value = {"n": 2**40, "s": "longer than five", "f": 1e300,
             "d": __import__("decimal").Decimal("12345678.91")}
    records = [("t", 0, 0, None, avro_record(7, schema, value)),
               ("t", 0, 1, None, avro_record(7, schema, {**value, "s": None}))]
    part = Stager(postgres.dsn, pg_schema, "t", options, "test", 1,
                  schemas=((7, (json.dumps(schema),)),)).stage(0, records)
    commit(postgres, pg_schema, options, [part])
    assert query(postgres, "SELECT column_name, format_type(atttypid, atttypmod), attnotnull "
                           "FROM information_schema.columns JOIN pg_attribute ON attrelid = "
                           f"'\"{pg_schema}\".t'::regclass AND attname = column_name WHERE "
                           f"table_schema = '{pg_schema}' AND table_name = 't' AND column_name "
                           "IN ('n', 's', 'f', 'd') ORDER BY column_name") == [
        ("d", "numeric(10,2)", False), ("f", "double precision", False),
        ("n", "bigint", True), ("s", "text", False)]
    assert query(postgres, f'SELECT n, s, f, d::text FROM "{pg_schema}".t ORDER BY '
                           "kafka_offset") == [(2**40, "longer than five", 1e300, "12345678.91"),
                                               (2**40, None, 1e300, "12345678.91")]


def test_a_change_no_alter_can_apply_stops_naming_field_types_and_offset(postgres, pg_schema):
    from kafka_direct.app.typed.schema_registry import RegistrySettings

    query(postgres, f'CREATE TABLE "{pg_schema}".t (topic text NOT NULL, kafka_partition '
                    "integer NOT NULL, kafka_offset bigint NOT NULL, n integer, PRIMARY KEY "
                    f'(topic, kafka_partition, kafka_offset)); CREATE VIEW "{pg_schema}".v AS '
                    f'SELECT n FROM "{pg_schema}".t; SELECT 1')
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    options = TypedOptions(valueFormat="avro", registry=RegistrySettings("http://127.0.0.1:9"))
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    part = Stager(postgres.dsn, pg_schema, "t", options, "test", 1,
                  schemas=((8, (json.dumps(schema),)),)).stage(
        0, [("t", 0, 41, None, avro_record(8, schema, {"n": 2**40}))])
    with pytest.raises(SchemaChangeError) as caught:
        commit(postgres, pg_schema, options, [part])
    error = caught.value
    assert (error.field, error.columnType, error.newType, error.offset) == (
        "n", "integer", "bigint", 41)
    assert "offset 41" in str(error) and "view" in str(error)
    assert query(postgres, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                           f"attrelid = '\"{pg_schema}\".t'::regclass AND attname = 'n'") == [
        ("integer",)]
