"""A million tasks due in the same second, through the cold tier and promotion, while a
HIGH-lane producer keeps scheduling work due now.

    python -m benchmarks.bench_burst                         # 1,000,000 tasks, 200/s HIGH
    python -m benchmarks.bench_burst --tasks 5000 --lead 20  # a smoke run (CI)
    python -m benchmarks.bench_burst --dsn postgresql://...  # a superuser's, empty database

How time is handled. Every time is the database's clock (the host's: the throwaway
cluster runs on this machine). Before seeding, the due second D is fixed at
now + --lead (120 s) + the seeding's expected time (--tasks / 20,000 s). The --tasks `burst`
tasks (NORMAL lane, no-op) are scheduled with run_at D and as_of D - 2 days: the router
judges them as if scheduled two days ahead, so they go PENDING into tasks_cold now, yet
come due at D, a minute or two from now. Nothing else is faked: the default hot window (24
hours) covers D, so the sweeper's promotion pass, which runs as soon as it is elected,
moves the million into tasks_hot (10,000 per chunk), and at D the worker processes find
them due. If seeding ends less than 10 s before D the run stops and says to raise --lead.

What runs, all real processes with their default flags: 2 `pgsched worker` processes
(every lane, benchmarks.burst_app) started before the seeding, one `pgsched sweeper`
started when the seeding ends, and a HIGH-lane producer in this process (a thread that
schedules --high-rate tasks/s due now, 10 per statement). It produces from the sweeper's
start until the million are done.

What is reported (a table, and JSON):

  promotion      the sweeper's pass (its log line: rows, chunks, seconds), the longest
                 chunk (pg_stat_statements), and when the cold tier held none of the
                 million any more (polled), before or after D
  last start     the last claim of the million after D (task_events -> PROCESSING), with
                 the start lateness p50 / p99 of the million; target: within 50 s
  drain rate     the million's completions over first claim -> last completion
  HIGH lateness  handler start (burst_high writes time.time() when it runs) minus the
                 task's due time, p50 / p99 / max, for HIGH tasks due between D and the
                 last start of the million ("during the burst"); also before D; target
                 p99 <= 25 ms. And by part, for each of those tasks, cut at the commit
                 records (track_commit_timestamp): the producer's statement, on to the
                 claim's start (the producer's WAL flush, the NOTIFY, the wake-up), the
                 claim, on to the handler's start (the claim's WAL flush, the reply)
  longest claim  pg_stat_statements' max_exec_time of the claim statement (the cluster
                 preloads it); and the claims over 50 ms in the server log
                 (log_min_duration_statement = 50ms); target: none over 50 ms
  worker memory  each worker process' RSS, sampled every 0.5 s, and its VmHWM at the end
  cpu            cores used by the workers, by Postgres and by everything else on the
                 machine, from the sweeper's start to the last completion, and from D to
                 the last completion (the drain: µs per task of the workers and Postgres)
  lock waits     every 50 ms, the workers' backends waiting on a lock (pg_stat_activity
                 wait_event_type = 'Lock'), and who blocks them (pg_blocking_pids): a
                 claim blocked by the sweeper's promotion shows here; target: none
  WAL            written from the sweeper's start to the last completion, and per task;
                 whether the run wrote into recycled segments (below); the WAL syncs
                 meanwhile and their mean time (pg_stat_wal, track_wal_io_timing)

The WAL. A freshly made cluster has no WAL segment to reuse, so every 16 MB the run writes,
a backend creates the next segment (16 MB of zeros, synced) holding the WAL write lock,
and every commit, the HIGH producer's included, waits meanwhile. A server that has carried
such a burst before reuses old segments (kept at each checkpoint, up to min_wal_size). So,
by default, the throwaway cluster first writes and recycles about the WAL the run will
write (PgServer.recycle_wal; measure.WAL_PER_TASK a task, at most 4 GB): the figures are a server's
that has run before. --fresh-wal skips that: the figures of a first burst on a new cluster.

Without --dsn a throwaway, durable cluster is started (benchmarks/pgserver.py), with
pg_stat_statements preloaded and log_min_duration_statement = 50ms. With --dsn (a
superuser's empty database) the longest claim is reported only if that server preloads
pg_stat_statements, and the server log is not read.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.pgserver import DEFAULT_SETTINGS, PgServer, Setting

OUT = measure.RESULTS / "burst.json"
APP = "benchmarks.burst_app:app"
SEED_RATE = 20_000  # tasks/s the seeding is expected to reach at least
TARGET_LAST_START_S = 50.0
TARGET_HIGH_P99_MS = 25.0
TARGET_CLAIM_MS = 50.0
# A HIGH task's lateness, cut at the producer's commit, the claim's start and its commit.
HIGH_PARTS = ("the_producer", "to_the_claim", "the_claim", "to_the_handler")

BURST_SETTINGS = (
    *DEFAULT_SETTINGS,
    Setting("shared_preload_libraries", "pg_stat_statements", "the longest claim statement"),
    Setting("pg_stat_statements.track", "top", "the statements the workers send"),
    Setting("log_min_duration_statement", "50ms", "every statement over the claim target"),
    Setting("track_commit_timestamp", "on", "when the producer's and claims' commits were made"),
    Setting("track_wal_io_timing", "on", "how long the run's WAL syncs took"),
)


# --------------------------------------------------------------------------------------
# samplers


class Sampler(threading.Thread):
    """Every `interval`: the workers' RSS, and their backends waiting on a lock."""

    def __init__(self, dsn: str, pids: list[int], app_prefix: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.pids = pids
        self.app_prefix = app_prefix
        self.interval = interval
        self.rss_peak_kib: dict[int, int] = {}
        self.lock_samples = 0
        self.samples = 0
        self.waits: Counter[str] = Counter()
        self.blockers: Counter[str] = Counter()
        self.examples: list[dict[str, Any]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._halt.wait(self.interval):
                for pid in self.pids:
                    rss = _status_kib(pid, "VmRSS")
                    if rss is not None:
                        self.rss_peak_kib[pid] = max(self.rss_peak_kib.get(pid, 0), rss)
                rows = conn.execute(
                    # Statement texts without their leading comment lines.
                    "SELECT a.wait_event, left(regexp_replace(a.query, %s, ''), 80),"
                    "  ARRAY(SELECT coalesce(b.application_name, '') || ': '"
                    "         || left(regexp_replace(b.query, %s, ''), 60)"
                    "         FROM pg_stat_activity AS b"
                    "         WHERE b.pid = ANY(pg_blocking_pids(a.pid)))"
                    " FROM pg_stat_activity AS a"
                    " WHERE a.application_name LIKE %s AND a.wait_event_type = 'Lock'",
                    (_COMMENTS, _COMMENTS, f"{self.app_prefix}%"),
                ).fetchall()
                self.samples += 1
                if rows:
                    self.lock_samples += 1
                for event, raw, raw_blockers in rows:
                    query = " ".join(raw.split())
                    blockers = [" ".join(b.split()) for b in raw_blockers]
                    self.waits[f"{event}: {query}"] += 1
                    for blocker in blockers:
                        self.blockers[blocker] += 1
                    if len(self.examples) < 20:
                        self.examples.append(
                            {"wait_event": event, "query": query, "blocked_by": blockers}
                        )

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


_COMMENTS = r"^\s*(--[^\n]*\n\s*)+"


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class HighProducer(threading.Thread):
    """`rate` HIGH tasks/s due now, `per` to a statement, on its own connection. Keeps
    each statement's transaction id by its due time (the statement's now(), in µs since
    the epoch): its commit timestamp splits a HIGH task's lateness."""

    def __init__(self, dsn: str, rate: float, per: int = 10) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.rate = rate
        self.per = per
        self.scheduled = 0
        self.behind_max_s = 0.0
        self.xid_by_due: dict[int, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        period = self.per / self.rate
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            nxt = time.monotonic()
            while not self._halt.is_set():
                row = conn.execute(
                    "SELECT (extract(EPOCH FROM now()) * 1e6)::bigint,"
                    " xid(pg_current_xact_id())::text::bigint, count(*)"
                    " FROM pgsched.schedule_tasks("
                    " task_types => array_fill('burst_high'::text, ARRAY[%(n)s]),"
                    " priorities => array_fill(9, ARRAY[%(n)s]),"
                    " lanes => array_fill('HIGH'::text, ARRAY[%(n)s]))",
                    {"n": self.per},
                ).fetchone()
                if row is not None:
                    self.xid_by_due[row[0]] = row[1]
                self.scheduled += self.per
                nxt += period
                delay = nxt - time.monotonic()
                if delay > 0:
                    self._halt.wait(delay)
                else:
                    self.behind_max_s = max(self.behind_max_s, -delay)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


# --------------------------------------------------------------------------------------
# the run


def seed(dsn: str, n: int, due: datetime, chunk: int = 50_000) -> float:
    """n `burst` tasks due at `due`, scheduled as of two days before it (cold tier)."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(0, n, chunk):
            k = min(chunk, n - lo)
            got = measure.one(
                conn,
                "SELECT count(*) FROM pgsched.schedule_tasks("
                " task_types => array_fill('burst'::text, ARRAY[%(k)s]),"
                " run_ats => array_fill(%(due)s::timestamptz, ARRAY[%(k)s]),"
                " as_of => %(due)s::timestamptz - interval '2 days')",
                {"k": k, "due": due},
            )
            assert got == k
    return time.perf_counter() - started


def events_seq(conn: psycopg.Connection[Any]) -> int:
    return int(measure.one(conn, "SELECT last_value FROM pgsched.task_events_id_seq"))


def run(
    dsn: str,
    n: int,
    high_rate: float,
    processes: int,
    lead: float,
    cap_s: float,
    server_log: Path | None,
) -> dict[str, Any]:
    log_base = Path(tempfile.mkdtemp(prefix="pgsched-burst-")) / "high"
    with psycopg.connect(dsn, autocommit=True) as conn:
        statements = bool(
            measure.one(
                conn,
                "SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'",
            )
        )
        if statements:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        db_start: datetime = measure.one(conn, "SELECT clock_timestamp()")
        cold_before = measure.one(conn, "SELECT count(*) FROM pgsched.tasks_cold")
        wal_before_seed = measure.one(conn, "SELECT pg_current_wal_insert_lsn()")
    due = db_start + timedelta(seconds=lead + n / SEED_RATE)
    # Default flags: only the app and the log level are given (every lane runs).
    workers = measure.Procs(
        "bench-burst-w",
        [[*measure.pgsched_exe(), "--dsn", dsn, "worker", "--app", APP, "--log-level", "warning"]]
        * processes,
        env={"PGSCHED_BURST_LOG": str(log_base)},
    )
    sweeper = measure.Procs(
        "bench-burst-s",
        [[*measure.pgsched_exe(), "--dsn", dsn, "sweeper", "--log-level", "info"]],
    )
    producer = HighProducer(dsn, high_rate)
    sampler: Sampler | None = None
    result: dict[str, Any] = {"tasks": n, "high_rate": high_rate, "processes": processes}
    try:
        workers.start()
        workers.wait_listening(dsn)
        measure.step(f"seeding {n:,} tasks due at {due:%H:%M:%S} as of two days before")
        seed_s = seed(dsn, n, due)
        with psycopg.connect(dsn, autocommit=True) as conn:
            seeded_at: datetime = measure.one(conn, "SELECT clock_timestamp()")
            cold = measure.one(conn, "SELECT count(*) FROM pgsched.tasks_cold") - cold_before
            conn.execute("ANALYZE pgsched.tasks_cold")
            if statements:
                conn.execute("SELECT pg_stat_statements_reset()")
            seq_start = events_seq(conn)
            wal_start = measure.one(conn, "SELECT pg_current_wal_insert_lsn()")
        measure.note(f"seeded in {seed_s:.1f} s ({n / seed_s:,.0f}/s); {cold:,} in tasks_cold")
        if cold != n:
            raise RuntimeError(f"{n - cold:,} of the tasks did not go to the cold tier")
        slack = (due - seeded_at).total_seconds()
        if slack < 10:
            raise RuntimeError(
                f"seeding ended {slack:.1f} s before the due time: raise --lead (it was {lead:g} s)"
            )
        sampler = Sampler(dsn, workers.pids, "bench-burst-w", 0.05)
        sampler.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            sweeper_started: datetime = measure.one(conn, "SELECT clock_timestamp()")
            syncs_before = wal_syncs(conn)
        meter = measure.CpuMeter(workers.pids, measure.postmaster_pid(dsn))
        meter.begin()
        sweeper.start()
        producer.start()
        measure.step(f"sweeper and HIGH producer ({high_rate:g}/s) started; due in {slack:.0f} s")
        # Done when the million (and the HIGH work so far) has moved the events sequence
        # by three per task (promoted, claimed, completed), then by the exact count.
        need = 3 * n
        deadline = time.monotonic() + slack + cap_s
        wal_end: str | None = None
        done = 0
        promoted_at: datetime | None = None
        drain_meter: measure.CpuMeter | None = None
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                workers.check_alive()
                sweeper.check_alive()
                if promoted_at is None:
                    # The promotion events carry the sweep's clock, one time for a whole
                    # pass: its end is watched here instead (the due index, one probe).
                    left = measure.one(
                        conn,
                        "SELECT EXISTS (SELECT FROM pgsched.tasks_cold"
                        " WHERE next_run_at = %s AND task_type = 'burst')",
                        (due,),
                    )
                    if not left:
                        promoted_at = measure.one(conn, "SELECT clock_timestamp()")
                    else:
                        time.sleep(0.25)
                        continue
                # The drain's meter starts at the due time itself (the loop's second
                # would miss all of a small run's drain).
                if drain_meter is None and time.time() >= due.timestamp() - 1.0:
                    time.sleep(max(due.timestamp() - time.time(), 0.0))
                    drain_meter = measure.CpuMeter(workers.pids, meter.postmaster)
                    drain_meter.begin()
                if events_seq(conn) - seq_start >= need:
                    done = int(
                        measure.one(
                            conn,
                            "SELECT count(*) FROM pgsched.tasks_finished"
                            " WHERE task_type = 'burst' AND status = 'COMPLETED'",
                        )
                    )
                    if done >= n:
                        wal_end = measure.one(conn, "SELECT pg_current_wal_insert_lsn()")
                        break
                time.sleep(1.0)
            result["wal"] = wal_written(conn, n, wal_before_seed, wal_start, wal_end)
            result["wal_syncs"] = wal_sync_figures(syncs_before, wal_syncs(conn))
        result["finished"] = done >= n
        # Cores used from the sweeper's start to the last completion: the workers, the
        # server, and everything else on the machine (the producer, the samplers, others).
        result["cpu"] = meter.end()
        # From the due time to the last completion: the drain alone, per task.
        if drain_meter is not None:
            cpu = drain_meter.end()
            result["cpu_drain"] = {
                **cpu,
                "workers_us_per_task": round(cpu["clients_cpu_s"] / n * 1e6, 1),
                "postgres_us_per_task": round(cpu["postgres_cpu_s"] / n * 1e6, 1),
            }
        measure.note(f"{done:,}/{n:,} completed")
        time.sleep(1.0)  # the last HIGH tasks of the burst run
    finally:
        producer.stop()
        if sampler is not None:
            sampler.stop()
        hwm = {pid: _status_kib(pid, "VmHWM") for pid in workers.pids}
        worker_codes = workers.stop(dsn=dsn)
        sweeper_codes = sweeper.stop(dsn=dsn)
    result.update(
        seed_s=round(seed_s, 1),
        due=due.isoformat(),
        seeded_before_due_s=round(slack, 1),
        worker_exit_codes=worker_codes,
        sweeper_exit_codes=sweeper_codes,
        worker_warnings=workers.warnings(),
        sweeper_log_tail=sweeper.log_text().splitlines()[-8:],
        sweeper_started=sweeper_started.isoformat(),
        promotion_done_after_sweeper_start_s=(
            round((promoted_at - sweeper_started).total_seconds(), 2) if promoted_at else None
        ),
        promotion_done_after_due_s=(
            round((promoted_at - due).total_seconds(), 2) if promoted_at else None
        ),
        promotion_sweep=promotion_logged(sweeper.log_text()),
        high_scheduled=producer.scheduled,
        high_producer_behind_max_s=round(producer.behind_max_s, 3),
    )
    workers.cleanup()
    sweeper.cleanup()
    with psycopg.connect(dsn, autocommit=True) as conn:
        result.update(burst_figures(conn, due))
        result["claim_statements"] = (
            statement_stats(conn, "task_claim_many(") if statements else None
        )
        result["promotion_statements"] = (
            statement_stats(conn, "task_promote_due(") if statements else None
        )
    starts = handler_starts(log_base)
    result["high"] = high_lateness(starts, due, result)
    with psycopg.connect(dsn, autocommit=True) as conn:
        result["high_parts"] = high_lateness_parts(conn, starts, due, result, producer.xid_by_due)
    assert sampler is not None
    result["worker_rss_peak_mib"] = {
        str(pid): round(kib / 1024, 1) for pid, kib in sampler.rss_peak_kib.items()
    }
    result["worker_vmhwm_mib"] = {
        str(pid): round(kib / 1024, 1) for pid, kib in hwm.items() if kib is not None
    }
    result["lock_waits"] = {
        "samples": sampler.samples,
        "samples_with_a_worker_waiting": sampler.lock_samples,
        "by_statement": dict(sampler.waits.most_common(10)),
        "blocked_by": dict(sampler.blockers.most_common(10)),
        "examples": sampler.examples,
    }
    result["slow_claims_logged"] = slow_claims(server_log) if server_log else None
    return result


def wal_written(
    conn: psycopg.Connection[Any], n: int, before_seed: str, seeded: str, end: str | None
) -> dict[str, Any]:
    """WAL bytes of the seeding and of the run (the sweeper's start to the last
    completion), and per task of the million."""

    def diff(a: str, b: str | None) -> int | None:
        if b is None:
            return None
        return int(measure.one(conn, "SELECT pg_wal_lsn_diff(%s, %s)", (b, a)))

    seeding, run = diff(before_seed, seeded), diff(seeded, end)
    return {
        "seeding_bytes": seeding,
        "run_bytes": run,
        "per_task_bytes": round((seeding + run) / n) if seeding is not None and run else None,
    }


def burst_figures(conn: psycopg.Connection[Any], due: datetime) -> dict[str, Any]:
    """Promotion, starts and completions of the million, from their events."""
    row = conn.execute(
        """
        SELECT min(e.occurred_at) FILTER (WHERE e.from_status = 'PENDING'
                                          AND e.to_status = 'QUEUED'),
               max(e.occurred_at) FILTER (WHERE e.from_status = 'PENDING'
                                          AND e.to_status = 'QUEUED'),
               count(*) FILTER (WHERE e.from_status = 'PENDING' AND e.to_status = 'QUEUED'),
               min(e.occurred_at) FILTER (WHERE e.to_status = 'PROCESSING'),
               max(e.occurred_at) FILTER (WHERE e.to_status = 'PROCESSING'),
               count(*) FILTER (WHERE e.to_status = 'PROCESSING'),
               max(e.occurred_at) FILTER (WHERE e.to_status = 'COMPLETED'),
               count(*) FILTER (WHERE e.to_status = 'COMPLETED'),
               percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
                   ORDER BY extract(EPOCH FROM e.occurred_at - %(due)s::timestamptz))
                   FILTER (WHERE e.to_status = 'PROCESSING')
          FROM pgsched.task_events AS e
         WHERE e.task_type = 'burst'
        """,
        {"due": due},
    ).fetchone()
    assert row is not None
    (_p_first, _p_last, promoted, c_first, c_last, claimed, f_last, completed, pct) = row

    def after_due(t: datetime | None) -> float | None:
        return None if t is None else round((t - due).total_seconds(), 3)

    drain_s = (f_last - c_first).total_seconds() if f_last and c_first else None
    return {
        "promoted": promoted,
        "claimed": claimed,
        "first_start_after_due_s": after_due(c_first),
        "last_start_after_due_s": after_due(c_last),
        "start_after_due_p50_s": round(pct[0], 3) if pct else None,
        "start_after_due_p99_s": round(pct[1], 3) if pct else None,
        "completed": completed,
        "last_completion_after_due_s": after_due(f_last),
        "drain_s": round(drain_s, 2) if drain_s else None,
        "drain_rate_per_s": round(completed / drain_s) if drain_s else None,
        "burst_end": c_last.isoformat() if c_last else None,
    }


def statement_stats(conn: psycopg.Connection[Any], fragment: str) -> list[dict[str, Any]]:
    """pg_stat_statements' figures of every statement whose text holds `fragment`."""
    rows = conn.execute(
        "SELECT query, calls, rows, max_exec_time, mean_exec_time, total_exec_time"
        " FROM pg_stat_statements WHERE strpos(query, %s) > 0"
        " ORDER BY max_exec_time DESC",
        (fragment,),
    ).fetchall()
    return [
        {
            "query": " ".join(q.split())[-90:],
            "calls": calls,
            "rows_per_call": round(nrows / calls, 1) if calls else None,
            "max_ms": round(mx, 2),
            "mean_ms": round(mean, 3),
            "total_ms": round(total, 1),
        }
        for q, calls, nrows, mx, mean, total in rows
    ]


_DURATION = re.compile(r"duration: ([\d.]+) ms\s+(?:statement|execute [^:]*):(.*)")
_PROMOTION = re.compile(r"sweep promotion: \{'promoted': (\d+), 'chunks': (\d+)\} \(([\d.]+)s\)")


def promotion_logged(log: str) -> list[dict[str, Any]]:
    """The sweeper's promotion passes that moved anything: rows, chunks, seconds."""
    return [
        {"promoted": int(m[1]), "chunks": int(m[2]), "seconds": float(m[3])}
        for m in _PROMOTION.finditer(log)
        if int(m[1]) > 0
    ]


def slow_claims(log: Path) -> dict[str, Any]:
    """Statements the server logged as over 50 ms: the claims, and the others by kind."""
    if not log.exists():
        return {"log": "missing"}
    claims: list[float] = []
    others: Counter[str] = Counter()
    # A statement's text goes on over the lines after its first, each starting with a tab.
    entries: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("\t") and entries:
            entries[-1] += " " + line
        else:
            entries.append(line)
    for entry in entries:
        m = _DURATION.search(entry)
        if not m:
            continue
        text = " ".join(m[2].split())
        if "task_claim_many(" in text:
            claims.append(float(m[1]))
        else:
            others[text[:70]] += 1
    return {
        "claims_over_50ms": len(claims),
        "claim_ms": sorted(claims, reverse=True)[:10],
        "other_statements_over_50ms": dict(others.most_common(8)),
    }


def handler_starts(log_base: Path) -> dict[int, tuple[float, float]]:
    """task id -> (handler start, due), epoch seconds, from the HIGH handlers' lines."""
    starts: dict[int, tuple[float, float]] = {}
    for path in glob.glob(f"{log_base}.*"):
        with open(path) as lines:
            for line in lines:
                parts = line.split()
                if len(parts) == 3:
                    starts[int(parts[0])] = (float(parts[1]), float(parts[2]))
    return starts


def high_lateness_parts(
    conn: psycopg.Connection[Any],
    starts: dict[int, tuple[float, float]],
    due: datetime,
    burst: dict[str, Any],
    xid_by_due: dict[int, int],
) -> dict[str, Any]:
    """Where the lateness of each HIGH task due during the burst went (ms), in four parts
    that add up to it, cut at the two commits on its way (a commit timestamp is taken as
    the commit record is written, before its WAL flush): the producer's statement up to
    its commit; from there to the claim's start (the flush, the NOTIFY, a lane waking,
    the claim sent: the claim's now(), in its PROCESSING event); the claim up to its
    commit; and from there to the handler's start (the flush, the reply, the task
    started). The parts need track_commit_timestamp (the throwaway cluster sets it);
    without it they are None."""
    tracked = measure.one(conn, "SELECT current_setting('track_commit_timestamp')::boolean")
    end = burst["burst_end"] or due.isoformat()
    producer_committed: dict[int, float] = {}
    if tracked:
        dues = list(xid_by_due)
        for due_us, at in conn.execute(
            "SELECT d.due_us, extract(EPOCH FROM pg_xact_commit_timestamp(d.x::text::xid))::float8"
            " FROM unnest(%s::bigint[], %s::bigint[]) AS d (due_us, x)",
            (dues, [xid_by_due[d] for d in dues]),
        ).fetchall():
            if at is not None:
                producer_committed[due_us] = at
    rows = conn.execute(
        "SELECT e.task_id, (extract(EPOCH FROM e.scheduled_for) * 1e6)::bigint,"
        " extract(EPOCH FROM e.occurred_at)::float8,"
        " CASE WHEN %(tracked)s"
        "  THEN extract(EPOCH FROM pg_xact_commit_timestamp(e.xmin))::float8 END"
        " FROM pgsched.task_events AS e"
        " WHERE e.task_type = 'burst_high' AND e.to_status = 'PROCESSING'"
        " AND e.scheduled_for BETWEEN %(due)s AND %(end)s",
        {"tracked": tracked, "due": due, "end": end},
    ).fetchall()
    parts: dict[str, list[float]] = {name: [] for name in HIGH_PARTS}
    for task_id, due_us, claim_began, claim_committed in rows:
        scheduled = producer_committed.get(due_us)
        if task_id not in starts or scheduled is None or claim_committed is None:
            continue
        started, _ = starts[task_id]
        parts["the_producer"].append((scheduled - due_us / 1e6) * 1e3)
        parts["to_the_claim"].append((claim_began - scheduled) * 1e3)
        parts["the_claim"].append((claim_committed - claim_began) * 1e3)
        parts["to_the_handler"].append((started - claim_committed) * 1e3)
    return {
        "commit_timestamps": tracked,
        **{name: measure.percentiles(v) if v else None for name, v in parts.items()},
    }


def wal_syncs(conn: psycopg.Connection[Any]) -> tuple[int, float]:
    """pg_stat_wal: WAL syncs so far, and their time (ms; 0 without track_wal_io_timing)."""
    row = conn.execute("SELECT wal_sync, wal_sync_time FROM pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def wal_sync_figures(before: tuple[int, float], after: tuple[int, float]) -> dict[str, Any]:
    syncs, ms = after[0] - before[0], after[1] - before[1]
    return {
        "syncs": syncs,
        "sync_ms": round(ms, 1),
        # Timing off (a server given with --dsn): the count alone.
        "mean_sync_ms": round(ms / syncs, 2) if syncs and ms > 0 else None,
    }


def high_lateness(
    starts: dict[int, tuple[float, float]], due: datetime, burst: dict[str, Any]
) -> dict[str, Any]:
    """HIGH start lateness (ms) from the handlers' own lines: during the burst (due between
    D and the million's last start) and before it."""
    rows = list(starts.values())
    d = due.timestamp()
    end = datetime.fromisoformat(burst["burst_end"]).timestamp() if burst["burst_end"] else d
    during = [(s - t) * 1000 for s, t in rows if d <= t <= end]
    before = [(s - t) * 1000 for s, t in rows if t < d]
    return {
        "started": len(rows),
        "during_burst": measure.percentiles(during),
        "before_burst": measure.percentiles(before),
        "during_over_25ms": sum(1 for v in during if v > TARGET_HIGH_P99_MS),
    }


# --------------------------------------------------------------------------------------
# the report


def table(r: dict[str, Any]) -> str:
    def s(v: Any, unit: str = "s") -> str:
        return "n/a" if v is None else f"{v:,} {unit}"

    high = r["high"]["during_burst"]
    longest = max((c["max_ms"] for c in r["claim_statements"] or ()), default=None)
    promote_ms = max((c["max_ms"] for c in r["promotion_statements"] or ()), default=None)
    slow = r["slow_claims_logged"] or {}
    locks = r["lock_waits"]
    rss = max(r["worker_vmhwm_mib"].values(), default=None)
    drain = r.get("cpu_drain") or {}
    last = r["last_start_after_due_s"]
    wal = r.get("wal") or {}
    syncs = r.get("wal_syncs") or {}
    parts = r.get("high_parts") or {}

    def mb(v: int | None) -> str:
        return "n/a" if v is None else f"{v / 1e6:,.0f}"

    def p50_p99(name: str) -> str:
        part = parts.get(name)
        if not part or part["p50"] is None:
            return "n/a"
        return f"{part['p50']:.1f} / {part['p99']:.1f}"

    rows = [
        ("tasks due in the same second", f"{r['tasks']:,}", ""),
        (
            "promotion (the sweeper's pass)",
            s(sum(p["seconds"] for p in r["promotion_sweep"]) or None),
            (
                "done {} {} due".format(
                    s(abs(r["promotion_done_after_due_s"])),
                    "after" if r["promotion_done_after_due_s"] > 0 else "before",
                )
                if r["promotion_done_after_due_s"] is not None
                else "not done"
            )
            + f"; longest chunk {s(promote_ms and round(promote_ms, 1), 'ms')}",
        ),
        (
            "last of them started, after due",
            s(last),
            f"target <= 50 s: {'met' if last is not None and last <= 50 else 'MISSED'}",
        ),
        (
            "start after due p50 / p99",
            f"{s(r['start_after_due_p50_s'])} / {s(r['start_after_due_p99_s'])}",
            "",
        ),
        ("drain rate", s(r["drain_rate_per_s"], "tasks/s"), f"over {s(r['drain_s'])}"),
        (
            f"HIGH lateness during the burst ({high['n']:,} tasks) p50 / p99 / max",
            f"{high['p50'] and round(high['p50'], 1)} / {high['p99'] and round(high['p99'], 1)}"
            f" / {high['max'] and round(high['max'], 1)} ms",
            "target p99 <= 25 ms: "
            + ("met" if high["p99"] is not None and high["p99"] <= 25 else "MISSED"),
        ),
        (
            "HIGH lateness by part, p50 / p99: the producer's statement; on to the claim;"
            " the claim; on to the handler",
            "; ".join(p50_p99(name) for name in HIGH_PARTS) + " ms",
            "cut at the commit records: the producer's; its WAL flush, NOTIFY, wake-up, claim"
            " sent; the claim's; its WAL flush, reply, task start",
        ),
        (
            "longest claim statement",
            s(longest and round(longest, 1), "ms"),
            f"{slow.get('claims_over_50ms', 'n/a')} claims over 50 ms in the server log",
        ),
        (
            "drain CPU per task: workers / Postgres",
            "{} / {} µs".format(
                drain.get("workers_us_per_task"), drain.get("postgres_us_per_task")
            ),
            "cores from due to the last completion: {} / {} / the rest {}, of {}".format(
                drain.get("clients_cores"),
                drain.get("postgres_cores"),
                drain.get("other_cores"),
                os.cpu_count(),
            ),
        ),
        ("worker memory (peak RSS, VmHWM)", s(rss, "MiB"), "largest of the processes"),
        (
            "WAL written: seeding + run, per task",
            "{} + {} MB, {} B".format(
                mb(wal.get("seeding_bytes")), mb(wal.get("run_bytes")), wal.get("per_task_bytes")
            ),
            (
                "into {:,} MB recycled beforehand".format(r["wal_recycled_mb"])
                if r.get("wal_recycled_mb")
                else "fresh cluster: every segment made during the run"
                if r.get("wal_recycled_mb") == 0
                else "the server given (--dsn)"
            ),
        ),
        (
            "WAL syncs from the sweeper's start to the last completion",
            "{:,}, mean {} ms".format(syncs.get("syncs", 0), syncs.get("mean_sync_ms") or "n/a"),
            "every commit waits for the sync under way, then its own",
        ),
        (
            "a worker waiting on a lock",
            f"{locks['samples_with_a_worker_waiting']} of {locks['samples']} samples",
            "blocked by: " + (", ".join(locks["blocked_by"]) or "nobody"),
        ),
    ]
    out = ["| figure | value | note |", "|---|---:|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_burst", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=1_000_000, help="due at once (1,000,000)")
    parser.add_argument("--high-rate", type=float, default=200.0, help="HIGH tasks/s (200)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--lead", type=float, default=120.0, help="s from the seeding's expected end to due (120)"
    )
    parser.add_argument("--cap", type=float, default=900.0, help="s after due to give up (900)")
    parser.add_argument("--dsn", default=None, help="an empty database (a superuser's connection)")
    parser.add_argument(
        "--fresh-wal",
        action="store_true",
        help="do not recycle WAL first: a first burst on a new cluster (see the docstring)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.tasks < 100 or args.high_rate <= 0 or args.processes < 1 or args.lead < 10:
        parser.error("--tasks >= 100, --high-rate > 0, --processes >= 1, --lead >= 10")
    load = measure.loadavg()
    server: PgServer | None = None
    recycled_mb: int | None = None
    if args.dsn:
        from pgsched.migrations import migrate

        migrate(args.dsn)
        dsn = args.dsn
    else:
        recycled_mb = 0 if args.fresh_wal else measure.wal_to_recycle_mb(args.tasks)
        server = measure.start_server(recycled_mb, BURST_SETTINGS)
        dsn = measure.pgsched_database(server, "bench")
    try:
        result = run(
            dsn,
            args.tasks,
            args.high_rate,
            args.processes,
            args.lead,
            args.cap,
            server.logfile if server else None,
        )
        result["wal_recycled_mb"] = recycled_mb
    finally:
        if server is not None:
            server.stop()
    text = table(result)
    print(text, flush=True)
    measure.write_json(
        args.out,
        {
            "benchmark": "burst",
            "command": " ".join(["python -m benchmarks.bench_burst", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "loadavg_before": load,
            "loadavg_after": measure.loadavg(),
            "settings": [s.name + "=" + s.value for s in BURST_SETTINGS] if server else None,
            "result": result,
            "markdown": text,
        },
    )
    return 0 if result.get("finished") else 1


if __name__ == "__main__":
    sys.exit(main())
