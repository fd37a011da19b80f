"""Server-rendered HTML of the statistics page and the batch detail page.

No script and nothing from the network: charts are inline SVG (a timeline and a histogram
per figure, as on Spark's Streaming tab), so the page works offline. Every text that comes
from the application (names, descriptions, errors) is escaped.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from html import escape
from typing import Any

__all__ = ["batch_page", "statistics_page"]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3;text-align:left} td.n{text-align:right}
.failed{color:#b00} svg{background:#fafafa;border:1px solid #ddd}
"""


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def _duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms / 1000), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min {seconds} s" if hours else f"{minutes} min {seconds} s"


def _timeline(points: Sequence[tuple[int, float]], width: int = 320, height: int = 70) -> str:
    if len(points) < 2:
        return f'<svg width="{width}" height="{height}"></svg>'
    xs = [p[0] for p in points]
    top = max(p[1] for p in points) or 1.0
    span = (xs[-1] - xs[0]) or 1
    coords = " ".join(f"{(x - xs[0]) / span * (width - 4) + 2:.1f},"
                      f"{height - 2 - y / top * (height - 4):.1f}" for x, y in points)
    return (f'<svg width="{width}" height="{height}"><polyline fill="none" '
            f'stroke="#3b6fb6" stroke-width="1.5" points="{coords}"/></svg>')


def _histogram(values: Sequence[float], bins: int = 12, width: int = 200,
               height: int = 70) -> str:
    if not values:
        return f'<svg width="{width}" height="{height}"></svg>'
    low, high = min(values), max(values)
    step = (high - low) / bins or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / step))] += 1
    tallest, bar = max(counts), width / bins
    rects = "".join(
        f'<rect x="{i * bar + 1:.1f}" y="{height - c / tallest * (height - 2):.1f}" '
        f'width="{bar - 2:.1f}" height="{c / tallest * (height - 2):.1f}" fill="#7aa6da">'
        f"<title>{low + i * step:.0f}-{low + (i + 1) * step:.0f}: {c}</title></rect>"
        for i, c in enumerate(counts) if c)
    return f'<svg width="{width}" height="{height}">{rects}</svg>'


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _batch_rows(batches: Sequence[dict[str, Any]], completed: bool) -> str:
    rows = []
    for b in batches:
        ops = f"{b['numCompletedOutputOps'] - b['numFailedOutputOps']}/{b['numTotalOutputOps']}"
        status = escape(b["status"])
        cells = [f'<td><a href="batch?id={b["batchTime"]}">{_time(b["batchTime"])}</a></td>',
                 f'<td class="n">{b["inputSize"]}</td>',
                 f'<td class="n">{_duration(b["schedulingDelay"])}</td>',
                 f'<td class="n">{_duration(b["processingTime"])}</td>']
        if completed:
            cells.append(f'<td class="n">{_duration(b["totalDelay"])}</td>')
        cells.append(f'<td>{ops}</td><td class="{status}">{status}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(rows)


def statistics_page(stats: dict[str, Any], active: Sequence[dict[str, Any]],
                    completed: Sequence[dict[str, Any]], inputs: dict[int, dict[str, Any]]
                    ) -> str:
    """The Streaming Statistics page."""
    series = stats["series"]
    figures = [("Input Rate", "inputRate", "records/s", stats["avgInputRate"]),
               ("Scheduling Delay", "schedulingDelay", "ms", stats["avgSchedulingDelay"]),
               ("Processing Time", "processingTime", "ms", stats["avgProcessingTime"]),
               ("Total Delay", "totalDelay", "ms", stats["avgTotalDelay"])]
    chart_rows = "".join(
        f'<tr><th>{label}</th><td class="n" id="avg-{key}">'
        f'{"-" if avg is None else f"{avg:.2f} {unit}"}</td>'
        f"<td>{_timeline(series[key])}</td><td>{_histogram([v for _, v in series[key]])}</td>"
        "</tr>" for label, key, unit, avg in figures)
    partitions = []
    for stream in inputs.values():
        for p in stream.get("partitions", ()):
            cells = [escape(stream["name"]), escape(p["topic"])] + [
                "-" if p[k] is None else str(p[k])
                for k in ("partition", "nextOffset", "latestOffset", "lag", "committedOffset")]
            partitions.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells[:2]) + "".join(
                f'<td class="n">{c}</td>' for c in cells[2:]) + "</tr>")
    body = (
        f"<h1>Streaming Statistics{': ' + escape(stats['appName']) if stats['appName'] else ''}"
        f"</h1><p>Running batches of <b id='batch-interval'>{_duration(stats['batchDuration'])}"
        f"</b> for <b>{_duration(stats['uptime'])}</b> since {_time(stats['startTime'])} "
        f"(<b id='completed-batches'>{stats['numTotalCompletedBatches']}</b> completed "
        f"batches, <b id='processed-records'>{stats['numProcessedRecords']}</b> records; "
        f"{stats['numFailedBatches']} failed)</p>"
        "<table><tr><th></th><th>Avg</th><th>Timeline</th><th>Histogram</th></tr>"
        f"{chart_rows}</table>"
        + ("<h2>Kafka partitions</h2><table><tr><th>Stream</th><th>Topic</th>"
           "<th>Partition</th><th>Next offset</th><th>Latest offset</th><th>Lag</th>"
           "<th>Committed</th></tr>" + "".join(partitions) + "</table>" if partitions else "")
        + f"<h2>Active Batches ({len(active)})</h2><table id='active'><tr><th>Batch Time</th>"
        "<th>Records</th><th>Scheduling Delay</th><th>Processing Time</th>"
        f"<th>Output Ops: Succeeded/Total</th><th>Status</th></tr>{_batch_rows(active, False)}"
        f"</table><h2>Completed Batches (last {len(completed)} out of "
        f"{stats['numTotalCompletedBatches']})</h2><table id='completed'><tr>"
        "<th>Batch Time</th><th>Records</th><th>Scheduling Delay</th><th>Processing Time</th>"
        "<th>Total Delay</th><th>Output Ops: Succeeded/Total</th><th>Status</th></tr>"
        f"{_batch_rows(completed, True)}</table>"
        "<p><a href='api/v1/streaming/statistics'>JSON</a> · <a href='metrics'>metrics</a></p>")
    return _page("Streaming Statistics", body)


def _rate_limit(limit: dict[str, Any] | None) -> str:
    if not limit:
        return "none"
    parts = []
    if limit.get("estimatedRate"):
        parts.append(f"backpressure {limit['estimatedRate']:.0f} records/s")
    for tp, rate in limit.get("maxRatePerPartition", {}).items():
        parts.append(f"{escape(tp)} at most {rate:g} records/s")
    if limit.get("maxRecordsPerBatch"):
        parts.append(f"at most {limit['maxRecordsPerBatch']} records per batch")
    return "; ".join(parts) or "none"


def batch_page(detail: dict[str, Any]) -> str:
    """The detail page of one batch."""
    inputs = "".join(
        f"<h2>{escape(i['name'])}: {i['records']} records</h2>"
        f"<p>Rate limit: <span class='rate-limit'>{_rate_limit(i['rateLimit'])}</span></p>"
        "<table class='ranges'><tr><th>Topic</th><th>Partition</th><th>From offset</th>"
        "<th>Until offset</th><th>Offsets</th></tr>"
        + "".join(f"<tr><td>{escape(r['topic'])}</td><td class='n'>{r['partition']}</td>"
                  f"<td class='n'>{r['fromOffset']}</td><td class='n'>{r['untilOffset']}</td>"
                  f"<td class='n'>{r['count']}</td></tr>" for r in i["offsetRanges"])
        + "</table>" for i in detail["inputs"])
    operations = "".join(
        f"<tr><td>{op['id']}</td><td>{escape(op['name'])}</td>"
        f"<td>{escape(op['description'])}</td><td class='n'>{_duration(op['duration'])}</td>"
        f"<td class='{op['status']}'>{op['status']}</td>"
        f"<td><pre>{escape(op['failureReason'] or '')}</pre></td></tr>"
        for op in detail["outputOperations"])
    body = (
        f"<p><a href='.'>&larr; Streaming Statistics</a></p>"
        f"<h1>Batch {_time(detail['batchTime'])}</h1><ul>"
        f"<li>Batch duration: {_duration(detail['batchDuration'])}</li>"
        f"<li>Input records: <b id='input-size'>{detail['inputSize']}</b></li>"
        f"<li>Scheduling delay: {_duration(detail['schedulingDelay'])}</li>"
        f"<li>Processing time: {_duration(detail['processingTime'])}</li>"
        f"<li>Total delay: {_duration(detail['totalDelay'])}</li>"
        f"<li>Status: {escape(detail['status'])}</li></ul>{inputs}"
        "<h2>Output Operations</h2><table id='operations'><tr><th>Id</th><th>Name</th>"
        "<th>Description</th><th>Duration</th><th>Status</th><th>Error</th></tr>"
        f"{operations}</table>")
    return _page(f"Batch {_time(detail['batchTime'])}", body)
