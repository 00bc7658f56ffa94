"""What every benchmark measures with: one module, imported by each script.

Progress lines; the throwaway server and its databases; the machine and package versions;
percentiles and CDFs; CPU time from /proc (processes, the Postgres server, the machine);
the oldest open transaction (pg_stat_activity); long-running subprocesses (`pgsched
worker` / `pgsched scheduler` / a peer's worker); scheduling no-op tasks, draining them
through worker processes and checking the events they wrote; lateness figures; result JSON.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.pgserver import DEFAULT_SETTINGS, PgServer, Setting

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
NOOP_APP = "benchmarks.noop_app:app"
CLK_TCK = os.sysconf("SC_CLK_TCK")
T0 = time.monotonic()

# --------------------------------------------------------------------------------------
# progress


def elapsed() -> float:
    return time.monotonic() - T0


def step(message: str) -> None:
    """One progress line: time since the suite started, then what is happening."""
    minutes, seconds = divmod(int(elapsed()), 60)
    print(f"[{minutes:3d}:{seconds:02d}] {message}", flush=True)


def note(message: str) -> None:
    print(f"         {message}", flush=True)


# --------------------------------------------------------------------------------------
# the server and its databases


# WAL a task writes in a benchmark, at most (scheduling, promotion, claim, completion,
# events: the burst measured 3.2 kB); what recycle_wal is sized by.
WAL_PER_TASK = 4096


def wal_to_recycle_mb(tasks: int) -> int:
    """About the WAL `tasks` tasks write, in MB: at least 64, at most 4,096 (the benchmark
    cluster's min_wal_size, what a checkpoint keeps for reuse)."""
    return max(64, min(4096, -(-tasks * WAL_PER_TASK // (1 << 20))))


def start_server(
    recycle_wal_mb: int = 0, settings: tuple[Setting, ...] = DEFAULT_SETTINGS
) -> PgServer:
    """A throwaway durable cluster; with `recycle_wal_mb`, that much WAL already written
    and recycled (PgServer.recycle_wal: the run writes into reused segments, as a server
    that has run before does, not into segments made during it)."""
    server = PgServer(settings=settings)
    server.start()
    if recycle_wal_mb:
        server.recycle_wal(recycle_wal_mb)
    return server


def dsn_for(server: PgServer, dbname: str) -> str:
    assert server.port is not None
    return f"postgresql://{server.role}@127.0.0.1:{server.port}/{dbname}"


def create_database(server: PgServer, dbname: str) -> str:
    with psycopg.connect(dsn_for(server, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    return dsn_for(server, dbname)


@contextlib.contextmanager
def database(dsn: str | None, recycle_wal_mb: int = 0) -> Iterator[str]:
    """For a script run on its own: the given database, or one on a throwaway server
    started for the run (and removed after it; `recycle_wal_mb` as start_server);
    migrated either way."""
    from pgsched.migrations import migrate

    if dsn:
        migrate(dsn)
        yield dsn
        return
    server = start_server(recycle_wal_mb)
    try:
        yield pgsched_database(server, "bench")
    finally:
        server.stop()


def pgsched_database(server: PgServer, dbname: str) -> str:
    from pgsched.migrations import migrate

    dsn = create_database(server, dbname)
    migrate(dsn)
    return dsn


def one(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def server_settings(dsn: str) -> dict[str, Any]:
    """The server's version and every setting not at its built-in default."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = one(conn, "SELECT version()")
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings"
            " WHERE source NOT IN ('default', 'override', 'client', 'session')"
            " ORDER BY name"
        ).fetchall()
    return {"version": version, "settings": dict(rows)}


# --------------------------------------------------------------------------------------
# machine, versions


def package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def git(*argv: str) -> str:
    out = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip()


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
        "packages": {
            name: package_version(name)
            for name in ("pgsched", "psycopg", "psycopg-pool", "procrastinate", "pgqueuer")
        }
        | {"matplotlib": package_version("matplotlib")},
        "git_commit": git("rev-parse", "HEAD"),
        "engine_files_modified": git(
            "status", "--porcelain", "--untracked-files=no", "--", "pgsched", "sql"
        ).splitlines(),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------------------
# statistics


def cdf_points(values: Sequence[float], points: int = 400) -> list[list[float]]:
    """A compact CDF for plotting: [value, fraction] at evenly spaced ranks, plus the tail."""
    if not values:
        return []
    ordered = sorted(values)
    n = len(ordered)
    ranks = sorted(
        {min(n - 1, round(i * (n - 1) / points)) for i in range(points + 1)}
        | {min(n - 1, int(q * (n - 1))) for q in (0.99, 0.995, 0.999, 0.9995, 0.9999)}
    )
    return [[round(ordered[r], 3), round((r + 1) / n, 6)] for r in ranks]


def median(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


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


# --------------------------------------------------------------------------------------
# CPU from /proc


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


def postmaster_pid(dsn: str) -> int | None:
    # Read while the connection is open: its backend is the postmaster's child only as
    # long as it lives (closing first raced the backend's exit: 0 Postgres CPU, at times).
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        fields = proc_stat_fields(int(row[0])) if row else None
        return int(fields[1]) if fields else None  # the backend's parent (ppid)


@dataclass
class CpuMeter:
    """Cores used by some processes, the Postgres server and the whole machine over a span."""

    pids: list[int]
    postmaster: int | None
    start: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def _sample(self) -> tuple[float, float, float, float]:
        return (
            time.monotonic(),
            sum(cpu_seconds(p) for p in self.pids),
            (server_cpu_seconds(self.postmaster) or 0.0) if self.postmaster else 0.0,
            machine_busy_seconds(),
        )

    def begin(self) -> None:
        self.start = self._sample()

    def end(self) -> dict[str, float]:
        t1, w1, p1, m1 = self._sample()
        t0, w0, p0, m0 = self.start
        span = max(t1 - t0, 1e-9)
        return {
            "span_s": round(span, 2),
            "clients_cores": round((w1 - w0) / span, 2),
            "clients_cpu_s": round(w1 - w0, 2),
            "postgres_cores": round((p1 - p0) / span, 2),
            "postgres_cpu_s": round(p1 - p0, 2),
            "other_cores": round(max((m1 - m0) - (w1 - w0) - (p1 - p0), 0.0) / span, 2),
        }


class CpuTrace(threading.Thread):
    """The CPU seconds of some processes and of the Postgres server, sampled every
    `interval` s against the wall clock, so that a span known only afterwards (the first
    claim to the last completion, from the events or a peer's own log) can be read off:
    start-up (imports, connecting, schema checks, pools filling) and the idle polling after
    the last task stay outside. With 10,000 no-op tasks of about a second, a start-up of a
    few hundred ms of CPU is as much as the work itself."""

    def __init__(self, pids: list[int], postmaster: int | None, interval: float = 0.02) -> None:
        super().__init__(name="cpu-trace", daemon=True)
        self.pids = pids
        self.postmaster = postmaster
        self.interval = interval
        # (wall clock, the processes' CPU s, the server's CPU s, the machine's busy s)
        self.samples: list[tuple[float, float, float, float]] = []
        self._backends: list[int] = []
        self._stop_event = threading.Event()

    def _server_cpu(self, rescan: bool) -> float:
        # Listing /proc every sample costs the machine more than what is measured: the
        # server's children are listed again every few samples (a backend that starts in
        # between is counted from then on, one that exits is in the postmaster's cutime).
        if self.postmaster is None:
            return 0.0
        own = proc_stat_fields(self.postmaster)
        if own is None:
            return 0.0
        if rescan:
            self._backends = [
                int(e)
                for e in os.listdir("/proc")
                if e.isdigit()
                and (f := proc_stat_fields(int(e))) is not None
                and int(f[1]) == self.postmaster
            ]
        total = sum(int(own[i]) for i in (11, 12, 13, 14)) / CLK_TCK
        return total + sum(cpu_seconds(pid) for pid in self._backends)

    def sample(self, rescan: bool = False) -> None:
        procs = sum(cpu_seconds(p) for p in self.pids)
        server = self._server_cpu(rescan)
        self.samples.append((time.time(), procs, server, machine_busy_seconds()))

    def run(self) -> None:
        self.sample(rescan=True)
        n = 0
        while not self._stop_event.wait(self.interval):
            n += 1
            self.sample(rescan=n % 10 == 0)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def at(self, when: float) -> tuple[float, float, float]:
        """(processes, server, machine) CPU seconds at wall-clock time `when`, interpolated
        between the samples either side (the first or last sample outside the span)."""
        s = self.samples
        if when <= s[0][0]:
            return s[0][1:]
        for a, b in itertools.pairwise(s):
            if a[0] <= when <= b[0]:
                f = (when - a[0]) / max(b[0] - a[0], 1e-9)
                return (
                    a[1] + f * (b[1] - a[1]),
                    a[2] + f * (b[2] - a[2]),
                    a[3] + f * (b[3] - a[3]),
                )
        return s[-1][1:]

    def between(self, first: datetime | None, last: datetime | None) -> dict[str, float] | None:
        """CpuMeter's figures over first -> last (timezone-aware times); None without a span."""
        if first is None or last is None or not self.samples:
            return None
        # A peer's log may hold times without a zone: the server runs in UTC.
        t0, t1 = (
            t.timestamp() if t.tzinfo else t.replace(tzinfo=UTC).timestamp() for t in (first, last)
        )
        (w0, p0, m0), (w1, p1, m1) = self.at(t0), self.at(t1)
        span = max(t1 - t0, 1e-9)
        return {
            "span_s": round(span, 3),
            "clients_cores": round((w1 - w0) / span, 2),
            "clients_cpu_s": round(w1 - w0, 3),
            "postgres_cores": round((p1 - p0) / span, 2),
            "postgres_cpu_s": round(p1 - p0, 3),
            "other_cores": round(max((m1 - m0) - (w1 - w0) - (p1 - p0), 0.0) / span, 2),
        }


def cpu_per_task(cpu: dict[str, float] | None, done: int) -> dict[str, float] | None:
    if cpu is None:
        return None
    return {
        "workers": round(cpu["clients_cpu_s"] / max(done, 1) * 1e6, 1),
        "postgres": round(cpu["postgres_cpu_s"] / max(done, 1) * 1e6, 1),
    }


# --------------------------------------------------------------------------------------
# how long transactions stay open


class XactSampler(threading.Thread):
    """Samples pg_stat_activity: the oldest open transaction of each application_name
    starting with `prefix` (the engine's or a peer's backends), every `interval` s."""

    def __init__(
        self, dsn: str, prefix: str, interval: float = 0.5, processing: bool = False
    ) -> None:
        super().__init__(name=f"xact-sampler-{prefix}", daemon=True)
        self.dsn = dsn
        self.prefix = prefix
        self.interval = interval
        # also the most tasks PROCESSING at once (claimed, outcome not yet written)
        self.processing = processing
        self.max_processing = 0
        self.max_age_s = 0.0
        self.max_by_app: dict[str, float] = {}
        self.max_state: str | None = None
        self.max_query: str | None = None
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.wait(self.interval):
                rows = conn.execute(
                    "SELECT application_name, state, left(query, 120),"
                    " extract(EPOCH FROM clock_timestamp() - xact_start)::float8"
                    " FROM pg_stat_activity"
                    " WHERE application_name LIKE %s AND xact_start IS NOT NULL"
                    " AND pid <> pg_backend_pid()",
                    (self.prefix + "%",),
                ).fetchall()
                self.samples += 1
                if self.processing:
                    busy = one(
                        conn, "SELECT count(*) FROM pgsched.tasks_hot WHERE status = 'PROCESSING'"
                    )
                    self.max_processing = max(self.max_processing, int(busy or 0))
                for app, state, query, age in rows:
                    if age is None:
                        continue
                    self.max_by_app[app] = max(self.max_by_app.get(app, 0.0), age)
                    if age > self.max_age_s:
                        self.max_age_s, self.max_state, self.max_query = age, state, query

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        self.join(timeout=5)
        return {
            "max_xact_age_s": round(self.max_age_s, 3),
            "samples": self.samples,
            "interval_s": self.interval,
            "oldest_state": self.max_state,
            "oldest_query": self.max_query,
        } | ({"max_processing": self.max_processing} if self.processing else {})


# --------------------------------------------------------------------------------------
# subprocesses


@dataclass
class Procs:
    """Long-running subprocesses (workers, a scheduler), each with its own log file and
    application_name (PGAPPNAME), stopped with SIGTERM."""

    name: str
    argvs: list[list[str]]
    env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def start(self) -> Procs:
        for i, argv in enumerate(self.argvs):
            log = Path(tempfile.mkstemp(prefix=f"{self.name}-{i}-", suffix=".log")[1])
            own = {k: v.replace("{i}", str(i)) for k, v in self.env.items()}
            env = {**os.environ, **own, "PGAPPNAME": f"{self.name}-{i}", "PYTHONUNBUFFERED": "1"}
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
                )
            self.logs.append(log)
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
                )

    def wait_listening(self, dsn: str, timeout: float = 60.0) -> None:
        """Until each process has a backend that ran LISTEN (it is then ready to work)."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                self.check_alive()
                ready = one(
                    conn,
                    "SELECT count(DISTINCT application_name) FROM pg_stat_activity"
                    " WHERE application_name LIKE %s AND query ILIKE 'LISTEN%%'",
                    (f"{self.name}-%",),
                )
                if ready and ready >= len(self.procs):
                    return
                time.sleep(0.05)
        raise TimeoutError(f"{self.name} did not start listening within {timeout:g}s")

    def stop(self, timeout: float = 60.0, dsn: str | None = None) -> list[int | None]:
        """SIGTERM (graceful), SIGKILL after `timeout`; with a DSN, then end the sessions
        they left behind."""
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
        if dsn is not None:
            self.terminate_backends(dsn)
        return codes

    def terminate_backends(self, dsn: str) -> int:
        """End the database sessions these processes left behind (a worker killed in the
        middle of a long statement leaves it running, holding its locks)."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            return int(
                one(
                    conn,
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
                    (f"{self.name}-%",),
                )
            )

    def log_text(self) -> str:
        return "\n".join(log.read_text(errors="replace") for log in self.logs if log.exists())

    def warnings(self, limit: int = 5) -> list[str]:
        seen: dict[str, int] = {}
        for line in self.log_text().splitlines():
            if " WARNING " in line or " ERROR " in line or "Traceback" in line:
                key = line.split(": ", 1)[-1][:160]
                seen[key] = seen.get(key, 0) + 1
        return [f"{n}x {text}" for text, n in list(seen.items())[:limit]]

    def cleanup(self) -> None:
        for log in self.logs:
            log.unlink(missing_ok=True)


def pgsched_exe() -> list[str]:
    exe = Path(sys.executable).with_name("pgsched")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "pgsched.cli"]


def pgsched_workers(
    dsn: str,
    name: str,
    processes: int,
    batch_size: int,
    concurrency: int,
    lanes: str = "normal",
    app: str = NOOP_APP,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> Procs:
    argv = [
        *pgsched_exe(),
        "--dsn",
        dsn,
        "worker",
        "--app",
        app,
        "--lanes",
        lanes,
        "--batch-size",
        str(batch_size),
        "--concurrency",
        str(concurrency),
        "--log-level",
        "WARNING",
        *extra,
    ]
    return Procs(name, [argv] * processes, env=env or {})


# --------------------------------------------------------------------------------------
# pgsched helpers

SCHEDULE_NOW_SQL = (
    "SELECT count(*) FROM pgsched.schedule_tasks("
    "task_types => %b::text[], idempotency_keys => %b::text[])"
)
SCHEDULE_AT_SQL = (
    "SELECT min(task_id), max(task_id), count(*) FROM pgsched.schedule_tasks("
    "task_types => %b::text[], run_ats => %b::timestamptz[])"
)


def schedule_due_now(
    dsn: str, n: int, task_type: str = "noop", chunk: int = 20_000, keyed: bool = False
) -> float:
    """n no-op tasks due now (NORMAL lane) through the bulk SQL function, each with its own
    idempotency key when `keyed` (the worker then also writes the ledger); returns seconds."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            keys = [f"bench-{i}" for i in range(lo, hi)] if keyed else None
            assert one(conn, SCHEDULE_NOW_SQL, ([task_type] * (hi - lo), keys)) == hi - lo
    return time.perf_counter() - started


def schedule_at(
    dsn: str, run_ats: Sequence[datetime], task_type: str = "noop", chunk: int = 10_000
) -> tuple[int, int, float]:
    """Tasks due at the given times (NORMAL lane); returns (first id, last id, seconds)."""
    started = time.perf_counter()
    lo_id, hi_id = None, None
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(0, len(run_ats), chunk):
            part = list(run_ats[lo : lo + chunk])
            row = conn.execute(SCHEDULE_AT_SQL, ([task_type] * len(part), part)).fetchone()
            assert row is not None and row[2] == len(part)
            lo_id = row[0] if lo_id is None else min(lo_id, row[0])
            hi_id = row[1] if hi_id is None else max(hi_id, row[1])
    assert lo_id is not None and hi_id is not None
    return int(lo_id), int(hi_id), time.perf_counter() - started


def clear_worked_tasks(dsn: str) -> None:
    """Empty the hot and done tiers and the events, keeping the cold tier (the backlog).
    A benchmark reset, not an engine operation: leftovers of a run that hit its cap (or
    whose worker was killed) are truncated away with the rest of the hot tier. Then fresh
    statistics and a checkpoint, so no run inherits another's debt."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE pgsched.tasks_hot, pgsched.tasks_done, pgsched.tasks_finished,"
            " pgsched.task_events"
        )
        conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
        conn.execute("ANALYZE pgsched.tasks_done")
        conn.execute("ANALYZE pgsched.tasks_finished")
        conn.execute("ANALYZE pgsched.task_events")
        conn.execute("CHECKPOINT")


def completed(conn: psycopg.Connection[Any]) -> int:
    # COMPLETED rows live in tasks_finished's partitions (sql/0027): the status prunes to them.
    return int(one(conn, "SELECT count(*) FROM pgsched.tasks WHERE status = 'COMPLETED'"))


class Drained:
    """A cheap progress check for a run of n tasks: the events sequence until it has moved
    by at least 2n since the start, then the count of completed tasks."""

    def __init__(self, conn: psycopg.Connection[Any], n: int, events_per_task: int = 2) -> None:
        self.conn = conn
        self.n = n
        self.need = events_per_task * n
        self.start = events_written(conn)

    def __call__(self) -> tuple[bool, int]:
        moved = events_written(self.conn) - self.start
        if moved < self.need:
            return False, moved
        done = completed(self.conn)
        return done >= self.n, moved + done


def drain_rate(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Throughput from the events: completions over first claim -> last completion."""
    row = conn.execute(
        """
        SELECT min(occurred_at) FILTER (WHERE to_status = 'PROCESSING'),
               max(occurred_at) FILTER (WHERE to_status = 'COMPLETED'),
               count(*) FILTER (WHERE to_status = 'COMPLETED')
          FROM pgsched.task_events
        """
    ).fetchone()
    assert row is not None
    first, last, n = row
    per_second = [
        int(r[0])
        for r in conn.execute(
            "SELECT count(*) FROM pgsched.task_events WHERE to_status = 'COMPLETED'"
            " GROUP BY date_trunc('second', occurred_at) ORDER BY date_trunc('second', occurred_at)"
        ).fetchall()
    ]
    return rate_figures(first, last, int(n), per_second)


def rate_figures(
    first: datetime | None, last: datetime | None, n: int, per_second: list[int]
) -> dict[str, Any]:
    if first is None or last is None or n == 0:
        return {"completed": n, "seconds": None, "tasks_per_s": None}
    seconds = max((last - first).total_seconds(), 1e-6)
    inner = per_second[1:-1] if len(per_second) > 2 else per_second
    return {
        "completed": n,
        "first_at": first,
        "last_at": last,
        "seconds": round(seconds, 3),
        "tasks_per_s": round(n / seconds),
        "steady_median_per_s": int(statistics.median(inner)) if inner else None,
        "completed_per_second": per_second,
    }


def wait_until(
    check: Any, cap_s: float, procs: Procs | None = None, idle_timeout: float = 60.0
) -> tuple[bool, float]:
    """Poll check() -> (done, progress) until done, the cap, or no progress for a while."""
    started = time.monotonic()
    last_progress, last_value = started, None
    while True:
        if procs is not None:
            procs.check_alive()
        done, value = check()
        now = time.monotonic()
        if done:
            return True, now - started
        if value != last_value:
            last_value, last_progress = value, now
        if now - started > cap_s or now - last_progress > idle_timeout:
            return False, now - started
        time.sleep(0.2)


def pgsched_drain(
    dsn: str,
    n: int,
    *,
    processes: int,
    batch_size: int,
    concurrency: int,
    cap_s: float,
    name: str,
    verify: bool = True,
    task_type: str = "noop",
    keyed: bool = False,
) -> dict[str, Any]:
    """n no-op tasks due now, run by `processes` worker processes: throughput from the
    events, the engine's transaction ages, CPU. The cold tier is left as it is."""
    clear_worked_tasks(dsn)
    schedule_s = schedule_due_now(dsn, n, task_type, keyed=keyed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgsched.tasks_hot")
    pm = postmaster_pid(dsn)
    load_before = loadavg()
    progress_conn = psycopg.connect(dsn, autocommit=True)
    check = Drained(progress_conn, n)
    workers = pgsched_workers(dsn, name, processes, batch_size, concurrency).start()
    sampler = XactSampler(dsn, name, processing=True)
    sampler.start()
    meter = CpuMeter(workers.pids, pm)
    meter.begin()
    trace = CpuTrace(workers.pids, pm)
    trace.start()
    try:
        finished, waited = wait_until(check, cap_s, workers, idle_timeout=45.0)
        cpu = meter.end()
    finally:
        trace.stop()
        codes = workers.stop(dsn=dsn)
        xacts = sampler.stop()
        progress_conn.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        figures = drain_rate(conn)
        checked = verify_events(conn, n) if verify and finished else None
    result = {
        "system": "pgsched",
        "tasks": n,
        "task_type": task_type,
        "keyed": keyed,
        "processes": processes,
        "batch_size": batch_size,
        "concurrency": concurrency,
        "finished": finished,
        "capped_after_s": None if finished else round(waited, 1),
        "schedule_s": round(schedule_s, 3),
        **figures,
        **working_cpu(cpu, trace, figures),
        "engine_xacts": xacts,
        "verification": checked,
        "worker_exit_codes": codes,
        "worker_warnings": workers.warnings(),
        "loadavg_before": load_before,
    }
    workers.cleanup()
    return result


def working_cpu(
    whole: dict[str, float], trace: CpuTrace, figures: dict[str, Any]
) -> dict[str, Any]:
    """CPU per task over the work itself (first claim -> last completion: `cpu`,
    `cpu_us_per_task`) and over the processes' whole run, start-up and the wait for the
    drain check included (`cpu_whole_run`, `cpu_us_per_task_whole_run`)."""
    done = figures["completed"]
    working = trace.between(figures.get("first_at"), figures.get("last_at"))
    return {
        "cpu": working if working is not None else whole,
        "cpu_us_per_task": cpu_per_task(working if working is not None else whole, done),
        "cpu_whole_run": whole,
        "cpu_us_per_task_whole_run": cpu_per_task(whole, done),
    }


def g_processing(r: dict[str, Any]) -> int | None:
    xacts = r.get("engine_xacts") or {}
    return xacts.get("max_processing")


def drain_line(r: dict[str, Any]) -> str:
    rate = r.get("tasks_per_s")
    verified = r.get("verification")
    ok = "" if verified is None else (" events ok" if verified.get("ok") else " EVENTS WRONG")
    capped = "" if r.get("finished", True) else f" (capped at {r.get('capped_after_s')}s)"
    busy = g_processing(r)
    capped += f"; most PROCESSING at once {busy:,}" if busy is not None else ""
    cpu = r.get("cpu", {})
    return (
        f"{r.get('completed', 0):,} done, {rate if rate is not None else '-':>6} tasks/s"
        f"{capped}; cores: clients {cpu.get('clients_cores')}, postgres"
        f" {cpu.get('postgres_cores')}, other {cpu.get('other_cores')}{ok}"
    )


# --------------------------------------------------------------------------------------
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
    done = conn.execute("SELECT count(*) FROM pgsched.tasks WHERE status = 'COMPLETED'").fetchone()
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


def commit_latency(dsn: str, commits: int = 300) -> dict[str, Any]:
    """Time single-row autocommit inserts: each waits for its WAL flush (fsync)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_commit_probe")
        conn.execute("CREATE TABLE bench_commit_probe (x integer)")
        times = []
        for i in range(commits):
            t0 = time.perf_counter()
            conn.execute("INSERT INTO bench_commit_probe VALUES (%s)", (i,))
            times.append((time.perf_counter() - t0) * 1000)
        conn.execute("DROP TABLE bench_commit_probe")
    stats = percentiles(times)
    return {
        "what": f"{commits} one-row INSERTs, each its own transaction (commit = WAL fsync)",
        "ms": stats,
        "commits_per_s_one_connection": round(1000 / stats["p50"]) if stats["p50"] else None,
    }


def db_now(dsn: str) -> datetime:
    with psycopg.connect(dsn, autocommit=True) as conn:
        now: datetime = one(conn, "SELECT clock_timestamp()")
        return now


def lateness_of_tasks(conn: psycopg.Connection[Any], lo: int, hi: int) -> list[float]:
    """Claim lateness (ms) of the tasks lo..hi: task_runs.started_at - scheduled_for."""
    # The run just wrote every one of these events. Planned on the statistics from before
    # (autovacuum's analyze may not have come yet), the join behind task_runs scans the
    # events partition once per task: minutes for 100,000 tasks instead of a second.
    conn.execute("ANALYZE pgsched.task_events")
    rows = conn.execute(
        "SELECT extract(EPOCH FROM started_at - scheduled_for)::float8 * 1000"
        " FROM pgsched.task_runs WHERE task_id BETWEEN %s AND %s AND attempt = 1",
        (lo, hi),
    ).fetchall()
    return [r[0] for r in rows]


def lateness_figures(values: list[float], n: int) -> dict[str, Any]:
    return {
        "tasks": n,
        "started": len(values),
        "ms": percentiles(values),
        "over_25ms": sum(1 for v in values if v > 25),
        "over_250ms": sum(1 for v in values if v > 250),
        "cdf": cdf_points(values),
    }


def lateness_line(r: dict[str, Any]) -> str:
    ms = r["ms"]
    return (
        f"{r['started']:,}/{r['tasks']:,} started; lateness ms p50 {ms['p50']} p95 {ms['p95']}"
        f" p99 {ms['p99']} p99.9 {ms['p99_9']} max {ms['max']}"
    )


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
    print(f"wrote {path}", flush=True)
