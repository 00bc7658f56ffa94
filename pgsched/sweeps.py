"""The sweeps, and the sweeper process that runs them on one elected leader.

Every sweep has the same shape: a config with defaults, `run_once(conn, now)` returning
counts, bounded batches (each SQL call is its own short transaction), and a jittered
interval. Each is idempotent: running it twice, or on two processes, is harmless.

    PromotionSweep  hourly: cold tasks coming due within the hot window -> hot partition
    RecurringSweep  every minute (and at once on NOTIFY pgsched_recurring): arm schedules
                    that have no live occurrence (new, re-enabled, crashed mid-advance)
    RescueSweep     every minute: due cold tasks whose promotion was missed, expired
                    leases, and a wake-up for lanes with due work nobody claimed
    DeadlineSweep   every 20 s: judge the deadlines (complete_by) passed or completed; a
                    miss is an event, a log line naming the task, a count for
                    pgsched_deadline_missed_total and its callback task, if any
    RetentionSweep  hourly: make partitions of finished tasks and of task_events ahead and
                    drop expired ones (finished_partitions_maintain, partitions_maintain),
                    prune what no partition drop takes (default: keep 30 days)

Leadership: the sweeper holds the leader lease (`pgsched.leadership`: a row, renewed every
third of its length, its writes fenced by the lease's generation). A leader that stops
releases it; one that dies stops renewing, and another sweeper takes over when the lease
runs out (within one lease period), or at its next try (every `leader_retry` seconds).
Nothing depends on a session, so sweepers work through a transaction pooler.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg.rows import class_row, dict_row

from pgsched.horizon import HorizonSweep
from pgsched.leadership import (
    DEFAULT_LEASE_SECONDS,
    LeaderLease,
    LeaseRenewer,
    connect_fenced,
    is_deposed,
)
from pgsched.migrations import require_current_schema
from pgsched.option_checks import require_int, require_seconds
from pgsched.pooler import DEFAULT_PREPARE_THRESHOLD, listen_target
from pgsched.queries import query
from pgsched.recurring import ScheduleRow, arm, database_now
from pgsched.startup import (
    HOT_TIER_NOT_DISTRIBUTED,
    connect,
    first_line,
    retry_delay,
    wait_for_current_schema,
)

log = logging.getLogger("pgsched.sweeps")

# How often a sweeper that lost the database tries it again.
OUTAGE_PROBE_S = 1.0

CHUNK_TIMINGS = 1000


def check_sweep(sweep: Any) -> None:
    """A chunk of 0 would promote nothing and loop forever; a zero interval would spin."""
    require_seconds(f"{sweep.name} sweep interval", sweep.interval)
    for size in ("chunk", "batch"):
        if hasattr(sweep, size):
            require_int(f"{sweep.name} sweep {size}", getattr(sweep, size), 1)
    # Durations: retention keeping nothing would delete today's history; a negative
    # overdue age would wake lanes for work that is not due.
    for duration, zero_ok in (("keep", False), ("overdue_after", True)):
        if hasattr(sweep, duration):
            value = getattr(sweep, duration)
            seconds = value.total_seconds() if isinstance(value, timedelta) else value
            require_seconds(f"{sweep.name} sweep {duration}", seconds, zero_ok=zero_ok)


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
                query("task_promote_due"), {"max_tasks": self.chunk, "within": None, "now": now}
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
        armed = skipped = failed = 0
        while True:
            with conn.cursor(row_factory=class_row(ScheduleRow)) as cur:
                rows = cur.execute(query("schedules_unarmed"), {"max_rows": self.batch}).fetchall()
            progress = 0
            for schedule in rows:
                # One schedule's fault never stops the others: a bad row is quarantined by
                # arm(); anything else skips this schedule until the next sweep.
                try:
                    task_id = arm(conn, schedule, now)
                except Exception as exc:
                    if not _schedule_can_be_skipped(conn, exc):
                        raise
                    failed += 1
                    log.error(
                        "schedule %s not armed this sweep: %s",
                        schedule.id,
                        first_line(exc),
                        extra={"schedule_id": schedule.id, "error": first_line(exc)},
                    )
                    continue
                if task_id is not None:
                    armed += 1
                    progress += 1
                else:
                    skipped += 1
            if len(rows) < self.batch or progress == 0:
                counts = {"armed": armed, "not_armed": skipped}
                if failed:
                    counts["failed"] = failed
                return counts


def _schedule_can_be_skipped(conn: psycopg.Connection[Any], exc: Exception) -> bool:
    """False once the connection is lost (every schedule would fail, and the sweeper
    reconnects) or the lease (another sweeper leads now). Any other fault (a lock timeout,
    a tenant the sweeper may not act for) belongs to this schedule this time; the schema
    itself was checked at start."""
    return not (conn.broken or conn.closed or is_deposed(exc))


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
                query("task_promote_due"),
                {"max_tasks": self.chunk, "within": timedelta(0), "now": now},
            ).fetchone()
            moved = int(row[0]) if row else 0
            promoted_late += moved
            if moved < self.chunk:
                break
        while True:
            row = conn.execute(
                query("lease_rescue_all"), {"max_tasks": self.chunk, "now": now}
            ).fetchone()
            moved = int(row[0]) if row else 0
            rescued += moved
            if moved < self.chunk:
                break
        overdue = conn.execute(
            query("task_wake_overdue"), {"older_than": self.overdue_after, "now": now}
        ).fetchall()
        return {
            "promoted_late": promoted_late,
            "leases_rescued": rescued,
            "overdue_woken": sum(int(n) for _, n in overdue),
        }


@dataclass
class DeadlineSweep:
    """Judges deadlines: met if the task COMPLETED by its complete_by, missed otherwise.
    Every 20 s, so a miss is found within a minute of the deadline whatever the jitter;
    `on_missed` (the sweeper's metrics) hears the task type of each miss."""

    interval: float = 20.0
    chunk: int = 1_000
    name: str = "deadlines"
    on_missed: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        check_sweep(self)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        met = missed = callbacks = 0
        while True:
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(
                    query("deadline_sweep"), {"max_tasks": self.chunk, "now": now}
                ).fetchall()
            for row in rows:
                if row["outcome"] == "met":
                    met += 1
                    continue
                missed += 1
                if row["callback_task_id"] is not None:
                    callbacks += 1
                log.warning(
                    "task %s (%s, tenant %s) missed its deadline %s: it was %s%s",
                    row["task_id"],
                    row["task_type"],
                    row["tenant_id"],
                    row["complete_by"].isoformat(),
                    row["status"],
                    f"; callback task {row['callback_task_id']} scheduled"
                    if row["callback_task_id"] is not None
                    else "",
                    extra={
                        "event": "deadline_missed",
                        "task_id": row["task_id"],
                        "task_type": row["task_type"],
                        "tenant": row["tenant_id"],
                        "schedule_id": row["schedule_id"],
                        "fields": {
                            "status": row["status"],
                            "complete_by": row["complete_by"].isoformat(),
                            "callback_task_id": row["callback_task_id"],
                        },
                    },
                )
                if self.on_missed is not None:
                    self.on_missed(row["task_type"])
            if len(rows) < self.chunk:
                return {"deadlines_met": met, "deadlines_missed": missed, "callbacks": callbacks}


@dataclass
class RetentionSweep:
    interval: float = 3600.0
    keep: timedelta = timedelta(days=30)
    chunk: int = 10_000
    # Partitions (task_events, finished tasks) made ahead of the current period, and how
    # long dropping an expired one may wait for its lock (the next sweep tries again).
    partitions_ahead: int = 3
    lock_wait: timedelta = timedelta(seconds=1)
    name: str = "retention"

    def __post_init__(self) -> None:
        check_sweep(self)
        require_int("retention sweep partitions_ahead", self.partitions_ahead, 1)
        require_seconds("retention sweep lock_wait", self.lock_wait.total_seconds())

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        # Counted by what was deleted: tasks, idempotency keys, recurring occurrences,
        # ledger rows of completed keyed work (once-keys are never deleted). Finished tasks
        # and events mostly go a whole partition at a time. The finished tasks' periods are
        # dropped first, so that retention_prune finds their idempotency keys unused in the
        # same run, as when it deleted those tasks itself.
        totals = self.maintain_finished_partitions(conn, now)
        with conn.cursor(row_factory=dict_row) as cur:
            while True:
                row = cur.execute(
                    query("retention_prune"),
                    {"keep": self.keep, "max_rows": self.chunk, "now": now},
                ).fetchone()
                assert row is not None
                for name, count in row.items():
                    totals[name] = totals.get(name, 0) + int(count)
                if max(int(c) for c in row.values()) < self.chunk:
                    break
        for name, count in self.maintain_partitions(conn, now).items():
            totals[name] = totals.get(name, 0) + count
        return totals

    def maintain_finished_partitions(
        self, conn: psycopg.Connection[Any], now: datetime
    ) -> dict[str, int]:
        """Make tasks_finished partitions ahead and drop expired ones, with their COMPLETED
        and CANCELLED rows; counts only what happened (finished_partitions_created,
        finished_partitions_dropped, lock_timeouts)."""
        return self._maintain(conn, now, "finished_partitions_maintain", "finished_partitions")

    def maintain_partitions(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        """Make task_events partitions ahead and drop expired ones; counts only what
        happened (partitions_created, partitions_dropped, events_archived, lock_timeouts)."""
        return self._maintain(conn, now, "partitions_maintain", "partitions")

    def _maintain(
        self, conn: psycopg.Connection[Any], now: datetime, statement: str, counter: str
    ) -> dict[str, int]:
        """One table's maintenance (both share one SQL body, time_partitions_maintain, so their
        rows read alike): counted as `<counter>_created`, `<counter>_dropped`, lock_timeouts."""
        with conn.cursor() as cur:
            rows = cur.execute(
                query(statement),
                {
                    "ahead": self.partitions_ahead,
                    "keep": self.keep,
                    "now": now,
                    "lock_wait": self.lock_wait,
                },
            ).fetchall()
        counts: dict[str, int] = {}
        for partition, action, n_rows in rows:
            if action in ("created", "dropped"):
                key = f"{counter}_{action}"
            elif action == "archived":  # task_events alone keeps an archive of live history
                counts["events_archived"] = int(n_rows)
                continue
            else:  # not_created / not_dropped: the lock was not granted in time
                key = "lock_timeouts"
                self._lock_timeout(partition, action)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def _lock_timeout(self, partition: str, action: str) -> None:
        log.warning(
            "retention: partition %s %s: its lock was not granted within %.1fs; the next"
            " retention sweep tries again",
            partition,
            action.replace("_", " "),
            self.lock_wait.total_seconds(),
            extra={"event": "partition_lock_timeout", "fields": {"partition": partition}},
        )


def default_sweeps() -> list[Sweep]:
    return [
        PromotionSweep(),
        RecurringSweep(),
        RescueSweep(),
        DeadlineSweep(),
        RetentionSweep(),
        HorizonSweep(),
    ]


class Sweeper:
    """Runs the sweeps while it holds the leader lease; otherwise waits to take over.

    Each sweep has its own error boundary: one that fails is logged and runs again at its
    next interval, while the others keep their times. A lost connection or a lost lease
    ends the leadership; the sweeps' times survive it, so a reconnect does not run them all
    at once.
    """

    name = "sweeps"

    def __init__(
        self,
        dsn: str,
        sweeps: list[Sweep] | None = None,
        leader_retry: float = 5.0,
        on_counts: Any = None,
        *,
        leader_lease: float = DEFAULT_LEASE_SECONDS,
        listen_dsn: str | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        holder: str | None = None,
    ) -> None:
        require_seconds("sweeper leader_retry", leader_retry)
        self.dsn = dsn
        self.sweeps = sweeps if sweeps is not None else default_sweeps()
        self.leader_retry = leader_retry
        self.on_counts = on_counts
        self.lease = LeaderLease(holder, leader_lease)
        # Where LISTEN pgsched_recurring runs (None: nowhere; schedules made by plain SQL
        # are then armed at the recurring sweep's interval).
        self.listen_dsn = listen_target(dsn, listen_dsn)
        self._connect_kwargs: dict[str, Any] = {"prepare_threshold": prepare_threshold}
        self.is_leader = False
        self._stop = threading.Event()
        self._next_run = {sweep.name: 0.0 for sweep in self.sweeps}
        self._connected = False
        self._unreachable_since: float | None = None

    def start(self) -> None:
        """run() in a thread of its own (a worker's --sweeps; `pgsched sweeper` calls run)."""
        threading.Thread(target=self.run, name="pgsched-sweeps", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Lead or wait until stop(). Raises SchemaMismatchError at start if the database's
        schema is not this pgsched's (waiting cannot fix that); an unreachable database is
        waited for."""
        # The Redis hot tier's mirror (pgsched/hot_tier/mirror.py) cannot run there yet.
        mirrors = any(sweep.name == "redis_mirror" for sweep in self.sweeps)
        reached = wait_for_current_schema(
            self.dsn,
            "sweeper",
            self._stop.is_set,
            distributed_refusal=HOT_TIER_NOT_DISTRIBUTED if mirrors else None,
        )
        if reached is None:
            return
        attempt = 0
        while not self._stop.is_set():
            self._connected = False
            try:
                self._lead_when_elected()
            except psycopg.Error as exc:
                if self.is_leader:
                    log.warning(
                        "sweeper lost leadership: %s",
                        first_line(exc),
                        extra={"event": "leader_lost", "error": first_line(exc)},
                    )
                    self.is_leader = False
                attempt = 1 if self._connected else attempt + 1
                # A probe on a short fixed interval, not a growing backoff: after a failover
                # the lead is taken back within about a second of the database answering
                # (and the old lease running out), however long the outage was.
                delay = min(retry_delay(attempt), OUTAGE_PROBE_S)
                if self._unreachable_since is None:
                    self._unreachable_since = time.monotonic()
                if attempt & (attempt - 1) == 0:  # attempts 1, 2, 4, 8 ...: a few lines
                    log.warning(
                        "sweeper cannot reach the database (attempt %d: %s); retrying every %.1fs",
                        attempt,
                        first_line(exc),
                        delay,
                        extra={"event": "database_unreachable", "error": first_line(exc)},
                    )
                self._stop.wait(delay)
                continue
            if self.is_leader:
                log.info("sweeper gave up leadership: stopping", extra={"event": "leader_lost"})
                self.is_leader = False

    def _lead_when_elected(self) -> None:
        lease = self.lease
        with (
            connect(self.dsn, autocommit=True, **self._connect_kwargs) as control,
            connect_fenced(self.dsn, **self._connect_kwargs) as work,
        ):
            self._connected = True
            if self._unreachable_since is not None:
                down = time.monotonic() - self._unreachable_since
                self._unreachable_since = None
                log.info(
                    "sweeper reached the database again after %.1fs",
                    down,
                    extra={"event": "database_back", "fields": {"down_s": round(down, 1)}},
                )
            while not self._stop.is_set():
                state = lease.try_acquire(control)
                if state.acquired:
                    break
                # Try again when the lease seen runs out (a dead leader's, at the latest),
                # or every leader_retry seconds, whichever comes first.
                retry = self.leader_retry * random.uniform(0.5, 1.0)
                self._stop.wait(min(retry, max(state.expires_in_s, 0.0) + 0.05))
            else:
                return
            self.is_leader = True
            log.info(
                "sweeper became leader (lease generation %d, holder %s)",
                lease.generation,
                lease.holder,
                extra={"event": "leader_gained"},
            )
            work.fence = lease.fence()
            renewer = LeaseRenewer(lease, self.dsn, control, **self._connect_kwargs)
            renewer.start()
            try:
                self._lead(lease, work)
            finally:
                work.fence = None
                renewer.stop()
                if lease.held():
                    # A clean stop: let the next sweeper take over at its next try.
                    with contextlib.suppress(psycopg.Error):
                        lease.release(control)
            if not self._stop.is_set():
                log.warning(
                    "sweeper lost leadership: lease generation %d is no longer held",
                    lease.generation,
                    extra={"event": "leader_lost"},
                )
                self.is_leader = False

    def _lead(self, lease: LeaderLease, work: psycopg.Connection[Any]) -> None:
        """Run the sweeps on time while the lease is held and nobody asked to stop."""
        listener = (
            connect(self.listen_dsn, autocommit=True, **self._connect_kwargs)
            if self.listen_dsn is not None
            else None
        )
        with listener if listener is not None else contextlib.nullcontext():
            if listener is not None:
                listener.execute(query("listen_recurring"))
            next_run = self._next_run
            while not self._stop.is_set() and lease.held():
                now_mono = time.monotonic()
                for sweep in self.sweeps:
                    if next_run[sweep.name] <= now_mono and lease.held():
                        self._run_sweep(sweep, work)
                        jitter = random.uniform(0.9, 1.1)
                        next_run[sweep.name] = time.monotonic() + sweep.interval * jitter
                wait = min(max(min(next_run.values()) - time.monotonic(), 0.0), 1.0)
                if listener is None:
                    self._stop.wait(wait)
                    continue
                # A new schedule sends NOTIFY pgsched_recurring: arm it now, not in a minute.
                woken = False
                for _ in listener.notifies(timeout=wait, stop_after=1):
                    woken = True
                if woken:
                    for sweep in self.sweeps:
                        if sweep.name == "recurring":
                            next_run[sweep.name] = 0.0

    def _run_sweep(self, sweep: Sweep, conn: psycopg.Connection[Any]) -> None:
        started = time.perf_counter()
        try:
            # One reading of the database's clock per sweep: every due, misfire and lease
            # decision of this run is judged by it, never by this host's clock.
            counts = sweep.run_once(conn, database_now(conn))
        except Exception as exc:
            if conn.broken or conn.closed:
                raise
            if is_deposed(exc):
                # Another sweeper leads now: this one's fenced write was refused.
                self.lease.deposed = True
                log.warning("sweep %s refused: %s", sweep.name, first_line(exc))
                return
            log.error(
                "sweep %s failed (%s); it runs again in %.0fs, the other sweeps keep their times",
                sweep.name,
                first_line(exc),
                sweep.interval,
                exc_info=exc,
            )
            return
        elapsed = time.perf_counter() - started
        if any(counts.values()):
            log.info("sweep %s: %s (%.3fs)", sweep.name, counts, elapsed)
        if self.on_counts is not None:
            self.on_counts(sweep.name, counts, elapsed)


def run_all_once(
    dsn: str,
    sweeps: list[Sweep] | None = None,
    *,
    leader_lease: float = DEFAULT_LEASE_SECONDS,
    prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
) -> dict[str, dict[str, int]]:
    """Run each sweep once if this process can take the leader lease (for cron jobs and
    tests), then release it; a process that is not elected runs nothing and returns {}."""
    results: dict[str, dict[str, int]] = {}
    lease = LeaderLease(None, leader_lease)
    kwargs: dict[str, Any] = {"prepare_threshold": prepare_threshold}
    with (
        connect(dsn, autocommit=True, **kwargs) as control,
        connect_fenced(dsn, **kwargs) as work,
    ):
        require_current_schema(work)
        if not lease.try_acquire(control).acquired:
            return results
        work.fence = lease.fence()
        renewer = LeaseRenewer(lease, dsn, control, **kwargs)
        renewer.start()
        try:
            for sweep in sweeps if sweeps is not None else default_sweeps():
                results[sweep.name] = sweep.run_once(work, database_now(work))
        finally:
            work.fence = None
            renewer.stop()
            lease.release(control)
    return results
