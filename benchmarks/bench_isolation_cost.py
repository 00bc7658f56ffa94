"""What lanes on loops of their own and handler processes cost, against an earlier
checkout, side by side in one run (alternating, so both see the same machine):

    git worktree add /tmp/pgsched-before <commit>        # the version to compare against
    python -m benchmarks.bench_isolation_cost --baseline /tmp/pgsched-before
    python -m benchmarks.bench_isolation_cost --baseline /tmp/pgsched-before --rounds 1 --quick

Each round runs every measure on the baseline checkout, then on this one (the workers
import pgsched from the checkout named, through PYTHONPATH; the server is shared):

  start-up   one `pgsched worker --lanes high,normal,low`: seconds from its start to its
             "running lanes" line; its RSS idle; threads; server connections it holds
  drain      --tasks no-op async tasks due at once, 2 worker processes, default flags:
             tasks/s, and worker and Postgres CPU per task
  lateness   10,000/s due for --duration s, 2 processes, default flags (batch 100,
             concurrency 100): p50 / p99 / max
  plain      --plain-tasks plain `def` tasks without a timeout (a thread) and with one (a
             handler process here; a thread in a baseline without them), 1 process: tasks/s
             and worker CPU per task (the handler processes' CPU included); the ones with a
             timeout twice, the second time with the processes the first one started
             ("warm"); then the memory of the worker and every process under it (PSS,
             which counts shared pages once)

The figures go to benchmarks/results/isolation_cost.json and a table with the ratios
(this checkout / baseline) is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure, suite

# The handlers every checkout runs, written to a folder put first on PYTHONPATH: a baseline
# need not have them. `timeout=60` puts the plain one in a handler process where pgsched
# has them, and in a thread where it does not.
APP_SOURCE = """
from pgsched import App

app = App()


@app.handler("iso_noop")
async def iso_noop(ctx):
    return None


@app.handler("iso_plain")
def iso_plain(ctx):
    return None


@app.handler("iso_plain_timeout", timeout=60)
def iso_plain_timeout(ctx):
    return None
"""
APP = "isolation_cost_app:app"


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = measure.proc_stat_fields(int(entry))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def memory_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/smaps_rollup (Rss, Pss), in KiB; 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


def tree_cpu_seconds(pid: int) -> float:
    return sum(measure.cpu_seconds(p) for p in [pid, *descendants(pid)])


def wait_done(dsn: str, ids: tuple[int, int], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            left = measure.one(
                conn,
                "SELECT count(*) FROM pgsched.tasks WHERE id BETWEEN %s AND %s"
                " AND status <> 'COMPLETED'",
                ids,
            )
            if left == 0:
                return
            time.sleep(0.05)
    raise TimeoutError(f"tasks {ids} not done within {timeout:g}s")


def start_worker(dsn: str, lanes: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [*measure.pgsched_exe(), "--dsn", dsn, "worker", "--app", APP, "--lanes", lanes]
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=measure.REPO, stdout=out, stderr=subprocess.STDOUT)


def wait_running(proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if "running lanes" in log.read_text(errors="replace"):
            return time.monotonic() - started
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited {proc.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.01)
    raise TimeoutError("worker did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_up(dsn: str, logdir: Path) -> dict[str, Any]:
    log = logdir / "start-up.log"
    proc = start_worker(dsn, "high,normal,low", log)
    try:
        seconds = wait_running(proc, log)
        time.sleep(1.0)  # idle: pools grown, the fork server up where there is one
        with psycopg.connect(dsn, autocommit=True) as conn:
            connections = measure.one(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' AND datname = current_database()",
            )
        return {
            "seconds": round(seconds, 3),
            "worker_rss_mib": round(memory_kib(proc.pid, "Rss") / 1024, 1),
            "threads": threads(proc.pid),
            "processes_under_it": len(descendants(proc.pid)),
            "connections": connections,
        }
    finally:
        stop(proc)


def drain(dsn: str, n: int) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    workers = measure.pgsched_workers(dsn, "iso-drain", 2, 100, 100, app=APP)
    workers.start()
    try:
        workers.wait_listening(dsn)
        meter = measure.CpuMeter(workers.pids, measure.postmaster_pid(dsn))
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Counted from before the tasks exist: they may all be done before it looks.
            done = measure.Drained(conn, n)
            meter.begin()
            measure.schedule_due_now(dsn, n, task_type="iso_noop")
            deadline = time.monotonic() + 600
            while not done()[0] and time.monotonic() < deadline:
                time.sleep(0.05)
            cpu = meter.end()
            rate = measure.drain_rate(conn)
    finally:
        workers.stop(dsn=dsn)
    return {
        "tasks_per_s": rate["tasks_per_s"],
        "workers_us_per_task": round(cpu["clients_cpu_s"] / n * 1e6, 1),
        "postgres_us_per_task": round(cpu["postgres_cpu_s"] / n * 1e6, 1),
    }


def lateness(dsn: str, duration: float) -> dict[str, Any]:
    run = suite.pgsched_lateness(
        dsn,
        10_000,
        duration,
        suite.Plan.full(),
        processes=2,
        batch_size=100,
        concurrency=100,
        extra=["--log-level", "WARNING"],
    )
    ms = run["ms"]
    return {"p50_ms": ms["p50"], "p99_ms": ms["p99"], "max_ms": ms["max"]}


def plain(dsn: str, n: int, logdir: Path) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    log = logdir / "plain.log"
    proc = start_worker(dsn, "normal", log)
    out: dict[str, Any] = {}
    try:
        wait_running(proc, log)
        # Idle first: a fork server imports the handlers' modules as it starts, a cost of
        # the start (measured above), not of the tasks.
        time.sleep(2.0)
        runs = [
            ("iso_plain", "iso_plain"),
            ("iso_plain_timeout", "iso_plain_timeout"),
            # The same again: its handler processes are started now (where there are any).
            ("iso_plain_timeout_warm", "iso_plain_timeout"),
        ]
        for label, task_type in runs:
            before = tree_cpu_seconds(proc.pid)
            started = time.monotonic()
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT min(task_id), max(task_id) FROM pgsched.schedule_tasks("
                    "task_types => %b::text[])",
                    ([task_type] * n,),
                ).fetchone()
            assert row is not None
            wait_done(dsn, (row[0], row[1]))
            seconds = time.monotonic() - started
            # Handler processes that ended are not counted: they did not end in this span.
            cpu = tree_cpu_seconds(proc.pid) - before
            out[label] = {
                "tasks_per_s": round(n / seconds),
                "worker_us_per_task": round(cpu / n * 1e6, 1),
            }
        under = descendants(proc.pid)
        out["memory"] = {
            "worker_pss_mib": round(memory_kib(proc.pid, "Pss") / 1024, 1),
            "under_it_pss_mib": round(sum(memory_kib(p, "Pss") for p in under) / 1024, 1),
            "processes_under_it": len(under),
        }
    finally:
        stop(proc)
    return out


def version_of(tree: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, int | float):
            flat[f"{prefix}{key}"] = float(value)
    return flat


def table(runs: list[dict[str, Any]]) -> str:
    by_tree: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        by_tree.setdefault(run["tree"], []).append(flatten(run["figures"]))
    keys = sorted({k for rows in by_tree.values() for row in rows for k in row})
    lines = [
        "| figure | baseline (median) | this checkout (median) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for key in keys:
        medians = {
            tree: statistics.median(r[key] for r in rows if key in r)
            for tree, rows in by_tree.items()
            if any(key in r for r in rows)
        }
        base, head = medians.get("baseline"), medians.get("head")
        ratio = f"{head / base:.2f}" if base and head is not None else "-"
        lines.append(f"| {key} | {base if base is not None else '-'} | {head} | {ratio} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_isolation_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--baseline", type=Path, required=True, help="an earlier checkout")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both (3)")
    parser.add_argument("--tasks", type=int, default=30_000, help="drain tasks (30,000)")
    parser.add_argument("--plain-tasks", type=int, default=2_000, help="plain tasks (2,000)")
    parser.add_argument("--duration", type=float, default=5.0, help="lateness seconds (5)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "isolation_cost.json")
    args = parser.parse_args(argv)
    if not (args.baseline / "pgsched" / "__init__.py").exists():
        parser.error(f"--baseline {args.baseline}: not a pgsched checkout")
    if args.quick:
        args.tasks, args.plain_tasks, args.duration = 2_000, 200, 1.0
    trees = [("baseline", args.baseline.resolve()), ("head", measure.REPO)]
    appdir = Path(tempfile.mkdtemp(prefix="pgsched-isolation-"))
    (appdir / "isolation_cost_app.py").write_text(APP_SOURCE)
    server = measure.start_server()
    runs: list[dict[str, Any]] = []
    saved = os.environ.get("PYTHONPATH")
    try:
        dsn = measure.pgsched_database(server, "bench")
        for n in range(args.rounds):
            for label, tree in trees:
                os.environ["PYTHONPATH"] = f"{appdir}{os.pathsep}{tree}"
                measure.step(f"round {n + 1}: {label} ({tree})")
                figures = {
                    "start_up": start_up(dsn, appdir),
                    "drain": drain(dsn, args.tasks),
                    "lateness_10k": lateness(dsn, args.duration),
                    "plain": plain(dsn, args.plain_tasks, appdir),
                }
                measure.note(f"{label}: {figures}")
                runs.append({"tree": label, "version": version_of(tree), "figures": figures})
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
        server.stop()
    print(table(runs), flush=True)
    measure.write_json(
        args.out,
        {
            "benchmark": "isolation_cost",
            "command": " ".join(
                ["python -m benchmarks.bench_isolation_cost", *(argv or sys.argv[1:])]
            ),
            "machine": measure.machine_info(),
            "results": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
