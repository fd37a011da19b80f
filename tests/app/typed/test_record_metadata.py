"""The record's timestamp and headers as columns: options, decoding, and rows."""

import argparse
import datetime
import decimal

import pytest

from kafka_direct.app.typed.metadata import header_value, metadata_values, record_time
from kafka_direct.app.typed.options import TypedOptions, add_arguments, options_from_args
from kafka_direct.app.typed.rows import BAD, ROW, RowBuilder
from kafka_direct.app.typed.table import known_columns
from kafka_direct.errors import ConfigurationError


def options(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from_args(parser.parse_args(list(argv)), {})


def test_the_options_give_typed_columns_known_before_any_record():
    given = options("--value-format", "json", "--timestamp-column", "ts", "--header-columns",
                    "trace,attempt:int,amount:numeric(10,2)")
    assert given.active and given.timestampColumn == "ts"
    assert given.headerColumns == (("trace", "text"), ("attempt", "integer"),
                                   ("amount", "numeric(10,2)"))
    assert known_columns(given)[-4:] == [("ts", "timestamptz"), ("trace", "text"),
                                         ("attempt", "integer"), ("amount", "numeric(10,2)")]
    assert options("--timestamp-column", "ts").active  # raw records with their timestamp


@pytest.mark.parametrize(("argv", "message"), [
    (("--timestamp-column", "kafka_offset"), "fills itself"),
    (("--header-columns", "value"), "fills itself"),
    (("--timestamp-column", "a", "--header-columns", "a"), "named by --timestamp-column"),
    (("--header-columns", "a:nonsense"), "--header-columns: type 'nonsense'"),
    (("--header-columns", "a,,b"), "name\\[:type\\]"),
    (("--value-format", "json", "--columns", "a:bigint", "--header-columns", "a"),
     "declared by --columns"),
])
def test_clashing_or_bad_metadata_columns_are_refused_naming_the_flag(argv, message):
    with pytest.raises(ConfigurationError, match=message):
        options(*argv)


def test_timestamps_are_utc_and_a_missing_one_is_null():
    assert record_time(1_700_000_000_123) == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    assert record_time(-1) is None and record_time(None) is None
    naive = datetime.datetime(2024, 1, 1, 12)
    assert record_time(naive) == naive.replace(tzinfo=datetime.UTC)


def test_header_values_are_utf8_text_or_parsed_for_their_type():
    assert header_value("text", "é".encode()) == "é"
    assert header_value("bytea", b"\xff") == b"\xff"
    assert header_value("integer", b" 42") == 42
    assert header_value("numeric(10,2)", b"1.50") == decimal.Decimal("1.50")
    assert header_value("boolean", b"TRUE") is True
    assert header_value("jsonb", b'{"a": [1]}') == {"a": [1]}
    assert header_value("integer", None) is None
    with pytest.raises(ValueError, match="not UTF-8"):
        header_value("text", b"\xff")
    with pytest.raises(ValueError, match="not a integer value"):
        header_value("integer", b"forty")


def test_a_repeated_header_counts_by_its_last_value_and_a_missing_one_is_null():
    values = metadata_values(None, [("h", "text"), ("n", "bigint"), ("gone", "text")], 5,
                             [("h", b"first"), ("n", b"1"), ("h", b"last"), ("x", b"?")])
    assert values == [("h", "text", "last"), ("n", "bigint", 1), ("gone", "text", None)]
    structs = metadata_values("ts", [("h", "text")], None, [{"key": "h", "value": b"v"}])
    assert structs == [("ts", "timestamptz", None), ("h", "text", "v")]


def test_rows_carry_the_timestamp_and_headers_and_bad_headers_are_bad_records():
    typed = TypedOptions(valueFormat="json", timestampColumn="ts",
                         headerColumns=(("attempt", "integer"),), onBadRecord="dead-letter")
    builder = RowBuilder(typed, "s.t", None)
    kind, row = builder.build("t", 0, 7, None, b'{"a": 1}', 1_000, [("attempt", b"3")])
    assert kind == ROW and row == {"key": None, "a": 1, "ts": "1970-01-01T00:00:01+00:00",
                                   "attempt": 3}
    assert set(builder.columns) == {"key", "a", "ts", "attempt"}
    kind, reason = builder.build("t", 0, 8, None, b'{"a": 2}', 1_000, [("attempt", b"x")])
    assert kind == BAD and "header 'attempt'" in reason
    kind, reason = builder.build("t", 0, 9, None, b'{"ts": 2}', 1_000, ())
    assert kind == BAD and "field 'ts'" in reason and "timestamp" in reason
