"""Driving a StreamingContext on a ManualClock, batch by batch."""

import threading
import time

from kafka_direct.streaming import ManualClock, StreamingContext, StreamingListener
from kafka_direct.streaming.input_dstream import InputDStream


class Recorder(StreamingListener):
    """Records every event, and lets a test wait for a batch to complete."""

    def __init__(self):
        self.events = []
        self.completed = []
        self._changed = threading.Condition()

    def _add(self, name, event):
        with self._changed:
            self.events.append((name, event))
            self._changed.notify_all()

    def onStreamingStarted(self, e):
        self._add("streamingStarted", e)

    def onStreamingStopped(self, e):
        self._add("streamingStopped", e)

    def onBatchSubmitted(self, e):
        self._add("batchSubmitted", e)

    def onBatchStarted(self, e):
        self._add("batchStarted", e)

    def onBatchCompleted(self, e):
        with self._changed:
            self.completed.append(e.batchInfo)
        self._add("batchCompleted", e)

    def onOutputOperationStarted(self, e):
        self._add("outputOperationStarted", e)

    def onOutputOperationCompleted(self, e):
        self._add("outputOperationCompleted", e)

    def wait_completed(self, batch_time, timeout=30.0):
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(b.batchTime == batch_time for b in self.completed):
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"batch {batch_time} did not complete; {self.completed}"
                self._changed.wait(remaining)
        return next(b for b in self.completed if b.batchTime == batch_time)

    def names(self, batch_time=None):
        out = []
        for name, event in self.events:
            info = getattr(event, "batchInfo", None) or getattr(event, "outputOperationInfo",
                                                                None)
            if batch_time is None or (info is not None and info.batchTime == batch_time):
                out.append(name)
        return out


class Driver:
    """A context on a ManualClock at 0 with 1 s batches, and a recorder listening."""

    def __init__(self, sc, batch_seconds=1, start_ms=0, conf=None):
        self.clock = ManualClock(start_ms)
        self.ssc = StreamingContext(sc, batch_seconds, clock=self.clock, conf=conf)
        self.recorder = Recorder()
        self.ssc.addStreamingListener(self.recorder)
        self.interval = int(batch_seconds * 1000)

    def start(self):
        self.ssc.start()

    def run(self, batches):
        """Advance the clock batch by batch, waiting for each batch with jobs to complete."""
        for _ in range(batches):
            self.clock.advance(self.interval)
            self.wait_tick(self.clock.getTimeMillis())

    def wait_tick(self, batch_time, timeout=30.0):
        """Wait until batch ``batch_time`` was generated and, if it had jobs, completed."""
        deadline = time.monotonic() + timeout
        while True:
            generator = self.ssc.scheduler.jobGenerator
            tick = generator.lastTickTime if generator is not None else None
            if tick is not None and tick >= batch_time:
                break
            assert time.monotonic() < deadline, f"batch {batch_time} was not generated"
            time.sleep(0.005)
        self.ssc.scheduler.listenerBus.waitUntilEmpty()
        if batch_time in [e.batchInfo.batchTime for n, e in self.recorder.events
                          if n == "batchSubmitted"]:
            self.recorder.wait_completed(batch_time, timeout)

    def stop(self, graceful=False):
        self.ssc.stop(stopSparkContext=False, stopGracefully=graceful)


class ScriptedInputDStream(InputDStream):
    """Batch k (k = 1, 2, ...) holds ``batches[k - 1]``: replayable, hence checkpointable."""

    def __init__(self, ssc, batches):
        super().__init__(ssc)
        self.batches = [list(b) for b in batches]

    def compute(self, validTime):
        index = (validTime - self.zeroTime) // self.slideDuration - 1
        data = self.batches[index] if 0 <= index < len(self.batches) else []
        self.reportInfo(validTime, len(data), {"Description": f"batch {index + 1}"})
        return self.ssc.sparkContext.parallelize(data, 2)
