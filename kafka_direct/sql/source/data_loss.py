"""The query's positions against the logs of now: records lost, and what only waits.

Where the logs of now disagree with the offsets the query has read, records were lost or
something waits. Spark's Kafka source reports such losses as data loss; this one checks for
them on the driver at every trigger (and when a query starts from its offset store):

* a log that ends below the query's position (truncated, or its topic re-created)
  (:meth:`DataLossChecks.behind`); under ``read_committed`` an end held back by an open
  transaction is no loss: the partition waits at its position;
* a topic the cluster says no longer exists (:meth:`DataLossChecks.lost`); a partition
  missing from one metadata answer while its topic exists is a gap of the moment and keeps
  its position (:meth:`DataLossChecks.note_gaps`);
* under ``Trigger.AvailableNow``, a log that now ends below the target taken when the query
  started (:meth:`DataLossChecks.check_target`);
* a new partition whose first records were deleted before the query saw it
  (:meth:`DataLossChecks.check_new`).

With ``failOnDataLoss`` (the default) a loss is a :class:`~kafka_direct.errors.DataLossError`
naming the partition and its offsets; without it a warning, and the query goes on with what
exists. The offsets are asked through the source's
:class:`~kafka_direct.sql.source.metadata.SourceMetadata`.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping

from kafka_direct.client.topic_metadata import TopicListing
from kafka_direct.errors import DataLossError
from kafka_direct.sql.source.admission import NEW_PARTITION_START
from kafka_direct.sql.source.metadata import SourceMetadata, partition_names
from kafka_direct.topic_partition import TopicPartition, same_partitions

__all__ = ["DataLossChecks"]

logger = logging.getLogger(__name__)


class DataLossChecks:
    """A source's positions checked against the logs of now, on the driver.

    Args:
        metadata: The source's questions to Kafka; its options' ``failOnDataLoss`` decides
            between a :class:`~kafka_direct.errors.DataLossError` and a warning.
    """

    def __init__(self, metadata: SourceMetadata) -> None:
        self.options = metadata.options
        self._metadata = metadata
        #: New partitions whose lost first records were warned about (once each).
        self._warned: set[TopicPartition] = set()
        #: Partitions missing from the last metadata answers (warned about once a gap).
        self._gaps: set[TopicPartition] = set()

    def behind(self, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
               ) -> dict[TopicPartition, int]:
        """``latest`` with partitions whose end fell below their start sorted out.

        Ends only grow in a live log. An end below the start is either a position held back
        by an open transaction (under ``read_committed`` the end is the last stable offset;
        the high watermark is at or above the position): the partition waits at its start;
        or the log lost offsets the query had read (truncated, or its topic re-created).

        Raises:
            DataLossError: The log lost offsets, and ``failOnDataLoss`` is true. Otherwise a
                warning, and the partition ends at its new log start: the next batch reads
                the new log from there.
        """
        if same_partitions(start, latest) and not any(
                map(operator.lt, latest.values(), start.values())):
            return dict(latest)  # the usual trigger: compared in order, in C
        start_of = start.get
        behind = {tp: end for tp, end in latest.items()
                  if end < start_of(tp, end)}  # a partition start lacks is not behind
        if not behind:
            return dict(latest)
        checked = dict(latest)
        if self._metadata.readCommitted:
            high = self._metadata.high_watermarks(behind)
            for tp in [tp for tp in behind if high.get(tp, -1) >= start[tp]]:
                logger.info("kafka-direct source: %s waits at %d for an open transaction "
                            "(stable end %d)", tp, start[tp], behind.pop(tp))
                checked[tp] = start[tp]
        if not behind:
            return checked
        starts = self._metadata.earliest(behind)
        for tp, end in sorted(behind.items()):
            position, log_start = start[tp], min(starts.get(tp, 0), end)
            if self.options.failOnDataLoss:
                raise DataLossError(
                    f"the log of {tp} ends at {end}, below the query's position {position}: "
                    "it was truncated or its topic re-created, and records were lost. Set the "
                    f"source option failOnDataLoss=false to go on from its log start "
                    f"{log_start}", topic=tp.topic, partition=tp.partition,
                    fromOffset=position, untilOffset=position, logStartOffset=log_start,
                    logEndOffset=end)
            logger.warning("kafka-direct source: the log of %s ends at %d, below the query's "
                           "position %d (truncated or re-created: records lost); going on "
                           "from its log start %d (failOnDataLoss=false)", tp, end, position,
                           log_start)
            checked[tp] = log_start
        return checked

    def lost(self, positions: Mapping[TopicPartition, int], listing: TopicListing
             ) -> set[TopicPartition]:
        """The partitions of ``positions`` whose topic the cluster says does not exist.

        Spark's source reports a partition that disappears as data loss: what was not read
        yet is gone, and a topic created again under the name is a new log whose offsets say
        nothing about the old one. Only the cluster's "unknown topic" counts; a partition
        missing from an answer for any other reason (no leader, a partial listing) is a gap
        of the moment and keeps its position (:meth:`note_gaps`).

        Returns:
            The lost partitions (with ``failOnDataLoss=false``): the caller drops them from
            the offsets, so that a re-created topic's partitions are new, read from offset 0.

        Raises:
            DataLossError: With ``failOnDataLoss``, naming the first lost partition.
        """
        lost = sorted(tp for tp in positions if tp.topic in listing.unknown)
        if not lost:
            return set()
        tp = lost[0]
        if self.options.failOnDataLoss:
            raise DataLossError(
                f"topic {tp.topic} does not exist any more (deleted) while the query reads "
                f"{partition_names(lost)} (at offset {positions[tp]} of {tp}): records it "
                "had not read are lost, and a topic created again under the name is a new "
                "log. Set the source option failOnDataLoss=false to drop its partitions and "
                "read them from offset 0 if the topic is created again", topic=tp.topic,
                partition=tp.partition, fromOffset=positions[tp], untilOffset=positions[tp])
        logger.warning("kafka-direct source: topic %s does not exist any more (deleted): "
                       "dropping %s (positions %s); records not read are lost, and a topic "
                       "created again is read from offset 0 (failOnDataLoss=false)",
                       tp.topic, partition_names(lost), [positions[p] for p in lost])
        return set(lost)

    def note_gaps(self, positions: Mapping[TopicPartition, int],
                  present: set[TopicPartition], lost: set[TopicPartition]) -> None:
        """Warn, once a gap, of partitions the metadata answer left out: they wait."""
        gaps = set(positions) - present - lost
        for tp in sorted(gaps - self._gaps):
            logger.warning("kafka-direct source: %s is missing from the cluster's metadata "
                           "answer while its topic exists (a transient gap); it keeps its "
                           "position %d until it is listed again", tp, positions[tp])
        self._gaps = gaps

    def check_target(self, start: Mapping[TopicPartition, int],
                     target: Mapping[TopicPartition, int], present: set[TopicPartition]
                     ) -> dict[TopicPartition, int]:
        """``Trigger.AvailableNow``: the target offsets against the logs of now.

        The target was taken when the query started; a log that ends below it since was
        truncated or re-created (under ``read_committed`` the end is the last stable
        offset, which never goes back either), so the batches cannot read up to it.

        Returns:
            The target, with the ends of shrunk logs where ``failOnDataLoss=false`` (a
            warning): the run goes on with what exists. Partitions missing from ``present``
            (a gap) keep their target.

        Raises:
            DataLossError: A log ends below the target, and ``failOnDataLoss`` is true.
        """
        asked = sorted(tp for tp in target if tp in present)
        now = self._metadata.latest(asked)
        checked = dict(target)
        for tp in asked:
            end, goal = now.get(tp, target[tp]), target[tp]
            if end >= goal:
                continue
            position = start.get(tp, NEW_PARTITION_START)
            if self.options.failOnDataLoss:
                raise DataLossError(
                    f"the log of {tp} now ends at {end}, below the Trigger.AvailableNow "
                    f"target {goal} taken when the query started (position {position}): it "
                    "was truncated or its topic re-created, and records were lost. Set the "
                    "source option failOnDataLoss=false to read what exists",
                    topic=tp.topic, partition=tp.partition, fromOffset=position,
                    untilOffset=goal, logEndOffset=end)
            logger.warning("kafka-direct source: the log of %s now ends at %d, below the "
                           "Trigger.AvailableNow target %d (truncated or re-created: records "
                           "lost); reading up to %d (failOnDataLoss=false)", tp, end, goal,
                           end)
            checked[tp] = end
        return checked

    def check_new(self, start: Mapping[TopicPartition, int],
                  latest: Mapping[TopicPartition, int]) -> None:
        """Report new partitions whose first records were deleted before the query saw them.

        A new partition is read from offset 0 (:data:`NEW_PARTITION_START`); a log starting
        above that lost records.

        Raises:
            DataLossError: With ``failOnDataLoss`` (else a warning; the task skips them).
        """
        if same_partitions(start, latest):
            return  # the usual trigger: no partition is new
        new = [tp for tp, end in latest.items()
               if end > NEW_PARTITION_START and tp not in start]
        if not new:
            return
        for tp, log_start in sorted(self._metadata.earliest(new).items()):
            if log_start <= NEW_PARTITION_START:
                continue
            if self.options.failOnDataLoss:
                raise DataLossError(
                    f"partition {tp} was added with its log starting at {log_start}, not 0: "
                    f"offsets [0, {log_start}) were deleted before the query saw them. Set "
                    "the source option failOnDataLoss=false to read it from its log start",
                    topic=tp.topic, partition=tp.partition, fromOffset=NEW_PARTITION_START,
                    untilOffset=log_start, logStartOffset=log_start)
            if tp not in self._warned:
                self._warned.add(tp)
                logger.warning("kafka-direct source: partition %s was added with its log "
                               "starting at %d: offsets [0, %d) were lost; reading it from "
                               "%d (failOnDataLoss=false)", tp, log_start, log_start,
                               log_start)
