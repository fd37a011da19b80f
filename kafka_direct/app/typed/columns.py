"""PostgreSQL column types of typed rows: names, what fits where, and value conversion.

Types are kept as canonical text (``bigint``, ``numeric(12,2)``, ``varchar(20)``,
``timestamptz`` ...): :func:`normalise_type` maps PostgreSQL's spellings
(``format_type``'s ``timestamp with time zone``, ``int8``, ``character varying(20)``) onto
them.

Two questions are asked of them:

* :func:`fits`: can a column of one type take every value of another? (a schema's field
  against an existing column: ``integer`` into ``bigint`` yes, ``bigint`` into ``integer``
  no). :func:`widest` joins two types for a new column seen with both; :func:`widens`
  says whether a column may be altered to a schema's wider type.
* :func:`convert`: one value for a column of a type, as COPY's text takes it, or
  :class:`ValueError` with the reason (the record is then a bad record).
"""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import math
import re
import uuid
from collections.abc import Callable
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["INTEGER_RANGES", "KNOWN_TYPES", "JsonNumber", "JsonText", "convert", "converter",
           "fits", "infer_type", "normalise_type", "split_types", "widens", "widest"]


class JsonNumber(float):
    """A JSON number with a fraction or an exponent: a float that keeps its text.

    ``repr`` (and so ``str``) gives the text as written: a numeric column takes the exact
    digits the producer wrote (``123456789012345678.91``), not the nearest float's
    (``123456789012345680``); arithmetic and float columns see the float. JSON encoders
    write it as the float (they call float's own repr).
    """

    _text: str

    def __new__(cls, text: str) -> JsonNumber:
        """The number of JSON text ``text`` (what ``json.loads`` hands ``parse_float``)."""
        number = super().__new__(cls, text)
        number._text = text
        return number

    def __repr__(self) -> str:
        return self._text

    __str__ = __repr__


#: The types the job can check values for (others are written as text and left to
#: PostgreSQL's input functions).
KNOWN_TYPES = ("smallint", "integer", "bigint", "numeric", "real", "double precision",
               "boolean", "text", "varchar", "bytea", "jsonb", "json", "date", "time",
               "timestamp", "timestamptz", "uuid")

INTEGER_RANGES = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}

_ALIASES = {
    "int2": "smallint", "int": "integer", "int4": "integer", "int8": "bigint",
    "float4": "real", "float8": "double precision", "float": "double precision",
    "double": "double precision", "bool": "boolean", "decimal": "numeric",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
    "time without time zone": "time", "character varying": "varchar", "string": "text",
}
_PARAMETRISED = re.compile(r"(numeric|decimal|varchar|character varying)\s*\(\s*(\d+)\s*"
                           r"(?:,\s*(\d+)\s*)?\)")


def normalise_type(text: str, flag: str | None = None) -> str:
    """The canonical spelling of a PostgreSQL type.

    Args:
        text: The type as a user or ``format_type`` spells it.
        flag: The option it came from: then an unknown type is a ConfigurationError naming
            it. None (a type read from the catalog): an unknown type is kept as it is.

    Raises:
        ConfigurationError: ``flag`` given and the type is not one the job writes.
    """
    lowered = " ".join(text.strip().lower().split())
    match = _PARAMETRISED.fullmatch(lowered)
    if match is not None:
        kind, first, second = match.groups()
        if kind in ("numeric", "decimal"):
            precision, scale = int(first), int(second or 0)
            if (not 1 <= precision <= 1000 or scale > precision) and flag is not None:
                raise ConfigurationError(f"{flag}: {text!r} is not a valid numeric type "
                                         "(precision 1 to 1000, scale <= precision)")
            return f"numeric({precision},{scale})"
        if second is None and int(first) >= 1:
            return f"varchar({int(first)})"
    lowered = _ALIASES.get(lowered, lowered)
    if lowered in KNOWN_TYPES:
        return lowered
    if flag is not None:
        raise ConfigurationError(
            f"{flag}: type {text!r} is not one the job writes; use one of smallint, integer, "
            "bigint, numeric or numeric(p,s), real, double precision, boolean, text, "
            "varchar(n), bytea, jsonb, json, date, time, timestamp, timestamptz, uuid")
    return lowered


def split_types(text: str) -> list[str]:
    """``a:numeric(12,2),b:int`` -> its comma-separated pieces (commas in parentheses kept)."""
    pieces, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            pieces.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    pieces.append(current)
    return pieces


def _base(kind: str) -> str:
    return kind.split("(", 1)[0]


def _numeric(kind: str) -> tuple[int, int] | None:
    """(digits before the point, scale) of a numeric type; None for plain ``numeric``."""
    match = re.fullmatch(r"numeric\((\d+),(\d+)\)", kind)
    if match is None:
        return None
    precision, scale = int(match.group(1)), int(match.group(2))
    return precision - scale, scale


_INTEGER_DIGITS = {"smallint": 5, "integer": 10, "bigint": 19}
_INTEGERS = ("smallint", "integer", "bigint")


def fits(column: str, value: str) -> bool:
    """Whether a column of type ``column`` holds every value of type ``value`` exactly."""
    if column == value:
        return True
    base, other = _base(column), _base(value)
    if base in _INTEGERS and other in _INTEGERS:
        return _INTEGERS.index(base) >= _INTEGERS.index(other)
    if base == "numeric":
        bounds = _numeric(column)
        if other in _INTEGERS:
            return bounds is None or bounds[0] >= _INTEGER_DIGITS[other]
        if other == "numeric":
            if bounds is None:
                return True
            given = _numeric(value)
            return given is not None and given[0] <= bounds[0] and given[1] <= bounds[1]
        return False
    if base == "double precision":
        return other in ("real", "smallint", "integer")
    if base == "text":
        return other in ("varchar", "text")
    if base == "varchar" and other == "varchar":
        return int(column[8:-1]) >= int(value[8:-1])
    if base in ("json", "jsonb"):
        return other in ("json", "jsonb")
    return False


def widens(column: str, value: str) -> bool:
    """Whether ``ALTER COLUMN ... TYPE value`` widens a ``column`` column, keeping its values.

    ``integer`` to ``bigint``, ``real`` to ``double precision``, ``varchar(n)`` to a longer
    one or ``text``, ``numeric(p,s)`` to more digits, an integer to ``numeric``...: the new
    type holds every value of the old one (PostgreSQL casts them without a ``USING``).
    """
    return column != value and fits(value, column)


def widest(first: str, second: str) -> str | None:
    """The type of a new column seen with both types, or None when none holds both."""
    if fits(first, second):
        return first
    if fits(second, first):
        return second
    pair = {_base(first), _base(second)}
    if pair <= {"smallint", "integer", "real", "double precision"}:
        return "double precision"
    if pair <= {"smallint", "integer", "bigint", "numeric", "real", "double precision"}:
        return "numeric"  # exact for both (a bigint does not fit a double)
    if pair <= {"text", "varchar"}:
        return "text"
    return None


def infer_type(value: Any) -> str | None:
    """The column type of a JSON value with no schema (None for null: not known yet)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, str):
        return "text"
    return "jsonb"


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


def _text(value: Any, kind: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{_describe(value)} is not text")
    if "\x00" in value:
        raise ValueError("the text holds a NUL character, which PostgreSQL text cannot")
    if kind.startswith("varchar(") and len(value) > int(kind[8:-1]):
        raise ValueError(f"the text is {len(value)} characters, longer than {kind}")
    return value


def _describe(value: Any) -> str:
    """A value's type for a message (never the value: it may be private data)."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number with a fraction",
             str: "text", bytes: "bytes", dict: "an object", list: "an array"}
    return names.get(type(value), f"a {type(value).__name__}")


def _integer(value: Any, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{_describe(value)} is not an integer")
    limit = INTEGER_RANGES[kind]
    if not -limit <= value < limit:
        raise ValueError(f"the integer is out of the range of {kind}")
    return value


def _float(value: Any, kind: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise ValueError(f"{_describe(value)} is not a number")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any double
        raise ValueError(f"the number is out of the range of {kind}") from None
    if kind == "real" and math.isfinite(number) and abs(number) > 3.4028234663852886e38:
        raise ValueError("the number is out of the range of real")
    return number


def _decimal(value: Any, kind: str) -> decimal.Decimal | int:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise ValueError(f"{_describe(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        if kind != "numeric":
            raise ValueError(f"{value} does not fit {kind}")
        return decimal.Decimal(repr(value).replace("inf", "Infinity"))
    number = decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)
    if number.is_snan():  # PostgreSQL's numeric has no signalling NaN
        raise ValueError(f"a signalling NaN does not fit {kind}")
    if number.is_qnan():
        return decimal.Decimal("NaN")  # PostgreSQL reads NaN, not a sign or a payload
    bounds = _numeric(kind)
    if bounds is not None and number.is_infinite():  # only plain numeric holds Infinity
        raise ValueError(f"{number} does not fit {kind}")
    if bounds is not None and number.is_finite():
        digits, scale = bounds
        rounded = number.quantize(decimal.Decimal(1).scaleb(-scale),
                                  rounding=decimal.ROUND_HALF_UP)
        if rounded.adjusted() >= digits and rounded != 0:
            raise ValueError(f"the number has more digits before the point than {kind}")
        return rounded
    return number if not isinstance(value, int) else value


def _timestamp(value: Any, kind: str) -> str:
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"the text is not an ISO 8601 timestamp for {kind}") from None
    if not isinstance(value, datetime.datetime):
        raise ValueError(f"{_describe(value)} is not a timestamp")
    moment: datetime.datetime = value
    if kind == "timestamptz":
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)  # no zone given: UTC
        return moment.isoformat()
    if moment.tzinfo is not None:  # an instant into a column without a zone: its UTC time
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return moment.isoformat()


def _date(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError("the text is not an ISO 8601 date") from None
    if isinstance(value, datetime.datetime) or not isinstance(value, datetime.date):
        raise ValueError(f"{_describe(value)} is not a date")
    return value.isoformat()


def _time(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = datetime.time.fromisoformat(value)
        except ValueError:
            raise ValueError("the text is not an ISO 8601 time") from None
    if not isinstance(value, datetime.time):
        raise ValueError(f"{_describe(value)} is not a time of day")
    return value.isoformat()


def _uuid(value: Any) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            raise ValueError("the text is not a UUID") from None
    raise ValueError(f"{_describe(value)} is not a UUID")


class JsonText(str):
    """JSON text already checked (Debezium's ``io.debezium.data.Json``): written as it is.

    Parsing it into Python values and back would lose what ``jsonb`` keeps (``1.10`` is not
    ``1.1``).
    """

    __slots__ = ()


def _json(value: Any) -> str:
    if isinstance(value, JsonText):
        if "\\u0000" in value:
            raise ValueError("the JSON holds a NUL character (\\u0000), which jsonb cannot")
        return str(value)
    try:
        text = json.dumps(value, default=_json_default, allow_nan=False, ensure_ascii=False,
                          separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValueError(f"the value cannot be JSON ({error})") from None
    if "\\u0000" in text:
        raise ValueError("the JSON holds a NUL character (\\u0000), which jsonb cannot")
    return text


def convert(kind: str, value: Any) -> Any:
    """``value`` for a column of type ``kind``, as COPY's text format takes it.

    Returns None for None; ints, floats and Decimals as numbers; bytes as bytes; text and
    everything else as text (JSON for ``json``/``jsonb``, ISO 8601 for dates and times).

    Raises:
        ValueError: The value does not fit the column; the message says why without
            quoting the value (records may hold private data).
    """
    return converter(kind)(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{_describe(value)} is not a boolean")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ValueError(f"{_describe(value)} is not bytes")
    return bytes(value)


def _other(value: Any) -> Any:
    # A type of the user's own table the job does not know: text, for PostgreSQL to parse.
    if isinstance(value, str | int | float | decimal.Decimal) and not isinstance(value, bool):
        return value if not isinstance(value, str) else _text(value, "text")
    return _json(value)


@functools.lru_cache(maxsize=512)
def converter(kind: str) -> Callable[[Any], Any]:
    """The conversion of values for a column of type ``kind`` (see :func:`convert`)."""
    base = _base(kind)
    convert: Callable[[Any], Any]
    if base in INTEGER_RANGES:
        limit = INTEGER_RANGES[base]

        def convert(value: Any) -> Any:
            if type(value) is int and -limit <= value < limit:  # the common case, quickly
                return value
            return _integer(value, base)
    elif base in ("double precision", "real"):
        convert = functools.partial(_float, kind=base)
    elif base == "numeric":
        convert = functools.partial(_decimal, kind=kind)
    elif base == "boolean":
        convert = _boolean
    elif base in ("text", "varchar"):
        def convert(value: Any) -> Any:
            if type(value) is str and "\x00" not in value and base == "text":
                return value
            return _text(value, kind)
    elif base == "bytea":
        convert = _bytes
    elif base in ("jsonb", "json"):
        convert = _json
    elif base in ("timestamp", "timestamptz"):
        convert = functools.partial(_timestamp, kind=base)
    elif base == "date":
        convert = _date
    elif base == "time":
        convert = _time
    elif base == "uuid":
        convert = _uuid
    else:
        convert = _other

    def nullable(value: Any) -> Any:
        return None if value is None else convert(value)

    return nullable
