"""The ``kafka.*`` options: librdkafka properties given to the source, or to a sink that reads.

The ``kafka-direct`` source takes its Kafka client's settings as Spark's ``kafka`` source
does, each prefixed ``kafka.`` (``kafka.bootstrap.servers``, ``kafka.security.protocol``,
``kafka.sasl.username`` ...). The ``kafka-direct-postgres`` sink takes the same options when
it reads the offset ranges of a source with ``emit=offsetRanges`` itself. Both check them
here, the one way: librdkafka checks each property without connecting, and Java-only
settings fail with what to write instead. So is option ``reader`` (which reader builds the
records).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_direct.client.params import check_with_librdkafka, validate_params
from kafka_direct.errors import ConfigurationError

__all__ = ["KAFKA_PREFIX", "kafka_params", "reader_option"]

#: The prefix of the options that are librdkafka properties (``kafka.bootstrap.servers``).
KAFKA_PREFIX = "kafka."

#: Kafka client settings kafka-direct decides itself, with what to use instead.
_REFUSED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' "
                         "(streams resume from their checkpoint, not from the group)",
    "key.deserializer": "keys are always binary: decode the 'key' column with DataFrame "
                        "operations (CAST(key AS STRING), from_json ...)",
    "value.deserializer": "values are always binary: decode the 'value' column with "
                          "DataFrame operations (CAST(value AS STRING), from_json ...)",
    "interceptor.classes": "kafka-direct reads with librdkafka, which has no Java "
                           "interceptors; remove it",
}


def kafka_params(opts: Mapping[str, str], check_client: bool = True) -> dict[str, Any]:
    """The ``kafka.*`` options of ``opts`` (lower-case names) as checked librdkafka properties.

    Args:
        opts: The options, names lower case as Spark hands them over.
        check_client: Let librdkafka check the properties (a few ms, no network).

    Raises:
        ConfigurationError: No ``kafka.bootstrap.servers``, a Java-only or refused setting,
            or a property librdkafka refuses; named with the fix (never with its value).
    """
    params = {key[len(KAFKA_PREFIX):]: value for key, value in opts.items()
              if key.startswith(KAFKA_PREFIX)}
    for key, fix in _REFUSED_KAFKA.items():
        if key in params:
            raise ConfigurationError(f"option 'kafka.{key}' is not supported: {fix}")
    if not params.get("bootstrap.servers", "").strip() and \
            not params.get("metadata.broker.list", "").strip():
        raise ConfigurationError(
            "option 'kafka.bootstrap.servers' must be given: the brokers to read from, e.g. "
            ".option('kafka.bootstrap.servers', 'host1:9092,host2:9092')")
    try:
        checked = validate_params(params)
        if check_client:
            check_with_librdkafka(checked)
    except ConfigurationError as error:
        # Those messages speak of "kafkaParams": here the properties are kafka.* options.
        raise ConfigurationError(f"in the kafka.* options: {error.message}") from None
    return checked


def reader_option(opts: Mapping[str, str]) -> str | None:
    """Option ``reader``: the executors' reader, ``c`` or ``python``; None when not given.

    Raises:
        ConfigurationError: Any other value.
    """
    value = opts.get("reader", "").strip().lower()
    if value not in ("", "c", "python"):
        raise ConfigurationError(f"option 'reader' must be 'c' or 'python', not {value!r}",
                                 setting="reader", value=value)
    return value or None
