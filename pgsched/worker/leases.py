"""The heartbeat: renews the leases of running tasks from its own thread and connection.

A thread, not a coroutine, so that a handler hogging the event loop (CPU-bound code in an
`async def`) cannot starve it: a task that is still running keeps its lease.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import psycopg

from pgsched.queries import query

log = logging.getLogger("pgsched.worker.leases")


class LeaseKeeper(threading.Thread):
    def __init__(self, dsn: str, lease_seconds: float) -> None:
        super().__init__(name="pgsched-heartbeat", daemon=True)
        self._dsn = dsn
        self._lease = timedelta(seconds=lease_seconds)
        self._interval = max(lease_seconds / 3, 0.2)
        self._held: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def hold(self, task_id: int, lease_token: Any) -> None:
        with self._lock:
            self._held[task_id] = lease_token

    def drop(self, task_id: int) -> None:
        with self._lock:
            self._held.pop(task_id, None)

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop_event.wait(self._interval):
            with self._lock:
                held = dict(self._held)
            if not held:
                continue
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self._dsn, autocommit=True)
                rows = conn.execute(
                    query("task_heartbeat_many"),
                    {
                        "task_ids": list(held),
                        "lease_tokens": list(held.values()),
                        "lease": self._lease,
                    },
                ).fetchall()
            except psycopg.Error as exc:
                log.warning("heartbeat failed (%s); retrying", exc)
                conn = None
                continue
            kept = {row[0] for row in rows}
            for task_id in held.keys() - kept:
                with self._lock:
                    still_held = self._held.get(task_id) == held[task_id]
                if still_held:
                    # Either lost, or locked by its own outcome write at this moment (skipped);
                    # the outcome's compare-and-set decides which, and records a stale one.
                    log.debug("task %s: lease not renewed this round", task_id)
        if conn is not None:
            conn.close()
