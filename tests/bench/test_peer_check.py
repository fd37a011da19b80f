"""The side-by-side benchmark's check of a contender's table against the log.

Its counts of duplicates, gaps, stale and wrong rows are what the benchmark reports for
every contender after a kill -9: a check that cannot see a fault would make any peer look
exactly once.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench" / "peers"))

import common

pytestmark = pytest.mark.services

RECORDS = 400


@pytest.fixture
def connection(postgres, pg_schema):
    connection = postgres.connect(options=f"-c search_path={pg_schema}")
    connection.autocommit = True
    yield connection
    connection.close()


def test_raw_rows_duplicated_missing_or_altered_are_counted(connection):
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE t (topic text, kafka_partition integer, kafka_offset "
                       "bigint, key bytea, value bytea)")
        rows = [("t", p, i, None, common.raw_value(p, i))
                for p in range(common.PARTITIONS) for i in range(RECORDS // 4)]
        cursor.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s)", rows)
        assert common.verify(connection, "t", "raw", RECORDS) == {
            "rows": RECORDS, "duplicates": 0, "gaps": 0, "stale": 0, "wrong": 0}
        cursor.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s)", rows[:7])
        cursor.execute("DELETE FROM t WHERE kafka_partition = 3 AND kafka_offset >= 95")
        cursor.execute("UPDATE t SET value = 'x' WHERE kafka_partition = 1 AND "
                       "kafka_offset = 50")
        assert common.verify(connection, "t", "raw", RECORDS) == {
            "rows": RECORDS + 7 - 5, "duplicates": 7, "gaps": 5, "stale": 0, "wrong": 1}
    assert common.table_rows(connection, "t", "raw", RECORDS) == RECORDS + 2


def test_typed_inserts_and_upserts_are_checked_field_by_field(connection):
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE t (id bigint, name text, amount double precision, "
                       "ts bigint)")
        fields = [common.typed_record(n, RECORDS, False)[1] for n in range(RECORDS)]
        cursor.executemany("INSERT INTO t VALUES (%(id)s, %(name)s, %(amount)s, %(ts)s)",
                           fields)
        assert common.verify(connection, "t", "typed", RECORDS)["duplicates"] == 0
        cursor.execute("UPDATE t SET name = NULL WHERE id = 20")  # NULL is wrong too
        assert common.verify(connection, "t", "typed", RECORDS)["wrong"] == 1
        cursor.execute("UPDATE t SET name = 'customer-000020' WHERE id = 20")
        cursor.execute("INSERT INTO t SELECT * FROM t WHERE id < 3")
        cursor.execute("UPDATE t SET amount = amount + 1 WHERE id = 10")
        cursor.execute("DELETE FROM t WHERE id >= 390")
        assert common.verify(connection, "t", "typed", RECORDS) == {
            "rows": RECORDS + 3 - 10, "duplicates": 3, "gaps": 10, "stale": 0, "wrong": 1}

        # Upserts: every id's newest write must win; an older one is stale.
        cursor.execute("CREATE TABLE u (id bigint PRIMARY KEY, name text, amount double "
                       "precision, ts bigint)")
        newest: dict[int, dict] = {}
        for n in range(RECORDS):
            row = common.typed_record(n, RECORDS, True)[1]
            newest[row["id"]] = row
        assert len(newest) == common.expected_rows("updates", RECORDS)
        cursor.executemany("INSERT INTO u VALUES (%(id)s, %(name)s, %(amount)s, %(ts)s)",
                           list(newest.values()))
        assert common.verify(connection, "u", "updates", RECORDS) == {
            "rows": RECORDS // 4, "duplicates": 0, "gaps": 0, "stale": 0, "wrong": 0}
        assert common.table_rows(connection, "u", "updates", RECORDS) == RECORDS // 4
        older = common.typed_record(5, RECORDS, True)[1]  # id 5's first write
        cursor.execute("UPDATE u SET ts = %(ts)s, amount = %(amount)s WHERE id = %(id)s",
                       older)
        assert common.verify(connection, "u", "updates", RECORDS)["stale"] == 1
        assert common.table_rows(connection, "u", "updates", RECORDS) == RECORDS // 4 - 1
        cursor.execute("UPDATE u SET ts = NULL WHERE id = 6")
        assert common.verify(connection, "u", "updates", RECORDS)["stale"] == 2


def test_a_table_not_made_yet_counts_no_rows(connection):
    assert common.table_rows(connection, "absent", "raw", RECORDS) == 0
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE half (kafka_offset bigint)")  # its columns come later
    assert common.table_rows(connection, "half", "updates", RECORDS) == 0


def test_the_updates_dataset_writes_each_id_four_times_in_one_partition_in_order():
    seen: dict[int, list[tuple[int, int]]] = {}
    for n, (partition, _key, value) in enumerate(common.typed_records("updates", RECORDS)):
        import json

        fields = json.loads(value)
        seen.setdefault(fields["id"], []).append((partition, fields["ts"]))
        assert fields == common.typed_record(n, RECORDS, True)[1]
    assert len(seen) == RECORDS // 4
    for writes in seen.values():
        assert len(writes) == 4 and len({p for p, _ in writes}) == 1
        assert [ts for _, ts in writes] == sorted(ts for _, ts in writes)
