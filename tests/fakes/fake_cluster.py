"""A model Kafka cluster and a fake DriverConsumer over it, to drive a direct stream's driver
logic without a broker or a SparkContext.

Each partition's log is ``[start, end)``: ``end`` is the high watermark, ``stable`` the last
stable offset (below ``end`` while a transaction is open). Re-creating a topic gives it new,
empty logs and a new ``generation``; ``hidden`` topics are missing from metadata answers (a
transient gap), as are partitions at or above ``visible_partitions`` of a topic. A ``delete``d
topic is one the cluster says does not exist.
"""

import threading

from kafka_direct import TopicPartition


class Log:
    def __init__(self, end=0):
        self.start = 0
        self.end = end
        self.open_at = None  # first offset of an open transaction

    @property
    def stable(self):
        return self.end if self.open_at is None else self.open_at


class FakeCluster:
    def __init__(self):
        self.topics = {}
        self.hidden = set()
        self.visible_partitions = {}
        self.committed = {}  # (group, tp) -> offset
        self.commit_log = []  # (group, {tp: offset}) in commit order
        self.fail_commits = False

    def create(self, topic, partitions=1):
        self.topics[topic] = [Log() for _ in range(partitions)]

    def recreate(self, topic, partitions=None):
        self.create(topic, partitions or len(self.topics[topic]))

    def delete(self, topic):
        del self.topics[topic]

    def log(self, tp):
        return self.topics[tp.topic][tp.partition]

    def produce(self, tp, n):
        self.log(tp).end += n

    def add_partitions(self, topic, n):
        self.topics[topic].extend(Log() for _ in range(n))

    def truncate(self, tp, end):
        """The log loses its tail (an unclean leader election)."""
        log = self.log(tp)
        log.end = end
        log.start = min(log.start, end)

    def counts(self):
        return {topic: self.visible_partitions.get(topic, len(logs))
                for topic, logs in self.topics.items() if topic not in self.hidden}


class FakeDriverConsumer:
    """The DriverConsumer's questions, answered from a FakeCluster."""

    def __init__(self, cluster, params, log=None):
        self.cluster = cluster
        self.params = dict(params)
        self.groupId = str(self.params.get("group.id", ""))
        self.readCommitted = str(self.params.get("isolation.level", "read_committed")) \
            == "read_committed"
        self.subscribed = False
        self.topics = []
        self.closed = False
        self.calls = log if log is not None else []
        self._lock = threading.Lock()

    def _check_open(self):
        if self.closed:
            raise RuntimeError("the consumer is closed")

    def subscribe(self, topics):
        self.subscribed, self.topics = True, list(topics)

    def assignment(self, waitSeconds=0.0):
        counts = self.cluster.counts()
        return {TopicPartition(t, p) for t in self.topics if t in counts
                for p in range(counts[t])}

    def partitionsOf(self, topics):
        counts = self.cluster.counts()
        return {t: counts[t] for t in topics if t in counts}

    def topicsMatching(self, matches):
        return {t: n for t, n in self.cluster.counts().items() if matches(t)}

    def listTopics(self, topics):
        from kafka_direct.client.topic_metadata import TopicListing

        unknown = {t for t in topics if t not in self.cluster.topics}
        return TopicListing(self.partitionsOf(topics), frozenset(unknown))

    def listMatching(self, matches, known=()):
        from kafka_direct.client.topic_metadata import TopicListing

        unknown = {t for t in known if t not in self.cluster.topics}
        return TopicListing(self.topicsMatching(matches), frozenset(unknown))

    def leaders(self, partitions):
        return {tp: "localhost" for tp in partitions}

    def latestOffsets(self, partitions):
        self._check_open()
        return {tp: (self.cluster.log(tp).stable if self.readCommitted
                     else self.cluster.log(tp).end) for tp in partitions}

    def highWatermarks(self, partitions):
        return {tp: self.cluster.log(tp).end for tp in partitions}

    def earliestOffsets(self, partitions):
        return {tp: self.cluster.log(tp).start for tp in partitions}

    def offsetsForTimes(self, timestamps):
        return self.latestOffsets(timestamps)

    def committed(self, partitions):
        return {tp: self.cluster.committed[(self.groupId, tp)] for tp in partitions
                if (self.groupId, tp) in self.cluster.committed}

    def commit(self, offsets):
        with self._lock:
            self._check_open()
            if self.cluster.fail_commits:
                raise RuntimeError("the group coordinator is not available")
            self.calls.append(("commit", dict(offsets)))
            self.cluster.commit_log.append((self.groupId, dict(offsets)))
            for tp, offset in offsets.items():
                self.cluster.committed[(self.groupId, tp)] = offset

    def close(self):
        self.closed = True


class _Conf:
    def __init__(self, values):
        self.values = {k: str(v) for k, v in values.items()}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value


class FakeSparkContext:
    """What a StreamingContext asks of its SparkContext before it starts: settings and the
    job thread's local properties."""

    #: Spark's default parallelism (a grouped stream keeps at least this many tasks).
    defaultParallelism = 1

    def __init__(self, conf=None):
        self._conf = _Conf(conf or {})
        self._local = threading.local()

    def getConf(self):
        return self._conf

    def setLocalProperty(self, key, value):
        props = self._local.__dict__.setdefault("props", {})
        props[key] = value

    def getLocalProperty(self, key):
        return self._local.__dict__.get("props", {}).get(key)


def stub_rdds(monkeypatch, wrap=list):
    """The stream's KafkaRDDs are the ranges themselves (``wrap(ranges)``): compute()
    without Spark."""
    from kafka_direct.dstream import direct_kafka_batches
    from kafka_direct.rdd.kept_parent import KeptGroups, KeptParent

    monkeypatch.setattr(direct_kafka_batches, "kafka_rdd",
                        lambda sc, ranges, *args: wrap(ranges))
    # A grouped batch of many partitions: its ranges made beside the JVM's reading.
    monkeypatch.setattr(direct_kafka_batches, "kafka_rdd_beside",
                        lambda sc, elements, partitions, settings, strategy, leaders, ranges,
                        sizes=None: wrap(ranges()))
    # An ungrouped batch: its RDD over the stream's kept parent (see compute).
    monkeypatch.setattr(KeptParent, "locations", staticmethod(
        lambda sc, partitions, strategy, leaders: [[]] * len(partitions)))
    monkeypatch.setattr(KeptParent, "kafka_rdd",
                        lambda self, sc, partitions, offsets, settings, locations, ranges:
                        wrap(ranges()))
    # A grouped batch: its RDD over a kept parent of as many groups.
    monkeypatch.setattr(KeptGroups, "kafka_rdd",
                        lambda self, sc, partitions, offsets, sizes, settings, locations,
                        ranges: wrap(ranges()))


def make_stream(cluster, strategy, conf=None, batch_seconds=1, **options):
    """A DirectKafkaInputDStream on a fake SparkContext and a FakeDriverConsumer.

    ``options`` go to the stream's constructor (``waitClock=``).
    """
    from kafka_direct import LocationStrategies, StreamingContext
    from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream

    ssc = StreamingContext(FakeSparkContext(conf), batch_seconds)
    drivers = []

    def factory(params):
        drivers.append(FakeDriverConsumer(cluster, params))
        return drivers[-1]

    stream = DirectKafkaInputDStream(ssc, LocationStrategies.PreferConsistent(), strategy,
                                     driverConsumerFactory=factory, **options)
    stream.drivers = drivers
    stream.initialize(0)
    return stream


def on_job_thread(stream, batch_time, action):
    """Run ``action`` as an output operation of batch ``batch_time`` would: with the batch
    time in the thread's local properties."""
    from kafka_direct.streaming.job_scheduler import BATCH_TIME_PROPERTY

    sc = stream.ssc.sparkContext
    sc.setLocalProperty(BATCH_TIME_PROPERTY, str(batch_time))
    try:
        return action()
    finally:
        sc.setLocalProperty(BATCH_TIME_PROPERTY, None)
