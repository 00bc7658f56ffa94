"""Soak: a steady mix of traffic for a long while with retention pruning as it goes.

    python -m benchmarks.bench_soak --minutes 30 --rate 2000                # the long form
    python -m benchmarks.bench_soak --minutes 1 --rate 200 --sample-seconds 5   # a smoke run

A day of a busy deployment compressed into minutes: the retention period is minutes instead
of days (`--retention-minutes`, default 5), so the done tier and the events fill up to
their retained size and are pruned while the traffic goes on. Running at once:

- `--workers` `pgsched worker` processes (lanes high,normal; `benchmarks.soak_app`);
- one `pgsched sweeper` with retention every `--retention-interval` seconds (default 60);
- a producer (a thread of this process) scheduling `--rate` one-off tasks a second, each
  due `--lead` seconds ahead at exact 1/rate spacing: 10 % HIGH, 25 % with an idempotency
  key, 5 % `soak_flaky` (fails once, retried after ~1 s), 0.1 % `soak_doomed` (fails twice:
  the DEAD lane, which retention keeps);
- `--schedules` recurring schedules firing every minute (`* * * * *`: cron's finest step).

Every `--sample-seconds` (default 120) one sample: completions/s and claim lateness
(claim time - due time, from the events, p50 / p99 / max) over the window since the last
sample; tasks due but not claimed; `tasks_hot`'s size on disk and dead tuples; the done
tier's and `task_events`' sizes (summed over their partitions, and `task_events`'
partition count); the idempotency keys; the database's size; WAL written and `pg_wal`'s
size; what the retention sweeps deleted (from the sweeper's log); the load average.

After the run, with every process stopped, the retention sweep runs once more with its
clock moved two `task_events` partition periods plus the retention ahead, as the sweeper
would run two days later: what it deletes and drops, its time, its WAL,
the sizes before and after (events are dropped a period at a time, so within a run shorter
than the period they only grow).

Flat is the goal: after a warm-up (the retention period plus one retention interval, while
the done tier fills to its retained size) the mean of each series' last third is compared
with its first third; a change beyond `--tolerance` is named. Prints a table, writes JSON
(`--out`) and a plot (`--plot`; matplotlib, the `bench` extra: without it the plot is
skipped with a message). Without `--dsn` a throwaway durable Postgres cluster is started
(benchmarks/pgserver.py).
"""

from __future__ import annotations

import argparse
import ast
import math
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from benchmarks import measure

SOAK_APP = "benchmarks.soak_app:app"
PLOTS = measure.REPO / "benchmarks" / "plots"
MIB = 2**20
# Events are read this far behind the database's clock, so that a window's rows have all
# committed (an outcome is flushed a few ms after its event time) and none is counted twice.
SETTLE_S = 5.0
PRODUCER_TICK_S = 0.1
PRODUCER_CHUNK = 5_000

SCHEDULE_SQL = (
    "SELECT count(*) FROM pgsched.schedule_tasks("
    "task_types => %b::text[], payloads => %b::jsonb[], run_ats => %b::timestamptz[],"
    " priorities => %b::int4[], idempotency_keys => %b::text[], max_attempts => %b::int8[])"
)

WINDOW_SQL = """
SELECT count(*) FILTER (WHERE to_status = 'COMPLETED') AS completed,
       count(*) FILTER (WHERE to_status = 'PROCESSING' AND from_status <> 'PROCESSING')
           AS claimed,
       count(*) FILTER (WHERE from_status = 'PROCESSING' AND to_status IN ('QUEUED', 'PENDING'))
           AS retried,
       count(*) FILTER (WHERE to_status = 'FAILED') AS failed,
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
           ORDER BY extract(EPOCH FROM occurred_at - scheduled_for) * 1000)
           FILTER (WHERE to_status = 'PROCESSING' AND from_status <> 'PROCESSING')
           AS lateness_ms,
       max(extract(EPOCH FROM occurred_at - scheduled_for) * 1000)
           FILTER (WHERE to_status = 'PROCESSING' AND from_status <> 'PROCESSING')
           AS lateness_max_ms
  FROM pgsched.task_events
 WHERE occurred_at >= %(lo)s AND occurred_at < %(hi)s
"""

# Summed over partitions, so the figures mean the same before and after a table is split
# into time partitions (pg_partition_tree lists nothing for a plain table: it is its own
# one leaf). n_tup_del counts the rows retention deleted (completed tasks never leave the
# done tier otherwise); a dropped partition takes its counts with it.
SIZES_SQL = """
WITH done AS (
    SELECT relid FROM pg_partition_tree('pgsched.tasks')
     WHERE isleaf AND relid NOT IN ('pgsched.tasks_hot'::regclass, 'pgsched.tasks_cold'::regclass)
), events AS (
    SELECT relid FROM pg_partition_tree('pgsched.task_events') WHERE isleaf
    UNION
    SELECT oid FROM pg_class WHERE oid = 'pgsched.task_events'::regclass AND relkind = 'r'
), done_stats AS (
    SELECT coalesce(sum(n_live_tup), 0) AS live, coalesce(sum(n_dead_tup), 0) AS dead,
           coalesce(sum(n_tup_del), 0) AS deleted
      FROM pg_stat_all_tables WHERE relid IN (SELECT relid FROM done)
), events_stats AS (
    SELECT coalesce(sum(n_live_tup), 0) AS live, coalesce(sum(n_dead_tup), 0) AS dead,
           coalesce(sum(n_tup_del), 0) AS deleted
      FROM pg_stat_all_tables WHERE relid IN (SELECT relid FROM events)
), hot_stats AS (
    SELECT coalesce(n_dead_tup, 0) AS dead, coalesce(n_live_tup, 0) AS live,
           autovacuum_count AS autovacuums
      FROM pg_stat_all_tables WHERE relid = 'pgsched.tasks_hot'::regclass
)
SELECT pg_total_relation_size('pgsched.tasks_hot') AS hot_bytes,
       (SELECT dead FROM hot_stats) AS hot_dead_tup,
       (SELECT live FROM hot_stats) AS hot_live_tup,
       (SELECT autovacuums FROM hot_stats) AS hot_autovacuums,
       (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM done) AS done_bytes,
       (SELECT live FROM done_stats) AS done_live_tup,
       (SELECT dead FROM done_stats) AS done_dead_tup,
       (SELECT deleted FROM done_stats) AS done_deleted,
       (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM events) AS events_bytes,
       (SELECT count(*) FROM events) AS events_partitions,
       (SELECT live FROM events_stats) AS events_live_tup,
       (SELECT dead FROM events_stats) AS events_dead_tup,
       (SELECT deleted FROM events_stats) AS events_deleted,
       pg_total_relation_size('pgsched.idempotency_keys') AS keys_bytes,
       pg_database_size(current_database()) AS db_bytes,
       (SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()) AS pg_wal_bytes,
       pg_current_wal_lsn()::text AS lsn
"""

QUEUE_SQL = """
SELECT count(*) FILTER (WHERE status = 'QUEUED' AND next_run_at <= clock_timestamp())
           AS due_waiting,
       count(*) FILTER (WHERE status = 'PROCESSING') AS processing,
       (SELECT count(*) FROM pgsched.tasks WHERE status = 'FAILED') AS dead_lane
  FROM pgsched.tasks_hot
"""

# The sweeper's INFO line for a sweep that did something (text log format):
# `2026-12-03 16:05:35,468 INFO pgsched.sweeps: sweep retention: {...} (1.035s)`.
SWEEP_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)?.*?sweep (\w+): (\{[^}]*\}) \((\d+(?:\.\d+)?)s\)$",
    re.MULTILINE,
)


# --------------------------------------------------------------------------------------
# the producer


@dataclass(frozen=True)
class Mix:
    """What the i-th one-off task is: decided by i alone, so every run has the same mix."""

    def task_type(self, i: int) -> str:
        if i % 1000 == 7:
            return "soak_doomed"
        if i % 20 == 3:
            return "soak_flaky"
        return "soak_ok"

    def priority(self, i: int) -> int:
        return 8 if i % 10 == 1 else 5  # 8+ is the HIGH lane

    def key(self, i: int, prefix: str) -> str | None:
        return f"{prefix}-{i}" if i % 4 == 0 else None

    def max_attempts(self, i: int) -> int:
        return 2 if self.task_type(i) == "soak_doomed" else 3


class Producer:
    """Schedules `rate` one-off tasks a second, each due `lead` seconds ahead, at exact
    1/rate spacing of due times, in a call every PRODUCER_TICK_S (a thread of its own)."""

    def __init__(self, dsn: str, rate: float, lead: float, prefix: str) -> None:
        self.dsn, self.rate, self.lead, self.prefix = dsn, rate, lead, prefix
        self.mix = Mix()
        self.scheduled = 0
        self.calls = 0
        self.call_ms_max = 0.0
        self.behind_s_max = 0.0  # how far the producer fell behind its own due times
        self.error: BaseException | None = None
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the main thread, which stops the run
            self.error = exc

    def _produce(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            first_due = datetime.now(UTC) + timedelta(seconds=self.lead)
            i = 0
            while not self._stop_event.is_set():
                horizon = datetime.now(UTC) + timedelta(seconds=self.lead)
                upto = int((horizon - first_due).total_seconds() * self.rate)
                if upto > i:
                    hi = min(upto, i + PRODUCER_CHUNK)
                    due = first_due + timedelta(seconds=i / self.rate)
                    self.behind_s_max = max(
                        self.behind_s_max, (datetime.now(UTC) - due).total_seconds()
                    )
                    started = time.perf_counter()
                    n = measure.one(conn, SCHEDULE_SQL, self._arrays(first_due, i, hi))
                    self.call_ms_max = max(self.call_ms_max, (time.perf_counter() - started) * 1e3)
                    self.scheduled += int(n)
                    self.calls += 1
                    i = hi
                    if upto > i:
                        continue  # behind: catch up without sleeping
                self._stop_event.wait(PRODUCER_TICK_S)

    def _arrays(self, first_due: datetime, lo: int, hi: int) -> tuple[list[Any], ...]:
        m, idx = self.mix, range(lo, hi)
        return (
            [m.task_type(i) for i in idx],
            [f'{{"n": {i}}}' for i in idx],
            [first_due + timedelta(seconds=i / self.rate) for i in idx],
            [m.priority(i) for i in idx],
            [m.key(i, self.prefix) for i in idx],
            [m.max_attempts(i) for i in idx],
        )

    def stop(self) -> None:
        self._stop_event.set()
        if self._thread.ident is not None:  # started (a run that failed to start never was)
            self._thread.join(timeout=30)


# --------------------------------------------------------------------------------------
# sampling


def sweep_runs(log_text: str) -> list[dict[str, Any]]:
    """The sweeps that did something, in the order the sweeper logged them (when it
    finished each: the log's local time, as written)."""
    return [
        {"at": m[1], "sweep": m[2], "counts": ast.literal_eval(m[3]), "seconds": float(m[4])}
        for m in SWEEP_LINE.finditer(log_text)
    ]


def sweep_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per sweep: how many runs did something, their durations, what they counted."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({r["sweep"] for r in runs}):
        mine = [r for r in runs if r["sweep"] == name]
        out[name] = {
            "runs": len(mine),
            "seconds": measure.percentiles([r["seconds"] for r in mine]),
            "counted": {
                k: sum(int(r["counts"].get(k, 0)) for r in mine)
                for k in sorted({k for r in mine for k in r["counts"]})
            },
        }
    return out


def mib(n: Any) -> float:
    return round(int(n) / MIB, 2)


@dataclass
class Sampler:
    dsn: str
    started: float  # time.monotonic() at the start of the run
    window_lo: datetime
    lsn: str
    deleted: tuple[int, int] = (0, 0)  # done tier, events: n_tup_del at the last sample
    samples: list[dict[str, Any]] = field(default_factory=list)

    def take(self, sweeper_log: Callable[[], str], scheduled: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            now = conn.execute("SELECT clock_timestamp() AS now").fetchone()
            assert now is not None
            hi = now["now"] - timedelta(seconds=SETTLE_S)
            w = conn.execute(WINDOW_SQL, {"lo": self.window_lo, "hi": hi}).fetchone()
            z = conn.execute(SIZES_SQL).fetchone()
            q = conn.execute(QUEUE_SQL).fetchone()
            assert w is not None and z is not None and q is not None
            wal = conn.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn) AS bytes", (z["lsn"], self.lsn)
            ).fetchone()
            assert wal is not None
        span = max((hi - self.window_lo).total_seconds(), 1e-9)
        retention = [r for r in sweep_runs(sweeper_log()) if r["sweep"] == "retention"]
        late = w["lateness_ms"]
        sample = {
            "t_min": round((time.monotonic() - self.started) / 60, 2),
            "window_s": round(span, 1),
            "completed_per_s": round(int(w["completed"]) / span, 1),
            "claimed_per_s": round(int(w["claimed"]) / span, 1),
            "retried_per_s": round(int(w["retried"]) / span, 1),
            "failed_dead": int(w["failed"]),
            "lateness_p50_ms": round(late[0], 2) if late else None,
            "lateness_p99_ms": round(late[1], 2) if late else None,
            "lateness_max_ms": (
                round(w["lateness_max_ms"], 2) if w["lateness_max_ms"] is not None else None
            ),
            "due_waiting": int(q["due_waiting"]),
            "processing": int(q["processing"]),
            "dead_lane": int(q["dead_lane"]),
            "hot_mib": mib(z["hot_bytes"]),
            "hot_dead_tup": int(z["hot_dead_tup"]),
            "hot_live_tup": int(z["hot_live_tup"]),
            "hot_autovacuums": int(z["hot_autovacuums"]),
            "done_mib": mib(z["done_bytes"]),
            "done_live_tup": int(z["done_live_tup"]),
            "done_dead_tup": int(z["done_dead_tup"]),
            "events_mib": mib(z["events_bytes"]),
            "events_partitions": int(z["events_partitions"]),
            "events_live_tup": int(z["events_live_tup"]),
            "events_dead_tup": int(z["events_dead_tup"]),
            "keys_mib": mib(z["keys_bytes"]),
            "db_mib": mib(z["db_bytes"]),
            "pg_wal_mib": mib(z["pg_wal_bytes"]),
            "wal_mib_per_s": round(float(wal["bytes"]) / MIB / span, 3),
            # Rows deleted in the window (n_tup_del; a partition dropped takes its count).
            "pruned_tasks": max(int(z["done_deleted"]) - self.deleted[0], 0),
            "pruned_events": max(int(z["events_deleted"]) - self.deleted[1], 0),
            "retention_runs_logged": len(retention),
            "scheduled": scheduled,
            "loadavg_1m": measure.loadavg()[0],
            "sample_ms": round((time.perf_counter() - t0) * 1e3, 1),
        }
        self.window_lo, self.lsn = hi, z["lsn"]
        self.deleted = (int(z["done_deleted"]), int(z["events_deleted"]))
        self.samples.append(sample)
        return sample


# --------------------------------------------------------------------------------------
# flatness


@dataclass(frozen=True)
class Series:
    name: str
    label: str
    slack: float  # a change smaller than this is flat whatever the ratio
    # Judged by its peaks, not its mean: a sawtooth (dead tuples between autovacuum runs)
    # is flat when its peaks are, whichever phase the samples happen to catch.
    peaks: bool = False


SERIES: tuple[Series, ...] = (
    Series("completed_per_s", "completions/s", 0.0),
    Series("lateness_p99_ms", "lateness p99 (ms)", 5.0),
    Series("hot_mib", "tasks_hot MiB", 1.0),
    Series("hot_dead_tup", "tasks_hot dead tuples", 2_000.0, peaks=True),
    Series("done_mib", "done tier MiB", 1.0),
    Series("events_mib", "task_events MiB", 1.0),
    Series("db_mib", "database MiB", 1.0),
    Series("wal_mib_per_s", "WAL MiB/s", 0.05),
)


def flatness(
    samples: list[dict[str, Any]], warmup_min: float, tolerance: float
) -> dict[str, dict[str, Any]]:
    """Per series: the first sample, the first after the warm-up, the last; the steady
    part's first third against its last third (their means, or their peaks), and whether
    that stayed within the tolerance (or within the series' slack)."""
    steady = [s for s in samples if s["t_min"] >= warmup_min]
    out: dict[str, dict[str, Any]] = {}
    for series in SERIES:
        values = [s[series.name] for s in samples if s[series.name] is not None]
        tail = [s[series.name] for s in steady if s[series.name] is not None]
        entry: dict[str, Any] = {
            "label": series.label,
            "first": values[0] if values else None,
            "steady_start": tail[0] if tail else None,
            "end": values[-1] if values else None,
            "compared": "peaks" if series.peaks else "means",
        }
        if len(tail) >= 3:
            third = max(1, len(tail) // 3)
            pick = max if series.peaks else statistics.fmean
            early, late = pick(tail[:third]), pick(tail[-third:])
            change = (late - early) / early if early else (0.0 if late == early else math.inf)
            entry |= {
                "steady_first_third": round(early, 3),
                "steady_last_third": round(late, 3),
                "change": round(change, 3) if math.isfinite(change) else None,
                "flat": abs(late - early) <= series.slack or abs(change) <= tolerance,
            }
        else:
            entry |= {"change": None, "flat": None}  # too few steady samples to judge
        out[series.name] = entry
    return out


# --------------------------------------------------------------------------------------
# output


COLUMNS = (
    ("t_min", "min", "{:.1f}"),
    ("completed_per_s", "done/s", "{:,.0f}"),
    ("lateness_p50_ms", "p50 ms", "{:.1f}"),
    ("lateness_p99_ms", "p99 ms", "{:.1f}"),
    ("lateness_max_ms", "max ms", "{:,.0f}"),
    ("due_waiting", "due", "{:,}"),
    ("hot_mib", "hot MiB", "{:.1f}"),
    ("hot_dead_tup", "hot dead", "{:,}"),
    ("done_mib", "done MiB", "{:,.1f}"),
    ("events_mib", "events MiB", "{:,.1f}"),
    ("events_partitions", "parts", "{:,}"),
    ("db_mib", "db MiB", "{:,.0f}"),
    ("wal_mib_per_s", "WAL MiB/s", "{:.2f}"),
    ("pruned_tasks", "pruned", "{:,}"),
    ("loadavg_1m", "load", "{:.1f}"),
)


def table(samples: Sequence[dict[str, Any]]) -> str:
    def cell(value: Any, spec: str) -> str:
        return "-" if value is None else spec.format(value)

    head = [label for _, label, _ in COLUMNS]
    rows = [[cell(s[k], spec) for k, _, spec in COLUMNS] for s in samples]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def flatness_lines(flat: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for entry in flat.values():
        verdict = {True: "flat", False: "NOT FLAT", None: "too few steady samples"}[entry["flat"]]
        change = (
            ""
            if entry["change"] is None
            else f", steady {entry['compared']} change {entry['change']:+.0%}"
        )
        lines.append(
            f"{entry['label']:>22}: first {entry['first']}, after warm-up"
            f" {entry['steady_start']}, end {entry['end']}{change}: {verdict}"
        )
    return lines


def plot(document: dict[str, Any], path: Path) -> bool:
    """The series against time, one panel each, the warm-up shaded; False (and a message)
    when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -e '.[bench]')")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = document["samples"]
    t = [s["t_min"] for s in samples]
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5), sharex=True)

    def panel(ax: Any, keys: list[tuple[str, str]], ylabel: str, log: bool = False) -> Any:
        for key, label in keys:
            ax.plot(t, [s[key] for s in samples], marker=".", label=label)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.axvspan(0, document["warmup_min"], color="grey", alpha=0.12)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=None if log else 0)
        return ax

    ax = panel(axes[0][0], [("completed_per_s", "completed")], "tasks/s")
    ax.axhline(document["expected_per_s"], color="grey", linestyle="--", label="scheduled")
    ax.legend(fontsize=8)
    ax.set_title("completions/s")
    ax = panel(
        axes[0][1],
        [("lateness_p50_ms", "p50"), ("lateness_p99_ms", "p99"), ("lateness_max_ms", "max")],
        "ms (log)",
        log=True,
    )
    ax.legend(fontsize=8)
    ax.set_title("claim lateness (claim - due)")
    ax = panel(axes[0][2], [("hot_mib", "size")], "MiB")
    ax.set_title("tasks_hot: size and dead tuples")
    twin = ax.twinx()
    twin.plot(t, [s["hot_dead_tup"] for s in samples], color="grey", linewidth=0.8)
    twin.set_ylabel("dead tuples (grey)")
    twin.set_ylim(bottom=0)
    ax = panel(
        axes[1][0],
        [("done_mib", "done tier"), ("events_mib", "task_events"), ("keys_mib", "keys")],
        "MiB",
    )
    ax.legend(fontsize=8)
    ax.set_title("retained tables")
    ax = panel(axes[1][1], [("db_mib", "database"), ("pg_wal_mib", "pg_wal")], "MiB")
    ax.legend(fontsize=8)
    ax.set_title("database and pg_wal size")
    ax = panel(axes[1][2], [("wal_mib_per_s", "WAL written")], "MiB/s")
    ax.set_title("WAL written")
    for ax in axes[1]:
        ax.set_xlabel("minutes (warm-up shaded)")
    fig.suptitle(
        f"Soak: {document['rate_per_s']:,.0f} one-off tasks/s + {document['schedules']}"
        f" schedules/min, {document['workers']} workers, retention"
        f" {document['retention_minutes']:g} min pruned every"
        f" {document['retention_interval_s']:g} s"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")
    return True


# --------------------------------------------------------------------------------------
# the run


def start_processes(dsn: str, args: argparse.Namespace) -> tuple[measure.Procs, measure.Procs]:
    worker = [
        *measure.pgsched_exe(),
        "--dsn",
        dsn,
        "worker",
        "--app",
        SOAK_APP,
        "--lanes",
        "high,normal",
        "--batch-size",
        str(args.batch_size),
        "--concurrency",
        str(args.concurrency),
        # A failed attempt that will be retried logs a WARNING: the soak makes thousands.
        "--log-level",
        "error",
    ]
    sweeper = [
        *measure.pgsched_exe(),
        "--dsn",
        dsn,
        "sweeper",
        "--retention-days",
        repr(args.retention_minutes / 1440),
        "--retention-interval",
        str(args.retention_interval),
        "--recurring-interval",
        "10",
        "--rescue-interval",
        "10",
        "--log-level",
        "info",
    ]
    workers = measure.Procs("soak-worker", [worker] * args.workers).start()
    sweepers = measure.Procs("soak-sweeper", [sweeper]).start()
    return workers, sweepers


def create_schedules(dsn: str, n: int, run: str) -> None:
    from pgsched import App

    app = App(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n):
            app.schedule_recurring(
                "soak_tick", "* * * * *", idempotency_key=f"{run}-tick-{i}", conn=conn
            )


# The partition period in force (task_events by time, migration 0024), or a day where the
# schema has none: to_jsonb of the row reads a column that may not exist without failing.
PERIOD_SQL = (
    "SELECT coalesce((SELECT to_jsonb(s) ->> 'event_partition_period'"
    " FROM pgsched.settings AS s), '1 day')::interval"
)


def end_of_period(dsn: str, keep: timedelta) -> dict[str, Any]:
    """After the run, with every process stopped: the retention sweep once more, with its
    clock moved past the end of the next event partition period plus the retention (as the
    sweeper would run it two days later): what it deletes and drops, how long it takes, the
    WAL it writes and the sizes before and after."""
    from pgsched.sweeps import RetentionSweep

    def sizes(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        z = conn.cursor(row_factory=dict_row).execute(SIZES_SQL).fetchone()
        assert z is not None
        return {
            "done_mib": mib(z["done_bytes"]),
            "events_mib": mib(z["events_bytes"]),
            "events_partitions": int(z["events_partitions"]),
            "db_mib": mib(z["db_bytes"]),
            "lsn": z["lsn"],
        }

    with psycopg.connect(dsn, autocommit=True) as conn:
        period = measure.one(conn, PERIOD_SQL)
        before = sizes(conn)
        # Two periods: on a database migrated today the current period's events are in the
        # archive partition, which is rebuilt (kept events only) when the next one expires.
        now = measure.one(conn, "SELECT clock_timestamp()")
        as_of = now + 2 * period + keep + timedelta(minutes=1)
        started = time.perf_counter()
        counts = RetentionSweep(keep=keep).run_once(conn, as_of)
        seconds = time.perf_counter() - started
        after = sizes(conn)
        wal = measure.one(
            conn, "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (after["lsn"], before["lsn"])
        )
    return {
        "period": str(period),
        "as_of": as_of.isoformat(),
        "seconds": round(seconds, 3),
        "wal_mib": mib(wal),
        "counts": counts,
        "before": {k: v for k, v in before.items() if k != "lsn"},
        "after": {k: v for k, v in after.items() if k != "lsn"},
    }


def soak(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    run = f"soak{int(time.time())}"
    create_schedules(dsn, args.schedules, run)
    workers, sweepers = start_processes(dsn, args)
    producer = Producer(dsn, args.rate, args.lead, run)
    try:
        workers.wait_listening(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            window_lo = measure.one(conn, "SELECT clock_timestamp()")
            lsn = str(measure.one(conn, "SELECT pg_current_wal_lsn()::text"))
        started = time.monotonic()
        sampler = Sampler(dsn, started, window_lo, lsn)
        producer.start()
        measure.step(
            f"soak: {args.rate:,.0f}/s one-off + {args.schedules} schedules a minute for"
            f" {args.minutes:g} min, a sample every {args.sample_seconds:g} s"
        )
        end = started + args.minutes * 60
        next_sample = started + args.sample_seconds
        while True:
            now = time.monotonic()
            if producer.error is not None:
                raise RuntimeError(f"the producer failed: {producer.error!r}")
            workers.check_alive()
            sweepers.check_alive()
            if now >= next_sample:
                s = sampler.take(sweepers.log_text, producer.scheduled)
                measure.note(
                    f"{s['t_min']:5.1f} min: {s['completed_per_s']:,.0f} done/s, lateness p99"
                    f" {s['lateness_p99_ms']} ms, due waiting {s['due_waiting']:,}, hot"
                    f" {s['hot_mib']} MiB / {s['hot_dead_tup']:,} dead, done {s['done_mib']}"
                    f" MiB, events {s['events_mib']} MiB, db {s['db_mib']} MiB"
                )
                next_sample += args.sample_seconds
                if next_sample > end + 1e-6:
                    break
            time.sleep(min(1.0, max(0.0, next_sample - time.monotonic())))
    finally:
        producer.stop()
        codes = workers.stop(dsn=dsn) + sweepers.stop(dsn=dsn)
    runs = sweep_runs(sweepers.log_text())
    warnings = workers.warnings() + sweepers.warnings()
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        for log in [*workers.logs, *sweepers.logs]:
            shutil.copy(log, args.logs / log.name)
    workers.cleanup()
    sweepers.cleanup()
    measure.step("the retention sweep as of two event partition periods later")
    next_period = end_of_period(dsn, timedelta(minutes=args.retention_minutes))
    warmup = (args.retention_minutes * 60 + args.retention_interval) / 60
    flat = flatness(sampler.samples, warmup, args.tolerance)
    return {
        "benchmark": "soak",
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "schedules": args.schedules,
        "expected_per_s": round(args.rate + args.schedules / 60, 1),
        "workers": args.workers,
        "batch_size": args.batch_size,
        "concurrency": args.concurrency,
        "lead_s": args.lead,
        "retention_minutes": args.retention_minutes,
        "retention_interval_s": args.retention_interval,
        "sample_seconds": args.sample_seconds,
        "warmup_min": round(warmup, 2),
        "tolerance": args.tolerance,
        "scheduled_one_off": producer.scheduled,
        "producer": {
            "calls": producer.calls,
            "call_ms_max": round(producer.call_ms_max, 1),
            "behind_s_max": round(producer.behind_s_max, 3),
        },
        "completed_total": round(
            sum(s["completed_per_s"] * s["window_s"] for s in sampler.samples)
        ),
        "sweeps": sweep_summary(runs),
        "sweep_runs": runs,
        "exit_codes": codes,
        "warnings": warnings,
        "flatness": flat,
        "end_of_period": next_period,
        "samples": sampler.samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (30)")
    parser.add_argument("--rate", type=float, default=2000.0, help="one-off tasks/s (2,000)")
    parser.add_argument("--schedules", type=int, default=300, help="every-minute schedules")
    parser.add_argument("--sample-seconds", type=float, default=120.0, help="sample every (120)")
    parser.add_argument("--retention-minutes", type=float, default=5.0, help="keep (5 min)")
    parser.add_argument("--retention-interval", type=float, default=60.0, help="prune every (s)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=200, help="per lane")
    parser.add_argument("--lead", type=float, default=2.0, help="tasks are due this far ahead")
    parser.add_argument("--tolerance", type=float, default=0.25, help="flat within (0.25)")
    parser.add_argument("--dsn", default=None, help="run in this (scratch) database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "soak.json")
    parser.add_argument("--plot", type=Path, default=PLOTS / "soak.png")
    parser.add_argument("--logs", type=Path, default=None, help="keep the processes' logs here")
    args = parser.parse_args(argv)
    for name in ("minutes", "rate", "sample_seconds", "retention_minutes", "retention_interval"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be more than 0")
    for name in ("workers", "batch_size", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.schedules < 0:
        parser.error("--schedules must be 0 or more")
    if args.sample_seconds + SETTLE_S >= args.retention_minutes * 60:
        # A window's events must still be there when it is read.
        parser.error("--sample-seconds must be shorter than the retention period")
    if args.sample_seconds > args.minutes * 60:
        parser.error("--sample-seconds is longer than the run: no sample would be taken")
    with measure.database(args.dsn) as dsn:
        document = soak(dsn, args)
    document |= {
        "command": " ".join(["python -m benchmarks.bench_soak", *(argv or sys.argv[1:])]),
        "machine": measure.machine_info(),
        "loadavg_end": measure.loadavg(),
    }
    print()
    print(table(document["samples"]))
    print(
        f"\nwarm-up {document['warmup_min']:g} min (retention + one interval);"
        " sweeps that did something (runs, seconds p50 / max, counted):"
    )
    for name, sweep in document["sweeps"].items():
        secs = sweep["seconds"]
        print(f"  {name}: {sweep['runs']}, {secs['p50']} / {secs['max']} s, {sweep['counted']}")
    for line in flatness_lines(document["flatness"]):
        print(line)
    e = document["end_of_period"]
    print(
        f"retention as of two periods ({e['period']}) + retention later: {e['seconds']} s,"
        f" {e['wal_mib']} MiB WAL, {e['counts']}; task_events {e['before']['events_mib']} ->"
        f" {e['after']['events_mib']} MiB ({e['before']['events_partitions']} ->"
        f" {e['after']['events_partitions']} partitions), done tier {e['before']['done_mib']} ->"
        f" {e['after']['done_mib']} MiB, database {e['before']['db_mib']} ->"
        f" {e['after']['db_mib']} MiB"
    )
    document["plot"] = str(args.plot) if plot(document, args.plot) else None
    measure.write_json(args.out, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
