"""`kafka-direct ingest` with primitive keys as columns, against the real broker and
PostgreSQL: a topic keyed by ``str(id)`` upserts and deletes on both APIs, and a key the
key format cannot supply is refused before anything starts."""

import json

import psycopg2
import pytest

from kafka_direct.errors import ConfigurationError
from tests.app.test_ingest_typed import APIS, columns, ingest, ok, query


@pytest.mark.parametrize("api", APIS)
def test_a_str_id_keyed_json_topic_upserts_and_deletes_by_its_key(kafka, kafka_topic, postgres,
                                                                 pg_schema, api, job_host):
    topic = kafka_topic(partitions=2)
    expected = {}
    for partition in (0, 1):
        keys, values = [], []
        for step in range(12):
            account = partition * 10 + step % 4  # each id three times: the latest wins
            keys.append(str(account).encode())
            if step in (5, 11) and account % 2:  # some ids end deleted, one comes back
                values.append(None)
                expected.pop(str(account), None)
                continue
            values.append(json.dumps({"id": account, "name": f"n{account}-{step}"}).encode())
            expected[str(account)] = f"n{account}-{step}"
        kafka.produce(topic, values, partition=partition, keys=keys)
    args = ("--value-format", "json", "--key-columns", "id", "--on-tombstone", "delete")
    # The command: the raw key cannot supply id, refused before anything starts.
    refused = ingest(job_host, kafka, postgres, topic, pg_schema, api, *args)
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert "--key-format string" in refused.stdout + refused.stderr
    assert "ConfigurationError" in refused.stdout + refused.stderr
    assert query(postgres, "SELECT count(*) FROM information_schema.tables WHERE "
                           f"table_schema = '{pg_schema}' AND table_name = 'typed'") == [(0,)]
    out = ok(ingest(job_host, kafka, postgres, topic, pg_schema, api, *args,
                    "--key-format", "string"))
    assert "stored offsets == log end" in out
    rows = query(postgres, f'SELECT id, name FROM "{pg_schema}".typed')
    assert dict(rows) == expected and len(rows) == len(expected)
    assert columns(postgres, pg_schema, "typed")["id"] == "text"
    assert query(postgres, f"""SELECT a.attname FROM pg_index i JOIN pg_attribute a
                 ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                 WHERE i.indrelid = '"{pg_schema}".typed'::regclass AND i.indisprimary""") == [
        ("id",)]


def test_a_key_column_an_existing_table_cannot_take_is_refused_at_start(postgres, pg_schema):
    from kafka_direct.app.typed.options import TypedOptions
    from kafka_direct.app.typed.table import prepare_tables

    with psycopg2.connect(postgres.dsn) as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".accounts (topic text, kafka_partition '
                       "int, kafka_offset bigint, id uuid PRIMARY KEY)")
    connection.close()
    longs = TypedOptions(keyFormat="long", valueFormat="json", keyColumns=("id",))
    with pytest.raises(ConfigurationError) as caught:
        prepare_tables(postgres.dsn, pg_schema, "accounts", longs)
    assert (f"--key-format long: column id of {pg_schema}.accounts has type uuid, which a "
            "long key cannot be read as") in str(caught.value)
    # A string key is read as the column's type: the table decides.
    prepare_tables(postgres.dsn, pg_schema, "accounts",
                   TypedOptions(keyFormat="string", valueFormat="json", keyColumns=("id",)))
    # A new table gets the key's column and its primary key at start.
    prepare_tables(postgres.dsn, pg_schema, "fresh", TypedOptions(
        keyFormat="string", valueFormat="json", keyColumns=("id",), columns=(("id", "bigint"),)))
    assert columns(postgres, pg_schema, "fresh")["id"] == "bigint"
