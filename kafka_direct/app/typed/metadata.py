"""A record's Kafka timestamp and headers as columns (``--timestamp-column``, ``--header-columns``).

* The timestamp column is ``timestamptz``: the record's timestamp as Kafka keeps it. On a
  topic with ``message.timestamp.type=CreateTime`` (Kafka's default) that is the time the
  producer set (by default its clock when it sent the record, possibly out of order); with
  ``LogAppendTime`` it is the broker's clock when the record was appended (ordered within a
  partition). A record without a timestamp (-1) has NULL; one past year 9999 is a bad
  record.
* A header column holds the value of the header of that name: its bytes as UTF-8 text
  (type ``text``, the default), as they are (``bytea``), or that text parsed for the
  column's type (``bigint``, ``numeric``, ``boolean`` (``true``/``false``), ``jsonb``,
  ``timestamptz`` (ISO 8601), ``uuid``...). A record without the header has NULL; a header
  given several times counts by its last value (Kafka keeps every one, in order). A value
  that is not UTF-8 or does not parse is a bad record.

A field of the key or the value with the name of such a column is a bad record too: the
column is the job's.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["TIMESTAMP_TYPE", "check_metadata_columns", "header_value", "metadata_values",
           "parse_header_columns", "record_time"]

#: The timestamp column's type.
TIMESTAMP_TYPE = "timestamptz"

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_header_columns(text: str | None) -> tuple[tuple[str, str], ...]:
    """``name[:type],...`` -> ((name, canonical type), ...); the type defaults to text.

    Raises:
        ConfigurationError: An empty piece, a name given twice, or a type the job cannot
            write.
    """
    from kafka_direct.app.typed.columns import normalise_type, split_types

    if text is None:
        return ()
    parsed: list[tuple[str, str]] = []
    for piece in split_types(text):
        name, separator, kind = piece.strip().partition(":")
        if not name.strip() or (separator and not kind.strip()):
            raise ConfigurationError(f"--header-columns must be name[:type] separated by "
                                     f"commas (e.g. trace_id,attempt:integer), got {piece!r}")
        parsed.append((name.strip(), normalise_type(kind, "--header-columns")
                       if separator else "text"))
    return tuple(parsed)


def check_metadata_columns(timestampColumn: str | None,
                           headerColumns: Sequence[tuple[str, str]],
                           declared: Sequence[tuple[str, str]],
                           reserved: Sequence[str],
                           check_name: Callable[[str, str], str]) -> None:
    """Refuse metadata column names that clash, naming the flag.

    Args:
        timestampColumn: ``--timestamp-column``.
        headerColumns: ``--header-columns``.
        declared: ``--columns``.
        reserved: The columns the job fills itself.
        check_name: Checks a column name, naming the flag (the options' own rule).

    Raises:
        ConfigurationError: A name given twice, a coordinate's name, one ``--columns``
            declares, or one PostgreSQL cannot take.
    """
    seen: dict[str, str] = {}
    named = ([(timestampColumn, "--timestamp-column")] if timestampColumn is not None else [])
    named += [(name, "--header-columns") for name, _ in headerColumns]
    declaredNames = {name for name, _ in declared}
    for name, flag in named:
        check_name(name, flag)
        if name in reserved:
            raise ConfigurationError(f"{flag}: {name!r} is a column the job fills itself "
                                     "(topic, kafka_partition, kafka_offset, key, value); "
                                     "choose another name")
        if name in seen:
            raise ConfigurationError(f"{flag}: column {name!r} is named by {seen[name]} too")
        if name in declaredNames:
            raise ConfigurationError(f"{flag}: column {name!r} is declared by --columns too "
                                     "(a JSON field's type); drop one of them")
        seen[name] = flag


def record_time(timestamp: Any) -> datetime.datetime | None:
    """A record's timestamp (ms since the epoch, -1 for none; or a datetime) as a UTC time.

    Raises:
        ValueError: The timestamp is past year 9999 (a producer may set any long).
    """
    if timestamp is None:
        return None
    if isinstance(timestamp, datetime.datetime):
        return timestamp if timestamp.tzinfo is not None else timestamp.replace(
            tzinfo=datetime.UTC)  # the source's naive timestamps are UTC
    if timestamp < 0:
        return None
    try:
        return _EPOCH + datetime.timedelta(milliseconds=int(timestamp))
    except OverflowError:
        raise ValueError(f"the record's timestamp {int(timestamp)} ms is past year 9999, "
                         "beyond what a timestamptz column holds") from None


def _pairs(headers: Any) -> Iterator[tuple[str, Any]]:
    """(name, value) of headers given as pairs or as the source's {key, value} structs."""
    for header in headers or ():
        if isinstance(header, dict):
            yield header.get("key") or "", header.get("value")
        else:
            yield header[0], header[1]


def header_value(kind: str, value: bytes | None) -> Any:
    """A header's bytes for a column of type ``kind`` (None stays None).

    Raises:
        ValueError: Not UTF-8, or text that does not parse for ``kind``; the message never
            quotes the value.
    """
    if value is None:
        return None
    if kind == "bytea":
        return bytes(value)
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the header's value is not UTF-8 text") from None
    base = kind.split("(", 1)[0]
    try:
        if base in ("smallint", "integer", "bigint"):
            return int(text.strip())
        if base in ("real", "double precision"):
            return float(text)
        if base == "numeric":
            return decimal.Decimal(text.strip())
        if base == "boolean":
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError
            return lowered == "true"
        if base in ("json", "jsonb"):
            return json.loads(text)
    except (ValueError, decimal.InvalidOperation):
        raise ValueError(f"the header's text is not a {kind} value") from None
    return text  # text, varchar, dates, times, uuid: their converters parse the text


def metadata_values(timestampColumn: str | None, headerColumns: Iterable[tuple[str, str]],
                    timestamp: Any, headers: Any) -> list[tuple[str, str, Any]]:
    """(column, type, value) of a record's metadata columns.

    Raises:
        ValueError: The timestamp or a header's value does not fit its column (named in
            the message).
    """
    found: list[tuple[str, str, Any]] = []
    if timestampColumn is not None:
        try:
            found.append((timestampColumn, TIMESTAMP_TYPE, record_time(timestamp)))
        except ValueError as error:
            raise ValueError(f"timestamp column {timestampColumn!r}: {error}") from None
    wanted = dict(headerColumns)
    if wanted:
        last: dict[str, Any] = {}
        for name, value in _pairs(headers):
            if name in wanted:
                last[name] = value  # a repeated header: its last value wins
        for name, kind in wanted.items():
            try:
                found.append((name, kind, header_value(kind, last.get(name))))
            except ValueError as error:
                raise ValueError(f"header {name!r}: {error}") from None
    return found
