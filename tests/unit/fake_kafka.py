"""A fake confluent-kafka consumer over an in-memory partition log, for unit tests."""

from confluent_kafka import KafkaError


class FakeMessage:
    def __init__(self, topic, partition, offset, value=None, error=None, ms=None):
        self._t, self._p, self._o, self._v, self._e = topic, partition, offset, value, error
        self._ms = 1000 + offset if ms is None else ms

    def error(self):
        return self._e

    def offset(self):
        return self._o

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def key(self):
        return None

    def value(self):
        return self._v

    def timestamp(self):
        return (1, self._ms)

    def headers(self):
        return None


class FakeLog:
    """Records at ``offsets`` of one partition; offsets below ``high`` without a record are
    gaps (markers, compaction); ``stuck_at`` simulates an open transaction; ``timestamps``
    gives records a timestamp (ms) other than the default ``1000 + offset``."""

    def __init__(self, offsets, high=None, low=0, stuck_at=None, timestamps=None):
        self.records = sorted(offsets)
        self.high = high if high is not None else (self.records[-1] + 1 if self.records else 0)
        self.low = low
        self.stuck_at = stuck_at
        self.timestamps = dict(timestamps or {})


class FakeConsumer:
    def __init__(self, log, topic="t", partition=0):
        self.log, self.topic, self.partition = log, topic, partition
        self.pointer = None
        self.assigns = []
        self.seeks = []
        self.closed = False
        self.error_pending = False
        self.paused = False

    def assign(self, tps):
        (tp,) = tps
        self.pointer = tp.offset
        self.assigns.append(tp.offset)
        self.error_pending = self.pointer < self.log.low or self.pointer > self.log.high

    def pause(self, tps):
        self.paused = True

    def resume(self, tps):
        self.paused = False

    def seek(self, tp):
        self.pointer = tp.offset
        self.seeks.append(tp.offset)

    def consume(self, num, timeout):
        if self.error_pending:
            self.error_pending = False
            return [FakeMessage(self.topic, self.partition, -1,
                                error=KafkaError(KafkaError._AUTO_OFFSET_RESET))]
        limit = self.log.high if self.log.stuck_at is None else self.log.stuck_at
        out = [o for o in self.log.records if self.pointer <= o < limit][:num]
        if out:
            self.pointer = out[-1] + 1
        elif self.pointer < limit:
            self.pointer = limit  # librdkafka steps over control records
        return [FakeMessage(self.topic, self.partition, o, value=b"v%d" % o,
                            ms=self.log.timestamps.get(o)) for o in out]

    def position(self, tps):
        from confluent_kafka import TopicPartition

        return [TopicPartition(self.topic, self.partition,
                               self.pointer if self.pointer is not None else -1001)]

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return (self.log.low, self.log.high)

    def close(self):
        self.closed = True
