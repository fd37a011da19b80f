"""The native columnar reader: one partition's records straight into Arrow buffers.

The C extension ``_columnar`` consumes with the librdkafka that confluent-kafka ships
(loaded at run time, never linked) and writes keys, values, offsets, timestamps, timestamp
types and headers into bytes objects laid out as Arrow buffers, with the GIL released while
it consumes. No Python object is made per record. Everything else stays here, shared with
the Python reader: :class:`ColumnarDataConsumer` is a
:class:`~kafka_direct.client.data_consumer.KafkaDataConsumer` whose range loop hands out
:class:`Chunk`s instead of messages, and decides about errors, gaps, data loss and stalls
with the same methods.

Which reader runs is chosen per read (:func:`choose_impl`): ``KAFKA_DIRECT_IMPL=c`` or
``python``; unset, the native one when the extension imports and librdkafka loads, else the
Python one, with one INFO line saying why.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_direct.client.absent_partitions import ABSENT_CODES, partition_count
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.data_consumer import (
    _POLL_SLICE_S,
    MAX_BATCH,
    KafkaDataConsumer,
    _confluent_consumer,
)
from kafka_direct.client.error_codes import error_code
from kafka_direct.errors import ConfigurationError

__all__ = ["IMPL_ENV", "WANT_HEADERS", "WANT_KEY", "WANT_VALUE", "Chunk",
           "ColumnarConsumerCache", "ColumnarDataConsumer", "NativeKafkaError", "choose_impl",
           "columnar_cache", "native_config", "native_status", "use_native"]

logger = logging.getLogger(__name__)

#: The environment variable choosing the reader: ``c`` or ``python`` (unset: c if it loads).
IMPL_ENV = "KAFKA_DIRECT_IMPL"
#: Settings of confluent-kafka's Python client that librdkafka does not know.
_PYTHON_ONLY = frozenset({"logger", "error_cb", "throttle_cb", "stats_cb", "oauth_cb",
                          "on_commit", "on_delivery", "key.deserializer",
                          "value.deserializer"})
#: Indexes of the buffers ``_columnar.Consumer.consume`` returns (its enum, in order).
(KEY_OFFSETS, KEY_DATA, KEY_VALID, VALUE_OFFSETS, VALUE_DATA, VALUE_VALID, OFFSETS, STAMPS,
 STAMPS_VALID, TYPES, HEADER_OFFSETS, HEADER_VALID, HKEY_OFFSETS, HKEY_DATA, HVALUE_OFFSETS,
 HVALUE_DATA, HVALUE_VALID) = range(17)
#: ``consume``'s column mask: the columns it copies (the others' buffers are None).
WANT_KEY, WANT_VALUE, WANT_HEADERS = 1, 2, 4

_lock = threading.Lock()
_status: tuple[bool, str] | None = None
_fallback_logged = False


def _library_path() -> str:
    """The librdkafka confluent-kafka uses: the one loaded in this process, else its own."""
    import confluent_kafka
    import confluent_kafka.cimpl  # loads librdkafka into the process

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith("librdkafka") and ".so" in path:
                    return path
    except OSError:
        pass
    package = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    shipped = sorted(glob.glob(os.path.join(os.path.dirname(package), "confluent_kafka.libs",
                                            "librdkafka*.so*")))
    if shipped:
        return shipped[0]
    import ctypes.util

    found = ctypes.util.find_library("rdkafka")
    if found is None:
        raise OSError("no librdkafka found (neither loaded by confluent_kafka nor beside it)")
    return found


def native_status() -> tuple[bool, str]:
    """Whether the native reader can run here, and the librdkafka it uses or why not."""
    global _status
    with _lock:
        if _status is None:
            try:
                from kafka_direct.client import _columnar  # type: ignore[attr-defined]

                path = _library_path()
                version = _columnar.load(path)
                _status = (True, f"librdkafka {version} ({os.path.basename(path)})")
            except Exception as error:  # ImportError, OSError: any reason is a fallback
                _status = (False, f"{type(error).__name__}: {error}")
        return _status


def choose_impl(requested: str | None = None) -> str:
    """The reader to use, ``"c"`` or ``"python"``.

    Args:
        requested: The choice shipped with the read (the driver's ``KAFKA_DIRECT_IMPL``);
            None or empty: this process's ``KAFKA_DIRECT_IMPL``; unset: automatic.

    Raises:
        ConfigurationError: The value is neither ``c`` nor ``python``, or ``c`` is asked
            for and the native reader is unavailable.
    """
    global _fallback_logged
    value = (requested or os.environ.get(IMPL_ENV) or "").strip().lower()
    if value not in ("", "c", "python"):
        raise ConfigurationError(f"{IMPL_ENV} must be 'c' or 'python', not {value!r}",
                                 setting=IMPL_ENV, value=value)
    if value == "python":
        return "python"
    available, why = native_status()
    if available:
        return "c"
    if value == "c":
        raise ConfigurationError(
            f"{IMPL_ENV}=c but the native columnar reader is unavailable ({why}); install "
            "kafka-direct where a C compiler is present so the extension is built, or set "
            f"{IMPL_ENV}=python", setting=IMPL_ENV, value=value)
    with _lock:
        if not _fallback_logged:
            _fallback_logged = True
            logger.info("kafka-direct reads with its Python reader: the native columnar "
                        "reader is unavailable (%s)", why)
    return "python"


class UnsupportedConfigError(ConfigurationError):
    """Kafka parameters only confluent-kafka's Python client can apply (callbacks)."""


def native_config(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The parameters as librdkafka's string settings.

    Raises:
        UnsupportedConfigError: A setting holds a Python object (a callback, a logger): only
            the Python reader can apply it.
    """
    config: list[tuple[str, str]] = []
    refused: list[str] = []
    for key, value in params.items():
        if key in _PYTHON_ONLY or callable(value) or not isinstance(
                value, str | int | float | bool):
            refused.append(key)
        elif isinstance(value, bool):
            config.append((key, "true" if value else "false"))
        else:
            config.append((key, str(value)))
    if refused:
        raise UnsupportedConfigError(
            f"the native reader cannot apply {', '.join(sorted(refused))} (Python objects); "
            f"the Python reader can ({IMPL_ENV}=python)", setting=sorted(refused)[0])
    return config


def use_native(params: Mapping[str, Any], requested: str | None = None) -> bool:
    """Whether a read of ``params`` uses the native reader (decided where it runs).

    Args:
        params: The executor's Kafka parameters.
        requested: The choice shipped with the read (see :func:`choose_impl`).

    Raises:
        ConfigurationError: As :func:`choose_impl`; or ``c`` asked for explicitly and the
            parameters hold Python objects only the Python reader applies.
    """
    if choose_impl(requested) != "c":
        return False
    try:
        native_config(params)
    except UnsupportedConfigError:
        if (requested or os.environ.get(IMPL_ENV) or "").strip().lower() == "c":
            raise
        return False  # callbacks in the parameters: only the Python reader applies them
    return True


class NativeKafkaError:
    """A consumer error reported by the native reader, as confluent-kafka's KafkaError reads.

    Args:
        code: librdkafka's error code.
        offset: The offset the error is about (-1 if none).
        text: librdkafka's description.
    """

    __slots__ = ("_code", "_text", "offset")

    def __init__(self, code: int, offset: int, text: str) -> None:
        self._code, self.offset, self._text = code, offset, text

    def code(self) -> int:
        """The error code (librdkafka's)."""
        return self._code

    def str(self) -> str:
        """The description."""
        return self._text

    def fatal(self) -> bool:
        """Whether the consumer cannot go on (librdkafka's ``_FATAL``)."""
        return self._code == -150


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive records of one partition as Arrow buffers (see ``_columnar.c``).

    Attributes:
        count: How many records.
        buffers: The 17 buffers (bytes, or None for an absent validity bitmap or for the
            key's, value's or headers' buffers when not asked for), indexed by the module's
            ``KEY_OFFSETS`` ... constants.
        badIndex: The first record whose timestamp lies outside the asked bounds, or -1.
        badMillis: That record's timestamp (ms).
    """

    count: int
    buffers: tuple[bytes | None, ...]
    badIndex: int = -1
    badMillis: int = 0


def _native_factory(topic: str, partition: int, config: list[tuple[str, str]]
                    ) -> Callable[[dict[str, Any]], Any]:
    def create(params: dict[str, Any]) -> Any:
        from kafka_direct.client import _columnar  # type: ignore[attr-defined]

        if not native_status()[0]:
            raise ConfigurationError(f"the native reader is unavailable: {native_status()[1]}")
        return _columnar.Consumer(config, topic, partition,
                                  poll_loop=os.environ.get("KAFKA_DIRECT_NATIVE_POLL") == "1")

    return create


class ColumnarDataConsumer(KafkaDataConsumer):
    """A native consumer assigned to one partition: ranges read as :class:`Chunk`s.

    Args:
        topic: Topic to read.
        partition: Partition to read.
        params: Executor Kafka parameters (string, number and boolean values only).
        factory: Builds the native consumer from ``params`` (injectable for tests).

    Raises:
        UnsupportedConfigError: ``params`` hold Python objects (use the Python reader).
    """

    def __init__(self, topic: str, partition: int, params: Mapping[str, Any],
                 factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        if factory is None:
            factory = _native_factory(topic, partition, native_config(params))
        super().__init__(topic, partition, params, factory)

    def _assign(self, offset: int) -> None:
        self._consumer.assign(offset)
        self._assigned = True

    def _unassign(self) -> None:
        # The extension's retarget unassigns (and keeps the partition it names).
        self._consumer.retarget(self.topic, self.partition)
        self._assigned = False

    def _switch(self, topic: str, partition: int) -> None:
        self._consumer.retarget(topic, partition)

    def _ask_metadata(self, topic: str, timeout: float) -> bool:
        # The extension asks no metadata alone: its watermarks question looks the
        # partition's leader up first (then asks two offsets, once per new topic). It
        # fails at once when the metadata has no such partition (the absence rule's grace
        # starts then; it tells no missing topic from a missing partition).
        try:
            self._watermarks(timeout)
        except Exception as error:
            if error_code(error) not in ABSENT_CODES:
                raise
            self._absence.noticed()
            return False
        return True

    def _partition_count(self, timeout: float) -> int:
        # Only when a range's partition seems not to exist: the extension has no metadata
        # question, so a client of confluent-kafka's with the same settings asks, once.
        client = _confluent_consumer(dict(self._params))
        try:
            return partition_count(client, self.topic, timeout)
        finally:
            client.close()

    def _watermarks(self, timeout: float = 10.0) -> tuple[int, int]:
        low, high = self._consumer.watermarks(int(timeout * 1000))
        return int(low), int(high)

    def _position(self) -> int:
        return int(self._consumer.position())

    def read_batches(self, fromOffset: int, untilOffset: int, pollTimeoutMs: int,
                     failOnDataLoss: bool = True) -> Iterator[list[Any]]:
        """Not available: this consumer reads :meth:`read_chunks`."""
        raise TypeError("a ColumnarDataConsumer reads chunks (read_chunks), not messages")

    def read_chunks(self, fromOffset: int, untilOffset: int, pollTimeoutMs: int,
                    failOnDataLoss: bool = True, includeHeaders: bool = False,
                    timestampBounds: tuple[int, int] = (-(2**63), 2**63 - 1), *,
                    columns: int | None = None) -> Iterator[Chunk]:
        """The records of ``[fromOffset, untilOffset)`` as chunks, in offset order.

        The contract of :meth:`KafkaDataConsumer.read_batches`, decided by the same methods:
        gaps skipped, the range done when the consumer's position reaches ``untilOffset``,
        data loss, a log end below the range and stalls raised (or warned about).

        Args:
            fromOffset: First offset of the range.
            untilOffset: End of the range (exclusive).
            pollTimeoutMs: Longest time without progress.
            failOnDataLoss: Whether lost offsets raise (else a warning).
            includeHeaders: Whether chunks carry the headers' buffers (when ``columns``
                is None).
            timestampBounds: Timestamps (ms) outside these are reported in
                :attr:`Chunk.badIndex`.
            columns: Which of key, value and headers the chunks carry: a mask of
                ``WANT_KEY``, ``WANT_VALUE`` and ``WANT_HEADERS`` (0 for a count); None:
                key, value, and the headers with ``includeHeaders``.
        """
        if columns is None:
            columns = WANT_KEY | WANT_VALUE | (WANT_HEADERS if includeHeaders else 0)
        if fromOffset >= untilOffset:
            return
        last_progress = time.monotonic()  # the leader question counts in the poll timeout
        self._begin(fromOffset, pollTimeoutMs)
        low_ms, high_ms = timestampBounds
        slice_ms = int(_POLL_SLICE_S * 1000)
        position = fromOffset
        consume = self._consumer.consume
        while position < untilOffset:
            wanted = max(1, min(MAX_BATCH, untilOffset - position))
            (count, received, last, reached, error, buffers, bad_index,
             bad_ms) = consume(wanted, slice_ms, position, untilOffset, columns,
                               low_ms, high_ms)
            progressed = False
            if count:
                position = last + 1
                progressed = True
                yield Chunk(count, buffers, bad_index, bad_ms)
            if reached:
                # Past the range (the records between were compacted away or are markers);
                # the next range seeks to its own start anyway.
                position = untilOffset
            if error is not None:
                restart = self._on_error(NativeKafkaError(*error), position, fromOffset,
                                         untilOffset, failOnDataLoss)
                if restart is not None:
                    position = restart
                    progressed = True
            if position >= untilOffset:
                break
            if not received:
                consumer_position = self._position()
                if consumer_position > position:
                    position = min(consumer_position, untilOffset)
                    progressed = True
            if progressed:
                last_progress = time.monotonic()
            elif self._check_stalled(position, fromOffset, untilOffset, pollTimeoutMs,
                                     last_progress, failOnDataLoss):
                break
        self._finish()


class ColumnarConsumerCache(ConsumerCache):
    """Cached :class:`ColumnarDataConsumer`s of one Python worker, as :class:`ConsumerCache`.

    Args:
        capacity: Most consumers kept open.
        factory: Builds native consumers from the parameters (injectable for tests); None:
            the extension's, for each consumer's own partition.
    """

    consumer_class = ColumnarDataConsumer

    def __init__(self, capacity: int = 64,
                 factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        super().__init__(capacity, factory)  # type: ignore[arg-type]


#: The worker-wide cache of native consumers (a module global: Python workers outlive tasks).
columnar_cache = ColumnarConsumerCache()
