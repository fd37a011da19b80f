"""Primitive keys: the bytes of Kafka's primitive serializers as one column of the row.

Most producers key records by a plain string or number (``str(id)``) and keep the fields in
the value. ``--key-format`` names the serializer that wrote the key, as Kafka's ``Serdes``
do:

* ``string``: UTF-8 text (``StringSerializer``);
* ``long``, ``int``, ``short``: 8-, 4- and 2-byte big-endian signed integers;
* ``double``, ``float``: 8- and 4-byte big-endian IEEE 754 numbers;
* ``bytes``: the bytes as they are (``ByteArraySerializer``, ``BytesSerializer``);
* ``uuid``: a UUID's text in UTF-8 (``UUIDSerializer``).

The key is one column: ``--key-columns id`` names it (as Kafka Connect's ``pk.fields``
with ``pk.mode=record_key``), ``key`` without a name. Its type is the table's where the
column exists, else ``--columns id:TYPE``, else the format's own (:data:`KEY_TYPES`). A
``string`` key is the text of its column's value: ``"5"`` in a ``bigint`` column is 5, and
text that is not a value of the column's type makes the record a bad record. A key of the
wrong length for its number format (Kafka's deserializers refuse it too) is a bad record.

The key's value is the column's value: a value field of the same name is the same column,
and it must agree with the key (after conversion to the column's type; a field's text or
JSON number read as the key's text is: ``5`` agrees with the string key ``"5"``). A field
that says otherwise makes the record a bad record: the key decides which row a record
replaces or deletes, so a record whose value contradicts it is set aside, not guessed at.
"""

from __future__ import annotations

import decimal
import json
import re
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from kafka_direct.app.typed.columns import INTEGER_RANGES, convert, fits

__all__ = ["KEY_TYPES", "PRIMITIVE_FORMATS", "PrimitiveKey", "key_fits", "read_text"]

#: The formats of keys written by Kafka's primitive serializers.
PRIMITIVE_FORMATS = ("string", "long", "int", "short", "double", "float", "bytes", "uuid")
#: Each primitive format's own column type (without a table column or ``--columns``).
KEY_TYPES = {"string": "text", "long": "bigint", "int": "integer", "short": "smallint",
             "double": "double precision", "float": "real", "bytes": "bytea", "uuid": "uuid"}
#: The number formats: (size in bytes, struct format, name for messages).
_NUMBERS = {"long": (8, ">q", "a long"), "int": (4, ">i", "an int"),
            "short": (2, ">h", "a short"), "double": (8, ">d", "a double"),
            "float": (4, ">f", "a float")}
_INTEGER_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")


def _base(kind: str) -> str:
    return kind.split("(", 1)[0]


def _single(number: float) -> float:
    """``number`` rounded to the nearest float32 (what a ``real`` column keeps)."""
    rounded: float = struct.unpack(">f", struct.pack(">f", number))[0]
    return rounded


def _length(columnType: str) -> int:
    """The length of ``varchar(n)`` (unlimited ``varchar``: a large number)."""
    inside = columnType.partition("(")[2].rstrip(")")
    return int(inside) if inside.strip().isdigit() else 1 << 30


def key_fits(keyFormat: str, columnType: str) -> bool:
    """Whether keys of ``keyFormat`` can be read as values of a column of ``columnType``.

    A string key can be read as any type (its text is parsed; a text that is not a value
    of the type is a bad record); bytes only as ``bytea``; a UUID as ``uuid`` or text; a
    number as a column that holds every value of its type exactly.
    """
    base = _base(columnType)
    if keyFormat == "string":
        return True
    if keyFormat == "bytes":
        return base == "bytea"
    if keyFormat == "uuid":  # a UUID's text is 36 characters
        return base in ("uuid", "text") or (base == "varchar" and _length(columnType) >= 36)
    return fits(columnType, KEY_TYPES[keyFormat])


def read_text(columnType: str, text: str) -> Any:
    """A value of a column of ``columnType`` from its text (a string key's).

    Raises:
        ValueError: The text is not a value of the type; the message does not quote it.
    """
    base = _base(columnType)
    if base in INTEGER_RANGES:
        if not _INTEGER_TEXT.fullmatch(text):
            raise ValueError("the text is not an integer")
        return int(text)
    if base == "numeric":
        try:
            return decimal.Decimal(text.strip())
        except decimal.InvalidOperation:
            raise ValueError("the text is not a number") from None
    if base in ("double precision", "real"):
        try:
            return float(text)
        except ValueError:
            raise ValueError("the text is not a number") from None
    if base == "boolean":
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError("the text is not true or false")
        return lowered == "true"
    if base in ("json", "jsonb"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError("the text is not JSON") from None
    if base == "bytea":
        return text.encode("utf-8")
    return text  # text, varchar, dates, times, timestamps, UUIDs: the column's conversion


def _as_text(value: Any) -> str | None:
    """A value field's text, to read as a string key's would be (None: it has none)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return None


@dataclass(frozen=True, slots=True)
class PrimitiveKey:
    """A primitive key read as its column's value (see the module).

    Attributes:
        kind: One of :data:`PRIMITIVE_FORMATS`.
        column: The key's column (``--key-columns``' name, or ``key``).
        columnType: The column's type: the table's, ``--columns``', or the format's own.
    """

    kind: str
    column: str
    columnType: str

    def __post_init__(self) -> None:
        if self.kind not in PRIMITIVE_FORMATS:
            raise ValueError(f"{self.kind!r} is not a primitive key format")

    def read(self, data: bytes | None) -> Any:
        """The column's value of the key's bytes (None for a null key), converted.

        Raises:
            ValueError: The bytes are not a key of the format, or not a value of the
                column's type; the message says which, never quoting them.
        """
        if data is None:
            return None
        kind = self.kind
        value: Any
        if kind == "bytes":
            value = bytes(data)
        elif kind in _NUMBERS:
            size, layout, name = _NUMBERS[kind]
            if len(data) != size:
                raise ValueError(f"the key has {len(data)} bytes, not the {size} bytes of "
                                 f"{name} (--key-format {kind}, as Kafka's serializer writes "
                                 "it)")
            value = struct.unpack(layout, data)[0]
        else:
            try:
                text = bytes(data).decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError("the key is not UTF-8 text") from None
            if kind == "uuid":
                try:
                    value = str(uuid.UUID(text))
                except ValueError:
                    raise ValueError("the key is not a UUID (--key-format uuid)") from None
            else:
                value = self._parsed(text)
        try:
            return convert(self.columnType, value)
        except ValueError as error:
            raise ValueError(f"the key, read as column {self.column!r} ({self.columnType}): "
                             f"{error}") from None

    def _parsed(self, text: str) -> Any:
        try:
            return read_text(self.columnType, text)
        except ValueError as error:
            raise ValueError(f"the key, read as column {self.column!r} ({self.columnType}): "
                             f"{error}") from None

    def agrees(self, keyValue: Any, field: Any) -> bool:
        """Whether a value field of the key's column says what the key does (null: yes)."""
        if field is None or (type(field) is type(keyValue) and field == keyValue):
            return True  # the common cases, quickly
        if type(field) is int and type(keyValue) is str and self.columnType == "text":
            return str(field) == keyValue  # a JSON number beside its str() key
        try:
            converted = convert(self.columnType, field)
        except ValueError:
            text = _as_text(field)
            if text is None:
                return False
            try:
                converted = convert(self.columnType, read_text(self.columnType, text))
            except ValueError:
                return False
        if _base(self.columnType) == "real" and isinstance(converted, float) and isinstance(
                keyValue, float):
            # A real holds a float32: the key was read as one, so round the field alike.
            return bool(_single(converted) == _single(keyValue))
        return bool(converted == keyValue)
