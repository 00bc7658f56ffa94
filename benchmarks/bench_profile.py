"""Where a task's time goes: per statement, per SQL function, per part of the worker.

    python -m benchmarks.bench_profile                          # backlog and 5,000/s steady
    python -m benchmarks.bench_profile --mode backlog --tasks 50000
    python -m benchmarks.bench_profile --mode steady --rate 5000 --duration 10 --py-spy
    python -m benchmarks.bench_profile --worker-flags "--concurrency 16"   # the old default
    python -m benchmarks.bench_profile --fairness-off           # NORMAL claims in plain order

Two ways of offering the same no-op tasks to `--processes` worker processes (default flags
unless given): a backlog (every task due now: claims are full batches) and a steady rate
(tasks due at exact 1/rate spacing: each claim takes what came due since the last). For
each, the figures are per task:

  cpu        worker processes and the Postgres server, from /proc (CPU, not wall time)
  statements pg_stat_statements (track = all, track_planning = on): the claim, the
             completion, the next-due query, and every statement they run inside, with
             calls, rows per call and planning time. Execution times are wall times of
             the backends: on a loaded machine they include waiting for a core.
  functions  track_functions: task_claim_many, task_finish_many and the transition
             trigger (task_record_transitions), total and self time.
  python     with --py-spy: the workers' CPU per task shared out by where the samples of
             one worker process fell (waits in the selector left out): the claim, the
             completion flush, running the task (runner and handler), the lease heartbeat
             thread, and the rest (the event loop itself, asyncio, the driver outside those);
             libpq's send of each statement apart (on a busy machine the worker waits for
             a core there, which py-spy counts as work).

A throwaway server is started with pg_stat_statements preloaded (durable as every other
benchmark's: fsync and synchronous_commit on). --dsn must name a server that preloads it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.pgserver import DEFAULT_SETTINGS, Setting

PROFILE_SETTINGS = (
    *DEFAULT_SETTINGS,
    Setting("shared_preload_libraries", "pg_stat_statements", "per-statement times"),
    Setting("pg_stat_statements.track", "all", "statements inside functions and triggers too"),
    Setting("pg_stat_statements.track_planning", "on", "planning is a fixed cost per call"),
    Setting("track_functions", "pl", "per-function times (the claim, the trigger)"),
)

# What each tracked top-level statement is, by a fragment of its text.
STATEMENTS = {
    "claim (task_claim_many)": "pgsched.task_claim_many(",
    "completion (task_finish_many)": "pgsched.task_finish_many(",
    "next-due query": "pgsched.lane_next_due(",
    "heartbeat": "pgsched.task_heartbeat_many(",
}
FUNCTIONS = ("task_claim_many", "task_finish_many", "task_record_transitions")
PY_SPY_RATE = 250
# Leaves where a thread waits: py-spy names methods Class.name, so the heartbeat's and the
# stall watchdog's waits (Condition.wait) were taken for work until they were listed here.
IDLE_LEAVES = ("EpollSelector.select", "select (", "poll (", "wait (", "Condition.wait (")
# py-spy frames are "function (path:line)": the first pgsched part found from the leaf up.
# libpq's send of a statement: it wakes the server's backend, and on a busy machine the
# worker waits for a core right there, which py-spy counts as work (how much of it is CPU
# the samples cannot tell), so it is a part of its own.
SEND_LEAF = "BaseCursor._send_query_prepared ("
PY_PARTS = (
    (
        "claim",
        (
            "pgsched/claims.py",
            "claim (pgsched/worker/lane_engine.py",
            "claim_rows (pgsched/worker/lane_engine.py",
        ),
    ),
    ("claim loop", ("pgsched/worker/claim_loop.py",)),
    ("completion flush", ("pgsched/worker/outcomes.py",)),
    ("task run", ("pgsched/worker/runner.py", "pgsched/handlers.py", "benchmarks/noop_app.py")),
    ("lease heartbeat", ("pgsched/worker/leases.py",)),
    ("worker bookkeeping", ("pgsched/worker/",)),
)


def reset_stats(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
        conn.execute("SELECT pg_stat_reset()")


def statement_figures(dsn: str, n: int) -> list[dict[str, Any]]:
    """Every statement that took at least 0.5% of the time, per task (µs) and per call."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, rows, total_exec_time, total_plan_time, toplevel"
            " FROM pg_stat_statements WHERE calls > 0"
            " AND query NOT ILIKE '%pg_stat%' ORDER BY total_exec_time DESC"
        ).fetchall()
    total = sum(r[3] + r[4] for r in rows if r[5]) or 1.0
    out = []
    for query, calls, nrows, exec_ms, plan_ms, toplevel in rows:
        if (exec_ms + plan_ms) / total < 0.005:
            continue
        text = " ".join(query.split())
        label = next((k for k, frag in STATEMENTS.items() if frag in text), None)
        out.append(
            {
                "statement": label or text[:90],
                "toplevel": toplevel,
                "calls": calls,
                "rows_per_call": round(nrows / calls, 1),
                "ms_per_call": round((exec_ms + plan_ms) / calls, 3),
                "plan_ms_per_call": round(plan_ms / calls, 3),
                "us_per_task": round((exec_ms + plan_ms) / n * 1000, 1),
                "plan_us_per_task": round(plan_ms / n * 1000, 1),
            }
        )
    return out


def function_figures(dsn: str, n: int) -> dict[str, dict[str, float]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions"
            " WHERE schemaname = 'pgsched' AND funcname = ANY(%s)",
            (list(FUNCTIONS),),
        ).fetchall()
    return {
        name: {
            "calls": calls,
            "total_us_per_task": round(total / n * 1000, 1),
            "self_us_per_task": round(self_ms / n * 1000, 1),
        }
        for name, calls, total, self_ms in rows
    }


def python_parts(raw: Path, cpu_us_per_task: float) -> dict[str, float]:
    """py-spy's collapsed stacks -> the workers' CPU per task (µs, measured from /proc),
    shared out by where the samples fell. Samples in the selector's wait are left out: on a
    loaded machine a woken process waits for a core there, which py-spy counts as active."""
    parts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames[-1].startswith(IDLE_LEAVES):
            continue
        part = "event loop and the rest"
        if frames[-1].startswith(SEND_LEAF):
            parts["statement send (libpq)"] += int(count)
            continue
        for frame in reversed(frames):
            found = next((p for p, keys in PY_PARTS if any(k in frame for k in keys)), None)
            if found is not None:
                part = found
                break
        parts[part] += int(count)
    total = sum(parts.values()) or 1
    return {p: round(c / total * cpu_us_per_task, 1) for p, c in parts.most_common()}


def py_spy_exe() -> Path:
    return Path(sys.executable).with_name("py-spy")


def start_py_spy(pid: int) -> tuple[subprocess.Popen[bytes], Path]:
    exe = py_spy_exe()
    out = Path(tempfile.mkstemp(prefix="pyspy-", suffix=".txt")[1])
    argv = [str(exe), "record", "--pid", str(pid), "--rate", str(PY_SPY_RATE)]
    argv += ["--format", "raw", "--nonblocking", "--output", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, out


def stop_py_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def profile(
    dsn: str,
    mode: str,
    n: int,
    rate: float,
    processes: int,
    flags: Sequence[str],
    py_spy: bool,
) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    argv = [*measure.pgsched_exe(), "--dsn", dsn, "worker", "--app", measure.NOOP_APP]
    argv += ["--lanes", "normal", "--log-level", "WARNING", *flags]
    workers = measure.Procs(f"prof-{mode}", [argv] * processes)
    workers.start()
    pm = measure.postmaster_pid(dsn)
    spy = None
    try:
        workers.wait_listening(dsn)
        # Scheduled ahead, so that the statistics and the meters start just before the
        # first task comes due: a backlog is every task due at the same instant.
        first_due = measure.db_now(dsn) + timedelta(seconds=3.0 + n / 15_000)
        step = 1 / rate if mode == "steady" else 0.0
        run_ats = [first_due + timedelta(seconds=i * step) for i in range(n)]
        lo, hi, _ = measure.schedule_at(dsn, run_ats)
        progress = psycopg.connect(dsn, autocommit=True)
        progress.execute("ANALYZE pgsched.tasks_hot")
        # Counted from here: the events written before the first task came due (none).
        drained = measure.Drained(progress, n)
        while (wait := (first_due - measure.db_now(dsn)).total_seconds()) > 0.2:
            time.sleep(min(wait - 0.2, 0.5))
        reset_stats(dsn)
        if py_spy:
            spy = start_py_spy(workers.pids[0])
        meter = measure.CpuMeter(workers.pids, pm)
        meter.begin()
        with progress:
            done, _ = measure.wait_until(drained, 600.0, workers, 60.0)
        cpu = meter.end()
        if spy is not None:
            stop_py_spy(spy[0])
        statements = statement_figures(dsn, n)
        functions = function_figures(dsn, n)
    finally:
        codes = workers.stop(dsn=dsn)
    late = None
    if mode == "steady":
        with psycopg.connect(dsn, autocommit=True) as conn:
            late = measure.percentiles(measure.lateness_of_tasks(conn, lo, hi))
    result = {
        "mode": mode,
        "tasks": n,
        "rate_per_s": rate if mode == "steady" else None,
        "processes": processes,
        "worker_flags": list(flags),
        "all_completed": done,
        "cpu": cpu,
        "cpu_us_per_task": {
            "workers": round(cpu["clients_cpu_s"] / n * 1e6, 1),
            "postgres": round(cpu["postgres_cpu_s"] / n * 1e6, 1),
        },
        "lateness_ms": late,
        "statements": statements,
        "functions": functions,
        "python_us_per_task": (
            python_parts(spy[1], cpu["clients_cpu_s"] / n * 1e6) if spy else None
        ),
        "worker_exit_codes": codes,
        "loadavg": measure.loadavg(),
    }
    workers.cleanup()
    return result


def report(r: dict[str, Any]) -> None:
    cpu = r["cpu_us_per_task"]
    what = f"{r['tasks']:,} tasks" + (f" at {r['rate_per_s']:,}/s" if r["rate_per_s"] else "")
    measure.note(
        f"{r['mode']}: {what}, {r['processes']} process(es) {' '.join(r['worker_flags'])}:"
        f" CPU per task: workers {cpu['workers']} µs, Postgres {cpu['postgres']} µs"
        f" (other load {r['cpu']['other_cores']} cores; load avg {r['loadavg'][0]})"
    )
    if r["lateness_ms"]:
        ms = r["lateness_ms"]
        measure.note(f"  lateness ms p50 {ms['p50']} p99 {ms['p99']} max {ms['max']}")
    for s in r["statements"]:
        level = "" if s["toplevel"] else "  (inside)"
        measure.note(
            f"  {s['us_per_task']:8.1f} µs/task ({s['plan_us_per_task']:.1f} planning)"
            f"  {s['calls']:6,} calls x {s['rows_per_call']:6.1f} rows"
            f"  {s['ms_per_call']:7.3f} ms/call  {s['statement']}{level}"
        )
    for name, f in sorted(r["functions"].items()):
        measure.note(
            f"  function {name}: {f['calls']:,} calls, {f['total_us_per_task']} µs/task total,"
            f" {f['self_us_per_task']} self"
        )
    if r["python_us_per_task"]:
        parts = ", ".join(f"{k} {v}" for k, v in r["python_us_per_task"].items())
        measure.note(f"  python (workers' CPU per task, µs, by py-spy's share): {parts}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_profile", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--mode", choices=["backlog", "steady", "both"], default="both")
    parser.add_argument("--tasks", type=int, default=50_000, help="backlog tasks (50,000)")
    parser.add_argument("--rate", type=float, default=5_000, help="steady tasks/s (5,000)")
    parser.add_argument("--duration", type=float, default=10.0, help="steady seconds (10)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--worker-flags", default="", help="`pgsched worker` flags, one string")
    parser.add_argument("--py-spy", action="store_true", help="sample one worker with py-spy")
    parser.add_argument(
        "--fairness-off", action="store_true", help="NORMAL's claims in plain order (not fair)"
    )
    parser.add_argument("--dsn", default=None, help="a server preloading pg_stat_statements")
    parser.add_argument(
        "--fresh-wal",
        action="store_true",
        help="do not recycle WAL first (PgServer.recycle_wal): segments made during the run",
    )
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "profile.json")
    args = parser.parse_args(argv)
    if args.py_spy and not py_spy_exe().exists():
        # Refused before a server starts: found missing, it would end the run half way.
        parser.error(f"--py-spy: {py_spy_exe()} not found; pip install -e '.[bench]' installs it")
    flags = shlex.split(args.worker_flags)
    modes = ["backlog", "steady"] if args.mode == "both" else [args.mode]
    server = None
    dsn = args.dsn
    recycled_mb = None
    if dsn is None:
        profiled = (args.tasks if "backlog" in modes else 0) + (
            int(args.rate * args.duration) if "steady" in modes else 0
        )
        recycled_mb = 0 if args.fresh_wal else measure.wal_to_recycle_mb(profiled)
        server = measure.start_server(recycled_mb, PROFILE_SETTINGS)
        dsn = measure.pgsched_database(server, "bench")
    runs = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', %s)", (not args.fairness_off,))
        for mode in modes:
            n = args.tasks if mode == "backlog" else int(args.rate * args.duration)
            measure.step(f"profile: {mode}, {n:,} tasks")
            r = profile(dsn, mode, n, args.rate, args.processes, flags, args.py_spy)
            r["fairness"] = not args.fairness_off
            report(r)
            runs.append(r)
    finally:
        if server is not None:
            server.stop()
    measure.write_json(
        args.out,
        {
            "benchmark": "profile",
            "command": " ".join(["python -m benchmarks.bench_profile", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "wal_recycled_mb": recycled_mb,
            "results": runs,
        },
    )
    return 0 if all(r["all_completed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
