"""The numbers behind the statistics page, its JSON and the metrics: plain dicts.

Every view is computed from one :class:`ProgressSnapshot`, so the page, the JSON endpoint
and the metrics agree with each other and with the listener's ``BatchInfo`` values. Times
are epoch milliseconds; delays are milliseconds; rates are records per second.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Mapping
from typing import Any

from kafka_direct.streaming.batch_info import BatchInfo
from kafka_direct.streaming.ui.progress_listener import ProgressSnapshot

__all__ = ["batch_detail", "batch_summary", "capture_inputs", "input_streams", "overview"]


def _status(info: BatchInfo, snapshot: ProgressSnapshot) -> str:
    if any(b.batchTime == info.batchTime for b in snapshot.waiting):
        return "queued"
    if any(b.batchTime == info.batchTime for b in snapshot.running):
        return "processing"
    return "failed" if info.failed else "completed"


def batch_summary(info: BatchInfo, snapshot: ProgressSnapshot,
                  batchDuration: int) -> dict[str, Any]:
    """One batch as the batches list shows it (Spark's REST field names)."""
    ops = list(info.outputOperationInfos.values())
    failures = [op.failureReason for op in ops if op.failureReason]
    return {
        "batchId": info.batchTime, "batchTime": info.batchTime,
        "status": _status(info, snapshot), "batchDuration": batchDuration,
        "inputSize": info.numRecords, "schedulingDelay": info.schedulingDelay,
        "processingTime": info.processingDelay, "totalDelay": info.totalDelay,
        "numTotalOutputOps": len(ops),
        "numCompletedOutputOps": sum(op.endTime is not None for op in ops),
        "numFailedOutputOps": len(failures),
        "numActiveOutputOps": sum(op.startTime is not None and op.endTime is None
                                  for op in ops),
        "firstFailureReason": failures[0] if failures else None,
    }


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def overview(snapshot: ProgressSnapshot, batchDuration: int, now: int,
             appName: str = "") -> dict[str, Any]:
    """The statistics of the stream, with the per-batch series of the charts."""
    completed = snapshot.completed
    seconds = batchDuration / 1000.0
    series: dict[str, list[tuple[int, float]]] = {
        "inputRate": [(b.batchTime, b.numRecords / seconds) for b in completed],
        "schedulingDelay": [(b.batchTime, b.schedulingDelay) for b in completed
                            if b.schedulingDelay is not None],
        "processingTime": [(b.batchTime, b.processingDelay) for b in completed
                           if b.processingDelay is not None],
        "totalDelay": [(b.batchTime, b.totalDelay) for b in completed
                       if b.totalDelay is not None],
    }
    averages = {f"avg{name[0].upper()}{name[1:]}": _mean([float(v) for _, v in points])
                for name, points in series.items()}
    return {
        "appName": appName, "startTime": snapshot.startTime, "batchDuration": batchDuration,
        "uptime": None if snapshot.startTime is None else now - snapshot.startTime,
        "numTotalCompletedBatches": snapshot.totalCompletedBatches,
        "numRetainedCompletedBatches": len(completed),
        "numFailedBatches": snapshot.totalFailedBatches,
        "numActiveBatches": len(snapshot.waiting) + len(snapshot.running),
        "numWaitingBatches": len(snapshot.waiting),
        "numRunningBatches": len(snapshot.running),
        "numProcessedRecords": snapshot.totalProcessedRecords,
        "numReceivedRecords": snapshot.totalReceivedRecords,
        **averages,
        "series": series,
    }


def capture_inputs(streams: Any) -> list[tuple[Any, ...]]:
    """The input streams' live Kafka figures, copied as they are (cheap: once a batch).

    The caller keeps the streams from changing meanwhile; :func:`input_streams` turns the
    copy into the page's description later, on the page's own thread (with a thousand
    partitions that description costs milliseconds the batch should not wait for).
    """
    captured: list[tuple[Any, ...]] = []
    for stream in streams:
        current = getattr(stream, "currentOffsets", None)
        if current is None:
            captured.append((stream.inputStreamId, stream.name, None, None, None, None))
            continue
        captured.append((stream.inputStreamId, stream.name, dict(current),
                         dict(getattr(stream, "latestSeen", {})),
                         dict(getattr(stream, "committedOffsets", {})), stream.rateLimit()))
    return captured


def input_streams(captured: list[tuple[Any, ...]]) -> dict[int, dict[str, Any]]:
    """Name and live Kafka figures of each input stream, by id, from :func:`capture_inputs`."""
    described: dict[int, dict[str, Any]] = {}
    for streamId, name, current, latest, committed, rateLimit in captured:
        entry: dict[str, Any] = {"name": name}
        if current is not None:
            entry["partitions"] = [
                {"topic": tp.topic, "partition": tp.partition, "nextOffset": offset,
                 "latestOffset": latest.get(tp), "committedOffset": committed.get(tp),
                 "lag": None if tp not in latest else max(0, latest[tp] - offset)}
                for tp, offset in sorted(current.items(), key=_by_partition)]
            entry["rateLimit"] = copy.deepcopy(rateLimit)  # the reader's to change
        described[streamId] = entry
    return described


def _by_partition(item: tuple[Any, int]) -> tuple[str, int]:
    return item[0].topic, item[0].partition


def batch_detail(info: BatchInfo, snapshot: ProgressSnapshot, batchDuration: int,
                 names: Mapping[int, str]) -> dict[str, Any]:
    """A batch with its inputs (offset ranges, rate limit) and output operations."""
    inputs = []
    for streamId, input_info in sorted(info.streamIdToInputInfo.items()):
        metadata = input_info.metadata
        inputs.append({
            "inputStreamId": streamId, "name": names.get(streamId, f"input {streamId}"),
            "records": input_info.numRecords,
            "offsetRanges": [{"topic": t, "partition": p, "fromOffset": a, "untilOffset": b,
                              "count": b - a} for t, p, a, b in metadata.get("offsets") or ()],
            "rateLimit": metadata.get("rateLimit"),
            "description": input_info.metadataDescription,
        })
    operations = [{"id": op.id, "name": op.name, "description": op.description,
                   "startTime": op.startTime, "endTime": op.endTime, "duration": op.duration,
                   "status": ("failed" if op.failureReason else "succeeded"
                              if op.endTime is not None else
                              "running" if op.startTime is not None else "queued"),
                   "failureReason": op.failureReason}
                  for _, op in sorted(info.outputOperationInfos.items())]
    return {**batch_summary(info, snapshot, batchDuration), "inputs": inputs,
            "outputOperations": operations}
