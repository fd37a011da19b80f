"""Kafka client properties for a real cluster (SASL, SSL...) from the command line.

``--kafka-properties FILE`` reads a Java-style properties file (``key=value`` or
``key: value`` lines, ``#`` and ``!`` comments, blank lines ignored); ``--kafka-param
key=value`` (repeatable) adds or overrides single properties, the command line winning over
the file. A value ``env:NAME`` is read from the environment variable ``NAME`` when the job
starts, so a secret need not appear on the command line, where other users of the machine
can read it (``ps``, ``/proc``).

Errors never quote a value: a property may be a password.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from kafka_direct.errors import ConfigurationError

__all__ = ["ENV_PREFIX", "kafka_params", "parse_param", "read_properties", "resolve_env"]

#: A value starting with this is the name of an environment variable holding the value.
ENV_PREFIX = "env:"

# The job sets these itself: a user's value would be silently replaced, so refuse it.
_OWNED = {"bootstrap.servers": "--bootstrap-servers", "group.id": "--group",
          "auto.offset.reset": "--starting-offsets"}


def parse_param(text: str, where: str = "--kafka-param") -> tuple[str, str]:
    """``key=value`` -> (key, value); ConfigurationError naming ``where`` otherwise."""
    key, separator, value = text.partition("=")
    key = key.strip()
    if not separator or not key:
        raise ConfigurationError(f"{where} must look like key=value (e.g. "
                                 "security.protocol=SASL_SSL); got a value without '='")
    return key, value.strip()


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style properties file: ``key=value`` / ``key: value``, ``#`` comments.

    Raises:
        ConfigurationError: The file cannot be read, or a line is not a property (the
            message names the line number, never its text).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise ConfigurationError(
            f"--kafka-properties {path} cannot be read: {reason}") from error
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key = line[:cut].strip() if cut >= 0 else ""
        if not key:
            raise ConfigurationError(f"--kafka-properties {path}, line {number}: expected "
                                     "key=value")
        properties[key] = line[cut + 1:].strip()
    return properties


def resolve_env(key: str, value: str, environ: Mapping[str, str] | None = None) -> str:
    """``value``, or the environment variable it names when it reads ``env:NAME``."""
    if not value.startswith(ENV_PREFIX):
        return value
    name = value[len(ENV_PREFIX):]
    found = (os.environ if environ is None else environ).get(name)
    if not name or found is None:
        raise ConfigurationError(f"Kafka property {key} is taken from the environment "
                                 f"variable {name!r}, which is not set")
    return found


def kafka_params(propertiesFile: str | Path | None, params: Iterable[str],
                 environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Kafka client properties: the file's, then each ``key=value`` over them.

    Args:
        propertiesFile: A properties file, or None.
        params: ``key=value`` texts (the command line's ``--kafka-param``).
        environ: The environment for ``env:NAME`` values (default: this process's).

    Raises:
        ConfigurationError: An unreadable file, a malformed property, an unset variable,
            or a property the job sets from its own options.
    """
    merged = dict(read_properties(propertiesFile)) if propertiesFile else {}
    merged.update(parse_param(text) for text in params)
    for key, option in _OWNED.items():
        if key in merged:
            raise ConfigurationError(f"Kafka property {key} is set by {option}; give it there")
    return {key: resolve_env(key, value, environ) for key, value in merged.items()}
