"""Input streams that record the engine's calls, for tests of the stop lifecycle.

They stand in for the Kafka direct stream: what it needs from the engine is that
``onBatchCompleted(time)`` comes only for successful batches, before ``stop()``, and that
``stop()`` (which flushes commits and closes its driver consumer) comes exactly once, last.
"""

import threading
import time

from kafka_direct import StreamingStateError
from kafka_direct.streaming.input_dstream import InputDStream
from kafka_direct.topic_partition import TopicPartition


class EventLog:
    """A thread-safe list of ``(what, *details)`` tuples, in the order they happened."""

    def __init__(self):
        self._lock = threading.Lock()
        self.entries = []

    def add(self, *entry):
        with self._lock:
            self.entries.append(entry)

    def snapshot(self):
        with self._lock:
            return list(self.entries)

    def of(self, what):
        return [e for e in self.snapshot() if e[0] == what]


class LifecycleInputDStream(InputDStream):
    """Logs compute, commits and stop; ``gate`` can hold compute, as a slow broker would.

    Like the Kafka stream, it fails to commit once stopped ("not started"): a batch whose
    commit comes after ``stop()`` is delivered again by the next run.
    """

    def __init__(self, ssc, log, name="in"):
        super().__init__(ssc)
        self.log = log
        self.label = name
        self.gate = threading.Event()
        self.gate.set()
        self.computing = threading.Event()
        self.stopped = threading.Event()
        self.computeDelay = 0.0

    def compute(self, validTime):
        self.log.add("computeStart", self.label, validTime)
        self.computing.set()
        if not self.gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        if self.computeDelay:
            time.sleep(self.computeDelay)
        self.reportInfo(validTime, 1)
        self.log.add("computeEnd", self.label, validTime)
        return self.ssc.sparkContext.emptyRDD()

    def onBatchCompleted(self, time):
        if self.stopped.is_set():
            self.log.add("commitAfterStop", self.label, time)
            raise StreamingStateError(f"{self.label} is not started: cannot commit {time}")
        self.log.add("committed", self.label, time)

    def stop(self):
        self.log.add("stop", self.label)
        self.stopped.set()


class SlowlyIteratedDict(dict):
    """A dict whose iteration lets other threads run between items.

    CPython happens to copy a plain dict without switching threads, but nothing promises
    that (free-threaded builds, finalizers run by the garbage collector): a reader that
    iterates a dict another thread changes can fail with "dictionary changed size during
    iteration". This makes that failure show up reliably.
    """

    def __iter__(self):
        for key in dict.__iter__(self):
            time.sleep(0)
            yield key

    def keys(self):
        return list(iter(self))

    def items(self):
        return [(key, self[key]) for key in self]

    def values(self):
        return [self[key] for key in self]


class OffsetsInputDStream(InputDStream):
    """Exposes Kafka-like figures (next, latest and committed offsets) that change per batch.

    As in the Kafka stream, compute (the generator's thread) moves ``currentOffsets`` in
    place and partitions come and go; ``onBatchCompleted`` (a job thread) updates
    ``committedOffsets`` in place.
    """

    def __init__(self, ssc, partitions=40):
        super().__init__(ssc)
        self.currentOffsets = SlowlyIteratedDict(
            {TopicPartition("t", p): 0 for p in range(partitions)})
        self.latestSeen = SlowlyIteratedDict()
        self.committedOffsets = SlowlyIteratedDict()
        self._next = partitions
        self._ranges = {}

    def compute(self, validTime):
        oldest = min(self.currentOffsets)
        del self.currentOffsets[oldest]
        for tp in list(dict.keys(self.currentOffsets)):
            self.currentOffsets[tp] += 1
        self.currentOffsets[TopicPartition("t", self._next)] = 0
        self._next += 1
        self.latestSeen = SlowlyIteratedDict(
            {tp: o + 5 for tp, o in dict.items(self.currentOffsets)})
        self._ranges[validTime] = dict(dict.items(self.currentOffsets))
        self.reportInfo(validTime, len(self._ranges[validTime]))
        return self.ssc.sparkContext.emptyRDD()

    def onBatchCompleted(self, time):
        ranges = self._ranges.pop(time, {})
        for tp in [tp for tp in dict.keys(self.committedOffsets) if tp not in ranges]:
            del self.committedOffsets[tp]
        self.committedOffsets.update(ranges)

    def rateLimit(self):
        return {"estimatedRate": None,
                "maxRatePerPartition": {str(tp): 10.0 for tp in self.currentOffsets},
                "maxRecordsPerBatch": 0}
