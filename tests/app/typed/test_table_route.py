"""``--table`` as a per-topic template: names as Kafka Connect's JDBC sinks make them, and
two topics onto one table refused (at start for --topic; a pattern's at its batch)."""

import argparse

import pytest

from kafka_direct.app.ingest_arguments import add_arguments, settings_from_args
from kafka_direct.app.ingest_options import IngestOptions
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.routing import TableRoute
from kafka_direct.errors import ConfigurationError


def test_a_plain_name_is_one_table_for_every_topic():
    route = TableRoute("events")
    assert not route.perTopic
    assert route.tables(["a.b", "a_b", "c"]) == {"a.b": "events", "a_b": "events", "c": "events"}


@pytest.mark.parametrize(("template", "topic", "table"), [
    ("{topic}", "orders", "orders"),
    ("{topic}", "server1.public.Orders-EU", "server1_public_Orders-EU"),
    ("kafka_{topic}", "orders", "kafka_orders"),
    ("kafka_${topic}", "orders.v2", "kafka_orders_v2"),  # Kafka Connect's spelling
])
def test_a_template_names_each_topics_table_dots_as_underscores(template, topic, table):
    route = TableRoute(template)
    assert route.perTopic and route.table(topic) == table


def test_two_topics_onto_one_table_are_refused_naming_both():
    with pytest.raises(ConfigurationError) as caught:
        TableRoute("{topic}").tables(["a.b", "a_b", "c"])
    assert "'a.b'" in str(caught.value) and "'a_b'" in str(caught.value)
    assert "'a_b'" in str(caught.value) and "without {topic}" in str(caught.value)


@pytest.mark.parametrize("template", ["{table}", "t_{topic}_{partition}", "{topic", ""])
def test_other_placeholders_and_empty_templates_are_refused(template):
    with pytest.raises(ConfigurationError, match="--table"):
        TableRoute(template)


def test_a_name_past_postgresqls_63_bytes_is_refused_not_truncated():
    route = TableRoute("archive_of_the_topic_{topic}")
    assert route.table("x" * 35) == "archive_of_the_topic_" + "x" * 35
    with pytest.raises(ConfigurationError, match="longer than PostgreSQL's 63-byte"):
        route.table("x" * 50)


def test_dead_letter_tables_follow_each_topics_table():
    route = TableRoute("{topic}")
    dead = TypedOptions(valueFormat="json", onBadRecord="dead-letter")
    assert route.dead_letter_table(dead, "a.b") == "a_b_dead_letter"
    assert route.dead_letter_table(TypedOptions(valueFormat="json"), "a.b") is None
    given = TypedOptions(valueFormat="json", onBadRecord="dead-letter",
                         deadLetterTable="dlq_{topic}")
    assert route.dead_letter_table(given, "a.b") == "dlq_a_b"
    shared = TypedOptions(valueFormat="json", onBadRecord="dead-letter", deadLetterTable="dlq")
    assert route.dead_letter_table(shared, "a.b") == "dlq"


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--bootstrap-servers", "b:9092", "--dsn", "dbname=x", *argv])


def test_topics_that_share_a_table_are_refused_before_anything_starts():
    with pytest.raises(ConfigurationError, match="onto one table 'a_b'"):
        settings_from_args(_args("--topic", "a.b", "--topic", "a_b", "--table", "{topic}"), {})
    settings = settings_from_args(_args("--topic", "a.b", "--topic", "c", "--table", "{topic}"),
                                  {})
    assert settings.options.table == "{topic}"


def test_a_table_per_topic_needs_the_transactional_sink():
    with pytest.raises(ConfigurationError, match="--sink idempotent"):
        IngestOptions(topics=("a", "b"), table="{topic}", sink="idempotent")


def test_a_stop_names_the_dead_letter_table_of_the_stopping_records_topic():
    # A table per topic has a dead-letter table per topic: the stop's block names the one of
    # the record that stopped the job, never the template with its placeholder.
    from kafka_direct.app.ingest_command import stop_dead_letters
    from kafka_direct.app.typed.options import TypedOptions
    from kafka_direct.errors import BadRecordError, SinkWriteError

    records = TypedOptions(valueFormat="json", onBadRecord="dead-letter")
    bad = BadRecordError("bad", topic="shop.orders", partition=0, offset=3, cause="x")
    assert stop_dead_letters(records, "m_{topic}", bad) == "m_shop_orders_dead_letter"
    assert stop_dead_letters(records, "orders", bad) == "orders_dead_letter"
    assert stop_dead_letters(records, "m_{topic}", SinkWriteError("down")) is None
    assert stop_dead_letters(TypedOptions(valueFormat="json"), "m_{topic}", bad) is None
    assert stop_dead_letters(None, "orders", bad) is None
