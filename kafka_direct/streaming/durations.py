"""Durations and batch times: the API speaks seconds, the engine milliseconds."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["batch_datetime", "conf_time_ms", "format_batch_time", "to_ms"]

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME_STRING = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def to_ms(seconds: Any, name: str) -> int:
    """A positive duration in seconds (int or float) as whole milliseconds.

    Raises:
        ConfigurationError: Not a positive number, or finer than a millisecond.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(f"{name} must be a number of seconds, got {seconds!r}")
    millis = round(seconds * 1000)
    if millis <= 0 or abs(millis - seconds * 1000) > 1e-6:
        raise ConfigurationError(
            f"{name} must be a positive whole number of milliseconds (in seconds: 0.5, 2, "
            f"10), got {seconds!r}")
    return int(millis)


def conf_time_ms(conf: Any, key: str, default_ms: int) -> int:
    """A Spark time setting (``"10s"``, ``"500ms"``, ``"2000"`` = ms) in milliseconds."""
    raw = conf.get(key, None) if conf is not None else None
    if raw is None:
        return default_ms
    match = _TIME_STRING.match(str(raw).lower())
    if match is None or (match.group(2) and match.group(2) not in _UNITS):
        raise ConfigurationError(f"{key} = {raw!r} is not a time such as 500ms, 10s or 2min")
    return int(match.group(1)) * _UNITS.get(match.group(2) or "ms", 1)


def batch_datetime(time_ms: int) -> datetime:
    """A batch time as the local ``datetime`` user functions receive (as in PySpark)."""
    return datetime.fromtimestamp(time_ms / 1000.0)


def format_batch_time(time_ms: int, batchInterval: int) -> str:
    """A batch time for people: ``HH:mm:ss``, with milliseconds for sub-second intervals."""
    moment = batch_datetime(time_ms)
    if batchInterval % 1000:
        return moment.strftime("%Y/%m/%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return moment.strftime("%Y/%m/%d %H:%M:%S")
