"""The metrics port of a worker or sweeper: /metrics, /healthz and /readyz.

    /metrics  Prometheus text of the process's registry
    /healthz  200 while the process can do its work: for a worker, while its event loop
              is not blocked past --stall-threshold (an orchestrator restarts a process
              that stays unhealthy); 503 with the reason otherwise
    /readyz   200 when the database answers and its schema is the one this pgsched ships
              (and the process is not shutting down); 503 with the reason otherwise

The server runs on its own daemon thread and is started before the process waits for its
database, so a process that cannot reach it says so on /readyz instead of not answering.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pgsched.errors import ConfigError, SchemaMismatchError
from pgsched.migrations import require_current_schema
from pgsched.startup import connect, first_line

log = logging.getLogger("pgsched.observability")

# A probe must answer within an orchestrator's timeout (1 s by default in Kubernetes is
# too short for a TCP connect to a failed-over host; a few seconds is usual).
READY_CONNECT_TIMEOUT_S = 3
# Probes and scrapes of several systems may arrive together: one check serves them all.
READY_CACHE_S = 1.0

Problem = Callable[[], str | None]


class Readiness:
    """Database reachable and schema current, checked on a connection of its own (never
    the worker's pool: a full pool is not an unreachable database)."""

    def __init__(self, dsn: str, process_problem: Problem = lambda: None) -> None:
        self._dsn = dsn
        self._process_problem = process_problem
        self._lock = threading.Lock()
        self._checked = -READY_CACHE_S
        self._last: str | None = None

    def problem(self) -> str | None:
        """None when ready, else why not."""
        reason = self._process_problem()
        if reason is not None:
            return reason
        with self._lock:
            if time.monotonic() - self._checked >= READY_CACHE_S:
                self._last = self._check()
                self._checked = time.monotonic()
            return self._last

    def _check(self) -> str | None:
        try:
            with connect(
                self._dsn, autocommit=True, connect_timeout=READY_CONNECT_TIMEOUT_S
            ) as conn:
                require_current_schema(conn)
        except SchemaMismatchError as exc:
            return f"schema: {exc}"
        except psycopg.Error as exc:
            return f"database unreachable: {first_line(exc)}"
        return None


class MetricsServer:
    name = "metrics"  # a service of the worker's or sweeper's shape (start, stop)

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        liveness: Problem,
        readiness: Problem,
    ) -> None:
        handler = _handler_class(registry, liveness, readiness)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror or exc});"
                " choose a free port or another --metrics-host"
            ) from None
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="pgsched-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        log.info(
            "metrics on http://%s:%d/metrics (also /healthz, /readyz)",
            self.host,
            self.port,
            extra={"fields": {"metrics_port": self.port}},
        )

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_class(
    registry: CollectorRegistry, liveness: Problem, readiness: Problem
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._verdict(liveness())
            elif path == "/readyz":
                self._verdict(readiness())
            else:
                self._send(404, b"not found: /metrics, /healthz, /readyz\n")

        def _verdict(self, problem: str | None) -> None:
            if problem is None:
                self._send(200, b"ok\n")
            else:
                self._send(503, f"{problem}\n".encode())

        def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape every few seconds is not worth a log line

    return Handler
