"""`kafka-direct ingest --envelope debezium` on both APIs: Debezium-shaped change events
(JSON with and without schemas.enable, Avro from a Schema Registry) produced into Apache
Kafka, and the PostgreSQL table checked after the job: upserts, deletes, their tombstones, a
primary key change, an unavailable TOAST value, semantic types and a truncate."""

import decimal

import pytest

from kafka_direct.app.typed.envelope import PLACEHOLDER
from tests.app.test_ingest_typed import query
from tests.app.typed.debezium_events import (
    AVRO_KEY,
    AVRO_VALUE,
    TYPES,
    avro_event,
    json_event,
    sample,
)

CASES = [("dstream", "json-schemas"), ("structured", "json-schemas"), ("dstream", "avro"),
         ("structured", "avro"), ("structured", "json-plain")]


def ingest(job_host, kafka, postgres, topic, schema, api, fmt, *extra):
    kind = "avro" if fmt == "avro" else "json"
    done = job_host.run(
        ["ingest", "--bootstrap-servers", kafka.bootstrap_servers, "--dsn", postgres.dsn,
         "--topic", topic, "--schema", schema, "--table", "mirror", "--batch-interval", "0.5",
         "--stop-after-idle", "1", "--api", api, "--group", f"g-{topic}",
         "--envelope", "debezium", "--value-format", kind, "--key-format", kind,
         "--key-columns", "id", *extra])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize(("api", "fmt"), CASES)
def test_debezium_events_mirror_the_source_table(kafka, kafka_topic, postgres, pg_schema,
                                                 schema_registry, api, fmt, job_host):
    topic = kafka_topic(partitions=2)
    extra: list[str] = []
    if fmt == "avro":
        ids = (schema_registry.register(f"{topic}-key", AVRO_KEY),
               schema_registry.register(f"{topic}-value", AVRO_VALUE))
        extra = ["--schema-registry", schema_registry.url]

        def event(op, key, before=None, after=None):
            return avro_event(op, key, before, after, ids)
    else:
        def event(op, key, before=None, after=None):
            return json_event(op, key, before, after, schemas=fmt == "json-schemas")

    def produce(partition, events):
        pairs = [event(*e) if e[0] != "tombstone" else (event("d", e[1])[0], None)
                 for e in events]
        kafka.produce(topic, [v for _, v in pairs], partition=partition,
                      keys=[k for k, _ in pairs])

    big = "b" * 20_000
    produce(0, [("r", 2, None, sample(2)), ("r", 4, None, sample(4)),
                ("u", 2, None, sample(2, name="two")), ("c", 6, None, sample(6)),
                ("u", 6, None, sample(6, name=PLACEHOLDER, amount=decimal.Decimal("7.25"))),
                ("d", 4, sample(4)), ("tombstone", 4),
                ("c", 8, None, sample(8, name=big))])  # key 3 became key 8
    produce(1, [("r", 1, None, sample(1)), ("r", 3, None, sample(3)),
                ("u", 1, None, sample(1, amount=decimal.Decimal("5.55"))),
                ("d", 3, sample(3)), ("tombstone", 3), ("c", 5, None, sample(5))])
    out = ingest(job_host, kafka, postgres, topic, pg_schema, api, fmt, *extra)
    assert "stored offsets == log end" in out
    assert query(postgres, f'SELECT id, name FROM "{pg_schema}".mirror ORDER BY id') == [
        (1, "n1"), (2, "two"), (5, "n5"), (6, "n6"), (8, big)]
    if fmt != "json-plain":
        types = dict(query(postgres, "SELECT column_name, data_type FROM "
                                     "information_schema.columns WHERE table_schema = "
                                     f"'{pg_schema}' AND table_name = 'mirror'"))
        assert {name: types[name] for name in TYPES} == TYPES
        assert query(postgres, f'SELECT amount, born::text, doc FROM "{pg_schema}".mirror '
                               "WHERE id IN (1, 6) ORDER BY id") == [
            (decimal.Decimal("5.55"), "1990-01-02", {"a": [1, 2.5], "i": 1}),
            (decimal.Decimal("7.25"), "1990-01-07", {"a": [1, 2.5], "i": 6})]
    if fmt == "json-schemas":  # a truncate, applied when asked to
        produce(0, [("c", 10, None, sample(10)), ("t", None), ("c", 12, None, sample(12))])
        ingest(job_host, kafka, postgres, topic, pg_schema, api, fmt, "--on-truncate",
               "truncate")
        assert query(postgres, f'SELECT id FROM "{pg_schema}".mirror ORDER BY id') == [(12,)]
