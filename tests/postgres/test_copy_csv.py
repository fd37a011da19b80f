"""Arrow record batches as COPY CSV: every value PostgreSQL gets back is the value sent."""

import datetime
import decimal
import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_direct.postgres.copy_csv import CsvStream, _hex_binary, bytea_columns_of, encode_batch

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=30)


@pytest.fixture(scope="module")
def pg(postgres):
    connection = postgres.connect()
    yield connection
    connection.close()


def round_trip(pg, columns, batches):
    with pg.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE t ({columns})")
        try:
            stream = CsvStream(batches, bytea_columns=bytea_columns_of(cursor, "t"))
            cursor.copy_expert("COPY t FROM STDIN WITH (FORMAT csv)", stream, size=64)
            cursor.execute("SELECT * FROM t")
            return stream.rows, cursor.fetchall()
        finally:
            pg.rollback()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(st.none() | TEXT, st.none() | st.binary(max_size=20),
                               st.none() | st.integers(-2**63, 2**63 - 1)), max_size=12),
       split=st.integers(0, 12))
def test_text_bytes_and_numbers_survive(pg, rows, split):
    def batch(part):
        texts, blobs, numbers = (list(c) for c in zip(*part, strict=True)) if part else (
            [], [], [])
        return pa.record_batch({"s": pa.array(texts, pa.string()),
                                "b": pa.array(blobs, pa.binary()),
                                "n": pa.array(numbers, pa.int64())})

    count, back = round_trip(pg, "s text, b bytea, n bigint",
                             [batch(rows[:split]), batch(rows[split:])])
    assert count == len(rows)
    assert [(s, None if b is None else bytes(b), n) for s, b, n in back] == rows


def test_floats_decimals_dates_timestamps_and_nested_values(pg):
    instant = datetime.datetime(2024, 1, 2, 3, 4, 5, 6)
    batch = pa.record_batch({
        "f": pa.array([math.nan, math.inf, -0.0, 1e-300]),
        "d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-3.25"), None],
                      pa.decimal128(10, 2)),
        "day": pa.array([datetime.date(2024, 2, 29), None, None, None]),
        "at": pa.array([instant, None, None, None],
                       pa.timestamp("us", tz="America/New_York")),
        "local": pa.array([instant, None, None, None], pa.timestamp("us")),
        "list": pa.array([[1, None], None, [], [3]]),
        "map": pa.array([[("k", 1.5)], None, [], [("z", math.nan)]],
                        pa.map_(pa.string(), pa.float64())),
        "obj": pa.array([{"x": 1, "y": b"\x01"}, None, {"x": None, "y": None},
                         {"x": 2, "y": b""}]),
        "span": pa.array([datetime.timedelta(days=1, microseconds=5), None, None, None]),
    })
    _, back = round_trip(pg, "f float8, d numeric(10,2), day date, at timestamptz, "
                         "local timestamp, list jsonb, map jsonb, obj jsonb, span interval",
                         [batch])
    first = back[0]
    assert math.isnan(first[0]) and back[1][0] == math.inf and str(back[2][0]) == "-0.0"
    assert first[1] == decimal.Decimal("1.50") and first[2] == datetime.date(2024, 2, 29)
    assert first[3] == instant.replace(tzinfo=datetime.UTC)  # Arrow's naive input is UTC
    assert first[4] == instant
    assert [r[5] for r in back] == [[1, None], None, [], [3]]
    assert [r[6] for r in back] == [{"k": 1.5}, None, {}, {"z": "NaN"}]
    assert back[0][7] == {"x": 1, "y": "\\x01"} and back[2][7] == {"x": None, "y": None}
    assert first[8] == datetime.timedelta(days=1, microseconds=5)


def test_an_empty_string_and_null_stay_apart():
    batch = pa.record_batch({"s": pa.array(["", None], pa.string())})
    assert encode_batch(batch) == b'""\n\n'


PRINTABLE = st.binary(max_size=12).map(lambda b: bytes(32 + x % 95 for x in b))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(values=st.lists(st.none() | PRINTABLE | st.binary(max_size=6), max_size=10),
       offset=st.integers(0, 10), large=st.booleans())
def test_bytes_survive_whether_sent_as_text_or_hex(pg, values, offset, large):
    # Printable ASCII columns go as their own text (bytea's escape input), others as hex;
    # a backslash, a "\x" prefix, quotes, commas, empty values and slices included.
    array = pa.array(values, pa.large_binary() if large else pa.binary())
    array = array.slice(min(offset, len(values)))
    _, back = round_trip(pg, "b bytea", [pa.record_batch({"b": array})])
    assert [None if b is None else bytes(b) for (b,) in back] == array.to_pylist()


def test_a_printable_bytes_column_is_sent_as_its_own_text():
    # Half the bytes of hex for the writer and PostgreSQL, and no hex pass.
    batch = pa.record_batch({"b": pa.array([b'a,b "c"', b"", None, b"~ "], pa.binary())})
    assert encode_batch(batch, bytea_columns={0}) == b'"a,b ""c"""\n""\n\n"~ "\n'
    for odd in (b"back\\slash", b"\\x41", b"tab\t", b"del\x7f", b"\xc3\xa9"):
        mixed = pa.record_batch({"b": pa.array([b"plain", odd], pa.binary())})
        assert encode_batch(mixed, bytea_columns={0}) == \
            f'"\\x{b"plain".hex()}"\n"\\x{odd.hex()}"\n'.encode()


def test_a_bytes_column_whose_target_is_not_bytea_is_hex_whatever_its_neighbours(pg):
    # Only bytea's input reads a printable text back as those bytes: into a text or jsonb
    # column the form would change what is stored, and a value's form would depend on the
    # other values of its batch (one non-ASCII value turned all of them hex).
    alone = pa.record_batch({"v": pa.array([b'{"a":1}'], pa.binary())})
    mixed = pa.record_batch({"v": pa.array([b'{"a":3}', '{"a":"\u00e9"}'.encode()],
                                           pa.binary())})
    assert encode_batch(alone) == b'"\\x' + b'{"a":1}'.hex().encode() + b'"\n'
    _, back = round_trip(pg, "v text", [alone, mixed])
    assert [v for (v,) in back] == ["\\x" + b'{"a":1}'.hex(), "\\x" + b'{"a":3}'.hex(),
                                    "\\x" + '{"a":"\u00e9"}'.encode().hex()]


def test_the_bytea_columns_of_a_target_are_found_in_its_catalog(pg):
    with pg.cursor() as cursor:
        try:
            cursor.execute("CREATE DOMAIN pg_temp.blob AS bytea")
            cursor.execute('CREATE TEMP TABLE "odd ""name""" (a text, b bytea, c jsonb, '
                           "d pg_temp.blob, e int)")
            table = '"odd ""name"""'
            assert bytea_columns_of(cursor, table) == {1, 3}
            assert bytea_columns_of(cursor, table, ("d", "a", "b")) == {0, 2}
        finally:
            pg.rollback()


@settings(deadline=None)  # correctness only: a busy machine's pause is no failure
@given(st.lists(st.none() | st.binary(max_size=8), max_size=10), st.integers(0, 10))
def test_hex_matches_python_on_slices(values, offset):
    array = pa.array(values, pa.binary()).slice(min(offset, len(values)))
    expected = [None if v is None else "\\x" + v.hex() for v in array.to_pylist()]
    assert _hex_binary(array).to_pylist() == expected
    assert _hex_binary(array.cast(pa.large_binary())).to_pylist() == expected


def test_copy_batches_raises_what_the_batches_raised_not_the_drivers_copy_error(postgres,
                                                                               pg_schema):
    import psycopg2
    from psycopg2 import sql

    from kafka_direct.postgres.copy_csv import copy_batches

    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".t (n bigint, v bytea)')
    connection.close()
    table = sql.Identifier(pg_schema, "t")
    batch = pa.RecordBatch.from_pydict({"n": [1, 2], "v": [b"a", None]})

    def failing():
        yield batch
        raise KeyError("the reader's own error")

    connection = postgres.connect()
    with pytest.raises(KeyError, match="the reader's own error"), connection, \
            connection.cursor() as cursor:
        copy_batches(cursor, table, ("n", "v"), failing())
    with connection, connection.cursor() as cursor:
        assert copy_batches(cursor, table, ("n", "v"), [batch, batch]) == 4
        cursor.execute(f'SELECT n, v FROM "{pg_schema}".t ORDER BY n')
        assert [(n, None if v is None else bytes(v)) for n, v in cursor.fetchall()] == [
            (1, b"a"), (1, b"a"), (2, None), (2, None)]
    with pytest.raises(psycopg2.Error), connection, connection.cursor() as cursor:
        copy_batches(cursor, table, ("n", "missing"), [batch])  # the database's own error
    connection.close()


def test_copy_batches_reads_between_statements_so_a_statement_timeout_bounds_each_copy(
        postgres, pg_schema):
    # The batches come from a Kafka read that may wait; a statement_timeout (the sinks'
    # statementTimeoutMs) must bound each COPY, not the read of a whole range.
    import time

    from psycopg2 import sql

    from kafka_direct.postgres.copy_csv import copy_batches

    def slow_batches():
        for first in (0, 2, 4):
            time.sleep(0.4)  # a fetch
            yield pa.RecordBatch.from_pydict({"n": [first, first + 1]})

    connection = postgres.connect()
    with connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".slow (n bigint)')
        cursor.execute("SET LOCAL statement_timeout = 300")
        assert copy_batches(cursor, sql.Identifier(pg_schema, "slow"), ("n",),
                            slow_batches(), chunk_rows=2) == 6
        cursor.execute(f'SELECT count(*) FROM "{pg_schema}".slow')
        assert cursor.fetchone() == (6,)
    connection.close()


def test_copy_batches_leaves_rows_a_trigger_skips_to_the_trigger(postgres, pg_schema):
    from psycopg2 import sql

    from kafka_direct.postgres.copy_csv import copy_batches

    connection = postgres.connect()
    with connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".kept (n bigint)')
        cursor.execute(f'CREATE FUNCTION "{pg_schema}".odd_only() RETURNS trigger '
                       "LANGUAGE plpgsql AS $$ BEGIN IF NEW.n % 2 = 0 THEN RETURN NULL; "
                       "END IF; RETURN NEW; END $$")
        cursor.execute(f'CREATE TRIGGER odd BEFORE INSERT ON "{pg_schema}".kept FOR EACH ROW '
                       f'EXECUTE FUNCTION "{pg_schema}".odd_only()')
        batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3, 4]})
        assert copy_batches(cursor, sql.Identifier(pg_schema, "kept"), ("n",), [batch]) == 4
        cursor.execute(f'SELECT n FROM "{pg_schema}".kept ORDER BY n')
        assert cursor.fetchall() == [(1,), (3,)]
    connection.close()
