"""One redaction for every place a secret could show: errors, reprs, logs, the CLI, pages.

Secrets reach us in two shapes: as configuration (Kafka client properties such as
``sasl.password``, ``ssl.key.password``, ``sasl.oauthbearer.client.secret``, the Java client's
``sasl.jaas.config``; a PostgreSQL DSN) and inside texts that quote configuration (libpq's
"invalid dsn" messages, a repr of a parameter dict, a JAAS line). :func:`redact_params` handles
the first by key, :func:`redact_text` the second by pattern. Every boundary that shows
configuration or a third party's error text goes through one of them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "RedactingFormatter", "is_secret_key", "redact_dsn_pieces",
           "redact_params", "redact_text"]

#: What a secret is replaced with.
REDACTED = "[redacted]"

# A key holding any of these is a secret (librdkafka's and the Java client's names, DSN keys).
_SECRET_MARKERS = ("password", "passwd", "secret", "token", "jaas", "sasl.oauthbearer.config",
                   "ssl.key.pem", "ssl_key", "private", "credential", "passfile")

_KEY = r"[A-Za-z0-9_.\-]*(?:" + "|".join(re.escape(m) for m in _SECRET_MARKERS) + \
       r")[A-Za-z0-9_.\-]*"
# A value: single-quoted (libpq, Python reprs), double-quoted (JAAS), or unquoted. An unquoted
# value may hold spaces, commas, quotes or braces (a mistyped DSN, a password with any
# character), so it runs to the next ``key=`` or the end of the line: hiding too much beats
# showing half a password.
_VALUE = (r"""(?:'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|"""
          r"""[^\n]+?(?=\s+[\w.\-]+\s*[=:]|\n|$))""")
# key=value, key: value, 'key': 'value' and "key": "value".
_ASSIGNMENT = re.compile(r"""(?P<key>['"]?""" + _KEY + r"""['"]?\s*[=:]\s*)""" + _VALUE,
                         re.IGNORECASE)
# scheme://user:password@host. Greedy to the last '@' of the run, so an unencoded '@' or
# space inside the password does not leave a piece of it behind.
_URI = re.compile(r"(?P<head>\b[a-z][a-z0-9+.\-]*://[^:/?#\s@]*:)[^\n]*@(?=[^@\n]*$)|"
                  r"(?P<head2>\b[a-z][a-z0-9+.\-]*://[^:/?#\s@]*:)\S*@", re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """Whether a configuration key holds a secret (by its name)."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` fit for showing: every secret value replaced by :data:`REDACTED`.

    String values that are not secrets by key still go through :func:`redact_text` (a DSN
    or a JAAS line under an innocent-looking key keeps its password hidden).
    """
    shown: dict[str, Any] = {}
    for key, value in params.items():
        if is_secret_key(str(key)):
            shown[key] = REDACTED
        elif isinstance(value, str):
            shown[key] = redact_text(value)
        else:
            shown[key] = value
    return shown


def _uri(match: re.Match[str]) -> str:
    return (match.group("head") or match.group("head2")) + REDACTED + "@"


def redact_text(text: str) -> str:
    """``text`` with every password, secret or token it quotes replaced by :data:`REDACTED`.

    Covers ``key=value`` and ``key: value`` pairs (quoted values with spaces included), dict
    reprs, JAAS lines (``password="..."``) and URIs with a password (``scheme://u:p@host``).
    """
    text = _URI.sub(_uri, text)
    return _ASSIGNMENT.sub(lambda m: m.group("key") + REDACTED, text)


def _dsn_pieces(dsn: str) -> set[str]:
    """Every piece of ``dsn``'s password a third party's message might quote on its own."""
    pieces: set[str] = set()
    try:
        from psycopg2.extensions import parse_dsn

        password = parse_dsn(dsn).get("password")
    except Exception:  # unparsable, or no driver: the raw text below still counts
        password = None
    if password:
        pieces.add(password)
    scheme = dsn.find("://")
    if scheme >= 0 and "@" in dsn[scheme:]:
        # An unencoded '@' moves libpq's idea of the host into the password: whatever
        # lies between the user's ':' and the last '@' is secret, and so is each part of it.
        userinfo = dsn[scheme + 3:dsn.rindex("@")]
        if ":" in userinfo:
            raw = userinfo.split(":", 1)[1]
            pieces.add(raw)
            pieces.update(re.split(r"[@:/%?#]", raw))
    return {piece for piece in pieces if len(piece) >= 3}


def redact_dsn_pieces(text: str, dsn: str | None) -> str:
    """:func:`redact_text`, and no piece of ``dsn``'s password anywhere in ``text``.

    For the errors of database drivers, which quote parts of a connection string they could
    not use (a host that is really the tail of a password with an unencoded ``@``).
    """
    shown = redact_text(text)
    if dsn:
        for piece in sorted(_dsn_pieces(dsn), key=len, reverse=True):
            shown = shown.replace(piece, REDACTED)
    return shown


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output went through :func:`redact_text` (tracebacks included).

    The library attaches no handler; an application (our CLI, or yours) installs this one so
    that a third party's message quoting a secret does not reach the log.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Format as usual, then redact."""
        return redact_text(super().format(record))
