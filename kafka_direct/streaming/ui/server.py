"""StreamingUI: the statistics page, its JSON and the metrics, served by the driver.

Opt-in: ``spark.streaming.ui.enabled=true`` starts it with the context, bound to
``spark.streaming.ui.host`` (default 127.0.0.1: the page is not exposed beyond the machine
unless you say so) and ``spark.streaming.ui.port`` (default 4050; 0 picks a free port).
``ssc.uiWebUrl`` tells where it listens. Routes:

* ``/``: the Streaming Statistics page; ``/batch?id=<batch time ms>``: one batch;
* ``/api/v1/streaming/statistics``, ``/api/v1/streaming/batches``,
  ``/api/v1/streaming/batches/<batch time ms>``: the same data as JSON;
* ``/metrics``: Prometheus text.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from kafka_direct.streaming.ui.metrics import prometheus_text
from kafka_direct.streaming.ui.pages import batch_page, statistics_page
from kafka_direct.streaming.ui.progress_listener import StreamingJobProgressListener
from kafka_direct.streaming.ui.statistics import batch_detail, batch_summary, overview

if TYPE_CHECKING:
    from kafka_direct.streaming.context import StreamingContext

__all__ = ["StreamingUI"]

logger = logging.getLogger(__name__)


class StreamingUI:
    """The HTTP server of one StreamingContext.

    Args:
        ssc: The context (its graph gives the input streams).
        listener: The progress listener registered on the context's bus.
        host: Address to bind.
        port: Port (0: a free one).
    """

    def __init__(self, ssc: StreamingContext, listener: StreamingJobProgressListener,
                 host: str = "127.0.0.1", port: int = 4050) -> None:
        self.ssc = ssc
        self.listener = listener
        ui = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ui._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("ui: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where the page is."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="streaming-ui", daemon=True)
        self._thread.start()
        logger.info("streaming statistics at %s", self.url)

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()

    def _views(self) -> tuple[Any, int, dict[str, Any], dict[int, dict[str, Any]]]:
        snapshot = self.listener.snapshot()
        duration = self.ssc.graph.batchDuration
        stats = overview(snapshot, duration, self.ssc.clock.getTimeMillis(), self.ssc.appName)
        # Never the live streams: the engine changes them on its own threads.
        return snapshot, duration, stats, self.ssc.inputStatus.snapshot()

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        path = parts.path.rstrip("/") or "/"
        snapshot, duration, stats, inputs = self._views()

        def summaries() -> list[dict[str, Any]]:  # newest first: active, then completed
            return [batch_summary(b, snapshot, duration)
                    for b in (*reversed(snapshot.running), *reversed(snapshot.waiting),
                              *reversed(snapshot.completed))]

        if path == "/":
            batches = summaries()
            active = len(snapshot.running) + len(snapshot.waiting)
            self._reply(request, statistics_page(stats, batches[:active], batches[active:],
                                                 inputs), "text/html")
        elif path == "/metrics":
            last = snapshot.lastCompleted
            self._reply(request, prometheus_text(
                stats, None if last is None else batch_summary(last, snapshot, duration),
                snapshot.lastReceivedRecords, inputs), "text/plain; version=0.0.4")
        elif path == "/api/v1/streaming/statistics":
            self._json(request, {**stats, "inputStreams": inputs})
        elif path == "/api/v1/streaming/batches":
            self._json(request, summaries())
        elif path in ("/batch", "/api/v1/streaming/batches") or \
                path.startswith("/api/v1/streaming/batches/"):
            key = parse_qs(parts.query).get("id", [path.rsplit("/", 1)[-1]])[0]
            info = snapshot.batch(int(key)) if key.isdigit() else None
            if info is None:
                self._reply(request, f"no retained batch {key!r}", "text/plain",
                            HTTPStatus.NOT_FOUND)
                return
            names = {i: v["name"] for i, v in inputs.items()}
            detail = batch_detail(info, snapshot, duration, names)
            if path == "/batch":
                self._reply(request, batch_page(detail), "text/html")
            else:
                self._json(request, detail)
        else:
            self._reply(request, "not found", "text/plain", HTTPStatus.NOT_FOUND)

    def _json(self, request: BaseHTTPRequestHandler, value: Any) -> None:
        self._reply(request, json.dumps(value, default=str), "application/json")

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, text: str, kind: str,
               status: HTTPStatus = HTTPStatus.OK) -> None:
        body = text.encode()
        request.send_response(status)
        request.send_header("Content-Type", f"{kind}; charset=utf-8"
                            if "charset" not in kind and kind != "application/json" else kind)
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        request.wfile.write(body)
