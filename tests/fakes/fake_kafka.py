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

    def unassign(self):
        self.pointer = None
        self.unassigned = getattr(self, "unassigned", 0) + 1

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

    def list_topics(self, topic=None, timeout=None):
        self.asked = [*getattr(self, "asked", []), topic]
        if getattr(self, "metadata_fails", False):
            from confluent_kafka import KafkaException

            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def close(self):
        self.closed = True


class FakeNativeConsumer:
    """The native reader's consumer (``_columnar.Consumer``) over a :class:`FakeConsumer`.

    ``consume`` scans as ``_columnar.c`` does (records below the position skipped, a stop at
    the first record at or past the range's end and at the first error, whose followers
    stay for the next call) and returns the same tuple, its buffers built with pyarrow.
    """

    def __init__(self, log, topic="t", partition=0):
        self.inner = FakeConsumer(log, topic, partition)
        self.pending = []

    def __getattr__(self, name):  # assigns, seeks, closed, paused
        return getattr(self.inner, name)

    def _tp(self, offset=-1001):
        from confluent_kafka import TopicPartition

        return TopicPartition(self.inner.topic, self.inner.partition, offset)

    def assign(self, offset):
        self.pending = []
        self.inner.assign([self._tp(offset)])

    def retarget(self, topic, partition):
        # As the extension's: whatever is assigned is unassigned (what was taken of it
        # dropped), and the next assign() starts the partition named.
        self.pending = []
        self.inner.unassign()
        self.inner.topic, self.inner.partition = topic, partition

    def pause(self):
        self.inner.pause([self._tp()])

    def resume(self):
        self.inner.resume([self._tp()])

    def seek(self, offset, timeout_ms):
        self.pending = []
        self.inner.seek(self._tp(offset))

    def position(self):
        return self.inner.position([self._tp()])[0].offset

    def watermarks(self, timeout_ms):
        return self.inner.get_watermark_offsets(self._tp())

    def close(self):
        self.inner.close()

    def consume(self, max_records, timeout_ms, position, until, columns, low_ms, high_ms):
        import pyarrow as pa

        from kafka_direct.client.columnar import WANT_HEADERS, WANT_KEY, WANT_VALUE

        if not self.pending:
            self.pending = self.inner.consume(max_records, timeout_ms / 1000.0)
        received = bool(self.pending)
        taken, error, reached, index = [], None, False, 0
        while index < len(self.pending) and len(taken) < max_records:
            message = self.pending[index]
            if message.error() is not None:
                error = (message.error().code(), message.offset(), message.error().str())
                index += 1
                break
            if message.offset() >= until:
                reached = True
                break
            if message.offset() >= position:
                taken.append(message)
            index += 1
        self.pending = [] if reached else self.pending[index:]
        if not taken:
            return (0, received, -1, reached, error, None, -1, 0)

        def raw(buffer):
            return None if buffer is None else buffer.to_pybytes()

        def binary(values):
            valid, offsets, data = pa.array(values, pa.binary()).buffers()
            return raw(valid), raw(offsets), raw(data) or b""

        stamps, kinds, valid_stamps, bad = [], [], [], (-1, 0)
        for row, message in enumerate(taken):
            kind, ms = message.timestamp()
            kinds.append(kind - 1)
            valid_stamps.append(None if kind == 0 else 0)
            outside = kind != 0 and not low_ms <= ms <= high_ms
            if outside and bad[0] < 0:
                bad = (row, ms)
            stamps.append(ms * 1000 if kind != 0 and not outside else 0)
        key_valid, key_offsets, key_data = binary([m.key() for m in taken])
        value_valid, value_offsets, value_data = binary([m.value() for m in taken])
        stamp_valid = pa.array(valid_stamps, pa.int64()).buffers()[0]
        buffers = [key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,
                   raw(pa.array([m.offset() for m in taken], pa.int64()).buffers()[1]),
                   raw(pa.array(stamps, pa.int64()).buffers()[1]), raw(stamp_valid),
                   raw(pa.array(kinds, pa.int32()).buffers()[1])] + [None] * 7
        if not columns & WANT_KEY:  # the native reader copies no column not asked for
            buffers[0:3] = [None] * 3
        if not columns & WANT_VALUE:
            buffers[3:6] = [None] * 3
        if columns & WANT_HEADERS:
            kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            pairs = [[{"key": k, "value": v} for k, v in (m.headers() or [])] or None
                     for m in taken]
            (list_valid, list_offsets, _, _, hkey_offsets, hkey_data, hvalue_valid,
             hvalue_offsets, hvalue_data) = pa.array(pairs, kind).buffers()
            buffers[10:] = [raw(list_offsets), raw(list_valid), raw(hkey_offsets),
                            raw(hkey_data) or b"", raw(hvalue_offsets),
                            raw(hvalue_data) or b"", raw(hvalue_valid)]
        return (len(taken), received, taken[-1].offset(), reached, error, tuple(buffers),
                bad[0], bad[1])
