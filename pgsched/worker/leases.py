"""The heartbeat: renews the leases of running tasks from its own thread and connection.

A thread, not a coroutine, so that a handler hogging the event loop (CPU-bound code in an
`async def`) cannot starve it: a task that is still running keeps its lease.

Its connection is its own, opened before the worker's pool (so a server short of slots
starves the pool, never the heartbeat), and checked before each beat: one that died idle
(`idle_session_timeout`, a killed backend) is replaced and the beat sent at once, not a
round later.

A lease that cannot be renewed two rounds in a row is lost (the task was rescued and
belongs to another worker, or finished elsewhere): it is dropped at once, never renewed
again, and `on_lost` is told (the worker cancels the task's handler). One missed round
alone proves nothing: the renewal skips a row its own outcome write holds locked.

Every second, between beats, it also asks which of its tasks were asked to stop
(`task_cancel_requested`, a read) and tells `on_cancel` of each once: the backstop for a
cancel notification the listener missed (pgsched/worker/cancels.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import psycopg

from pgsched.queries import query
from pgsched.tasks import TaskRow
from pgsched.worker.connections import looks_dead

log = logging.getLogger("pgsched.worker.leases")

LOST_AFTER_MISSED_ROUNDS = 2

# How often the held tasks are checked for cancel requests: a cancel takes effect within
# about this long even when its notification is lost.
CANCEL_CHECK_SECONDS = 1.0


class LeaseKeeper(threading.Thread):
    def __init__(
        self,
        dsn: str,
        lease_seconds: float,
        on_lost: Callable[[int], object] | None = None,
        on_cancel: Callable[[int], object] | None = None,
        **connect_kwargs: Any,
    ) -> None:
        super().__init__(name="pgsched-heartbeat", daemon=True)
        self._dsn = dsn
        self._connect_kwargs = connect_kwargs
        self._lease = timedelta(seconds=lease_seconds)
        self._interval = max(lease_seconds / 3, 0.2)
        self._held: dict[int, Any] = {}
        # Distributed mode: each held task's tenant (tenants_of); empty otherwise.
        self._tenants: dict[int, str] = {}
        self._missed: dict[int, int] = {}
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._cancel_told: set[int] = set()
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None

    def hold(self, task_id: int, lease_token: Any) -> None:
        with self._lock:
            self._held[task_id] = lease_token

    def tenants_of(self, tasks: Iterable[TaskRow]) -> None:
        """Distributed mode: the tenants of claimed tasks, so that their leases are renewed
        tenant by tenant, each on its shard (a worker node down then holds back only the
        renewals of its own tenants)."""
        with self._lock:
            self._tenants.update((task.id, task.tenant_id) for task in tasks)

    def hold_many(self, tasks: Iterable[tuple[int, Any]]) -> None:
        """hold() for a claim's (task id, lease token) pairs, under one lock."""
        with self._lock:
            self._held.update(tasks)

    def drop(self, task_id: int) -> None:
        with self._lock:
            self._held.pop(task_id, None)
            self._tenants.pop(task_id, None)
            self._missed.pop(task_id, None)
            self._cancel_told.discard(task_id)

    def drop_many(self, task_ids: Iterable[int]) -> None:
        """drop() for a flush's tasks, under one lock."""
        with self._lock:
            held, missed, told = self._held, self._missed, self._cancel_told
            tenants = self._tenants
            for task_id in task_ids:
                held.pop(task_id, None)
                if tenants:
                    tenants.pop(task_id, None)
                if missed:
                    missed.pop(task_id, None)
                if told:
                    told.discard(task_id)

    def stop(self) -> None:
        self._stop_event.set()

    def connect(self) -> None:
        """Open the heartbeat's connection now (else at the first beat that needs it)."""
        try:
            self._connection()
        except psycopg.Error as exc:
            log.warning("heartbeat connection not open yet (%s); retrying at each beat", exc)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or looks_dead(self._conn):
            if self._conn is not None:
                self._conn.close()
                log.info("heartbeat connection lost; reconnecting")
            self._conn = None
            self._conn = psycopg.connect(self._dsn, autocommit=True, **self._connect_kwargs)
        return self._conn

    def _beat(self, held: dict[int, Any]) -> tuple[list[Any], set[int]]:
        """Renew `held`: the rows renewed, and the tasks whose renewal could not be asked
        (distributed mode: their tenant's worker node did not answer; neither kept nor
        missed). Raises when the whole beat failed."""
        with self._lock:
            tenants = {task_id: self._tenants.get(task_id) for task_id in held}
        if not any(tenants.values()):
            return self._beat_one(held, None), set()
        groups: dict[str | None, dict[int, Any]] = {}
        for task_id, token in held.items():
            groups.setdefault(tenants[task_id], {})[task_id] = token
        rows: list[Any] = []
        unknown: set[int] = set()
        for tenant, group in groups.items():
            try:
                rows += self._beat_one(group, tenant)
            except psycopg.Error as exc:
                log.warning(
                    "heartbeat for %d tasks of tenant %s failed (%s); retrying (tasks %s)",
                    len(group),
                    tenant,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    ",".join(map(str, list(group)[:20])),
                )
                unknown |= group.keys()
        return rows, unknown

    def _beat_one(self, held: dict[int, Any], tenant: str | None) -> list[Any]:
        params = {
            "task_ids": list(held),
            "lease_tokens": list(held.values()),
            "lease": self._lease,
            "tenant": tenant,
        }
        try:
            return self._connection().execute(query("task_heartbeat_many"), params).fetchall()
        except psycopg.OperationalError as exc:
            # Died between the check and the beat: one more try on a new connection.
            log.info("heartbeat connection lost (%s); reconnecting", exc)
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return self._connection().execute(query("task_heartbeat_many"), params).fetchall()

    def _check_cancels(self, held: dict[int, Any]) -> None:
        try:
            rows = (
                self._connection()
                .execute(query("task_cancel_requested"), {"task_ids": list(held)})
                .fetchall()
            )
        except psycopg.Error as exc:
            log.info("cancel check failed (%s); the next beat reconnects", exc)
            return
        with self._lock:
            told = [row[0] for row in rows if row[0] in self._held]
            told = [task_id for task_id in told if task_id not in self._cancel_told]
            self._cancel_told.update(told)
        for task_id in told:
            assert self._on_cancel is not None
            self._on_cancel(task_id)

    def run(self) -> None:
        next_beat = time.monotonic() + self._interval
        wake_every = min(self._interval, CANCEL_CHECK_SECONDS)
        while not self._stop_event.wait(wake_every):
            with self._lock:
                held = dict(self._held)
            if not held:
                continue
            if self._on_cancel is not None:
                self._check_cancels(held)
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self._interval
            try:
                rows, unknown = self._beat(held)
            except psycopg.Error as exc:
                log.warning(
                    "heartbeat for %d tasks failed (%s); retrying (tasks %s)",
                    len(held),
                    exc,
                    ",".join(map(str, list(held)[:20])),
                )
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                continue
            kept = {row[0] for row in rows}
            lost = []
            with self._lock:
                for task_id in kept:
                    self._missed.pop(task_id, None)
                for task_id in held.keys() - kept - unknown:
                    if self._held.get(task_id) != held[task_id]:
                        continue  # its outcome was written meanwhile
                    # Either lost, or locked by its own outcome write at this moment (skipped).
                    missed = self._missed[task_id] = self._missed.get(task_id, 0) + 1
                    if missed >= LOST_AFTER_MISSED_ROUNDS:
                        del self._held[task_id], self._missed[task_id]
                        lost.append(task_id)
            for task_id in lost:
                if self._on_lost is not None:
                    self._on_lost(task_id)
                else:
                    log.warning("task %s: lease lost; no longer renewed", task_id)
        if self._conn is not None:
            self._conn.close()
