"""What the planning bench (planning_scale.py) and its JVM peers (peers/spark_planning.py)
share: new records before each batch, Spark's planning figure of each trigger, the lines
printed, and the peers' answer read back.

Imports neither kafka-direct nor PySpark: the peers run it on a PySpark of their own.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: The prefix of the peers' answer line on their standard output (anything else there,
#: Spark's own output included, is not read).
RESULT = "RESULT "


def feed(producer: Any, names: Iterable[str], partitions: int) -> None:
    """One 100-byte record into every partition of ``names``, delivered before returning."""
    for name in names:
        for p in range(partitions):
            producer.produce(name, b"x" * 100, partition=p)
    producer.flush(60)


def percentile95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile (of 20 values, the 19th smallest)."""
    if not values:
        raise ValueError("no values: no batch was measured")
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def summary_line(label: str, ms: Sequence[float], cpu: Sequence[float] | None = None,
                 process: Sequence[float] | None = None) -> str:
    """``label``'s p50/p95/max line (and its CPU per batch, thread and process, if measured)."""
    ordered = sorted(ms)
    line = (f"{label:<44} p50 {statistics.median(ordered):7.1f} ms  "
            f"p95 {percentile95(ordered):7.1f} ms  max {ordered[-1]:7.1f} ms  "
            f"({len(ordered)} batches)")
    if cpu:
        line += (f"  CPU/batch p50 {statistics.median(cpu):5.1f} ms "
                 f"p95 {percentile95(cpu):5.1f} ms")
    if process:
        line += f"  process CPU/batch p50 {statistics.median(process):5.1f} ms"
    return line


def summary(label: str, ms: Sequence[float], cpu: Sequence[float] | None = None,
            process: Sequence[float] | None = None) -> float:
    """Print ``label``'s line; returns its p95 (ms)."""
    print(summary_line(label, ms, cpu, process), flush=True)
    return percentile95(ms)


def trigger_planning(query: Any, batches: int, between: Callable[[], None],
                     timeout: float) -> list[float]:
    """Spark's planning of each of ``batches`` triggers of ``query`` that read rows (ms).

    The planning is ``durationMs.latestOffset`` + ``durationMs.queryPlanning`` from the
    query's progress; the first batch (the source's start) and triggers of no new data are
    left out. New data is rows read or, where the batch's rows are not read (a
    ``foreachBatch`` that does nothing counts none), a source's offsets moved. ``between``
    runs before each second's wait (new records, for a Kafka source).
    """
    seen: set[int] = set()
    planning: list[float] = []
    deadline = time.monotonic() + timeout
    while len(planning) < batches and time.monotonic() < deadline:
        between()
        time.sleep(1.0)
        for progress in query.recentProgress:
            batch = progress["batchId"]
            if batch in seen or batch == 0 or not (progress["numInputRows"]
                                                   or moved(progress)):
                continue
            seen.add(batch)
            durations = progress["durationMs"]
            planning.append(durations.get("latestOffset", 0)
                            + durations.get("queryPlanning", 0))
    return planning[:batches]


def moved(progress: dict[str, Any]) -> bool:
    """Whether a trigger's progress shows a source's offsets moved."""
    return any(source.get("endOffset") not in (None, source.get("startOffset"))
               for source in progress.get("sources") or ())


def peer_lines(stdout: str) -> list[dict[str, Any]]:
    """The lines measured by the peers' process, read from its ``RESULT`` line.

    Each is ``{"label": str, "ms": [float], "cpu": [float]}`` (``cpu`` may be empty).

    Raises:
        ValueError: The output holds no ``RESULT`` line, or one of another shape.
    """
    found = [line[len(RESULT):] for line in stdout.splitlines() if line.startswith(RESULT)]
    if not found:
        raise ValueError("the peers' process printed no RESULT line")
    answer = json.loads(found[-1])
    lines = answer.get("lines") if isinstance(answer, dict) else None
    if not isinstance(lines, list) or not all(
            isinstance(line, dict) and isinstance(line.get("label"), str)
            and isinstance(line.get("ms"), list) for line in lines):
        raise ValueError(f"the peers' RESULT line is not a list of measured lines: "
                         f"{found[-1][:200]}")
    return [{"label": line["label"], "ms": [float(v) for v in line["ms"]],
             "cpu": [float(v) for v in line.get("cpu") or []]} for line in lines]
