"""Kafka parameters: a raw librdkafka config dict, validated, made safe, never leaked.

Users pass the same dict they would give ``confluent_kafka.Consumer``. This module checks it
on the driver (so a typo fails at construction, not in an executor minutes later), forces the
settings that would break the direct stream's guarantees on executors (as Spark's
``KafkaUtils.fixKafkaParams`` does), and redacts secrets wherever parameters are shown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED, is_secret_key, redact_params, redact_text

__all__ = [
    "CALLBACK_KEYS",
    "EXECUTOR_GROUP_PREFIX",
    "check_with_librdkafka",
    "executor_params",
    "force_param",
    "reads_committed",
    "redact",
    "refusal",
    "resolve_callbacks",
    "validate_params",
]

logger = logging.getLogger(__name__)

#: Executors read in their own consumer group so they never touch the user's group offsets.
EXECUTOR_GROUP_PREFIX = "spark-executor-"

_DEFAULT_GROUP = "kafka-direct"

#: Java-client settings librdkafka does not have, with what to do instead.
_JAVA_ONLY = {
    "key.deserializer": "pass keyDeserializer= to KafkaUtils instead",
    "value.deserializer": "pass valueDeserializer= to KafkaUtils instead",
    "max.poll.records": "records are fetched in batches by librdkafka; remove it",
    "bootstrap_servers": "librdkafka spells it 'bootstrap.servers'",
    "group_id": "librdkafka spells it 'group.id'",
    # librdkafka refuses it at client creation; its value (a JAAS line) holds the password,
    # so the message never quotes it.
    "sasl.jaas.config": "librdkafka takes sasl.mechanism, sasl.username and sasl.password "
                        "instead of a JAAS line (sasl.mechanism: PLAIN, SCRAM-SHA-256 or "
                        "SCRAM-SHA-512; security.protocol: SASL_SSL or SASL_PLAINTEXT)",
}

#: confluent-kafka settings whose value is a Python function. Given as a string
#: ``"package.module:function"`` they are imported in each process that creates a client
#: (the driver and every executor): a token provider for OAUTHBEARER (AWS MSK IAM, a custom
#: OAuth flow) then works where a function object would have to be pickled, and where
#: options are strings (the Structured Streaming source's ``kafka.oauth_cb``).
CALLBACK_KEYS = frozenset({"oauth_cb", "error_cb", "stats_cb", "throttle_cb"})

_EXECUTOR_DEFAULTS = {"queued.max.messages.kbytes": 16384, "queued.min.messages": 20000,
                      "fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 10,
                      "fetch.error.backoff.ms": 50}

_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def reads_committed(params: Mapping[str, Any]) -> bool:
    """Whether a consumer of ``params`` reads under ``read_committed``, as librdkafka reads it.

    librdkafka's default; it takes the value in any case and with leading whitespace
    (``" READ_COMMITTED"`` is read_committed) and refuses trailing whitespace or any other
    word when the client is created. The driver and the source decide with this one reading
    whether an end offset is the last stable offset or the high watermark.
    """
    level = str(params.get("isolation.level", "read_committed"))
    return level.lstrip().lower() == "read_committed"


def redact(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` fit for logs and error messages: secret values replaced.

    The one redaction of :mod:`kafka_direct.redaction`, under its historical name.
    """
    return redact_params(params)


def validate_params(params: Any, *, require_group: bool = False) -> dict[str, Any]:
    """Check a user's Kafka parameters and return them as a plain dict.

    Args:
        params: A mapping of librdkafka property names to values.
        require_group: Whether ``group.id`` must be present (the stream's consumer group).

    Returns:
        A new dict with the same items.

    Raises:
        ConfigurationError: ``params`` is not a mapping, lacks ``bootstrap.servers`` (or
            ``group.id`` when required), or holds a Java-client setting or a value librdkafka
            cannot take.
    """
    if not isinstance(params, Mapping):
        raise ConfigurationError(
            f"kafkaParams must be a dict of librdkafka properties, got {type(params).__name__}"
        )
    checked: dict[str, Any] = {}
    for key, value in params.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"kafkaParams keys must be strings, got {key!r}")
        if key in _JAVA_ONLY:
            raise ConfigurationError(
                f"kafkaParams[{key!r}] is a Java-client setting, not a librdkafka property: "
                f"{_JAVA_ONLY[key]}"
            )
        if value is None or not isinstance(value, str | int | float | bool):
            # The type only: an object's repr may hold a secret (a callback bound to its
            # client credentials), which redaction, made for strings, cannot see.
            raise ConfigurationError(
                f"kafkaParams[{key!r}] must be a string, number or bool, got "
                f"{'None' if value is None else type(value).__name__}"
            )
        checked[key] = value
    servers = checked.get("bootstrap.servers", checked.get("metadata.broker.list"))
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigurationError(
            "kafkaParams needs 'bootstrap.servers', e.g. {'bootstrap.servers': 'host:9092'}"
        )
    if require_group:
        group = checked.get("group.id")
        if not isinstance(group, str) or not group.strip():
            raise ConfigurationError(
                "kafkaParams needs 'group.id': the consumer group whose offsets the stream "
                "commits and resumes from"
            )
    return checked


def refusal(error: BaseException, params: Mapping[str, Any]) -> ConfigurationError:
    """The ConfigurationError for parameters librdkafka refused with ``error``.

    librdkafka's text names the property (and for some, quotes the value): every secret
    value of ``params`` is cut out of it, as is whatever :func:`redact_text` recognises.

    Args:
        error: What creating the client raised (``KafkaException``, ``ValueError``...).
        params: The parameters the client was created with.

    Returns:
        The error to raise (``from error``), naming the property and the fix.
    """
    text = str(error.args[0].str()) if error.args and hasattr(error.args[0], "str") \
        else str(error)
    # Longest first, so a secret containing another is cut out whole.
    for value in sorted((str(v) for k, v in params.items() if is_secret_key(str(k))),
                        key=len, reverse=True):
        if value:
            text = text.replace(value, REDACTED)
    return ConfigurationError(
        f"kafkaParams refused by librdkafka: {redact_text(text)}. Parameters are librdkafka "
        "properties: see librdkafka's CONFIGURATION.md for each one's name, type and range")


def _import_function(key: str, path: str) -> Any:
    """The function ``path`` (``package.module:function`` or ``package.module.function``)."""
    import importlib

    module_name, colon, name = path.partition(":")
    if not colon:
        module_name, _, name = path.rpartition(".")
    fix = (f"give {key} as 'package.module:function', importable on the driver and on every "
           "executor (installed, or shipped with --py-files)")
    if not module_name or not name or not all(p.isidentifier()
                                              for p in (*module_name.split("."), name)):
        # Not echoed: what is no dotted name may be a token or a secret pasted in its place.
        raise ConfigurationError(f"kafkaParams {key} names no function (its value, "
                                 f"{len(path)} characters, is no dotted name); {fix}",
                                 key=key)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(f"kafkaParams {key}={path!r}: module {module_name!r} cannot "
                                 f"be imported ({type(error).__name__}: {error}); {fix}",
                                 key=key) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigurationError(f"kafkaParams {key}={path!r}: {module_name} has no function "
                                 f"{name!r}; {fix}", key=key)
    return function


def resolve_callbacks(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with each callback named by a string (see CALLBACK_KEYS) imported.

    Called wherever a client is created, in the process that creates it: the string
    crosses to executors (and through checkpoints) as plain data.

    Raises:
        ConfigurationError: A name that does not import, or names no function.
    """
    resolved = dict(params)
    for key in CALLBACK_KEYS & resolved.keys():
        value = resolved[key]
        if isinstance(value, str):
            resolved[key] = _import_function(key, value)
        elif not callable(value):
            raise ConfigurationError(
                f"kafkaParams {key} must be a function or 'package.module:function', got "
                f"{type(value).__name__}", key=key)
    return resolved


def check_with_librdkafka(params: Mapping[str, Any]) -> None:
    """Let librdkafka check every property name and value, without connecting anywhere.

    Creates a ``confluent_kafka.Consumer`` with ``params`` less its bootstrap servers (so
    it never contacts a broker) and closes it: a few milliseconds. A bad property otherwise
    surfaces only when the stream starts.

    Raises:
        ConfigurationError: librdkafka refused a property (see :func:`refusal`).
    """
    from confluent_kafka import Consumer, KafkaException

    offline = {k: v for k, v in params.items()
               if k not in ("bootstrap.servers", "metadata.broker.list")}
    offline.setdefault("group.id", _DEFAULT_GROUP)  # a consumer needs one
    offline = resolve_callbacks(offline)
    try:
        consumer = Consumer(offline, logger=logger)
    except (KafkaException, ValueError, TypeError) as error:
        # Not chained: librdkafka's own text may quote a secret value; refusal() cuts it out.
        raise refusal(error, params) from None
    consumer.close()


def force_param(params: dict[str, Any], key: str, value: Any, why: str,
                role: str = "executor", *, expected: bool = False) -> None:
    """Set ``params[key]`` to ``value``; a different user value gets one warning per process.

    Args:
        params: The parameters to change.
        key: The setting.
        value: Its forced value.
        why: Why it is forced (for the warning).
        role: Whom the parameters are for ("executor").
        expected: A different value is no mistake (a setting that means something else
            where the user gave it, such as the driver's ``auto.offset.reset``): DEBUG only.
    """
    current = params.get(key)
    if key in params and str(current).lower() != str(value).lower():
        with _warned_lock:
            first = (role, key, str(current)) not in _warned
            _warned.add((role, key, str(current)))
        if first:
            logger.log(logging.DEBUG if expected else logging.WARNING,
                       "overriding %s to %r for %s (was %r): %s", key, value, role, current,
                       why)
    params[key] = value


def executor_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters executors read with, derived from the user's.

    * ``enable.auto.commit`` is false: executors must never move committed offsets.
    * ``auto.offset.reset`` is ``error``: a missing offset is data loss to report, not a
      reason to jump silently.
    * ``group.id`` is ``spark-executor-<group.id>``: executors never join the user's group,
      so they cannot trigger its rebalances or read its offsets.
    * ``enable.partition.eof`` is false; a range's end is known from its offsets.
    * ``allow.auto.create.topics`` is false: a broker with ``auto.create.topics.enable``
      would create a topic an executor's metadata question names, bringing a topic deleted
      after its ranges were planned back empty (the read then fails as data loss instead
      of naming the deleted topic, and the topic stays).

    Unless the user sets them, the prefetch queue per consumer is smaller than librdkafka's
    default (``queued.max.messages.kbytes`` 16 MiB, ``queued.min.messages`` 20000): an
    executor caches up to 64 consumers, and records fetched past a range's end are wasted.
    And a fetch waits at most 10 ms for records (``fetch.wait.max.ms``, 500 by default): a
    range's records exist when it is planned, so the broker only ever waits on the fetch
    librdkafka sends past a range's end, and while it waits, that connection fetches
    nothing else: the next range of the consumer (a hand-over to another partition, or the
    same partition's next batch) waited up to half a second for it. A partition's fetch that
    failed is tried again after 50 ms (``fetch.error.backoff.ms``, 500 by default): a cached
    consumer meeting a topic deleted and created again since it last read it is told
    ``UNKNOWN_TOPIC_ID``, has the new metadata within milliseconds, and then fetched nothing
    for half a second, most of a short poll timeout.

    A user setting that disagrees is overridden with one warning per setting and value.
    """
    fixed = dict(params)
    force_param(fixed, "enable.auto.commit", False,
           "executors read exact offset ranges and never commit")
    force_param(fixed, "enable.auto.offset.store", False,
           "executors read exact offset ranges and never store offsets")
    # The user's auto.offset.reset is the driver's starting policy, no mistake: quiet.
    force_param(fixed, "auto.offset.reset", "error",
                "a missing offset is reported as data loss instead of jumping silently",
                expected=True)
    force_param(fixed, "enable.partition.eof", False,
           "a range ends at its untilOffset, not at the partition end")
    # The driver may create the topics it subscribes to; executors only read what exists.
    force_param(fixed, "allow.auto.create.topics", False,
                "executors never create the topics they read", expected=True)
    for key, value in _EXECUTOR_DEFAULTS.items():
        fixed.setdefault(key, value)
    group = str(params.get("group.id") or _DEFAULT_GROUP)
    if not group.startswith(EXECUTOR_GROUP_PREFIX):
        group = EXECUTOR_GROUP_PREFIX + group
    fixed["group.id"] = group
    return fixed
