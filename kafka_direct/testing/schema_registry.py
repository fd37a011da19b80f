"""A tiny Confluent-compatible Schema Registry for tests, on 127.0.0.1 (standard library only).

confluent-kafka's ``mock://`` registry lives in one Python process: Spark's executors (other
Python workers) cannot see it. :class:`LocalSchemaRegistry` serves the few endpoints the
serializers and deserializers use, over HTTP, so every process of a test reaches the same
schemas:

* ``POST /subjects/{subject}/versions``: register (the same schema under a subject keeps
  its id; a schema already known under another subject keeps its id too);
* ``POST /subjects/{subject}``: look a schema up;
* ``GET /schemas/ids/{id}``, ``GET /subjects``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects/{subject}/versions/{version|latest}``;
* anything else: 404 with a registry error body (the clients then fall back, as they do
  with a registry that lacks a feature).

With ``user`` and ``password`` every request needs HTTP basic auth (401 otherwise).
Memory only; it stops with :meth:`stop` or at the end of a ``with`` block. Not a product:
no compatibility checks, no deletes, no contexts.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["LocalSchemaRegistry"]


class LocalSchemaRegistry:
    """A Schema Registry for tests (see the module).

    Args:
        user: Require basic auth with this user (and ``password``); None: open.
        password: The password.

    Attributes:
        requests: How many requests it answered (a test can see the clients' caching).
    """

    def __init__(self, user: str | None = None, password: str | None = None) -> None:
        self.user = user
        self.password = password
        self._schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema", "schemaType", ...}
        self._subjects: dict[str, list[int]] = {}  # subject -> ids by version
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests = 0

    def __repr__(self) -> str:
        return f"LocalSchemaRegistry({self.url if self._server else 'stopped'})"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the registry is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> LocalSchemaRegistry:
        """Listen on a free port of 127.0.0.1 in a daemon thread."""
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet

            def do_GET(self) -> None:
                registry._serve(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                registry._serve(self, self.rfile.read(length) if length else b"{}")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="local-schema-registry")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> LocalSchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register(self, subject: str, schema: str | dict[str, Any],
                 schemaType: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` directly; returns its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return self._register(subject, {"schema": text, "schemaType": schemaType})[0]

    def _register(self, subject: str, body: dict[str, Any]) -> tuple[int, int]:
        entry = {"schema": body["schema"], "schemaType": body.get("schemaType") or "AVRO",
                 "references": body.get("references") or []}
        with self._lock:
            found = next((i + 1 for i, known in enumerate(self._schemas) if known == entry),
                         None)
            if found is None:
                self._schemas.append(entry)
                found = len(self._schemas)
            versions = self._subjects.setdefault(subject, [])
            if found not in versions:
                versions.append(found)
            return found, versions.index(found) + 1

    def _authorised(self, handler: BaseHTTPRequestHandler) -> bool:
        if self.user is None:
            return True
        expected = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return handler.headers.get("Authorization") == f"Basic {expected}"

    def _serve(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> None:
        with self._lock:
            self.requests += 1
        if not self._authorised(handler):
            self._answer(handler, 401, {"error_code": 401, "message": "Unauthorized"})
            return
        parts = [unquote(p) for p in urlsplit(handler.path).path.strip("/").split("/")]
        try:
            status, answer = self._route(parts, None if body is None else json.loads(body))
        except (KeyError, IndexError, ValueError):
            status, answer = 404, {"error_code": 40401, "message": "not found"}
        self._answer(handler, status, answer)

    def _route(self, parts: list[str], body: dict[str, Any] | None) -> tuple[int, Any]:
        missing = (404, {"error_code": 40403, "message": "Schema not found"})
        if body is not None:
            if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                schemaId, _ = self._register(parts[1], body)
                return 200, {"id": schemaId}
            if len(parts) == 2 and parts[0] == "subjects":
                entry = {"schema": body["schema"],
                         "schemaType": body.get("schemaType") or "AVRO",
                         "references": body.get("references") or []}
                with self._lock:
                    for version, schemaId in enumerate(self._subjects.get(parts[1], []), 1):
                        if self._schemas[schemaId - 1] == entry:
                            return 200, {"subject": parts[1], "version": version,
                                         "id": schemaId, **entry}
                return missing
            return 404, {"error_code": 40401, "message": "not found"}
        with self._lock:
            if parts == ["subjects"]:
                return 200, sorted(self._subjects)
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
                schemaId = int(parts[2])
                if not 1 <= schemaId <= len(self._schemas):
                    return missing
                return 200, dict(self._schemas[schemaId - 1])
            if parts[0] == "subjects" and len(parts) >= 3 and parts[2] == "versions":
                versions = self._subjects.get(parts[1])
                if not versions:
                    return 404, {"error_code": 40401, "message": "Subject not found"}
                if len(parts) == 3:
                    return 200, list(range(1, len(versions) + 1))
                number = len(versions) if parts[3] == "latest" else int(parts[3])
                if not 1 <= number <= len(versions):
                    return 404, {"error_code": 40402, "message": "Version not found"}
                schemaId = versions[number - 1]
                return 200, {"subject": parts[1], "version": number, "id": schemaId,
                             **self._schemas[schemaId - 1]}
        return 404, {"error_code": 40401, "message": "not found"}

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, answer: Any) -> None:
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
