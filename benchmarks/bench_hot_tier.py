"""Postgres-only claims against claims through the Redis hot tier, side by side in one run,
each both straight to Postgres and through PgBouncer in transaction mode.

    python -m benchmarks.bench_hot_tier                # 50,000 tasks; 1 and 4 processes; 1,000/s
    python -m benchmarks.bench_hot_tier --quick        # 10,000 tasks; 1 and 2 processes; 5 s
    python -m benchmarks.bench_hot_tier --tasks 100000 --processes 1 2 4 --rate 1000 5000
    python -m benchmarks.bench_hot_tier --routes direct    # without PgBouncer

On one database, one redis-server and one PgBouncer (transaction mode, pool of 20), for
each route (`direct`: every connection to Postgres; `pgbouncer`: workers and sweeper through
the pooler with `--prepare-threshold none`, LISTEN on a direct connection) and each mode
(`postgres`: workers as shipped; `redis`: the same workers with `--redis`, the sweeper
with `--redis` mirroring the window):

    drain     N no-op tasks due now, P worker processes (batch 100, concurrency 50) and a
              sweeper: throughput from the events (checked: two per task), CPU per task of
              the workers + sweeper, of Postgres, of PgBouncer and of redis-server, and in
              redis mode how many tasks were claimed by id and how many by the top-up
    xmin      the same drain (P = the largest of --processes) while another session holds
              a snapshot open from before the tasks were scheduled: vacuum can remove no
              row version the drain leaves behind, so the claim index fills with dead
              entries that task_claim_many steps over and claims by id do not
    lateness  R tasks/s for D seconds scheduled ahead, one worker: claim lateness p50 / p99
              / max (task_runs.started_at - scheduled_for, by the database clock)
    idle      W worker processes (concurrency 1) and a sweeper with no work at all for S
              seconds: claim queries per second (the workers' own count), Postgres
              transactions per second (pg_stat_database: every statement, autocommit),
              Postgres CPU
    memory    Redis bytes per mirrored id (a lane's sorted set) at 10k / 100k / 1M ids

The hot tier serves lanes whose claims are in plain priority order, so NORMAL's fair
claims across tenants are turned off (`lane_set_fairness`) in every mode alike.

Ratios redis / postgres per route are printed per case and written with the figures to
benchmarks/results/hot_tier.json. Without --dsn a throwaway, durable Postgres cluster is
started (benchmarks/pgserver.py, max_connections raised for the idle workers' sessions);
redis-server and pgbouncer always are (tests/support/redis_server.py, pgbouncer_server.py).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from benchmarks import measure
from benchmarks.pgserver import DEFAULT_SETTINGS, PgServer, Setting
from pgsched.hot_tier.keys import LaneKeys, score
from tests.support.pgbouncer_server import PgBouncer, running_pgbouncer
from tests.support.redis_server import RedisServer

MODES = ("postgres", "redis")
ROUTES = ("direct", "pgbouncer")
BATCH = 100
CONCURRENCY = 50
# Each worker process holds about five sessions straight to Postgres (its pool's three,
# the heartbeat's, the listener's): fifty idle workers need more than the usual 200.
MAX_CONNECTIONS = Setting("max_connections", "400", "fifty idle worker processes, direct")


@dataclass
class Route:
    """Where workers and the sweeper connect: `dsn` (Postgres or the pooler), with `env`;
    `direct` is the database's own DSN (setup, checks, LISTEN)."""

    name: str
    dsn: str
    direct: str
    bouncer: PgBouncer | None = None
    env: dict[str, str] = field(default_factory=dict)

    def pooler_pid(self) -> int | None:
        if self.bouncer is None or self.bouncer.process is None:
            return None
        # As root pgbouncer runs under runuser: its child is the pooler itself.
        children = Path(
            f"/proc/{self.bouncer.process.pid}/task/{self.bouncer.process.pid}/children"
        )
        if children.exists() and children.read_text().split():
            return int(children.read_text().split()[0])
        return self.bouncer.process.pid


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_hot_tier", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tasks", type=int, default=None, help="tasks per drain (50,000)")
    parser.add_argument("--processes", type=int, nargs="+", default=None, help="1 4")
    parser.add_argument("--rate", type=int, nargs="+", default=None, help="tasks/s (1000)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per rate (20)")
    parser.add_argument("--idle-workers", type=int, default=None, help="50 (0: skip)")
    parser.add_argument("--idle-seconds", type=float, default=None, help="20")
    parser.add_argument("--xmin-tasks", type=int, default=None, help="--tasks (0: skip)")
    parser.add_argument(
        "--memory-sizes", type=int, nargs="+", default=None, help="10000 100000 1000000"
    )
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--quick", action="store_true", help="10,000 tasks, 1 and 2, 5 s")
    parser.add_argument("--dsn", default=None, help="benchmark this database instead")
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "hot_tier.json")
    args = parser.parse_args(argv)
    quick = args.quick
    args.tasks = args.tasks or (10_000 if quick else 50_000)
    args.processes = args.processes or ([1, 2] if quick else [1, 4])
    args.rate = args.rate or [1000]
    args.duration = args.duration or (5.0 if quick else 20.0)
    if args.idle_workers is None:
        args.idle_workers = 10 if quick else 50
    args.idle_seconds = args.idle_seconds or (5.0 if quick else 20.0)
    if args.xmin_tasks is None:
        args.xmin_tasks = args.tasks
    args.memory_sizes = args.memory_sizes or (
        [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]
    )
    return args


@contextlib.contextmanager
def bench_database(dsn: str | None) -> Iterator[str]:
    """The given database, or one on a throwaway server (room for the idle workers)."""
    if dsn:
        with measure.database(dsn) as given:
            yield given
        return
    settings = tuple(
        MAX_CONNECTIONS if s.name == "max_connections" else s for s in DEFAULT_SETTINGS
    )
    server = PgServer(settings=settings)
    server.start()
    try:
        yield measure.pgsched_database(server, "bench")
    finally:
        server.stop()


@contextlib.contextmanager
def routes(dsn: str, names: Sequence[str]) -> Iterator[list[Route]]:
    found = [Route("direct", dsn, dsn)] if "direct" in names else []
    if "pgbouncer" not in names:
        yield found
        return
    info = conninfo_to_dict(dsn)
    with running_pgbouncer(
        str(info.get("host", "127.0.0.1")), int(str(info.get("port", 5432))), str(info["user"])
    ) as bouncer:
        pooled = bouncer.dsn(str(info["dbname"]))
        env = {"PGSCHED_PREPARE_THRESHOLD": "none", "PGSCHED_LISTEN_DSN": dsn}
        found.append(Route("pgbouncer", pooled, dsn, bouncer, env))
        yield found


def start_sweeper(route: Route, mode: str, redis: RedisServer) -> measure.Procs:
    argv = [*measure.pgsched_exe(), "--dsn", route.dsn, "sweeper", "--log-level", "WARNING"]
    if mode == "redis":
        argv += ["--redis", redis.url]
    sweeper = measure.Procs("bench-sweeper", [argv], env=route.env).start()
    if mode == "redis":
        keys = LaneKeys("pgsched", "NORMAL")
        deadline = time.monotonic() + 30
        with redis.client() as c:
            while not c.exists(keys.meta):
                sweeper.check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError("the sweeper did not build the mirror within 30 s")
                time.sleep(0.05)
    return sweeper


def worker_extra(mode: str, redis: RedisServer) -> list[str]:
    # INFO: the worker's last lines say where its claims came from and how many it made.
    extra = ["--log-level", "INFO"]
    return [*extra, "--redis", redis.url] if mode == "redis" else extra


def claim_split(log_text: str) -> dict[str, int] | None:
    found = re.findall(
        r"(\d+) ids popped, (\d+) claimed by id, (\d+) dropped .*?, (\d+) claimed from Postgres",
        log_text,
    )
    if not found:
        return None
    totals = [sum(int(row[i]) for row in found) for i in range(4)]
    return dict(zip(("popped", "claimed_by_id", "dropped", "topped_up"), totals, strict=True))


def claim_queries(log_text: str) -> int:
    return sum(int(n) for n in re.findall(r"lane \w+: (\d+) claim queries", log_text))


@contextlib.contextmanager
def snapshot_held(dsn: str, hold: bool) -> Iterator[None]:
    """With `hold`: a session whose open REPEATABLE READ snapshot keeps vacuum from removing
    any row version that dies meanwhile (as a forgotten transaction or a long report does)."""
    if not hold:
        yield
        return
    with psycopg.connect(dsn, application_name="bench-xmin-holder") as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM pgsched.settings")
        try:
            yield
        finally:
            holder.rollback()


def drain(
    route: Route,
    redis: RedisServer,
    mode: str,
    n: int,
    processes: int,
    hold_xmin: bool = False,
) -> dict[str, Any]:
    dsn = route.direct
    measure.clear_worked_tasks(dsn)
    with redis.client() as c:
        c.flushall()
    with snapshot_held(dsn, hold_xmin):
        measure.schedule_due_now(dsn, n)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE pgsched.tasks_hot")
        sweeper = start_sweeper(route, mode, redis)
        pm = measure.postmaster_pid(dsn)
        progress = psycopg.connect(dsn, autocommit=True)
        check = measure.Drained(progress, n)
        workers = measure.pgsched_workers(
            route.dsn,
            "bench-hot",
            processes,
            BATCH,
            CONCURRENCY,
            env=route.env,
            extra=worker_extra(mode, redis),
        ).start()
        meter = measure.CpuMeter([*workers.pids, *sweeper.pids], pm)
        meter.begin()
        redis_cpu = measure.cpu_seconds(redis.pid)
        pooler = route.pooler_pid()
        pooler_cpu = measure.cpu_seconds(pooler) if pooler else 0.0
        try:
            finished, _ = measure.wait_until(check, 300.0, workers, idle_timeout=45.0)
            cpu = meter.end()
            redis_cpu = measure.cpu_seconds(redis.pid) - redis_cpu
            pooler_cpu = measure.cpu_seconds(pooler) - pooler_cpu if pooler else 0.0
        finally:
            workers.stop(dsn=dsn)
            sweeper.stop(dsn=dsn)
            progress.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        figures = measure.drain_rate(conn)
        checked = measure.verify_events(conn, n) if finished else None
    done = max(figures["completed"], 1)
    result = {
        "case": "xmin" if hold_xmin else "drain",
        "route": route.name,
        "mode": mode,
        "tasks": n,
        "processes": processes,
        "finished": finished,
        "tasks_per_s": figures["tasks_per_s"],
        "seconds": figures["seconds"],
        "cpu_us_per_task": {
            "workers_and_sweeper": round(cpu["clients_cpu_s"] / done * 1e6, 1),
            "postgres": round(cpu["postgres_cpu_s"] / done * 1e6, 1),
            "pgbouncer": round(pooler_cpu / done * 1e6, 1),
            "redis": round(redis_cpu / done * 1e6, 1),
        },
        "claims": claim_split(workers.log_text()),
        "claim_queries": claim_queries(workers.log_text()),
        "events_ok": bool(checked and checked["ok"]),
        "warnings": workers.warnings() + sweeper.warnings(),
    }
    workers.cleanup()
    sweeper.cleanup()
    return result


def lateness(
    route: Route, redis: RedisServer, mode: str, rate: int, duration: float
) -> dict[str, Any]:
    dsn = route.direct
    n = int(rate * duration)
    measure.clear_worked_tasks(dsn)
    with redis.client() as c:
        c.flushall()
    sweeper = start_sweeper(route, mode, redis)
    workers = measure.pgsched_workers(
        route.dsn, "bench-hot", 1, 500, 500, env=route.env, extra=worker_extra(mode, redis)
    ).start()
    pm = measure.postmaster_pid(dsn)
    try:
        workers.wait_listening(dsn, timeout=180.0)
        lead = 3.0 + n / 15_000
        first_due = measure.db_now(dsn) + timedelta(seconds=lead)
        run_ats = [first_due + timedelta(seconds=i / rate) for i in range(n)]
        lo, hi, _ = measure.schedule_at(dsn, run_ats)
        meter = measure.CpuMeter([*workers.pids, *sweeper.pids], pm)
        meter.begin()
        while (wait := (run_ats[-1] - measure.db_now(dsn)).total_seconds()) > 0:
            workers.check_alive()
            time.sleep(min(wait, 0.5))
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed, _ = measure.wait_until(measure.Drained(conn, n, 0), 120.0, workers, 30.0)
        cpu = meter.end()
    finally:
        workers.stop(dsn=dsn)
        sweeper.stop(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        values = measure.lateness_of_tasks(conn, lo, hi)
    figures = measure.lateness_figures(values, n)
    figures.pop("cdf")
    result = {
        "case": "lateness",
        "route": route.name,
        "mode": mode,
        "rate_per_s": rate,
        "duration_s": duration,
        "all_completed": completed,
        **figures,
        "cpu_us_per_task": {
            "workers_and_sweeper": round(cpu["clients_cpu_s"] / max(n, 1) * 1e6, 1),
            "postgres": round(cpu["postgres_cpu_s"] / max(n, 1) * 1e6, 1),
        },
        "claims": claim_split(workers.log_text()),
        "warnings": workers.warnings() + sweeper.warnings(),
    }
    workers.cleanup()
    sweeper.cleanup()
    return result


def transactions(conn: psycopg.Connection[Any]) -> int:
    return int(
        measure.one(
            conn,
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()",
        )
    )


def idle(
    route: Route, redis: RedisServer, mode: str, n_workers: int, seconds: float
) -> dict[str, Any]:
    """n_workers worker processes and a sweeper, nothing to do: what they ask of Postgres."""
    dsn = route.direct
    measure.clear_worked_tasks(dsn)
    with redis.client() as c:
        c.flushall()
    sweeper = start_sweeper(route, mode, redis)
    workers = measure.pgsched_workers(
        route.dsn, "bench-idle", n_workers, 1, 1, env=route.env, extra=worker_extra(mode, redis)
    ).start()
    pm = measure.postmaster_pid(dsn)
    try:
        workers.wait_listening(dsn, timeout=180.0)
        time.sleep(3.0)  # past the start-up claims
        with psycopg.connect(dsn, autocommit=True) as conn:
            # pg_stat_database is flushed by each backend at most once a second.
            conn.execute("SELECT pg_stat_clear_snapshot()")
            xacts = transactions(conn)
            meter = measure.CpuMeter([*workers.pids, *sweeper.pids], pm)
            meter.begin()
            begun = time.monotonic()
            time.sleep(seconds)
            workers.check_alive()
            cpu = meter.end()
            span = time.monotonic() - begun
            conn.execute("SELECT pg_stat_clear_snapshot()")
            xacts = transactions(conn) - xacts
        stopping = time.monotonic()
    finally:
        workers.stop(dsn=dsn)
        sweeper.stop(dsn=dsn)
    log_text = workers.log_text()
    # The workers count their claims over their whole life: per second of that life, for
    # one worker, then for all of them at once.
    lives = worker_lives(log_text, stopping)
    per_worker = claim_queries(log_text) / lives if lives else None
    result = {
        "case": "idle",
        "route": route.name,
        "mode": mode,
        "workers": n_workers,
        "seconds": round(span, 1),
        "claim_queries_per_s": round(per_worker * n_workers, 1) if per_worker else None,
        "claim_queries_per_s_per_worker": round(per_worker, 2) if per_worker else None,
        "postgres_xacts_per_s": round(xacts / span, 1),
        "postgres_cores": cpu["postgres_cores"],
        "workers_cores": cpu["clients_cores"],
        "warnings": workers.warnings() + sweeper.warnings(),
    }
    workers.cleanup()
    sweeper.cleanup()
    return result


def worker_lives(log_text: str, stopped_at: float) -> float | None:
    """The sum of the workers' running seconds: from each one's "running lanes" line to the
    stop (the log's wall clock against this process's monotonic clock)."""
    started = re.findall(r"^(\S+ \S+),\d+ INFO pgsched.worker: worker \S+ running", log_text, re.M)
    if not started:
        return None
    now = datetime.now()
    offset = time.monotonic() - stopped_at
    total = 0.0
    for stamp in started:
        began = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
        total += max((now - began).total_seconds() - offset, 0.0)
    return total


def memory_per_id(redis: RedisServer, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Bytes a lane's sorted set costs per mirrored id, ids and scores as the mirror writes
    them (ids from a bigint sequence, due times a millisecond apart)."""
    results = []
    due = datetime.now()
    with redis.client() as c:
        for size in sizes:
            c.flushall()
            before = int(c.info("memory")["used_memory"])
            key = LaneKeys("bench", "NORMAL").due
            for lo in range(0, size, 10_000):
                chunk = range(lo, min(size, lo + 10_000))
                c.zadd(
                    key,
                    {str(1_000_000 + i): score(5, due + timedelta(milliseconds=i)) for i in chunk},
                )
            after = int(c.info("memory")["used_memory"])
            results.append({"ids": size, "bytes_per_id": round((after - before) / size, 1)})
        c.flushall()
    return results


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def headline(run: dict[str, Any]) -> str:
    if run["case"] in ("drain", "xmin"):
        return (
            f"{run['tasks_per_s']} tasks/s; CPU us/task {run['cpu_us_per_task']};"
            f" claims {run['claims']}; events ok {run['events_ok']}"
        )
    if run["case"] == "lateness":
        ms = run["ms"]
        return (
            f"{run['started']:,}/{run['tasks']:,} started; ms p50 {ms['p50']}"
            f" p99 {ms['p99']} max {ms['max']}; CPU us/task {run['cpu_us_per_task']}"
        )
    return (
        f"{run['claim_queries_per_s']} claim queries/s; Postgres {run['postgres_xacts_per_s']}"
        f" transactions/s, {run['postgres_cores']} cores"
    )


def compared(case: str, pair: dict[str, dict[str, Any]]) -> dict[str, Any]:
    pg, rd = pair["postgres"], pair["redis"]
    if case in ("drain", "xmin"):
        return {
            "throughput_redis_over_postgres": ratio(rd["tasks_per_s"], pg["tasks_per_s"]),
            "postgres_cpu_redis_over_postgres": ratio(
                rd["cpu_us_per_task"]["postgres"], pg["cpu_us_per_task"]["postgres"]
            ),
        }
    if case == "lateness":
        return {
            "p99_redis_over_postgres": ratio(rd["ms"]["p99"], pg["ms"]["p99"]),
            "postgres_cpu_redis_over_postgres": ratio(
                rd["cpu_us_per_task"]["postgres"], pg["cpu_us_per_task"]["postgres"]
            ),
        }
    return {
        "claim_queries_redis_over_postgres": ratio(
            rd["claim_queries_per_s"], pg["claim_queries_per_s"]
        ),
        "postgres_xacts_redis_over_postgres": ratio(
            rd["postgres_xacts_per_s"], pg["postgres_xacts_per_s"]
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    server: dict[str, Any] = {}

    def both_modes(route: Route, label: str, run: Any) -> None:
        pair = {}
        for mode in MODES:
            measure.step(f"{label}, {route.name}, {mode}")
            if route.bouncer is not None:
                # A fresh pooler for every case: none inherits another's server connections
                # (each case ends by terminating its sessions on the server).
                route.bouncer.kill()
                route.bouncer.start()
            outcome = run(mode)
            measure.note(headline(outcome))
            results.append(outcome)
            pair[mode] = outcome
        comparisons.append({"case": label, "route": route.name, **compared(outcome["case"], pair)})
        save()

    def save(memory: list[dict[str, Any]] | None = None) -> None:
        """After every case: a run cut short keeps what it measured."""
        measure.write_json(
            args.out,
            {
                "benchmark": "hot_tier",
                "command": " ".join(
                    ["python -m benchmarks.bench_hot_tier", *(argv or sys.argv[1:])]
                ),
                "machine": measure.machine_info(),
                "postgres": server,
                "results": results,
                "comparisons": comparisons,
                "redis_memory": memory,
                "complete": memory is not None,
            },
        )

    def run_route(route: Route, redis: RedisServer) -> None:
        for processes in args.processes:
            both_modes(
                route,
                f"drain {args.tasks:,}, {processes} process(es)",
                lambda mode, p=processes: drain(route, redis, mode, args.tasks, p),
            )
        if args.xmin_tasks:
            top = max(args.processes)
            both_modes(
                route,
                f"drain {args.xmin_tasks:,} under a held snapshot, {top} process(es)",
                lambda mode: drain(route, redis, mode, args.xmin_tasks, top, True),
            )
        for rate in args.rate:
            both_modes(
                route,
                f"lateness at {rate:,}/s for {args.duration:g}s",
                lambda mode, r=rate: lateness(route, redis, mode, r, args.duration),
            )
        if args.idle_workers:
            both_modes(
                route,
                f"{args.idle_workers} idle workers for {args.idle_seconds:g}s",
                lambda mode: idle(route, redis, mode, args.idle_workers, args.idle_seconds),
            )

    with (
        bench_database(args.dsn) as dsn,
        RedisServer() as redis,
        routes(dsn, args.routes) as found,
    ):
        server.update(measure.server_settings(dsn))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', false)")
        measure.step(f"{server['version']}; redis-server on port {redis.port}")
        for route in found:
            run_route(route, redis)
        measure.step("Redis memory per mirrored id")
        memory = memory_per_id(redis, args.memory_sizes)
        for m in memory:
            measure.note(f"{m['ids']:,} ids: {m['bytes_per_id']} bytes per id")
    measure.step("redis / postgres")
    for c in comparisons:
        measure.note(", ".join(f"{k} {v}" for k, v in c.items()))
    save(memory)
    drains_ok = all(r["events_ok"] for r in results if r["case"] in ("drain", "xmin"))
    late_ok = all(r["all_completed"] for r in results if r["case"] == "lateness")
    return 0 if drains_ok and late_ok else 1


if __name__ == "__main__":
    sys.exit(main())
