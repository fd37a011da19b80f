"""Review of issue 38 items 4 and 5 (a table per topic, record timestamp and header columns,
schema evolution, Protobuf from a Schema Registry): each test states a defect found by
experiment and fails on the code as reviewed.

Findings:

1. A Protobuf ``google.protobuf.Timestamp`` outside datetime's range (year 10000, or before
   year 1) raises a bare OverflowError out of ``RowBuilder.build``: the field readers run
   outside the decoder's ``try``, so the record is neither a dead letter nor a
   BadRecordError; one such record stops the job with an untyped error, even with
   ``--on-bad-record dead-letter``, and stops it again at every restart.
2. A ``google.protobuf.Any`` field holding a message of the schema's own file raises a
   bare TypeError: ``json_format.MessageToDict`` resolves the Any's type URL in protobuf's
   default pool, not in the schema's private pool. Every record that sets such a field
   stops the job (with dead letters on, too); an Any of an unknown type does the same.
3. Schemas that import the files confluent-kafka's serializer treats as built in
   (``google/type/*`` other than date, ``google/protobuf/descriptor.proto`` for custom
   options, ``confluent/type/decimal.proto`` for decimals) never resolve in the job's pool
   (it preloads only a few well-known files; the serializer registers no references for
   these), so every record of such a schema is a bad record.
4. A Kafka record timestamp past year 9999 (a producer may set any long) raises a bare
   OverflowError from ``--timestamp-column``: not a bad record, an untyped stop.
5. A header ``Infinity`` or ``sNaN`` for a ``numeric(p,s)`` header column passes the
   builder's checks (only floats are checked for infinity), and PostgreSQL then refuses
   the batch's commit: the whole batch fails instead of one dead letter.
6. With ``--table '{topic}'`` and dead letters, topic ``a``'s dead-letter table
   ``a_dead_letter`` is topic ``a_dead_letter``'s target: nothing refuses it, and one
   topic's rows and another's dead letters share a table.
7. A per-topic table of exactly 63 bytes has itself as its dead-letter table
   (``f"{table}_dead_letter"[:63]``): its dead letters are written into the data table.
8. A NOT NULL column whose field left the schema is kept NOT NULL when no record of the
   batch still has the field (``_nullable`` only looks at the batch's columns), so the
   commit fails on a NOT NULL violation; the same batch with one old record in it drops
   NOT NULL and succeeds.
"""

import json

import pytest
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.routing import TableRoute
from kafka_direct.app.typed.rows import BAD, ROW, RowBuilder
from kafka_direct.app.typed.schema_registry import RegistrySettings, registry_client
from kafka_direct.app.typed.stage import Stager
from kafka_direct.app.typed.table import prepare_tables
from kafka_direct.errors import ConfigurationError
from tests.app.typed.protobuf_messages import F, _field, classes, serializer
from tests.app.typed.test_typed_commit import avro_record
from tests.app.typed.test_typed_commit import commit as _commit
from tests.app.typed.test_typed_commit import query as _query


def _message_class(package, dependencies, add, serialized=()):
    """A message ``<package>.M`` (id int64, then what ``add`` adds) and its class."""
    proto = descriptor_pb2.FileDescriptorProto(name=f"{package}/m.proto", package=package,
                                               syntax="proto3")
    proto.dependency.extend(dependencies)
    message = proto.message_type.add(name="M")
    _field(message, "id", 1, F.TYPE_INT64)
    add(message, proto)
    pool = descriptor_pool.DescriptorPool()
    for file in serialized:
        pool.AddSerializedFile(file)
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.M"))


def _protobuf_builder(name):
    registry = RegistrySettings(f"mock://review38b-{name}")
    options = TypedOptions(valueFormat="protobuf", registry=registry,
                           onBadRecord="dead-letter")
    return registry, RowBuilder(options, "s.t", None)


# Finding 1 (high: one record stops the job for good, dead letters or not).
@pytest.mark.parametrize("seconds", [253402300800, -62135596801])
def test_review38b_a_protobuf_timestamp_out_of_range_is_a_bad_record(seconds):
    Order, _, _ = classes("review38bts")
    registry, builder = _protobuf_builder(f"ts{seconds}")
    order = Order(id=1)
    order.at.seconds = seconds
    kind, _ = builder.build("t", 0, 1, None, serializer(registry_client(registry), Order,
                                                        "t")(order))
    assert kind == BAD


def _with_any(message, proto):
    _field(message, "anything", 2, F.TYPE_MESSAGE, ".google.protobuf.Any")


# Finding 2 (high: a valid record with an Any stops the job).
def test_review38b_a_protobuf_any_of_the_schemas_own_message_is_a_row():
    M = _message_class("review38bany", ["google/protobuf/any.proto"], _with_any,
                       [any_pb2.DESCRIPTOR.serialized_pb])
    registry, builder = _protobuf_builder("any")
    record = M(id=1)
    record.anything.Pack(M(id=2))
    kind, row = builder.build("t", 0, 1, None,
                              serializer(registry_client(registry), M, "t")(record))
    assert kind == ROW
    assert json.loads(row["anything"])["@type"] == "type.googleapis.com/review38bany.M"


# Finding 2: an Any whose type nobody knows is a bad record, not a TypeError.
def test_review38b_a_protobuf_any_of_an_unknown_type_is_a_bad_record():
    M = _message_class("review38bany2", ["google/protobuf/any.proto"], _with_any,
                       [any_pb2.DESCRIPTOR.serialized_pb])
    registry, builder = _protobuf_builder("any2")
    record = M(id=1)
    record.anything.type_url = "type.googleapis.com/nowhere.X"
    record.anything.value = b"\x08\x01"
    kind, _ = builder.build("t", 0, 1, None,
                            serializer(registry_client(registry), M, "t")(record))
    assert kind == BAD


def _money(message, proto):
    _field(message, "price", 2, F.TYPE_MESSAGE, ".google.type.Money")


def _custom_option(message, proto):
    proto.extension.add(name="sensitive", number=50001, type=F.TYPE_BOOL,
                        label=F.LABEL_OPTIONAL, extendee=".google.protobuf.FieldOptions")


def _confluent_decimal(message, proto):
    _field(message, "amount", 2, F.TYPE_MESSAGE, ".confluent.type.Decimal")


def _builtin_files():
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from google.type import money_pb2

    return {"money": (["google/type/money.proto"], _money, money_pb2),
            "options": (["google/protobuf/descriptor.proto"], _custom_option, descriptor_pb2),
            "decimal": (["confluent/type/decimal.proto"], _confluent_decimal, decimal_pb2)}


# Finding 3 (medium: whole schemas unreadable; every record a dead letter or a stop).
@pytest.mark.parametrize("imported", ["money", "options", "decimal"])
def test_review38b_a_protobuf_schema_importing_a_builtin_file_is_read(imported):
    dependencies, add, module = _builtin_files()[imported]
    M = _message_class(f"review38b{imported}", dependencies, add,
                       [module.DESCRIPTOR.serialized_pb])
    registry, builder = _protobuf_builder(imported)
    data = serializer(registry_client(registry), M, "t")(M(id=3))
    built = builder.build("t", 0, 1, None, data)
    assert built[0] == ROW, built
    assert built[1]["id"] == 3


# Finding 4 (medium: a producer's bad timestamp stops the job untyped).
def test_review38b_a_record_timestamp_past_year_9999_is_a_bad_record():
    options = TypedOptions(valueFormat="json", timestampColumn="ts",
                           onBadRecord="dead-letter")
    kind, _ = RowBuilder(options, "s.t", None).build("t", 0, 1, None, b'{"id": 1}',
                                                     timestamp=10**15)
    assert kind == BAD


# Finding 5 (medium: one header fails the whole batch at its commit).
@pytest.mark.parametrize("text", [b"Infinity", b"sNaN"])
def test_review38b_a_numeric_header_postgresql_cannot_hold_is_a_dead_letter(
        postgres, pg_schema, text):
    options = TypedOptions(valueFormat="json", headerColumns=(("amount", "numeric(10,2)"),),
                           onBadRecord="dead-letter")
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    records = [("t", 0, 0, None, b'{"id": 1}', 0, [("amount", b"1.5")]),
               ("t", 0, 1, None, b'{"id": 2}', 0, [("amount", text)])]
    part = Stager(postgres.dsn, pg_schema, "t", options, "test", 1).stage(0, records)
    _commit(postgres, pg_schema, options, [part])  # today: PostgreSQL refuses the batch
    assert _query(postgres, f'SELECT id, amount::text FROM "{pg_schema}".t') == [(1, "1.50")]
    assert _query(postgres, f'SELECT kafka_offset FROM "{pg_schema}".t_dead_letter') == [(1,)]


# Finding 6 (medium-high: one topic's dead letters and another's rows in one table).
def test_review38b_a_topics_dead_letter_table_is_not_another_topics_table(postgres,
                                                                          pg_schema):
    options = TypedOptions(valueFormat="json", onBadRecord="dead-letter")
    route = TableRoute("{topic}")
    topics = ["a", "a_dead_letter"]
    assert route.dead_letter_table(options, "a") in route.tables(topics).values()
    with pytest.raises(ConfigurationError):  # today: accepted
        prepare_tables(postgres.dsn, pg_schema, "{topic}", options, topics=topics)


# Finding 7 (medium: dead letters written into the data table itself).
def test_review38b_a_63_byte_tables_dead_letters_have_a_table_of_their_own():
    options = TypedOptions(valueFormat="json", onBadRecord="dead-letter")
    route = TableRoute("{topic}")
    topic = "t" * 63
    assert route.table(topic) == topic  # accepted: exactly PostgreSQL's limit
    assert route.dead_letter_table(options, topic) != route.table(topic)


# Finding 8 (low-medium: a removed schema field fails the batch, or not, by chance).
def test_review38b_a_not_null_column_whose_field_left_the_schema_becomes_nullable(
        postgres, pg_schema):
    _query(postgres, f'CREATE TABLE "{pg_schema}".t (topic text NOT NULL, kafka_partition '
                     "integer NOT NULL, kafka_offset bigint NOT NULL, n bigint, s text NOT "
                     "NULL, PRIMARY KEY (topic, kafka_partition, kafka_offset)); SELECT 1")
    v2 = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    options = TypedOptions(valueFormat="avro",
                           registry=RegistrySettings("http://127.0.0.1:9"))  # never asked
    prepare_tables(postgres.dsn, pg_schema, "t", options)
    part = Stager(postgres.dsn, pg_schema, "t", options, "test", 1,
                  schemas=((9, (json.dumps(v2),)),)).stage(
        0, [("t", 0, 0, None, avro_record(9, v2, {"n": 1}))])
    _commit(postgres, pg_schema, options, [part])  # today: NOT NULL violation on s
    assert _query(postgres, f'SELECT n, s FROM "{pg_schema}".t') == [(1, None)]

