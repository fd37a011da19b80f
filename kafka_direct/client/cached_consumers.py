"""The executors' consumers, cached per Python worker and handed out one read at a time.

PySpark reuses Python workers across tasks, so :data:`consumer_cache` lives as long as the
worker does, and a range's read takes a consumer already connected instead of making one.

Contract of :class:`ConsumerCache`:

* At most ``capacity`` consumers stay open, the least recently used idle ones closed first;
  consumers in use stay (the cache is past its capacity only while they are), and are
  closed when their reads hand them back.
* A consumer serves one read at a time: two concurrent tasks on one partition never share
  one (the second gets a consumer of its own, closed after its read).
* A retried task (attempt > 0) never reuses a cached consumer: it starts from a fresh one.
* A full cache hands its least recently used idle consumer of the same parameters over to
  another partition (:meth:`KafkaDataConsumer.retarget`) rather than closing one and making
  one; a consumer whose hand-over fails is closed, never reused. A retried task never gets
  one.
* A read leased (:meth:`ConsumerCache.lease`) that fails or is abandoned discards its
  consumer: one left mid-range is closed, not reasoned about.

How one consumer reads one range is :mod:`kafka_direct.client.data_consumer`'s contract.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kafka_direct.client.data_consumer import (
    ConsumerFactory,
    KafkaDataConsumer,
    _confluent_consumer,
)
from kafka_direct.client.params import redact

__all__ = ["ConsumerCache", "consumer_cache"]

logger = logging.getLogger(__name__)


class ConsumerCache:
    """Cached :class:`KafkaDataConsumer` instances of one Python worker, LRU-bounded.

    Args:
        capacity: Most consumers kept open (Spark's
            ``spark.streaming.kafka.consumer.cache.maxCapacity``, default 64).
        factory: Builds confluent-kafka consumers (injectable for tests).
    """

    #: The consumers this cache makes (a subclass of :class:`KafkaDataConsumer`).
    consumer_class: type[KafkaDataConsumer] = KafkaDataConsumer

    def __init__(self, capacity: int = 64,
                 factory: ConsumerFactory = _confluent_consumer) -> None:
        self.capacity = capacity
        self.factory = factory
        self._entries: OrderedDict[tuple[Any, ...], KafkaDataConsumer] = OrderedDict()
        self._in_use: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        self.created = 0
        self.handedOver = 0

    @staticmethod
    def _key(topic: str, partition: int, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return (params.get("group.id"), topic, partition,
                tuple(sorted((k, str(v)) for k, v in params.items())))

    def acquire(self, topic: str, partition: int, params: Mapping[str, Any], *,
                attempt: int = 0) -> tuple[KafkaDataConsumer, Callable[[], None]]:
        """A consumer for the partition and the function that hands it back.

        A retried task (``attempt > 0``) closes the cached consumer and gets a fresh one, so
        a consumer in a bad state is not reused.
        """
        key = self._key(topic, partition, params)
        with self._lock:
            if key in self._in_use:  # two concurrent tasks on one partition: do not share
                return self._uncached(topic, partition, params)
            cached = self._entries.pop(key, None)
            if cached is not None and (attempt > 0 or cached.closed):
                cached.close()
                cached = None
            if cached is None and attempt == 0:
                cached = self._handed_over(key, topic, partition)
            if cached is None:
                logger.debug("new executor consumer for %s-%d (%s)", topic, partition,
                             redact(params).get("group.id"))
                cached = self.consumer_class(topic, partition, params, self.factory)
                self.created += 1
            self._entries[key] = cached
            self._in_use.add(key)
            self._trim()

        def release() -> None:
            with self._lock:
                self._in_use.discard(key)
                self._trim()

        return cached, release

    def _trim(self) -> None:
        """Close the least recently used idle consumers past the capacity (with the lock).

        Consumers in use stay (the cache is past its capacity only while they are), and
        are closed when their reads hand them back.
        """
        excess = len(self._entries) - self.capacity
        if excess <= 0:
            return
        idle = [key for key in self._entries if key not in self._in_use][:excess]
        for old_key in idle:
            self._entries.pop(old_key).close()

    def _handed_over(self, key: tuple[Any, ...], topic: str, partition: int
                     ) -> KafkaDataConsumer | None:
        """A full cache's least recently used idle consumer, retargeted to the partition.

        Only one of the same parameters; None when there is none (call with the lock). The
        consumer would be closed to make room; handing it over instead saves making a
        client (its threads and connections) and closing one, most of the cost of a range
        when a worker reads more partitions than the cache holds (a task of many small
        ranges, a topic of many partitions). A retried task never gets one.
        """
        if len(self._entries) < self.capacity:
            return None
        for old_key, old in self._entries.items():
            if old_key in self._in_use or old_key[0] != key[0] or old_key[3] != key[3]:
                continue
            del self._entries[old_key]
            try:
                old.retarget(topic, partition)
            except Exception as error:  # any failure: the consumer is closed, not reused
                logger.debug("handing the consumer of %s-%d over failed: %s", old.topic,
                             old.partition, error)
                old.close()
                return None
            self.handedOver += 1
            return old
        return None

    @contextlib.contextmanager
    def lease(self, topic: str, partition: int, params: Mapping[str, Any], *,
              attempt: int = 0, cached: bool = True) -> Iterator[KafkaDataConsumer]:
        """A consumer for one read: the cached one (``cached``) or a new one, closed after.

        A read that fails or is abandoned (an exception, a generator closed early) discards
        the cached consumer: one left mid-range is closed, not reasoned about.
        """
        if cached:
            consumer, release = self.acquire(topic, partition, params, attempt=attempt)
        else:
            consumer = self.consumer_class(topic, partition, params, self.factory)
            release = consumer.close
        ok = False
        try:
            yield consumer
            ok = True
        finally:
            if not ok and cached:
                self.discard(topic, partition, params, consumer)
            release()

    def _uncached(self, topic: str, partition: int, params: Mapping[str, Any]
                  ) -> tuple[KafkaDataConsumer, Callable[[], None]]:
        consumer = self.consumer_class(topic, partition, params, self.factory)
        self.created += 1
        return consumer, consumer.close

    def discard(self, topic: str, partition: int, params: Mapping[str, Any],
                consumer: KafkaDataConsumer | None = None) -> None:
        """Close and forget the cached consumer of the partition (after a failure).

        Args:
            topic: The partition's topic.
            partition: The partition.
            params: The parameters the consumer was made with.
            consumer: Only if it is this one: a failed read with a consumer of its own (the
                cached one was in use by another task) leaves the other task's alone.
        """
        key = self._key(topic, partition, params)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (consumer is not None and entry is not consumer):
                return
            del self._entries[key]
            self._in_use.discard(key)
        entry.close()

    def clear(self) -> None:
        """Close every cached consumer."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._in_use.clear()
        for entry in entries:
            entry.close()

    def __len__(self) -> int:
        return len(self._entries)


#: The worker-wide cache (a module global, because Python workers outlive tasks).
consumer_cache = ConsumerCache()
