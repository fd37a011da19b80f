"""The ingest command's closing check counts a table's rows and distinct records.

It runs at the end of every run over the whole table, so it must count right (a record
written twice is a duplicate, whatever its partition or topic) on a real PostgreSQL.
"""

import uuid

from kafka_direct.app.ingest_table import check_table
from kafka_direct.topic_partition import TopicPartition


def _table(postgres, rows):
    name = f"check_{uuid.uuid4().hex[:12]}"
    connection = postgres.connect()
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {name} (topic text, kafka_partition int, "
                           "kafka_offset bigint, value bytea)")
            cursor.executemany(f"INSERT INTO {name} VALUES (%s, %s, %s, 'v')", rows)
    finally:
        connection.close()
    return name


def test_the_check_counts_each_record_written_twice_as_a_duplicate(postgres):
    rows = [("a", p, o) for p in range(3) for o in range(50)]
    # The same offset in another partition or topic is another record, not a duplicate.
    rows += [("b", 0, o) for o in range(20)]
    duplicated = [("a", 1, 7), ("a", 1, 7), ("b", 0, 19), ("a", 2, 0)]
    name = _table(postgres, rows + duplicated)
    end = {TopicPartition("a", 0): 50}
    check = check_table(postgres.dsn, "public", name, "group", end, stored=end)
    assert (check.rows, check.distinctRecords, check.duplicates) == (174, 170, 4)
    assert check.caughtUp


def test_the_check_of_an_empty_table(postgres):
    name = _table(postgres, [])
    check = check_table(postgres.dsn, "public", name, "group", {}, stored={})
    assert (check.rows, check.duplicates) == (0, 0)


def test_the_check_of_a_table_keyed_by_its_records_counts_its_rows(postgres):
    from kafka_direct.app.ingest_table import ensure_table

    name = f"check_{uuid.uuid4().hex[:12]}"
    ensure_table(postgres.dsn, "public", name)
    connection = postgres.connect()
    try:
        with connection, connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {name} (topic, kafka_partition, kafka_offset, value) "
                "VALUES (%s, %s, %s, 'v')", [("a", p, o) for p in range(2) for o in range(9)])
    finally:
        connection.close()
    check = check_table(postgres.dsn, "public", name, "group", {}, stored={})
    assert (check.rows, check.duplicates) == (18, 0)
