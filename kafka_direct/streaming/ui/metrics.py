"""Prometheus text exposition of the stream, named after Spark's StreamingSource gauges.

Stream figures come from the progress listener; Kafka figures (next, latest and committed
offsets, lag, rate limit) from the direct streams themselves. Label values are escaped as
the text format requires.
"""

from __future__ import annotations

from typing import Any

__all__ = ["prometheus_text"]

_PREFIX = "kafka_direct_streaming_"


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _seconds(ms: float | None) -> float:
    return float("nan") if ms is None else ms / 1000.0


def prometheus_text(stats: dict[str, Any], last: dict[str, Any] | None,
                    lastReceivedRecords: int, inputs: dict[int, dict[str, Any]]) -> str:
    """The metrics page (``text/plain; version=0.0.4``)."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str,
               samples: list[tuple[dict[str, Any], float]]) -> None:
        lines.append(f"# HELP {_PREFIX}{name} {help_}")
        lines.append(f"# TYPE {_PREFIX}{name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{_PREFIX}{name}{{{text}}} {value}" if text else
                         f"{_PREFIX}{name} {value}")

    metric("batch_interval_seconds", "gauge", "The batch interval.",
           [({}, stats["batchDuration"] / 1000.0)])
    metric("completed_batches_total", "counter", "Batches completed since the start.",
           [({}, stats["numTotalCompletedBatches"])])
    metric("failed_batches_total", "counter", "Completed batches with a failed output op.",
           [({}, stats["numFailedBatches"])])
    metric("received_records_total", "counter", "Records of every submitted batch.",
           [({}, stats["numReceivedRecords"])])
    metric("processed_records_total", "counter", "Records of the completed batches.",
           [({}, stats["numProcessedRecords"])])
    metric("waiting_batches", "gauge", "Batches submitted and not started.",
           [({}, stats["numWaitingBatches"])])
    metric("running_batches", "gauge", "Batches started and not completed.",
           [({}, stats["numRunningBatches"])])
    metric("unprocessed_batches", "gauge", "Waiting plus running batches.",
           [({}, stats["numActiveBatches"])])
    metric("last_received_batch_records", "gauge", "Records of the newest submitted batch.",
           [({}, lastReceivedRecords)])
    for name, key, help_ in (
            ("last_completed_batch_scheduling_delay_seconds", "schedulingDelay",
             "Scheduling delay of the last completed batch."),
            ("last_completed_batch_processing_delay_seconds", "processingTime",
             "Processing time of the last completed batch."),
            ("last_completed_batch_total_delay_seconds", "totalDelay",
             "Total delay of the last completed batch.")):
        metric(name, "gauge", help_, [({}, _seconds(last[key] if last else None))])
    metric("last_completed_batch_records", "gauge", "Records of the last completed batch.",
           [({}, last["inputSize"] if last else 0)])
    partitions = [(stream, p) for stream in inputs.values()
                  for p in stream.get("partitions", ())]

    def per_partition(key: str) -> list[tuple[dict[str, Any], float]]:
        return [({"stream": s["name"], "topic": p["topic"], "partition": p["partition"]},
                 p[key]) for s, p in partitions if p[key] is not None]

    metric("kafka_partition_lag", "gauge", "Latest offset minus the next offset to read.",
           per_partition("lag"))
    metric("kafka_partition_next_offset", "gauge", "The next offset the stream reads.",
           per_partition("nextOffset"))
    metric("kafka_partition_latest_offset", "gauge", "The partition's end offset, last seen.",
           per_partition("latestOffset"))
    metric("kafka_partition_committed_offset", "gauge", "Offset committed to the group.",
           per_partition("committedOffset"))
    metric("kafka_rate_limit_records_per_second", "gauge",
           "The backpressure estimate in force (NaN: none).",
           [({"stream": s["name"]}, s["rateLimit"]["estimatedRate"] or float("nan"))
            for s in inputs.values() if "rateLimit" in s])
    metric("kafka_max_rate_per_partition", "gauge", "Configured records/s per partition.",
           [({"stream": s["name"], "partition": tp}, rate) for s in inputs.values()
            if "rateLimit" in s for tp, rate in s["rateLimit"]["maxRatePerPartition"].items()])
    return "\n".join(lines) + "\n"
