"""StreamSettings: the Spark settings a direct stream reads, parsed and checked once.

Keys, defaults and allowed values (Spark's ``spark.streaming.kafka.*`` names where Spark
has them):

* ``spark.streaming.kafka.consumer.poll.ms`` = 120000: integer > 0, the longest executor wait
  without progress on a range (``createRDD`` applies the same rule).
* ``spark.streaming.kafka.failOnDataLoss`` = true: ``true`` / ``false``.
* ``spark.streaming.kafka.consumer.cache.enabled`` = true: ``true`` / ``false``.
* ``spark.streaming.kafka.maxRecordsPerBatch`` = 0: integer >= 0; 0 = no cap.
* ``spark.streaming.kafka.maxRetries`` = 1: integer >= 0, retries of a driver question.
* ``spark.streaming.kafka.retryBackoffMs`` = 200: integer >= 0.
* ``spark.streaming.kafka.driverTimeoutMs`` = 30000: integer > 0, per driver question; also
  the wait for the group's first assignment at start.
* ``spark.streaming.kafka.rebalanceWaitMs`` = 10000: integer >= 0, how long a batch waits for
  known partitions a rebalance hides.
* ``spark.streaming.backpressure.initialRate`` = 0: finite number >= 0 (records/s).
* ``spark.streaming.kafka.minOffsetsPerTask`` = 0: integer >= 0; above 1, a batch's
  consecutive small ranges share a Spark task up to about this many offsets (a grouped
  KafkaRDD, :mod:`kafka_direct.rdd.range_groups`); 0 or 1: one Spark partition per range.
* ``spark.streaming.kafka.maxRangesPerTask`` = 1000: integer >= 1, most ranges in one task
  when grouped.

Rate limits per partition are :mod:`kafka_direct.dstream.per_partition_config`'s. The users'
table of these settings is in docs/configuration.md (tests/architecture/test_docs.py checks
it against the ``*_CONF`` constants here and there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafka_direct.conf_values import parse_bool, parse_float, parse_int

__all__ = [
    "CACHE_ENABLED_CONF",
    "FAIL_ON_DATA_LOSS_CONF",
    "MAX_RANGES_PER_TASK_CONF",
    "MIN_OFFSETS_PER_TASK_CONF",
    "POLL_TIMEOUT_CONF",
    "StreamSettings",
    "poll_timeout_ms",
]

POLL_TIMEOUT_CONF = "spark.streaming.kafka.consumer.poll.ms"
FAIL_ON_DATA_LOSS_CONF = "spark.streaming.kafka.failOnDataLoss"
CACHE_ENABLED_CONF = "spark.streaming.kafka.consumer.cache.enabled"
MAX_RECORDS_CONF = "spark.streaming.kafka.maxRecordsPerBatch"
MAX_RETRIES_CONF = "spark.streaming.kafka.maxRetries"
RETRY_BACKOFF_CONF = "spark.streaming.kafka.retryBackoffMs"
DRIVER_TIMEOUT_CONF = "spark.streaming.kafka.driverTimeoutMs"
REBALANCE_WAIT_CONF = "spark.streaming.kafka.rebalanceWaitMs"
INITIAL_RATE_CONF = "spark.streaming.backpressure.initialRate"
MIN_OFFSETS_PER_TASK_CONF = "spark.streaming.kafka.minOffsetsPerTask"
MAX_RANGES_PER_TASK_CONF = "spark.streaming.kafka.maxRangesPerTask"

#: A Spark conf lookup: ``get(key, default) -> value``.
ConfGet = Callable[[str, str], str]


def poll_timeout_ms(raw: object) -> int:
    """The executor poll timeout: an integer number of milliseconds > 0.

    One rule for ``createRDD(pollTimeoutMs=...)`` and the stream's Spark setting: 0 would
    fail every non-empty range at once with a PollTimeoutError.
    """
    return parse_int(POLL_TIMEOUT_CONF, raw, 1)


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """A direct stream's settings; each field checked at construction.

    Attributes:
        pollTimeoutMs: Longest executor wait without progress on a range (> 0).
        failOnDataLoss: Raise DataLossError where offsets were lost (else warn, go on).
        useConsumerCache: Reuse executor consumers across tasks.
        maxRecordsPerBatch: Most records per batch over all partitions; 0 = no cap.
        maxRetries: Retries of a failed driver question (>= 0; attempts = retries + 1).
        retryBackoffMs: Pause between attempts (>= 0).
        requestTimeoutMs: Longest a driver question may take (> 0); at start, also how long
            the stream waits for the group's first assignment.
        rebalanceWaitMs: How long a batch waits for known partitions a rebalance hides.
        initialRate: Backpressure's rate (records/s) before its first estimate; 0 = none.
        minOffsetsPerTask: Above 1, consecutive small ranges of a batch share a Spark task
            up to about this many offsets (a grouped KafkaRDD); 0 or 1: one per range.
        maxRangesPerTask: Most ranges one task reads when grouped (>= 1).

    Raises:
        ConfigurationError: A field is of the wrong type or out of range; the message
            names the Spark setting.
    """

    pollTimeoutMs: int = 120_000
    failOnDataLoss: bool = True
    useConsumerCache: bool = True
    maxRecordsPerBatch: int = 0
    maxRetries: int = 1
    retryBackoffMs: int = 200
    requestTimeoutMs: int = 30_000
    rebalanceWaitMs: int = 10_000
    initialRate: float = 0.0
    minOffsetsPerTask: int = 0
    maxRangesPerTask: int = 1000

    def __post_init__(self) -> None:
        poll_timeout_ms(self.pollTimeoutMs)
        parse_bool(FAIL_ON_DATA_LOSS_CONF, self.failOnDataLoss)
        parse_bool(CACHE_ENABLED_CONF, self.useConsumerCache)
        parse_int(MAX_RECORDS_CONF, self.maxRecordsPerBatch, 0)
        parse_int(MAX_RETRIES_CONF, self.maxRetries, 0)
        parse_int(RETRY_BACKOFF_CONF, self.retryBackoffMs, 0)
        parse_int(DRIVER_TIMEOUT_CONF, self.requestTimeoutMs, 1)
        parse_int(REBALANCE_WAIT_CONF, self.rebalanceWaitMs, 0)
        parse_float(INITIAL_RATE_CONF, self.initialRate, 0)
        parse_int(MIN_OFFSETS_PER_TASK_CONF, self.minOffsetsPerTask, 0)
        parse_int(MAX_RANGES_PER_TASK_CONF, self.maxRangesPerTask, 1)

    @classmethod
    def fromConf(cls, get: ConfGet) -> StreamSettings:
        """Parse the settings from a Spark conf lookup (``ssc.conf``).

        Raises:
            ConfigurationError: A setting is not a number (or flag) in its range.
        """
        return cls(
            pollTimeoutMs=poll_timeout_ms(get(POLL_TIMEOUT_CONF, "120000")),
            failOnDataLoss=parse_bool(FAIL_ON_DATA_LOSS_CONF, get(FAIL_ON_DATA_LOSS_CONF,
                                                                  "true")),
            useConsumerCache=parse_bool(CACHE_ENABLED_CONF, get(CACHE_ENABLED_CONF, "true")),
            maxRecordsPerBatch=parse_int(MAX_RECORDS_CONF, get(MAX_RECORDS_CONF, "0"), 0),
            maxRetries=parse_int(MAX_RETRIES_CONF, get(MAX_RETRIES_CONF, "1"), 0),
            retryBackoffMs=parse_int(RETRY_BACKOFF_CONF, get(RETRY_BACKOFF_CONF, "200"), 0),
            requestTimeoutMs=parse_int(DRIVER_TIMEOUT_CONF, get(DRIVER_TIMEOUT_CONF, "30000"),
                                       1),
            rebalanceWaitMs=parse_int(REBALANCE_WAIT_CONF, get(REBALANCE_WAIT_CONF, "10000"),
                                      0),
            initialRate=parse_float(INITIAL_RATE_CONF, get(INITIAL_RATE_CONF, "0"), 0),
            minOffsetsPerTask=parse_int(MIN_OFFSETS_PER_TASK_CONF,
                                        get(MIN_OFFSETS_PER_TASK_CONF, "0"), 0),
            maxRangesPerTask=parse_int(MAX_RANGES_PER_TASK_CONF,
                                       get(MAX_RANGES_PER_TASK_CONF, "1000"), 1))
