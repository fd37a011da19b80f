"""Helpers shared by the benchmarks (run as scripts from this folder)."""

from __future__ import annotations

import os
import threading
import time

from kafka_direct.streaming import StreamingListener


class Completed(StreamingListener):
    """Lets a benchmark wait for a batch to complete."""

    def __init__(self):
        self.times = set()
        self.changed = threading.Condition()

    def onBatchCompleted(self, batchCompleted):
        with self.changed:
            self.times.add(batchCompleted.batchInfo.batchTime)
            self.changed.notify_all()

    def wait(self, batch_time):
        with self.changed:
            while batch_time not in self.times:
                self.changed.wait(30)


def time_generation(ssc):
    """Record how long each batch's generation takes on the driver (ms), in a list."""
    generator = ssc.scheduler.jobGenerator
    original, durations = generator.generateJobs, []

    def timed(batch_time):
        start = time.perf_counter()
        original(batch_time)
        durations.append((time.perf_counter() - start) * 1000)

    generator.generateJobs = timed
    return durations


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def proc_table() -> dict[int, tuple[int, str, float, float]]:
    """Every process: pid -> (ppid, command name, own CPU s, reaped children's CPU s)."""
    tick = clock_ticks()
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        own = (int(fields[11]) + int(fields[12])) / tick
        children = (int(fields[13]) + int(fields[14])) / tick
        table[int(entry)] = (int(fields[1]), name, own, children)
    return table
