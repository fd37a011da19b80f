"""Checked conversions of settings (Spark conf strings, arguments) into numbers and flags.

Every setting the connector reads goes through one of these, so a bad value fails when the
RDD or stream is built, with a :class:`~kafka_direct.errors.ConfigurationError` that names the
setting, the value given and what to give instead: never later, as ``AssertionError``,
``OverflowError`` or a silently wrong batch.
"""

from __future__ import annotations

import math
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["MAX_OFFSET", "check_offset", "parse_bool", "parse_float", "parse_int"]

#: Kafka offsets are Java longs (int64): nothing above this exists.
MAX_OFFSET = (1 << 63) - 1


def parse_int(key: str, raw: Any, minimum: int, maximum: int = MAX_OFFSET) -> int:
    """``raw`` (a string or an int) as an int in ``[minimum, maximum]``.

    Raises:
        ConfigurationError: Not an integer (``"1.5"``, ``"abc"``, NaN, a bool), or out of
            range; the message names ``key``.
    """
    if isinstance(raw, bool):
        raise ConfigurationError(f"{key} must be an integer >= {minimum}, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        try:
            value = int(str(raw).strip())
        except ValueError as error:
            raise ConfigurationError(
                f"{key} must be an integer >= {minimum}, got {raw!r}; set it to a whole "
                "number") from error
    if value < minimum:
        raise ConfigurationError(f"{key} must be an integer >= {minimum}, got {raw!r}; set it "
                                 f"to a whole number from {minimum}")
    if value > maximum:
        raise ConfigurationError(f"{key} must be an integer <= {maximum}, got {raw!r}; set it "
                                 f"to a whole number up to {maximum}")
    return value


def parse_float(key: str, raw: Any, minimum: float) -> float:
    """``raw`` (a string or a number) as a finite float ``>= minimum``.

    Raises:
        ConfigurationError: Not a number, NaN, infinite or below ``minimum``.
    """
    if isinstance(raw, bool):
        raise ConfigurationError(f"{key} must be a number >= {minimum:g}, got {raw!r}")
    try:
        value = float(raw)
    except (TypeError, ValueError) as error:
        raise ConfigurationError(
            f"{key} must be a number >= {minimum:g}, got {raw!r}") from error
    # NaN compares false with everything: without isfinite it would pass every bound, and
    # infinity overflows int() when turned into a record count.
    if not math.isfinite(value):
        raise ConfigurationError(
            f"{key} must be a finite number >= {minimum:g}, got {raw!r}; use 0 for no limit "
            "where the setting allows it")
    if value < minimum:
        raise ConfigurationError(f"{key} must be >= {minimum:g}, got {raw!r}")
    return value


def parse_bool(key: str, raw: Any) -> bool:
    """``raw`` as a flag: ``true`` or ``false`` (any case), or a bool.

    Raises:
        ConfigurationError: Anything else (``"yes"`` would otherwise silently mean false).
    """
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"{key} must be true or false, got {raw!r}")
    return text == "true"


def check_offset(what: str, value: Any, **context: Any) -> int:
    """``value`` as a Kafka offset: an int in ``[0, 2**63 - 1]``.

    Args:
        what: How to name the value in the message (``"OffsetRange fromOffset of t-0"``).
        value: The offset.
        **context: Error context (topic, partition).

    Raises:
        ConfigurationError: Not an int, negative, or beyond int64 (Kafka's offset type).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{what} must be an int >= 0, got {value!r}", **context)
    if value > MAX_OFFSET:
        raise ConfigurationError(
            f"{what} is {value}, beyond the largest Kafka offset {MAX_OFFSET} (int64); "
            "offsets are Java longs", **context)
    return value
