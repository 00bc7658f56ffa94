"""The sweeps, and the sweeper process that runs them on one elected leader.

Every sweep has the same shape: a config with defaults, `run_once(conn, now)` returning
counts, bounded batches (each SQL call is its own short transaction), and a jittered
interval. Each is idempotent: running it twice, or on two processes, is harmless.

    PromotionSweep  hourly: cold tasks coming due within the hot window -> hot partition
    RecurringSweep  every minute (and at once on NOTIFY pgsched_recurring): arm schedules
                    that have no live occurrence (new, re-enabled, crashed mid-advance)
    RescueSweep     every minute: due cold tasks whose promotion was missed, expired
                    leases, and a wake-up for lanes with due work nobody claimed
    RetentionSweep  hourly: prune finished tasks and old events (default: keep 30 days)

Leadership: the sweeper holds a session advisory lock on a dedicated connection. If the
leader dies its session ends, the lock is released, and another sweeper takes over at
its next try (every `leader_retry` seconds, jittered).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from pgsched.option_checks import require_int, require_seconds
from pgsched.queries import query
from pgsched.recurring import ScheduleRow, arm

log = logging.getLogger("pgsched.sweeps")

LEADER_LOCK_KEY = 0x70677363686564 + 1  # "pgsched" + 1: the sweep leader


CHUNK_TIMINGS = 1000


def check_sweep(sweep: Any) -> None:
    """A chunk of 0 would promote nothing and loop forever; a zero interval would spin."""
    require_seconds(f"{sweep.name} sweep interval", sweep.interval)
    for size in ("chunk", "batch"):
        if hasattr(sweep, size):
            require_int(f"{sweep.name} sweep {size}", getattr(sweep, size), 1)


class Sweep(Protocol):
    name: str
    interval: float

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]: ...


@dataclass
class PromotionSweep:
    interval: float = 3600.0
    chunk: int = 10_000
    name: str = "promotion"
    # The last chunks' durations (a bounded window: a sweeper runs for months).
    chunk_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=CHUNK_TIMINGS))

    def __post_init__(self) -> None:
        check_sweep(self)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        promoted = chunks = 0
        while True:
            started = time.perf_counter()
            row = conn.execute(
                query("task_promote_due"), {"max_tasks": self.chunk, "within": None}
            ).fetchone()
            self.chunk_seconds.append(time.perf_counter() - started)
            moved = int(row[0]) if row else 0
            promoted += moved
            chunks += 1
            if moved < self.chunk:
                return {"promoted": promoted, "chunks": chunks}


@dataclass
class RecurringSweep:
    interval: float = 60.0
    batch: int = 500
    name: str = "recurring"

    def __post_init__(self) -> None:
        check_sweep(self)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        armed = skipped = 0
        while True:
            rows = conn.execute(query("schedules_unarmed"), {"max_rows": self.batch}).fetchall()
            progress = 0
            for row in rows:
                if arm(conn, ScheduleRow(*row), now) is not None:
                    armed += 1
                    progress += 1
                else:
                    skipped += 1
            if len(rows) < self.batch or progress == 0:
                return {"armed": armed, "not_armed": skipped}


@dataclass
class RescueSweep:
    interval: float = 60.0
    chunk: int = 1_000
    overdue_after: timedelta = timedelta(minutes=1)
    name: str = "rescue"

    def __post_init__(self) -> None:
        check_sweep(self)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        promoted_late = rescued = 0
        while True:
            row = conn.execute(
                query("task_promote_due"), {"max_tasks": self.chunk, "within": timedelta(0)}
            ).fetchone()
            moved = int(row[0]) if row else 0
            promoted_late += moved
            if moved < self.chunk:
                break
        while True:
            row = conn.execute(query("lease_rescue_all"), {"max_tasks": self.chunk}).fetchone()
            moved = int(row[0]) if row else 0
            rescued += moved
            if moved < self.chunk:
                break
        overdue = conn.execute(
            query("task_wake_overdue"), {"older_than": self.overdue_after}
        ).fetchall()
        return {
            "promoted_late": promoted_late,
            "leases_rescued": rescued,
            "overdue_woken": sum(int(n) for _, n in overdue),
        }


@dataclass
class RetentionSweep:
    interval: float = 3600.0
    keep: timedelta = timedelta(days=30)
    chunk: int = 10_000
    name: str = "retention"

    def __post_init__(self) -> None:
        check_sweep(self)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        # Counted by what was deleted: tasks, events, idempotency keys, recurring
        # occurrences, ledger rows of completed keyed work (once-keys are never deleted).
        totals: dict[str, int] = {}
        with conn.cursor(row_factory=dict_row) as cur:
            while True:
                row = cur.execute(
                    query("retention_prune"), {"keep": self.keep, "max_rows": self.chunk}
                ).fetchone()
                assert row is not None
                for name, count in row.items():
                    totals[name] = totals.get(name, 0) + int(count)
                if max(int(c) for c in row.values()) < self.chunk:
                    return totals


def default_sweeps() -> list[Sweep]:
    return [PromotionSweep(), RecurringSweep(), RescueSweep(), RetentionSweep()]


class Sweeper:
    """Runs the sweeps while it is the elected leader; otherwise waits to take over."""

    def __init__(
        self,
        dsn: str,
        sweeps: list[Sweep] | None = None,
        leader_retry: float = 5.0,
        on_counts: Any = None,
    ) -> None:
        self.dsn = dsn
        self.sweeps = sweeps if sweeps is not None else default_sweeps()
        self.leader_retry = leader_retry
        self.on_counts = on_counts
        self.is_leader = False
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self._lead_when_elected()
            except psycopg.Error as exc:
                log.warning("sweeper lost its database connection (%s); retrying", exc)
                self.is_leader = False
            if not self._stop.is_set():
                self._stop.wait(self.leader_retry * random.uniform(0.5, 1.0))

    def _lead_when_elected(self) -> None:
        with (
            psycopg.connect(self.dsn, autocommit=True) as leader,
            psycopg.connect(self.dsn, autocommit=True) as work,
        ):
            while not self._stop.is_set():
                row = leader.execute(query("sweep_leader_try"), {"key": LEADER_LOCK_KEY}).fetchone()
                if row and row[0]:
                    break
                self._stop.wait(self.leader_retry * random.uniform(0.5, 1.0))
            else:
                return
            self.is_leader = True
            log.info("elected sweep leader")
            leader.execute(query("listen_recurring"))
            next_run = {sweep.name: 0.0 for sweep in self.sweeps}
            while not self._stop.is_set():
                now_mono = time.monotonic()
                for sweep in self.sweeps:
                    if next_run[sweep.name] <= now_mono:
                        self._run_sweep(sweep, work)
                        jitter = random.uniform(0.9, 1.1)
                        next_run[sweep.name] = time.monotonic() + sweep.interval * jitter
                wait = max(min(next_run.values()) - time.monotonic(), 0.0)
                # A new schedule sends NOTIFY pgsched_recurring: arm it now, not in a minute.
                woken = False
                for _ in leader.notifies(timeout=min(wait, 1.0), stop_after=1):
                    woken = True
                if woken:
                    for sweep in self.sweeps:
                        if sweep.name == "recurring":
                            next_run[sweep.name] = 0.0

    def _run_sweep(self, sweep: Sweep, conn: psycopg.Connection[Any]) -> None:
        started = time.perf_counter()
        counts = sweep.run_once(conn, datetime.now(UTC))
        elapsed = time.perf_counter() - started
        if any(counts.values()):
            log.info("sweep %s: %s (%.3fs)", sweep.name, counts, elapsed)
        if self.on_counts is not None:
            self.on_counts(sweep.name, counts, elapsed)


def run_all_once(dsn: str, sweeps: list[Sweep] | None = None) -> dict[str, dict[str, int]]:
    """Run each sweep once if this process can take the leader lock (for cron jobs and
    tests); a process that is not elected runs nothing and returns {}."""
    results: dict[str, dict[str, int]] = {}
    with (
        psycopg.connect(dsn, autocommit=True) as leader,
        psycopg.connect(dsn, autocommit=True) as work,
    ):
        row = leader.execute(query("sweep_leader_try"), {"key": LEADER_LOCK_KEY}).fetchone()
        if not (row and row[0]):
            return results
        for sweep in sweeps if sweeps is not None else default_sweeps():
            results[sweep.name] = sweep.run_once(work, datetime.now(UTC))
    return results
