"""The kafka-direct-postgres sink's options: every bad one refused up front, named with its fix."""

import pickle

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.link.tables import StoreRef
from kafka_direct.sql.sink.options import parse_options

FIELDS = ["id", "name", "total"]
SECRET = "s3cr3t-Pa55"


def parse(overwrite=False, fields=FIELDS, **options):
    return parse_options({"table": "events", **options}, fields, overwrite)


def test_defaults():
    options = parse()
    assert options.table == "events" and options.schema == "public"
    assert options.columns == tuple(FIELDS)
    assert options.mode == "append" and options.keyColumns == ()
    assert options.stagingSchema == "public" and options.createTable is False
    assert options.database.dsn == "" and options.database.password is None
    assert options.link is None and options.statementTimeoutMs is None


def test_option_names_are_case_insensitive_and_spark_lowercases_them():
    options = parse_options({"TABLE": "t", "keycolumns": "id", "Mode": "UPSERT",
                             "createtable": "TRUE", "stagingschema": "stage"}, FIELDS, False)
    assert options.mode == "update" and options.keyColumns == ("id",)
    assert options.createTable is True and options.stagingSchema == "stage"


def test_overwrite_defaults_to_complete_and_columns_map_in_order():
    options = parse(overwrite=True, columns=" a, b ,c")
    assert options.mode == "complete" and options.columns == ("a", "b", "c")


@pytest.mark.parametrize(("options", "fields", "overwrite", "words", "setting"), [
    ({"table": None}, FIELDS, False, "needs option table", "table"),
    ({"table": "  "}, FIELDS, False, "needs option table", "table"),
    ({"table": "analytics.events"}, FIELDS, False, "schema='analytics'", "table"),
    ({"mode": "merge"}, FIELDS, False, "mode 'merge' is unknown", "mode"),
    ({"mode": "update"}, FIELDS, False, "give option keyColumns", "keyColumns"),
    ({"mode": "update", "keyColumns": "id,nope"}, FIELDS, False, "['nope'] are not among",
     "keyColumns"),
    ({"mode": "update", "keyColumns": "id,id"}, FIELDS, False, "twice", "keyColumns"),
    ({"keyColumns": "id"}, FIELDS, False, "are for mode 'update'", "keyColumns"),
    ({"mode": "append"}, FIELDS, True, "would add the whole result again", "mode"),
    ({"mode": "complete"}, FIELDS, False, "needs outputMode('complete')", "mode"),
    ({"columns": "a,b"}, FIELDS, False, "2 target columns", "columns"),
    ({"columns": "a,a,b"}, FIELDS, False, "more than once", "columns"),
    ({"createTable": "maybe"}, FIELDS, False, "true or false", "createtable"),
    ({"statementTimeoutMs": "soon"}, FIELDS, False, "whole number", "statementTimeoutMs"),
    ({"statementTimeoutMs": "0"}, FIELDS, False, "positive", "statementTimeoutMs"),
    ({"staleStagingMinutes": "-5"}, FIELDS, False, "positive", "staleStagingMinutes"),
    ({"keyColumn": "id"}, FIELDS, False, "unknown options ['keycolumn']", "keycolumn"),
    ({"table": "x" * 64}, FIELDS, False, "63-byte", "table"),
    ({"schema": "a\x00b"}, FIELDS, False, "NUL", "schema"),
    ({}, [], False, "at least one column", "columns"),
    ({"offsetStore.dsn": "host=x"}, FIELDS, False, "need offsetStore.name",
     None),
])
def test_bad_options_are_refused_with_their_fix(options, fields, overwrite, words, setting):
    given = {"table": "events", **options}
    given = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(ConfigurationError) as raised:
        parse_options(given, fields, overwrite)
    assert words in str(raised.value)
    if setting is not None:
        assert raised.value.setting == setting


def test_a_dotted_table_with_an_explicit_schema_is_a_name():
    assert parse(table="a.b", schema="s").table == "a.b"


def test_the_dsn_and_password_never_show():
    options = parse(dsn=f"host=db user=app password={SECRET}", password=SECRET,
                    **{"offsetStore.name": "orders"})
    for shown in (repr(options), str(options), repr(options.database), repr(options.link)):
        assert SECRET not in shown and "host=db" not in shown
    assert options.database.password == SECRET


def test_a_bad_option_with_a_secret_elsewhere_does_not_quote_it():
    with pytest.raises(ConfigurationError) as raised:
        parse(dsn=f"password={SECRET}", password=SECRET, mode="bogus")
    assert SECRET not in str(raised.value)


def test_the_sink_keeps_its_offsets_in_its_own_database():
    options = parse(dsn="host=db", password=SECRET,
                    **{"offsetStore.name": "orders", "offsetStore.schema": "offs",
                       "offsetStore.dsn": "host=elsewhere"})
    assert options.link == StoreRef("host=db", "orders", "offs")
    assert options.link.password == SECRET


def test_options_pickle_for_the_tasks():
    options = parse(dsn="host=db", password=SECRET, mode="update", keyColumns="id")
    assert pickle.loads(pickle.dumps(options)) == options


def test_the_source_side_link_needs_its_dsn():
    with pytest.raises(ConfigurationError, match="needs offsetStore.dsn"):
        SourceLink.from_options({"offsetStore.name": "orders"})
    assert SourceLink.from_options({"kafka.bootstrap.servers": "b"}) is None
    link = SourceLink.from_options({"offsetstore.name": "orders", "offsetstore.dsn": "",
                                    "offsetstore.password": SECRET})
    assert link == SourceLink("", "orders", "public") and link.password == SECRET
    assert SECRET not in repr(link)


@pytest.mark.parametrize("name", ["", "   ", "x" * 201])
def test_a_store_name_must_be_a_name(name):
    with pytest.raises(ConfigurationError, match="offsetStore.name"):
        SourceLink("", name)
