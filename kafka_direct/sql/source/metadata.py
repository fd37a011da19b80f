"""The source's questions to Kafka on the driver: which partitions, where they start and end.

One :class:`~kafka_direct.client.driver_consumer.DriverConsumer`, created on first use and closed by
:meth:`SourceMetadata.close`. It never joins a consumer group and never reads a record: it
lists topics (``subscribe``, ``subscribePattern`` matched here with ``re.fullmatch``), asks
for offsets (``ListOffsets`` with the source's isolation level: under ``read_committed``,
librdkafka's default, a partition ends at its last stable offset) and, only with
``commitOffsetsToGroup``, commits a batch's end to ``kafka.group.id``. What the answers mean
for the query's positions (records lost, or waiting) is :mod:`~kafka_direct.sql.source.data_loss`'s.

Every question is retried ``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs``
apart (:class:`~kafka_direct.client.retry.Retrier`).

From :data:`ASK_AHEAD_FROM` partitions, a trigger's end offsets are asked while its topic
listing is, of the partitions whose ends the trigger before asked (:meth:`SourceMetadata.
ask_ahead`): the answer stands only if the listing shows exactly those partitions, and
otherwise the ends are asked again of what the listing shows, as without it. The end offsets
are asked by up to three consumers at once (the direct stream's ``STREAM_ASKERS``).

Ends asked ahead can be older than the listing by its round trip. A topic deleted and
re-created with as many partitions within those milliseconds then shows its new life in the
listing and its former life's ends in the answer, and no listing can tell the two apart (it
carries no topic id). That is the race every Kafka source has with a re-creation just after
a trigger's planning, no wider in kind: the executors meet the new, shorter log. Under
``failOnDataLoss`` the batch fails with ``DataLossError``. Without it the range ends with
what exists (a warning), the next trigger finds the end below the query's position and
goes on from the new log's start
(:meth:`~kafka_direct.sql.source.data_loss.DataLossChecks.behind`): the new log's records
the range held, those at or above the former position, are then delivered a second time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from kafka_direct.client.driver_consumer import STREAM_ASKERS, DriverConsumer
from kafka_direct.client.params import reads_committed
from kafka_direct.client.retry import Retrier
from kafka_direct.client.topic_metadata import TopicListing
from kafka_direct.errors import ConfigurationError, UnknownTopicOrPartitionError
from kafka_direct.sql.source.offsets import EARLIEST, LATEST
from kafka_direct.sql.source.options import OffsetSpec, SourceOptions
from kafka_direct.topic_partition import TopicPartition

__all__ = ["ASK_AHEAD_FROM", "DriverFactory", "EndsAsked", "SourceMetadata", "partition_names"]

logger = logging.getLogger(__name__)

DriverFactory = Callable[[dict[str, Any]], DriverConsumer]

#: Partitions from which a trigger asks its end offsets beside its topic listing: below, the
#: listing's round trip is shorter than a thread's hand-over on a busy machine.
ASK_AHEAD_FROM = 100


class _RefreshingAdmin:
    """An AdminClient that refreshes a topic's metadata before its first offset question.

    An AdminClient answers ``ListOffsets`` from its own metadata cache, refreshed every few
    minutes: a partition added since (the source found it in a fresh topic listing) is
    "Local: Unknown partition" until then. One metadata request per topic with a partition
    it was not asked about before avoids that.
    """

    def __init__(self, admin: Any) -> None:
        self._admin = admin
        self._asked: set[tuple[str, int]] = set()

    def list_offsets(self, request: Any, **kwargs: Any) -> Any:
        """``AdminClient.list_offsets``, after refreshing topics with unasked partitions."""
        fresh = sorted({tp.topic for tp in request
                        if (tp.topic, tp.partition) not in self._asked})
        for topic in fresh:
            self._admin.list_topics(topic, timeout=kwargs.get("request_timeout", 30))
        futures = self._admin.list_offsets(request, **kwargs)
        self._asked.update((tp.topic, tp.partition) for tp in request)
        return futures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)


def _driver(params: dict[str, Any]) -> DriverConsumer:
    from confluent_kafka.admin import AdminClient

    # Three asking consumers: a broker answers one connection's requests one at a time, and
    # a thousand partitions' ends are ten requests.
    return DriverConsumer(params, adminFactory=lambda p: _RefreshingAdmin(AdminClient(p)),
                          askers=STREAM_ASKERS)


def partition_names(partitions: Iterable[TopicPartition]) -> str:
    """``partitions`` for a message: sorted, separated by commas; ``none`` for none."""
    return ", ".join(str(tp) for tp in sorted(partitions)) or "none"


#: A question :meth:`SourceMetadata.ask_ahead` started: the partitions asked, the answer.
EndsAsked = tuple[frozenset[TopicPartition], Future[dict[TopicPartition, int]]]


class SourceMetadata:
    """Partitions and offsets of one source, asked of Kafka on the driver.

    Args:
        options: The source's options.
        driverFactory: Builds the driver consumer from its parameters (injectable).
    """

    def __init__(self, options: SourceOptions, driverFactory: DriverFactory | None = None
                 ) -> None:
        self.options = options
        self._factory: DriverFactory = driverFactory or _driver
        self._driver: DriverConsumer | None = None
        self._retrying = Retrier(maxRetries=options.numRetries,
                                 backoffMs=options.retryIntervalMs,
                                 servers=str(options.kafkaParams.get("bootstrap.servers", "")))
        #: The last partition counts listed, and their partitions (see :meth:`present`).
        self._present: tuple[dict[str, int], frozenset[TopicPartition]] | None = None
        #: The partitions whose end offsets were asked last (see :meth:`ask_ahead`).
        self._asked: frozenset[TopicPartition] | None = None
        #: The thread that asks end offsets beside a listing, made when first needed.
        self._ahead: ThreadPoolExecutor | None = None

    @property
    def readCommitted(self) -> bool:
        """Whether the source reads under ``read_committed`` (librdkafka's default)."""
        return reads_committed(self.options.kafkaParams)

    @property
    def driver(self) -> DriverConsumer:
        """The driver consumer, created on first use."""
        if self._driver is None:
            params = dict(self.options.kafkaParams)
            params["enable.auto.commit"] = False
            params["enable.auto.offset.store"] = False
            self._driver = self._factory(params)
        return self._driver

    def close(self) -> None:
        """Close the driver consumer, if one was created; a later question creates another."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.shutdown(wait=True)
        self._asked = None
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.close()

    # -- partitions -----------------------------------------------------------------------

    def partitions(self) -> set[TopicPartition]:
        """The partitions the source reads now (for ``assign``: the assigned ones)."""
        subscription = self.options.subscription
        if subscription.kind == "assign":
            return set(subscription.partitions)
        return self.present(self.listing())

    def listing(self, known: Iterable[str] = ()) -> TopicListing:
        """The subscription's topics as the cluster lists them now.

        Args:
            known: Topics the query has positions in: for ``subscribePattern``, those the
                listing no longer shows are asked for by name, to tell a deleted topic from
                a gap in the answer.
        """
        subscription = self.options.subscription
        driver = self.driver
        if subscription.kind == "subscribePattern":
            names = sorted(set(known))
            listing: TopicListing = self._retrying(
                "listing the topics matching subscribePattern",
                lambda: driver.listMatching(subscription.matches, names))
            return listing
        topics = (subscription.topics if subscription.kind == "subscribe"
                  else sorted({tp.topic for tp in subscription.partitions}))
        listing = self._retrying("listing the subscribed topics' partitions",
                                 lambda: driver.listTopics(topics))
        return listing

    def present(self, listing: TopicListing) -> set[TopicPartition]:
        """The partitions of ``listing`` the source reads (``assign``: those that exist)."""
        subscription = self.options.subscription
        if subscription.kind == "assign":
            return {tp for tp in subscription.partitions
                    if tp.partition < listing.counts.get(tp.topic, 0)}
        counts = dict(listing.counts)
        if self._present is None or self._present[0] != counts:
            # Built again only when the counts change: the same TopicPartition objects
            # trigger after trigger make every lookup of a partition in the query's offsets
            # an identity hit (no __eq__ call) and save building a thousand of them.
            self._present = (counts, frozenset(TopicPartition(topic, p)
                                               for topic, n in counts.items()
                                               for p in range(n)))
        return set(self._present[1])

    def check_assigned(self) -> None:
        """Fail unless every assigned partition exists (``assign`` only).

        Raises:
            UnknownTopicOrPartitionError: Names the first missing partition.
        """
        subscription = self.options.subscription
        if subscription.kind != "assign":
            return
        driver = self.driver
        topics = sorted({tp.topic for tp in subscription.partitions})
        counts: dict[str, int] = self._retrying("listing the assigned topics' partitions",
                                                lambda: driver.partitionsOf(topics))
        missing = [tp for tp in subscription.partitions
                   if tp.partition >= counts.get(tp.topic, 0)]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"option 'assign' names {partition_names(missing)}, which the cluster does not "
                "have; check the topic names and partition counts",
                topic=missing[0].topic, partition=missing[0].partition)

    # -- offsets --------------------------------------------------------------------------

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """End offsets (the last stable offset under ``read_committed``)."""
        return self._offsets("reading latest offsets", partitions,
                             lambda driver, wanted: driver.latestOffsets(wanted))

    def _offsets(self, what: str, partitions: Iterable[TopicPartition],
                 ask: Callable[[DriverConsumer, frozenset[TopicPartition]],
                               dict[TopicPartition, int]]) -> dict[TopicPartition, int]:
        """``ask(driver, partitions)`` with retries (nothing asked of no partition)."""
        wanted = frozenset(partitions)
        if not wanted:
            return {}
        driver = self.driver
        # A set, not a list: the driver keeps its requests while the partitions stay.
        found: dict[TopicPartition, int] = self._retrying(what, lambda: ask(driver, wanted))
        return found

    def trigger_latest(self, partitions: Iterable[TopicPartition],
                       ahead: EndsAsked | None = None) -> dict[TopicPartition, int]:
        """A trigger's end offsets: :meth:`latest`, remembered for :meth:`ask_ahead`.

        Args:
            partitions: The partitions the trigger's listing shows.
            ahead: The question :meth:`ask_ahead` started, if any: waited for, and its
                answer taken if it asked exactly ``partitions`` and got an answer;
                otherwise the ends are asked here (with retries), as without it.
        """
        wanted = frozenset(partitions)
        answer = self.settle(ahead)
        if answer is not None and answer[0] == wanted:
            return answer[1]
        found = self.latest(wanted)
        self._asked = wanted
        return found

    def ask_ahead(self) -> EndsAsked | None:
        """Start asking the end offsets the last trigger asked, in a thread; or None.

        Asked beside the trigger's topic listing, the listing's round trip is no longer
        before the end offsets' (when the listing shows the same partitions, as it does
        but for a topic added, grown or deleted). The question is asked once, without
        retries: a failure leaves the ends to :meth:`trigger_latest`. The caller hands
        the result to :meth:`trigger_latest` or :meth:`settle`, so that no question runs
        past the trigger. Nothing is started below :data:`ASK_AHEAD_FROM` partitions, before the
        first :meth:`trigger_latest`, or once closed.
        """
        asked, driver = self._asked, self._driver
        if asked is None or driver is None or len(asked) < ASK_AHEAD_FROM:
            return None
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="kafka-direct-source-ends")
        return asked, self._ahead.submit(driver.latestOffsets, asked)

    @staticmethod
    def settle(ahead: EndsAsked | None
               ) -> tuple[frozenset[TopicPartition], dict[TopicPartition, int]] | None:
        """Wait for :meth:`ask_ahead`'s question: its partitions and answer, or None.

        None when nothing was asked or the question failed (its error is not the
        trigger's: the ends are asked again, and a lasting failure raises there).
        """
        if ahead is None:
            return None
        asked, future = ahead
        try:
            return asked, future.result()
        except Exception as error:
            logger.debug("kafka-direct source: end offsets asked beside the listing failed "
                         "(asked again): %s", error)
            return None

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offsets."""
        return self._offsets("reading earliest offsets", partitions,
                             lambda driver, wanted: driver.earliestOffsets(wanted))

    def high_watermarks(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, int]:
        """High watermarks: the log's end whatever its transactions (for ``read_committed``)."""
        return self._offsets("reading high watermarks", partitions,
                             lambda driver, wanted: driver.highWatermarks(wanted))

    def for_times(self, timestamps: Mapping[TopicPartition, int]
                  ) -> dict[TopicPartition, int | None]:
        """The first offset whose record's timestamp is at or after each time, None if none.

        A matched offset is that of an existing record, so it lies below the end offset; an
        answer at the end means no record is that recent.
        """
        if not timestamps:
            return {}
        driver = self.driver
        found: dict[TopicPartition, int] = self._retrying(
            "looking offsets up by timestamp", lambda: driver.offsetsForTimes(dict(timestamps)))
        ends = self.latest(timestamps)
        return {tp: (found[tp] if 0 <= found.get(tp, -1) < ends.get(tp, 0) else None)
                for tp in timestamps}

    def resolve(self, spec: OffsetSpec, partitions: Iterable[TopicPartition], *,
                ending: bool = False) -> dict[TopicPartition, int]:
        """Concrete offsets of ``partitions`` as ``spec`` says.

        Args:
            spec: The starting (or ending) offsets option.
            partitions: The partitions to place.
            ending: ``spec`` is a batch query's end: a timestamp no record reaches means
                latest (for a start, ``startingOffsetsByTimestampStrategy`` decides).

        Raises:
            ConfigurationError: JSON that misses or invents partitions; a timestamp no
                record reaches with the ``error`` strategy; an offset beyond the end.
        """
        wanted = set(partitions)
        if not wanted:
            return {}
        if spec.kind == "earliest":
            return self.earliest(wanted)
        if spec.kind == "latest":
            return self.latest(wanted)
        if spec.kind == "timestamp":
            if spec.timestamp is None:
                raise ConfigurationError(f"option {spec.option!r} needs a timestamp")
            return self._by_time({tp: spec.timestamp for tp in wanted}, spec, ending)
        named = {tp: value for tp, value in spec.offsets.items() if tp in wanted}
        named.update({tp: spec.topics[tp.topic] for tp in wanted
                      if tp.topic in spec.topics and tp not in named})
        self._check_named(spec, wanted)  # as Spark: JSON names every partition
        if spec.kind == "timestamps":
            return self._by_time(named, spec, ending)
        return self._given(named, spec)

    def _check_named(self, spec: OffsetSpec, wanted: set[TopicPartition]) -> None:
        named = set(spec.offsets) | {tp for tp in wanted if tp.topic in spec.topics}
        unknown = named - wanted
        unread = sorted(set(spec.topics) - {tp.topic for tp in wanted})
        missing = wanted - named
        if unknown or missing or unread:
            faults = []
            if unknown:
                faults.append(f"it names {partition_names(unknown)}, which the source does "
                              "not read")
            if unread:
                faults.append(f"it names topics {', '.join(unread)}, which the source does "
                              "not read")
            if missing:
                faults.append(f"it misses {partition_names(missing)}")
            raise ConfigurationError(
                f"option {spec.option!r} must name exactly the partitions the source reads "
                f"(use -2 for earliest and -1 for latest where the option allows): "
                f"{'; '.join(faults)}. The source reads {partition_names(wanted)}")

    def _given(self, named: Mapping[TopicPartition, int], spec: OffsetSpec
               ) -> dict[TopicPartition, int]:
        offsets = {tp: o for tp, o in named.items() if o >= 0}
        offsets.update(self.earliest(tp for tp, o in named.items() if o == EARLIEST))
        ends = self.latest(named)
        offsets.update({tp: ends[tp] for tp, o in named.items() if o == LATEST})
        beyond = sorted(tp for tp, o in offsets.items() if o > ends.get(tp, o))
        if beyond:
            tp = beyond[0]
            raise ConfigurationError(
                f"option {spec.option!r}: offset {offsets[tp]} of {tp} is beyond its end "
                f"offset {ends[tp]}; give an offset at or below the end (or -1 for latest)",
                topic=tp.topic, partition=tp.partition)
        return offsets

    def _by_time(self, timestamps: Mapping[TopicPartition, int], spec: OffsetSpec,
                 ending: bool) -> dict[TopicPartition, int]:
        found = self.for_times(timestamps)
        unmatched = sorted(tp for tp, offset in found.items() if offset is None)
        if unmatched and not ending and self.options.timestampStrategy == "error":
            tp = unmatched[0]
            raise ConfigurationError(
                f"option {spec.option!r}: no record of {partition_names(unmatched)} has a "
                f"timestamp at or after {timestamps[tp]}; give an earlier time, or set "
                "startingOffsetsByTimestampStrategy=latest to start those partitions at their "
                "latest offset", topic=tp.topic, partition=tp.partition)
        offsets = {tp: offset for tp, offset in found.items() if offset is not None}
        offsets.update(self.latest(unmatched))
        return offsets

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit next-to-read offsets to ``kafka.group.id`` (for monitoring tools)."""
        driver = self.driver
        self._retrying("committing offsets to the group", lambda: driver.commit(offsets))
