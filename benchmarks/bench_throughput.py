"""End-to-end throughput of no-op tasks through real worker processes.

    python -m benchmarks.bench_throughput                      # the full sweep
    python -m benchmarks.bench_throughput --quick              # 20,000 tasks, one setting
    python -m benchmarks.bench_throughput --tasks 100000 --batch-size 250 500 \\
        --concurrency 500 --processes 1 2 --dsn postgresql://... --out results.json

For each setting (worker processes x batch size x concurrency): empty the tables, schedule
N tasks due now into the NORMAL lane through `pgsched.schedule_tasks` (in chunks), start
`pgsched worker --app benchmarks.noop_app:app --lanes normal ...` as subprocesses, and
wait until every task is COMPLETED. Throughput is N over the span from the first
PROCESSING event to the last COMPLETED one, as pgsched.task_events records them; the run is
checked to have written exactly two events per task (QUEUED->PROCESSING and
PROCESSING->COMPLETED). CPU time of the worker processes, of the Postgres server (when it
runs on this machine) and of everything else on the machine is measured from /proc over
the same span.

Without --dsn a throwaway, durable Postgres cluster is started (benchmarks/pgserver.py).

This module also holds the helpers that benchmarks/bench_lateness.py shares.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from pgsched.migrations import migrate

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
APP_SPEC = "benchmarks.noop_app:app"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- shared helpers (bench_lateness imports these) ---------------------------------------


@contextlib.contextmanager
def database(dsn: str | None, setup_sql: Path | None = None) -> Iterator[tuple[str, Any]]:
    """The DSN to benchmark against: the given one, or a throwaway cluster we start.
    Yields (dsn, server or None); the schema is migrated either way, then `setup_sql`
    (if any) is run: a way to try an engine change without touching sql/."""
    if dsn:
        _prepare_schema(dsn, setup_sql)
        yield dsn, None
        return
    from benchmarks.pgserver import PgServer

    with PgServer() as server:
        _prepare_schema(server.dsn, setup_sql)
        yield server.dsn, server


def _prepare_schema(dsn: str, setup_sql: Path | None) -> None:
    migrate(dsn)
    if setup_sql is not None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(setup_sql.read_text().encode())
        print(f"ran {setup_sql} after migrating")


def source_info() -> dict[str, Any]:
    """Which pgsched was measured: the commit, and whether the work tree differed."""

    def git(*argv: str) -> str:
        out = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
        return out.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "pgsched", "sql")
    return {"commit": git("rev-parse", "HEAD"), "engine_files_modified": dirty.splitlines()}


def machine_info() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg(),
    }


def postgres_info(dsn: str) -> dict[str, Any]:
    """The server version and every setting not at its built-in default."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("SELECT version()").fetchone()
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings"
            " WHERE source NOT IN ('default', 'override', 'client', 'session')"
            " ORDER BY name"
        ).fetchall()
    settings = dict(rows)
    return {"version": version[0] if version else "?", "settings": settings}


def print_environment(machine: dict[str, Any], pg: dict[str, Any], dsn: str) -> None:
    print(
        f"machine: {machine['nproc']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_gib']} GiB memory, Linux {machine['kernel']}, "
        f"Python {machine['python']}, load average {machine['loadavg_at_start']}"
    )
    print(f"postgres: {pg['version']}")
    print(f"dsn: {dsn}")
    shown = ", ".join(f"{k}={v}" for k, v in pg["settings"].items())
    print(f"non-default settings: {shown}")


def end_worker_backends(conn: psycopg.Connection[Any]) -> int:
    """Terminate server sessions left by benchmark workers. A worker killed mid-statement
    leaves its backend running (Postgres notices a dead client only when it next writes to
    it), and its locks would make the next run's TRUNCATE wait."""
    row = conn.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name LIKE 'bench-%%' AND pid <> pg_backend_pid()"
    ).fetchone()
    return int(row[0]) if row else 0


def reset_tables(conn: psycopg.Connection[Any]) -> None:
    """Empty every pgsched table so each run starts from the same state."""
    ended = end_worker_backends(conn)
    if ended:
        print(f"   terminated {ended} server sessions left by killed workers")
    conn.execute(
        "TRUNCATE pgsched.tasks, pgsched.task_events, pgsched.idempotency_keys,"
        " pgsched.completed_work RESTART IDENTITY"
    )


def prepare_for_run(conn: psycopg.Connection[Any]) -> None:
    """Fresh planner statistics and a checkpoint, so no run inherits another's debt."""
    conn.execute("ANALYZE pgsched.tasks_hot")
    conn.execute("ANALYZE pgsched.tasks_done")
    conn.execute("ANALYZE pgsched.task_events")
    conn.execute("CHECKPOINT")


def schedule_chunked(
    dsn: str,
    n: int,
    *,
    task_type: str = "noop",
    priority: int = 5,
    lane: str | None = None,
    run_ats: Sequence[datetime] | None = None,
    chunk: int = 20_000,
    keyed: bool = False,
) -> tuple[list[int], float]:
    """Schedule n tasks through pgsched.schedule_tasks, `chunk` per call and transaction,
    each with its own idempotency key when `keyed` (so each run also writes the ledger).
    Returns (task ids, seconds taken)."""
    ids: list[int] = []
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            size = hi - lo
            rows = conn.execute(
                "SELECT task_id FROM pgsched.schedule_tasks("
                " task_types => %(types)s::text[],"
                " run_ats => %(run_ats)s::timestamptz[],"
                " priorities => %(priorities)s::integer[],"
                " idempotency_keys => %(keys)s::text[],"
                " lanes => %(lanes)s::text[]) ORDER BY ordinal",
                {
                    "types": [task_type] * size,
                    "keys": [f"bench-{i}" for i in range(lo, hi)] if keyed else None,
                    "run_ats": None if run_ats is None else list(run_ats[lo:hi]),
                    "priorities": [priority] * size,
                    "lanes": None if lane is None else [lane] * size,
                },
                binary=True,
            ).fetchall()
            ids.extend(row[0] for row in rows)
    return ids, time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # After the ")" closing comm: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


class PostgresCpu:
    """CPU time of a local Postgres server: the postmaster, its live children, and the
    children it already reaped (cutime + cstime), so exited backends still count."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        fields = proc_stat_fields(int(row[0])) if row else None
        # The backend's parent is the postmaster (field 4 = ppid).
        self.postmaster: int | None = int(fields[1]) if fields else None

    @property
    def available(self) -> bool:
        return self.postmaster is not None

    def seconds(self) -> float | None:
        return None if self.postmaster is None else server_cpu_seconds(self.postmaster)


def server_cpu_seconds(postmaster: int) -> float | None:
    """CPU seconds of the server whose postmaster is `postmaster`: its own, its reaped
    children's, and its live children's; None if it is gone."""
    own = proc_stat_fields(postmaster)
    if own is None:
        return None
    total = sum(int(own[i]) for i in (11, 12, 13, 14)) / CLK_TCK
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat_fields(int(entry))
        if fields is not None and int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def machine_busy_seconds() -> float:
    """CPU seconds spent busy by the whole machine since boot (all CPUs), from /proc/stat."""
    with open("/proc/stat") as stat:
        parts = stat.readline().split()[1:]
    values = [int(v) for v in parts]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK


@dataclass
class CpuSample:
    at: float
    workers: float
    postgres: float | None
    machine: float


def sample_cpu(pids: Sequence[int], pg: PostgresCpu) -> CpuSample:
    return CpuSample(
        time.monotonic(), sum(cpu_seconds(p) for p in pids), pg.seconds(), machine_busy_seconds()
    )


def cpu_report(first: CpuSample, last: CpuSample) -> dict[str, Any]:
    """Cores used over the span by the workers, Postgres and everything else."""
    span = max(last.at - first.at, 1e-9)
    workers = last.workers - first.workers
    machine = last.machine - first.machine
    report: dict[str, Any] = {
        "span_s": round(span, 3),
        "worker_cpu_s": round(workers, 2),
        "worker_cores": round(workers / span, 2),
        "machine_busy_cores": round(machine / span, 2),
    }
    if first.postgres is not None and last.postgres is not None:
        pg = last.postgres - first.postgres
        report["postgres_cpu_s"] = round(pg, 2)
        report["postgres_cores"] = round(pg / span, 2)
        report["other_cores"] = round(max(machine - workers - pg, 0.0) / span, 2)
    return report


@dataclass
class WorkerProcs:
    """`pgsched worker` subprocesses, each with its own application_name and log file."""

    dsn: str
    lanes: str
    count: int = 1
    concurrency: int | None = None
    batch_size: int | None = None
    extra: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    name: str = "bench-worker"
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def argv(self) -> list[str]:
        exe = Path(sys.executable).with_name("pgsched")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pgsched.cli"]
        cmd += ["--dsn", self.dsn, "worker", "--app", APP_SPEC, "--lanes", self.lanes]
        if self.concurrency is not None:
            cmd += ["--concurrency", str(self.concurrency)]
        if self.batch_size is not None:
            cmd += ["--batch-size", str(self.batch_size)]
        return [*cmd, *self.extra, "--log-level", "WARNING"]

    def start(self) -> None:
        for i in range(self.count):
            log = Path(tempfile.mkstemp(prefix=f"{self.name}-{i}-", suffix=".log")[1])
            # "{i}" in a value of `env` becomes the worker's index (per-worker files).
            own = {k: v.replace("{i}", str(i)) for k, v in self.env.items()}
            env = {**os.environ, **own, "PGAPPNAME": f"{self.name}-{i}"}
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    self.argv(), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            self.procs.append(proc)
            self.logs.append(log)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
                )

    def wait_listening(self, conn: psycopg.Connection[Any], timeout: float = 30.0) -> None:
        """Until every worker's LISTEN connection is up: it is then ready to claim."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            row = conn.execute(
                "SELECT count(DISTINCT application_name) FROM pg_stat_activity"
                " WHERE application_name LIKE %s AND query LIKE 'LISTEN %%'",
                (f"{self.name}-%",),
            ).fetchone()
            if row and row[0] >= self.count:
                return
            time.sleep(0.05)
        raise TimeoutError("workers did not start listening in time")

    def stop(self, timeout: float = 60.0) -> list[int | None]:
        """SIGTERM (graceful), then SIGKILL after `timeout`; the exit codes (-9: killed)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        return codes

    def warnings(self) -> list[str]:
        """WARNING / ERROR lines the workers logged (first lines of each, deduplicated)."""
        seen: dict[str, int] = {}
        for log in self.logs:
            for line in log.read_text(errors="replace").splitlines():
                if " WARNING " in line or " ERROR " in line or "Traceback" in line:
                    key = line.split(": ", 1)[-1][:200]
                    seen[key] = seen.get(key, 0) + 1
        return [f"{count}x {text}" for text, count in seen.items()]

    def cleanup(self) -> None:
        for log in self.logs:
            log.unlink(missing_ok=True)


def percentiles(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50 / p95 / p99 / p99.9 / max / mean (linear interpolation between ranks)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "p99_9": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        pos = q * (len(ordered) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {
        "n": len(ordered),
        "min": round(ordered[0], 3),
        "mean": round(statistics.fmean(ordered), 3),
        "p50": round(at(0.50), 3),
        "p95": round(at(0.95), 3),
        "p99": round(at(0.99), 3),
        "p99_9": round(at(0.999), 3),
        "max": round(ordered[-1], 3),
    }


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"\nwrote {path}")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- the throughput benchmark ------------------------------------------------------------


def events_written(conn: psycopg.Connection[Any]) -> int:
    """How many task events exist so far: the identity sequence, cheaper than count(*)."""
    row = conn.execute(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM pgsched.task_events_id_seq"
    ).fetchone()
    return int(row[0]) if row else 0


def verify_events(conn: psycopg.Connection[Any], n: int) -> dict[str, Any]:
    """Exactly two events per task, QUEUED->PROCESSING then PROCESSING->COMPLETED."""
    row = conn.execute(
        """
        SELECT count(*),
               count(*) FILTER (WHERE from_status = 'QUEUED' AND to_status = 'PROCESSING'),
               count(*) FILTER (WHERE from_status = 'PROCESSING' AND to_status = 'COMPLETED'),
               count(DISTINCT task_id)
          FROM pgsched.task_events
        """
    ).fetchone()
    assert row is not None
    total, claimed, completed, tasks = (int(v) for v in row)
    bad = conn.execute(
        """
        SELECT count(*) FROM (
            SELECT task_id
              FROM pgsched.task_events
             GROUP BY task_id
            HAVING count(*) <> 2
                OR count(*) FILTER (
                       WHERE from_status = 'QUEUED' AND to_status = 'PROCESSING') <> 1
                OR count(*) FILTER (
                       WHERE from_status = 'PROCESSING' AND to_status = 'COMPLETED') <> 1
        ) AS odd
        """
    ).fetchone()
    done = conn.execute(
        "SELECT count(*) FROM pgsched.tasks_done WHERE status = 'COMPLETED'"
    ).fetchone()
    left = conn.execute("SELECT count(*) FROM pgsched.tasks_hot").fetchone()
    result = {
        "events": total,
        "claim_events": claimed,
        "complete_events": completed,
        "tasks_with_events": tasks,
        "tasks_with_wrong_events": int(bad[0]) if bad else -1,
        "tasks_completed": int(done[0]) if done else -1,
        "tasks_left_hot": int(left[0]) if left else -1,
    }
    result["ok"] = (
        total == 2 * n
        and claimed == n
        and completed == n
        and tasks == n
        and result["tasks_with_wrong_events"] == 0
        and result["tasks_completed"] == n
        and result["tasks_left_hot"] == 0
    )
    return result


def event_span(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = conn.execute(
        """
        SELECT min(occurred_at) FILTER (WHERE to_status = 'PROCESSING'),
               max(occurred_at) FILTER (WHERE to_status = 'COMPLETED')
          FROM pgsched.task_events
        """
    ).fetchone()
    assert row is not None and row[0] is not None and row[1] is not None
    per_second = conn.execute(
        """
        SELECT count(*)
          FROM pgsched.task_events
         WHERE to_status = 'COMPLETED'
         GROUP BY date_trunc('second', occurred_at)
         ORDER BY date_trunc('second', occurred_at)
        """
    ).fetchall()
    counts = [int(r[0]) for r in per_second]
    # Whole seconds only: drop the first and last, which are partial.
    inner = counts[1:-1] if len(counts) > 2 else counts
    return {
        "first_processing": row[0],
        "last_completed": row[1],
        "seconds": (row[1] - row[0]).total_seconds(),
        "completed_per_second": counts,
        "steady_median_per_s": int(statistics.median(inner)) if inner else None,
    }


def completed_count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pgsched.tasks_done WHERE status = 'COMPLETED'"
    ).fetchone()
    return int(row[0]) if row else 0


def run_setting(
    dsn: str,
    n: int,
    batch_size: int,
    concurrency: int,
    processes: int,
    task_type: str,
    chunk: int,
    timeout: float,
    max_seconds: float,
    keyed: bool = False,
) -> dict[str, Any]:
    label = f"procs={processes} batch={batch_size} conc={concurrency}"
    print(f"\n== {label}: {n:,} x {task_type}{' (keyed)' if keyed else ''}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        reset_tables(conn)
        ids, schedule_s = schedule_chunked(dsn, n, task_type=task_type, chunk=chunk, keyed=keyed)
        assert len(ids) == n
        print(f"   scheduled in {schedule_s:.2f}s ({n / schedule_s:,.0f}/s)")
        prepare_for_run(conn)
        pg = PostgresCpu(conn)
        workers = WorkerProcs(
            dsn, "normal", processes, concurrency, batch_size, name="bench-throughput"
        )
        loadavg_before = os.getloadavg()
        workers.start()
        started = time.monotonic()
        first: CpuSample | None = None
        failure: str | None = None
        try:
            last_progress = started
            seen = 0
            while True:
                workers.check_alive()
                written = events_written(conn)
                if written > 0 and first is None:
                    first = sample_cpu(workers.pids, pg)
                if written != seen:
                    seen, last_progress = written, time.monotonic()
                # Events are numbered before their statement commits (and a task run
                # twice writes more than two): count the committed completions.
                if written >= 2 * n and completed_count(conn) >= n:
                    break
                now = time.monotonic()
                if now - last_progress > timeout:
                    failure = f"no progress for {timeout:g}s at {written:,} events"
                    break
                if now - started > max_seconds:
                    failure = f"not done after {max_seconds:g}s ({written:,} events)"
                    break
                time.sleep(0.05)
            last = sample_cpu(workers.pids, pg)
        finally:
            # A run that failed is not drained gracefully: its backlog could take minutes.
            codes = workers.stop(60.0 if failure is None else 5.0)
        if failure is not None or first is None:
            done = completed_count(conn)
            warnings = workers.warnings()
            workers.cleanup()
            print(f"   FAILED: {failure}; {done:,} of {n:,} completed")
            for line in warnings[:5]:
                print(f"   worker log: {line}")
            return {
                "processes": processes,
                "batch_size": batch_size,
                "concurrency": concurrency,
                "tasks": n,
                "task_type": task_type,
                "error": failure or "no task was claimed",
                "completed": done,
                "elapsed_s": round(time.monotonic() - started, 1),
                "tasks_per_s": None,
                "worker_exit_codes": codes,
                "worker_warnings": warnings,
                "verification": {"ok": False},
                "cpu": {},
            }
        assert first is not None
        warnings = workers.warnings()
        workers.cleanup()
        span = event_span(conn)
        verified = verify_events(conn, n)
    rate = n / span["seconds"]
    cpu = cpu_report(first, last)
    cpu["worker_us_per_task"] = round(cpu["worker_cpu_s"] / n * 1e6, 1)
    if "postgres_cpu_s" in cpu:
        cpu["postgres_us_per_task"] = round(cpu["postgres_cpu_s"] / n * 1e6, 1)
    result = {
        "processes": processes,
        "batch_size": batch_size,
        "concurrency": concurrency,
        "tasks": n,
        "task_type": task_type,
        "tasks_per_s": round(rate),
        "seconds": round(span["seconds"], 3),
        "steady_median_per_s": span["steady_median_per_s"],
        "completed_per_second": span["completed_per_second"],
        "schedule_s": round(schedule_s, 3),
        "schedule_per_s": round(n / schedule_s),
        "cpu": cpu,
        "worker_exit_codes": codes,
        "worker_warnings": warnings,
        "loadavg_before": loadavg_before,
        "verification": verified,
    }
    print(
        f"   {rate:,.0f} tasks/s over {span['seconds']:.2f}s"
        f" (steady median {span['steady_median_per_s']}/s);"
        f" workers {cpu['worker_cores']} cores ({cpu['worker_us_per_task']} us/task),"
        f" postgres {cpu.get('postgres_cores', '?')} ({cpu.get('postgres_us_per_task', '?')}"
        f" us/task), other {cpu.get('other_cores', '?')}; events ok={verified['ok']}"
    )
    for line in warnings[:5]:
        print(f"   worker log: {line}")
    if not verified["ok"]:
        print(f"   VERIFICATION FAILED: {verified}")
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=None, help="tasks per setting (100,000)")
    parser.add_argument(
        "--batch-size", type=int, nargs="+", default=None, help="default: 50 100 250 500"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="50 200 500")
    parser.add_argument("--processes", type=int, nargs="+", default=None, help="1 2")
    parser.add_argument(
        "--task-type",
        default="noop",
        choices=["noop", "noop_sync"],
        help="noop: async handler; noop_sync: plain def (runs in a thread)",
    )
    parser.add_argument("--chunk", type=int, default=20_000, help="tasks per schedule call")
    parser.add_argument(
        "--keyed",
        action="store_true",
        help="give every task an idempotency key (the worker then writes the ledger)",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="give a setting up after no progress (s)"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=300.0, help="give a setting up after this long"
    )
    parser.add_argument(
        "--quick", action="store_true", help="20,000 tasks, batch 100, concurrency 50"
    )
    parser.add_argument("--dsn", default=None, help="benchmark this server instead")
    parser.add_argument("--out", type=Path, default=RESULTS / "throughput.json")
    parser.add_argument(
        "--setup-sql",
        type=Path,
        default=None,
        help="SQL run after migrating, to measure an engine change without editing sql/",
    )
    args = parser.parse_args(argv)
    # --quick: one short setting (any of these given explicitly still wins), bounded so
    # that it ends within a minute even when the engine falls behind.
    quick = args.quick
    args.tasks = args.tasks or (20_000 if quick else 100_000)
    args.batch_size = args.batch_size or ([100] if quick else [50, 100, 250, 500])
    args.concurrency = args.concurrency or ([50] if quick else [50, 200, 500])
    args.processes = args.processes or ([1] if quick else [1, 2])
    if quick:
        args.timeout = min(args.timeout, 20.0)
        args.max_seconds = min(args.max_seconds, 40.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    results: list[dict[str, Any]] = []
    with database(args.dsn, args.setup_sql) as (dsn, server):
        pg = postgres_info(dsn)
        print_environment(machine, pg, dsn)
        for processes in args.processes:
            for batch_size in args.batch_size:
                for concurrency in args.concurrency:
                    results.append(
                        run_setting(
                            dsn,
                            args.tasks,
                            batch_size,
                            concurrency,
                            processes,
                            args.task_type,
                            args.chunk,
                            args.timeout,
                            args.max_seconds,
                            keyed=args.keyed,
                        )
                    )
        pg_settings = server.settings if server is not None else None
    columns = [
        "processes",
        "batch_size",
        "concurrency",
        "tasks_per_s",
        "steady_median_per_s",
        "seconds",
        "worker_cores",
        "worker_us_per_task",
        "postgres_cores",
        "postgres_us_per_task",
        "other_cores",
        "events_ok",
        "extra_claims",
        "note",
    ]
    cpu_columns = (
        "worker_cores",
        "worker_us_per_task",
        "postgres_cores",
        "postgres_us_per_task",
        "other_cores",
    )
    rows = [
        {
            **r,
            **{k: r["cpu"].get(k) for k in cpu_columns},
            "events_ok": r["verification"]["ok"],
            "extra_claims": (
                r["verification"]["claim_events"] - r["tasks"]
                if "claim_events" in r["verification"]
                else None
            ),
            "note": r.get("error") or "; ".join(w[:60] for w in r["worker_warnings"][:2]),
        }
        for r in results
    ]
    print("\n" + render_table(rows, columns))
    valid = [r for r in results if r["verification"]["ok"]]
    best = max(valid, key=lambda r: r["tasks_per_s"]) if valid else None
    best_one = max(
        (r for r in valid if r["processes"] == 1), key=lambda r: r["tasks_per_s"], default=None
    )
    if best is not None:
        print(
            f"\nbest: {best['tasks_per_s']:,} tasks/s with processes={best['processes']}"
            f" batch_size={best['batch_size']} concurrency={best['concurrency']}"
        )
    if best_one is not None and best_one is not best:
        print(
            f"best with one worker process: {best_one['tasks_per_s']:,} tasks/s with"
            f" batch_size={best_one['batch_size']} concurrency={best_one['concurrency']}"
        )
    document = {
        "benchmark": "throughput",
        "when": now_iso(),
        "command": " ".join(["python -m benchmarks.bench_throughput", *(argv or sys.argv[1:])]),
        "machine": machine,
        "source": source_info(),
        "setup_sql": str(args.setup_sql) if args.setup_sql else None,
        "postgres": pg,
        "postgres_settings_why": (
            {s.name: s.why for s in pg_settings} if pg_settings is not None else None
        ),
        "results": results,
        "best": best,
        "best_one_process": best_one,
        "all_events_ok": all(r["verification"]["ok"] for r in results),
    }
    write_json(args.out, document)
    return 0 if document["all_events_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
