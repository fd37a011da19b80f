"""The Schema Registry of the ingest job's records: where it is, how to log in, its client.

:class:`RegistrySettings` holds the ``--schema-registry*`` flags (secrets never shown in a
``repr``); :func:`registry_settings` reads them from the parsed arguments, a value
``env:NAME`` from the environment; :func:`registry_client` is this process's
``SchemaRegistryClient`` of one settings, made on first use and kept. A mistake in the
settings is a :class:`~kafka_direct.errors.ConfigurationError` naming the flag, found when
the settings are read, before anything starts.
"""

from __future__ import annotations

import argparse
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["RegistrySettings", "registry_client", "registry_settings"]

_SECRET_CONF = ("basic.auth.user.info", "bearer.auth.token", "bearer.auth.client.secret",
                "ssl.key.password")


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """Where the Schema Registry is, and how to log in (never shown).

    Attributes:
        url: The registry's URL (``http(s)://...``, or ``mock://...`` for tests in one
            process).
        config: More settings of confluent-kafka's ``SchemaRegistryClient``
            (``basic.auth.user.info``, ``ssl.ca.location``, ``bearer.auth.*`` ...), as
            sorted pairs.
    """

    url: str = field(repr=False)
    config: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not re.match(r"(https?|mock)://\S+$",
                                                        self.url.strip()):
            raise ConfigurationError(
                "--schema-registry must be the registry's URL, http(s)://host:port (several "
                "separated by commas)")
        keys = [k for k, _ in self.config]
        if "url" in keys:
            raise ConfigurationError("--schema-registry-param url=...: give the URL with "
                                     "--schema-registry")
        if len(set(keys)) != len(keys):
            raise ConfigurationError("--schema-registry-param names a setting twice")

    def __repr__(self) -> str:
        from kafka_direct.redaction import redact_text

        shown = {k: ("[redacted]" if k in _SECRET_CONF or _secret(k) else v)
                 for k, v in self.config}
        return f"RegistrySettings(url={redact_text(self.url)!r}, config={shown!r})"

    def client_conf(self) -> dict[str, Any]:
        """The ``SchemaRegistryClient`` configuration (secret: never log it).

        Whole numbers of settings that are no secrets become ints (``max.retries=3``,
        ``timeout=10``): the client checks their types.
        """
        conf: dict[str, Any] = {"url": self.url.strip()}
        for key, value in self.config:
            numeric = value.isdigit() and key not in _SECRET_CONF and not _secret(key)
            conf[key] = int(value) if numeric else value
        return conf


def _secret(key: str) -> bool:
    from kafka_direct.redaction import is_secret_key

    return is_secret_key(key)


def registry_settings(args: argparse.Namespace, environ: Mapping[str, str]
                      ) -> RegistrySettings | None:
    """The registry settings of the parsed ``ingest`` arguments, checked by its client; or None.

    ``--schema-registry``, ``--schema-registry-auth`` and ``--schema-registry-param``; a value
    ``env:NAME`` is read from ``environ``.

    Raises:
        ConfigurationError: Auth or params without a URL, an unset variable, auth that is
            not ``USER:PASSWORD``, or settings the client refuses.
    """
    from kafka_direct.app.kafka_properties import parse_param

    url = getattr(args, "schema_registry", None)
    auth = getattr(args, "schema_registry_auth", None)
    params = list(getattr(args, "schema_registry_param", None) or [])
    if url is None:
        if auth is not None or params:
            flag = "--schema-registry-auth" if auth is not None else "--schema-registry-param"
            raise ConfigurationError(f"{flag} needs --schema-registry URL")
        return None
    config: dict[str, str] = {}
    for text in params:
        key, value = parse_param(text, "--schema-registry-param")
        config[key] = _resolve(key, value, environ)
    if auth is not None:
        info = _resolve("basic.auth.user.info", auth, environ)
        if ":" not in info or not info.partition(":")[0]:
            raise ConfigurationError("--schema-registry-auth must be USER:PASSWORD (or "
                                     "env:NAME of a variable holding it)")
        config["basic.auth.user.info"] = info
    url = _resolve("url", url, environ)
    settings = RegistrySettings(url, tuple(sorted(config.items())))
    registry_client(settings)  # the client checks its settings: a mistake is found now
    return settings


def _resolve(key: str, value: str, environ: Mapping[str, str]) -> str:
    from kafka_direct.app.kafka_properties import ENV_PREFIX

    if not value.startswith(ENV_PREFIX):
        return value
    name = value[len(ENV_PREFIX):]
    found = environ.get(name)
    if not name or not found:
        raise ConfigurationError(f"schema registry setting {key} is taken from the "
                                 f"environment variable {name!r}, which is not set or empty")
    return found


#: This process's Schema Registry clients, one per settings.
_clients: dict[RegistrySettings, Any] = {}
_clients_mutex = threading.Lock()


def registry_client(settings: RegistrySettings) -> Any:
    """This process's ``SchemaRegistryClient`` for ``settings`` (made on first use).

    Raises:
        ConfigurationError: The client refuses its settings (an unknown key, a bad value).
    """
    with _clients_mutex:
        client = _clients.get(settings)
        if client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as missing:
                raise ConfigurationError(
                    "Avro and JSON Schema records need confluent-kafka's Schema Registry client: "
                    "pip install "
                    "'confluent-kafka[avro]'", setting="--schema-registry") from missing
            try:
                client = SchemaRegistryClient.new_client(settings.client_conf())
            except (ValueError, TypeError, OSError) as error:  # OSError: an ssl.* file
                from kafka_direct.redaction import redact_text

                raise ConfigurationError(
                    "--schema-registry-param / --schema-registry-auth: the Schema Registry "
                    f"client refuses its settings: {redact_text(str(error))[:300]}",
                    setting="--schema-registry-param") from None
            _clients[settings] = client
        return client
