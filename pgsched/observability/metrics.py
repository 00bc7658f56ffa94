"""Prometheus metrics of the worker and sweeper processes.

Workers count what they already know, where they already handle it: claims once per claim
batch, outcomes once per outcome flush (after the database said which reports it applied),
aggregated per label set before a counter is touched. Lateness is observed per claimed
task, execution time per finished handler, on the event loop (no lock is contended). The
in-flight gauge is read from the lane loops at scrape time: it costs a task nothing.

Queue depth (due now, pending per tier, oldest due age, DEAD, overdue PENDING) is read from
the database by the sweeper leader only, on an interval (`QueueDepthSweep`), and exported
only while that process leads: one reader for the whole fleet, never one per scrape.

No metric has a task id label. The tenant label (on the claimed and outcome counters only)
is off unless asked for: every tenant multiplies those series by its task types and lanes.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pgsched.horizon import read_holders
from pgsched.option_checks import require_seconds
from pgsched.queries import query
from pgsched.tasks import TaskRow

# What a written outcome counts as (`pgsched_task_outcomes_total{outcome}`); each attempt
# that ends is counted once, under exactly one of these.
OUTCOMES = (
    "completed",
    "retried",
    "dead",
    "failed",
    "lease_lost",
    "released",
    "cancelled",
    "snoozed",
)

# Seconds. Lateness of a healthy lane is milliseconds; of a starved one, minutes to hours.
LATENESS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
)  # fmt: skip
EXECUTION_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
)  # fmt: skip


def new_registry() -> CollectorRegistry:
    """A registry of this process's own metrics, plus the standard process_* ones (CPU,
    memory, open files, start time) when the platform has /proc."""
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    return registry


def _outcome_of(status: str, task: TaskRow | None) -> str:
    """The outcome label of a report the database applied."""
    if status == "COMPLETED":
        return "completed"
    if status == "RELEASED":
        return "released"
    if status == "CANCELLED":
        return "cancelled"  # asked to stop (pgsched cancel) and stopped
    if status == "SNOOZED":
        return "snoozed"  # due again later, no attempt spent
    if status == "RETRY":
        # The database's own rule: a failed attempt with none left goes to the DEAD lane.
        if task is not None and task.attempt >= task.max_attempts:
            return "dead"
        return "retried"
    return "failed"  # FAILED: refused outright (validate, undecodable row), DEAD at once


class WorkerMetrics:
    """The worker's counters, histograms and in-flight gauge."""

    def __init__(
        self,
        registry: CollectorRegistry,
        lanes: Iterable[str],
        *,
        tenant_label: bool = False,
    ) -> None:
        self.registry = registry
        self.tenant_label = tenant_label
        labels = ["lane", "task_type", *(["tenant"] if tenant_label else [])]
        self._claimed = Counter(
            "pgsched_tasks_claimed",
            "Tasks claimed by this worker.",
            labels,
            registry=registry,
        )
        self._outcomes = Counter(
            "pgsched_task_outcomes",
            "Attempts ended, by outcome: completed, retried, dead (no attempts left), failed "
            "(refused outright: DEAD at once), lease_lost (report not applied), released "
            "(given back at shutdown), cancelled (asked to stop, and stopped), snoozed (due "
            "again later, no attempt spent).",
            [*labels, "outcome"],
            registry=registry,
        )
        lateness = Histogram(
            "pgsched_task_lateness_seconds",
            "When a task was claimed to start minus when it was due.",
            ["lane"],
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        execution = Histogram(
            "pgsched_task_execution_seconds",
            "How long a task's run took, from its start to its outcome.",
            ["lane"],
            buckets=EXECUTION_BUCKETS,
            registry=registry,
        )
        self._in_flight = Gauge(
            "pgsched_tasks_in_flight",
            "Tasks this worker runs now.",
            ["lane"],
            registry=registry,
        )
        self.lanes = [str(lane) for lane in lanes]
        # Children resolved once: observing is then a bucket search and two additions.
        self._lateness = {lane: lateness.labels(lane) for lane in self.lanes}
        self._execution = {lane: execution.labels(lane) for lane in self.lanes}
        # Claimed tasks whose outcome is not written yet: what a flush's outcomes count as.
        self._pending: dict[int, TaskRow] = {}

    def _key(self, task: TaskRow) -> tuple[str, ...]:
        if self.tenant_label:
            return (task.lane, task.task_type, task.tenant_id)
        return (task.lane, task.task_type)

    def watch_in_flight(self, lane: str, running: Callable[[], float]) -> None:
        """Read the lane's running count at scrape time."""
        self._in_flight.labels(lane).set_function(running)

    def claimed(self, tasks: list[TaskRow]) -> None:
        """A claim's tasks: counted, and their lateness observed (this host's clock, which
        `pgsched doctor` checks against the database's)."""
        if not tasks:
            return
        now = datetime.now(UTC)
        tally: Tally[tuple[str, ...]] = Tally()
        for task in tasks:
            self._pending[task.id] = task
            tally[self._key(task)] += 1
            lateness = self._lateness.get(task.lane)
            if lateness is not None:
                lateness.observe(max((now - task.scheduled_for).total_seconds(), 0.0))
        for key, n in tally.items():
            self._claimed.labels(*key).inc(n)

    def ran(self, task: TaskRow, seconds: float) -> None:
        execution = self._execution.get(task.lane)
        if execution is not None:
            execution.observe(seconds)

    def lease_lost(self, task: TaskRow) -> None:
        """The heartbeat found the lease gone while the handler ran (it is cancelled and
        reports nothing)."""
        if self._pending.pop(task.id, None) is not None:
            self._outcomes.labels(*self._key(task), "lease_lost").inc()

    def written(self, statuses: Iterable[tuple[int, str]], applied: set[int]) -> None:
        """Outcomes the buffer wrote: (task id, reported status) and the ids whose report
        the database applied; the others were refused as stale (their lease was lost)."""
        tally: Tally[tuple[str, ...]] = Tally()
        for task_id, status in statuses:
            task = self._pending.pop(task_id, None)
            if task is None:
                continue  # counted already (lease lost), or never a TaskRow (undecodable)
            outcome = _outcome_of(status, task) if task_id in applied else "lease_lost"
            tally[(*self._key(task), outcome)] += 1
        for key, n in tally.items():
            self._outcomes.labels(*key).inc(n)


# -- queue depth: the sweeper leader's view of the whole database -----------------------


@dataclass(frozen=True)
class QueueSnapshot:
    taken: float  # time.monotonic()
    due: Mapping[str, int]
    oldest_due_s: Mapping[str, float]
    pending: Mapping[str, int]
    dead: int
    overdue_pending: int
    overdue_pending_oldest_s: float
    # What holds the vacuum horizon back (pgsched.horizon): the oldest session transaction
    # among the holders, and the oldest xmin any holder pins.
    horizon_age_s: float = 0.0
    horizon_xid_age: int = 0


def read_queue_depth(conn: psycopg.Connection[Any]) -> QueueSnapshot:
    """Short, index-backed statements (sql/queries.sql): no routine read of the cold tier."""
    due: dict[str, int] = {}
    oldest: dict[str, float] = {}
    for lane, count, oldest_s in conn.execute(query("queue_depth_lanes")).fetchall():
        due[lane] = int(count)
        oldest[lane] = float(oldest_s or 0.0)
    row = conn.execute(query("queue_pending_tiers")).fetchone()
    assert row is not None
    immediate, hot, cold = (int(n) for n in row)
    if cold < 0:
        # Never analyzed (a new database): count it, until autovacuum's first ANALYZE.
        counted = conn.execute(query("queue_cold_count")).fetchone()
        cold = int(counted[0]) if counted else 0
    pending = {"immediate": immediate, "hot": hot, "cold": cold}
    dead_row = conn.execute(
        query("dead_count"), {"task_type": None, "tenant_id": None, "since": None}
    ).fetchone()
    overdue_row = conn.execute(query("overdue_pending")).fetchone()
    assert dead_row is not None and overdue_row is not None
    holders = read_holders(conn)
    return QueueSnapshot(
        taken=time.monotonic(),
        due=due,
        oldest_due_s=oldest,
        pending=pending,
        dead=int(dead_row[0]),
        overdue_pending=int(overdue_row[0]),
        overdue_pending_oldest_s=float(overdue_row[1] or 0.0),
        horizon_age_s=max((h.age_s for h in holders if h.age_s is not None), default=0.0),
        horizon_xid_age=max((h.xid_age for h in holders if h.xid_age is not None), default=0),
    )


class QueueDepthCollector(Collector):
    """Exports the last snapshot while this process leads the sweeps, and nothing
    otherwise: a follower's numbers would be stale, and summing several leaders' would
    double them."""

    def __init__(self, leading: Callable[[], bool], max_age: float) -> None:
        self._leading = leading
        self._max_age = max_age
        self.snapshot: QueueSnapshot | None = None
        # Workflow transitions (releases, holds, cascades) counted since this process began
        # reading: only the events written since its last read are read.
        self.workflow: dict[str, int] = {"released": 0, "held": 0, "cascaded": 0}
        self._last_event_id: int | None = None

    def count_workflow_events(self, conn: psycopg.Connection[Any]) -> None:
        if self._last_event_id is None:
            row = conn.execute(query("workflow_events_last")).fetchone()
            self._last_event_id = int(row[0]) if row else 0
            return
        row = conn.execute(
            query("workflow_events_since"), {"after": self._last_event_id}
        ).fetchone()
        assert row is not None
        self._last_event_id = int(row[0])
        for kind, n in zip(("released", "held", "cascaded"), row[1:], strict=True):
            self.workflow[kind] += int(n)

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if not self._leading():
            self.snapshot = None
            return
        if snapshot is None or time.monotonic() - snapshot.taken > self._max_age:
            return
        due = GaugeMetricFamily(
            "pgsched_queue_due_tasks", "QUEUED tasks already due, per lane.", labels=["lane"]
        )
        oldest = GaugeMetricFamily(
            "pgsched_queue_oldest_due_age_seconds",
            "How long the oldest due QUEUED task of the lane has waited (0: none due).",
            labels=["lane"],
        )
        for lane, count in sorted(snapshot.due.items()):
            due.add_metric([lane], count)
            oldest.add_metric([lane], snapshot.oldest_due_s.get(lane, 0.0))
        pending = GaugeMetricFamily(
            "pgsched_queue_pending_tasks",
            "Tasks scheduled and not yet due, per tier: immediate and hot (counted in the hot "
            "partition), cold (the planner's estimate of the cold partition's rows).",
            labels=["tier"],
        )
        for tier, count in snapshot.pending.items():
            pending.add_metric([tier], count)
        yield due
        yield oldest
        yield pending
        yield GaugeMetricFamily(
            "pgsched_dead_tasks", "Tasks in the DEAD lane.", value=snapshot.dead
        )
        transitions = CounterMetricFamily(
            "pgsched_workflow_transitions",
            "Workflow transitions seen by this sweep leader, by kind: released (a task's last "
            "parent finished), held (a parent went DEAD or was cancelled and the task waits "
            "on), cascaded (cancelled with its parent).",
            labels=["kind"],
        )
        for kind, n in self.workflow.items():
            transitions.add_metric([kind], n)
        yield transitions
        yield GaugeMetricFamily(
            "pgsched_overdue_pending_tasks",
            "Cold (PENDING) tasks already due: only a promotion moves them where workers claim.",
            value=snapshot.overdue_pending,
        )
        yield GaugeMetricFamily(
            "pgsched_overdue_pending_oldest_age_seconds",
            "How long the oldest overdue PENDING task has been due (0: none).",
            value=snapshot.overdue_pending_oldest_s,
        )
        yield GaugeMetricFamily(
            "pgsched_horizon_transaction_age_seconds",
            "How long the oldest transaction holding back VACUUM's horizon has been open (0:"
            " none); the sweep leader's log names it.",
            value=snapshot.horizon_age_s,
        )
        yield GaugeMetricFamily(
            "pgsched_horizon_xmin_age_xids",
            "Transactions since the oldest xmin a session, standby or replication slot pins.",
            value=snapshot.horizon_xid_age,
        )


@dataclass
class QueueDepthSweep:
    """A sweep that reads the queue depth into the collector: it runs where the sweeps run,
    on the elected leader only, every `interval` seconds."""

    collector: QueueDepthCollector
    interval: float = 15.0
    name: str = "queue_depth"
    runs: int = field(default=0)

    def __post_init__(self) -> None:
        require_seconds("--queue-depth-interval", self.interval)

    def run_once(self, conn: psycopg.Connection[Any], now: datetime) -> dict[str, int]:
        self.collector.snapshot = read_queue_depth(conn)
        self.collector.count_workflow_events(conn)
        self.runs += 1
        return {}  # nothing to log: the numbers are the metrics


class SweeperMetrics:
    """The sweeps' own gauges: whether this process leads, and the queue depth it reads."""

    def __init__(self, registry: CollectorRegistry, interval: float) -> None:
        # The sweeper that runs `sweep` is made with it in its list: it is followed after.
        self._leading: Callable[[], bool] = lambda: False
        leader = Gauge(
            "pgsched_sweeper_leader",
            "1 while this process holds the sweep leader lock.",
            registry=registry,
        )
        leader.set_function(lambda: 1.0 if self._leading() else 0.0)
        # A snapshot older than three intervals is not shown (the sweep is failing).
        self.collector = QueueDepthCollector(lambda: self._leading(), max_age=3 * interval + 5)
        registry.register(self.collector)
        self.sweep = QueueDepthSweep(self.collector, interval=interval)
        # Counted by the process whose deadline sweep judged the task: each miss once.
        self.deadline_missed = Counter(
            "pgsched_deadline_missed_total",
            "Tasks that missed their deadline (complete_by), found by the deadline sweep.",
            ["task_type"],
            registry=registry,
        )

    def count_deadline_missed(self, task_type: str) -> None:
        """The deadline sweep's `on_missed`."""
        self.deadline_missed.labels(task_type).inc()

    def watch(self, sweeps: Iterable[Any]) -> None:
        """Count the misses of the deadline sweep among `sweeps`."""
        for sweep in sweeps:
            if hasattr(sweep, "on_missed"):
                sweep.on_missed = self.count_deadline_missed

    def follow(self, leading: Callable[[], bool]) -> None:
        """Whether this process leads, read at scrape time (`lambda: sweeper.is_leader`)."""
        self._leading = leading
