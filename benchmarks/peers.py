"""The peers, measured side by side with pgsched on the same server: procrastinate and
PGQueuer, each in its own database, each used the way its documentation recommends.

procrastinate  App(connector=PsycopgConnector(...)); a worker process runs
               app.run_worker_async(concurrency=C) (docs: "Execute multiple jobs at the
               same time", concurrency=30 is their example), pool max_size = C + 2 (at most
               52); jobs are deferred in batches (JobManager.batch_defer_jobs_async, the
               call behind Task.batch_defer_async, which also takes a per-job scheduled_at);
               later work uses schedule_at. fetch_job_polling_interval is its only way to
               notice that a scheduled job came due (LISTEN/NOTIFY fires at insert time):
               default 5 s; we run it at 0.1 s and also once at the default.
PGQueuer       QueueManager(Queries(PsycopgDriver(conn))) with an autocommit psycopg async
               connection each (docs; its own benchmark runs 5 dequeue tasks of batch 10);
               QueueManager.run(batch_size=B); batch enqueue with lists; later work uses
               execute_after (a delay relative to the database's NOW()).

What each writes per job (both do keep a log, unlike what one might assume):
  procrastinate  the job row (kept: delete_jobs defaults to never) and procrastinate_events
                 rows from row triggers: deferred, started, succeeded (+ scheduled when
                 scheduled_at is set); every fetch and every finish is its own transaction.
  PGQueuer       the job row (deleted when done) and pgqueuer_log rows: queued, picked,
                 successful; completions are buffered and written in batches.
  pgsched        the task row (moved to tasks_finished), two task_events rows (QUEUED->PROCESSING,
                 PROCESSING->COMPLETED) with worker, attempt and due time; claims and
                 completions in batches.

Workers run as subprocesses: `python -m benchmarks.peers worker procrastinate|pgqueuer ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks import measure
from benchmarks.measure import (
    CpuMeter,
    CpuTrace,
    Procs,
    XactSampler,
    db_now,
    drain_line,
    lateness_figures,
    lateness_line,
    note,
    one,
    rate_figures,
    step,
    wait_until,
)
from benchmarks.suite import Plan

QUEUE = "bench"
TASK = "noop"
OUT_ENV = "BENCH_PEER_OUT"
SPAN_SECONDS = 365 * 86_400
SCATTER = 2_654_435_761  # as bench_schedule: distinct, scattered due times over the year
CHUNK = 10_000
WORKER = [sys.executable, "-m", "benchmarks.peers", "worker"]


def backlog_offsets(n: int) -> list[timedelta]:
    """Due times of n future jobs: from +25 h, spread over 365 days, in scattered order."""
    return [timedelta(seconds=90_000 + (i * SCATTER) % SPAN_SECONDS) for i in range(n)]


# --------------------------------------------------------------------------------------
# procrastinate


def procrastinate_app(dsn: str, max_size: int = 10, record: list[Any] | None = None) -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=dsn, min_size=min(4, max_size), max_size=max_size
        )
    )

    @app.task(name=TASK, queue=QUEUE, pass_context=True)
    async def noop(context: Any) -> None:
        if record is not None:
            record.append((context.job.id, time.time()))

    return app


async def _procrastinate_install(dsn: str) -> None:
    app = procrastinate_app(dsn, 2)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def _procrastinate_defer(dsn: str, scheduled: Sequence[datetime | None]) -> list[int]:
    from procrastinate import jobs

    app = procrastinate_app(dsn, 2)
    ids: list[int] = []
    async with app.open_async():
        for lo in range(0, len(scheduled), CHUNK):
            batch = [
                jobs.Job(
                    queue=QUEUE,
                    task_name=TASK,
                    lock=None,
                    queueing_lock=None,
                    task_kwargs={},
                    scheduled_at=at,
                )
                for at in scheduled[lo : lo + CHUNK]
            ]
            done = await app.job_manager.batch_defer_jobs_async(batch)
            ids.extend(int(j.id) for j in done if j.id is not None)
    return ids


async def _procrastinate_worker(dsn: str, concurrency: int, poll: float, out: str | None) -> None:
    record: list[Any] = []
    app = procrastinate_app(dsn, min(concurrency, 50) + 2, record)
    async with app.open_async():
        await app.run_worker_async(
            queues=[QUEUE],
            concurrency=concurrency,
            fetch_job_polling_interval=poll,
            install_signal_handlers=True,
        )
    if out:
        Path(out).write_text("".join(f"{i} {t:.6f}\n" for i, t in record))


@dataclass
class Procrastinate:
    name: str = "procrastinate"
    audit_table: str = "procrastinate_events"
    queue_table: str = "procrastinate_jobs"

    @property
    def version(self) -> str:
        return measure.package_version("procrastinate")

    def setup(self, dsn: str) -> None:
        asyncio.run(_procrastinate_install(dsn))

    def schedule_backlog(self, dsn: str, n: int) -> float:
        start = datetime.now(UTC)
        at = [start + d for d in backlog_offsets(n)]
        t0 = time.perf_counter()
        asyncio.run(_procrastinate_defer(dsn, at))
        return time.perf_counter() - t0

    def enqueue_now(self, dsn: str, n: int) -> float:
        t0 = time.perf_counter()
        asyncio.run(_procrastinate_defer(dsn, [None] * n))
        return time.perf_counter() - t0

    def enqueue_at(self, dsn: str, due: Sequence[datetime]) -> tuple[int, int, float]:
        t0 = time.perf_counter()
        ids = asyncio.run(_procrastinate_defer(dsn, due))
        return min(ids), max(ids), time.perf_counter() - t0

    def clear(self, dsn: str) -> None:
        """Drop every job but the future backlog (events go with them: ON DELETE CASCADE)."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM procrastinate_jobs"
                " WHERE scheduled_at IS NULL OR scheduled_at < now() + interval '1 day'"
            )
            conn.execute("DELETE FROM procrastinate_workers")
            conn.execute("VACUUM ANALYZE procrastinate_jobs")
            conn.execute("VACUUM ANALYZE procrastinate_events")
            conn.execute("CHECKPOINT")

    def completed(self, conn: psycopg.Connection[Any]) -> int:
        return int(
            one(
                conn,
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                " AND (scheduled_at IS NULL OR scheduled_at < now() + interval '1 day')",
            )
        )

    def rate(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        row = conn.execute(
            "SELECT min(at) FILTER (WHERE type = 'started'), max(at) FILTER"
            " (WHERE type = 'succeeded'), count(*) FILTER (WHERE type = 'succeeded')"
            " FROM procrastinate_events WHERE type IN ('started', 'succeeded')"
        ).fetchone()
        assert row is not None
        per_second = [
            int(r[0])
            for r in conn.execute(
                "SELECT count(*) FROM procrastinate_events WHERE type = 'succeeded'"
                " GROUP BY date_trunc('second', at) ORDER BY date_trunc('second', at)"
            ).fetchall()
        ]
        return rate_figures(row[0], row[1], int(row[2]), per_second)

    def audit(self, conn: psycopg.Connection[Any], n: int) -> dict[str, Any]:
        rows = dict(
            conn.execute(
                "SELECT e.type::text, count(*) FROM procrastinate_events e"
                " JOIN procrastinate_jobs j ON j.id = e.job_id"
                " WHERE j.status = 'succeeded'"
                " AND (j.scheduled_at IS NULL OR j.scheduled_at < now() + interval '1 day')"
                " GROUP BY 1"
            ).fetchall()
        )
        return {"log_rows_by_type": rows, "log_rows_per_job": round(sum(rows.values()) / n, 2)}

    def lateness(self, conn: psycopg.Connection[Any], lo: int, hi: int, out: Path) -> list[float]:
        rows = conn.execute(
            "SELECT extract(EPOCH FROM e.at - j.scheduled_at)::float8 * 1000"
            " FROM procrastinate_jobs j JOIN procrastinate_events e"
            " ON e.job_id = j.id AND e.type = 'started' WHERE j.id BETWEEN %s AND %s",
            (lo, hi),
        ).fetchall()
        return [r[0] for r in rows]

    def workers(
        self, dsn: str, name: str, processes: int, setting: dict[str, Any], out: Path
    ) -> Procs:
        argv = [
            *WORKER,
            "procrastinate",
            "--dsn",
            dsn,
            "--concurrency",
            str(setting["concurrency"]),
        ]
        argv += ["--poll", str(setting.get("poll", 0.1))]
        return Procs(name, [argv] * processes, env={OUT_ENV: str(out / "out-{i}.txt")})

    def sweep(self, plan: Plan) -> list[dict[str, Any]]:
        return [
            {
                "processes": p,
                "concurrency": c,
                "poll": 0.1,
                "pool_max_size": min(c, 50) + 2,
                "label": f"{p} proc, concurrency {c}",
            }
            for p, c in plan.procrastinate_settings
        ]


# --------------------------------------------------------------------------------------
# PGQueuer


async def _pgq_connect(dsn: str) -> Any:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def _pgq_install(dsn: str) -> None:
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await _pgq_connect(dsn)
    async with conn:
        await Queries(PsycopgDriver(conn)).install()


async def _pgq_enqueue(dsn: str, delays: Sequence[timedelta | None]) -> list[int]:
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await _pgq_connect(dsn)
    ids: list[int] = []
    async with conn:
        queries = Queries(PsycopgDriver(conn))
        for lo in range(0, len(delays), CHUNK):
            part = list(delays[lo : lo + CHUNK])
            done = await queries.enqueue(
                [TASK] * len(part),
                [None] * len(part),
                [0] * len(part),
                execute_after=part,
            )
            ids.extend(int(i) for i in done)
    return ids


async def _pgq_enqueue_at(dsn: str, due: Sequence[datetime]) -> list[int]:
    """Absolute due times: execute_after is a delay from the statement's NOW(), so each
    chunk's delays are taken from the database clock read just before it."""
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await _pgq_connect(dsn)
    ids: list[int] = []
    async with conn:
        queries = Queries(PsycopgDriver(conn))
        for lo in range(0, len(due), CHUNK):
            cur = await conn.execute("SELECT clock_timestamp()")
            row = await cur.fetchone()
            assert row is not None
            now = row[0]
            part = [d - now for d in due[lo : lo + CHUNK]]
            done = await queries.enqueue(
                [TASK] * len(part), [None] * len(part), [0] * len(part), execute_after=part
            )
            ids.extend(int(i) for i in done)
    return ids


async def _pgq_worker(
    dsn: str, managers: int, batch_size: int, out: str | None, driver: str = "psycopg"
) -> None:
    from pgqueuer.db import AsyncpgDriver, PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    record: list[tuple[int, float, float, float]] = []
    if driver == "asyncpg":
        import asyncpg

        conns = [await asyncpg.connect(dsn) for _ in range(managers)]
        drivers = [AsyncpgDriver(conn) for conn in conns]
    else:
        conns = [await _pgq_connect(dsn) for _ in range(managers)]
        drivers = [PsycopgDriver(conn) for conn in conns]
    qms = []
    for db in drivers:
        qm = QueueManager(Queries(db))

        @qm.entrypoint(TASK)
        async def noop(job: Job) -> None:
            record.append(
                (int(job.id), job.execute_after.timestamp(), job.updated.timestamp(), time.time())
            )

        qms.append(qm)
    loop = asyncio.get_running_loop()

    def stop_all() -> None:
        for qm in qms:
            qm.shutdown.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_all)
    await asyncio.gather(*(qm.run(batch_size=batch_size) for qm in qms))
    for conn in conns:
        await conn.close()
    if out:
        Path(out).write_text("".join(f"{i} {ea:.6f} {up:.6f} {t:.6f}\n" for i, ea, up, t in record))


@dataclass
class PgQueuer:
    name: str = "PGQueuer"
    audit_table: str = "pgqueuer_log"
    queue_table: str = "pgqueuer"

    @property
    def version(self) -> str:
        return measure.package_version("pgqueuer")

    def setup(self, dsn: str) -> None:
        asyncio.run(_pgq_install(dsn))

    def schedule_backlog(self, dsn: str, n: int) -> float:
        t0 = time.perf_counter()
        asyncio.run(_pgq_enqueue(dsn, backlog_offsets(n)))
        return time.perf_counter() - t0

    def enqueue_now(self, dsn: str, n: int) -> float:
        t0 = time.perf_counter()
        asyncio.run(_pgq_enqueue(dsn, [None] * n))
        return time.perf_counter() - t0

    def enqueue_at(self, dsn: str, due: Sequence[datetime]) -> tuple[int, int, float]:
        t0 = time.perf_counter()
        ids = asyncio.run(_pgq_enqueue_at(dsn, due))
        return min(ids), max(ids), time.perf_counter() - t0

    def clear(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgqueuer WHERE execute_after < now() + interval '1 day'")
            conn.execute("TRUNCATE pgqueuer_log")
            conn.execute("TRUNCATE pgqueuer_statistics")
            conn.execute("VACUUM ANALYZE pgqueuer")
            conn.execute("CHECKPOINT")

    def completed(self, conn: psycopg.Connection[Any]) -> int:
        return int(one(conn, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"))

    def rate(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        row = conn.execute(
            "SELECT min(created) FILTER (WHERE status = 'picked'), max(created) FILTER"
            " (WHERE status = 'successful'), count(*) FILTER (WHERE status = 'successful')"
            " FROM pgqueuer_log"
        ).fetchone()
        assert row is not None
        per_second = [
            int(r[0])
            for r in conn.execute(
                "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
                " GROUP BY date_trunc('second', created) ORDER BY date_trunc('second', created)"
            ).fetchall()
        ]
        return rate_figures(row[0], row[1], int(row[2]), per_second)

    def audit(self, conn: psycopg.Connection[Any], n: int) -> dict[str, Any]:
        rows = dict(
            conn.execute(
                "SELECT l.status::text, count(*) FROM pgqueuer_log l WHERE l.job_id IN"
                " (SELECT job_id FROM pgqueuer_log WHERE status = 'successful') GROUP BY 1"
            ).fetchall()
        )
        return {"log_rows_by_type": rows, "log_rows_per_job": round(sum(rows.values()) / n, 2)}

    def lateness(self, conn: psycopg.Connection[Any], lo: int, hi: int, out: Path) -> list[float]:
        """Pick time (the job's `updated`, set to NOW() by the dequeue) - execute_after,
        both by the database clock, as each handler saw its job."""
        values = []
        for path in out.glob("out-*.txt"):
            for line in path.read_text().splitlines():
                job_id, execute_after, updated, _ = line.split()
                if lo <= int(job_id) <= hi:
                    values.append((float(updated) - float(execute_after)) * 1000)
        return values

    def workers(
        self, dsn: str, name: str, processes: int, setting: dict[str, Any], out: Path
    ) -> Procs:
        argv = [*WORKER, "pgqueuer", "--dsn", dsn, "--managers", str(setting["managers"])]
        argv += ["--batch-size", str(setting["batch_size"])]
        argv += ["--driver", setting.get("driver", "psycopg")]
        return Procs(name, [argv] * processes, env={OUT_ENV: str(out / "out-{i}.txt")})

    def sweep(self, plan: Plan) -> list[dict[str, Any]]:
        return [
            {
                "processes": p,
                "managers": m,
                "batch_size": b,
                "label": f"{p} proc x {m} QueueManager(s), batch {b}",
            }
            for p, m, b in plan.pgqueuer_settings
        ]


PEERS = (Procrastinate(), PgQueuer())


# --------------------------------------------------------------------------------------
# the cases, for any peer


def wait_connected(dsn: str, name: str, backends: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            n = one(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                (f"{name}-%",),
            )
            if n >= backends:
                return
            time.sleep(0.1)
    raise TimeoutError(f"{name} did not connect within {timeout:g}s")


def prepare_drain(peer: Any, dsn: str, n: int) -> float:
    """Clear the peer's queue, enqueue n jobs due now and analyze its queue table, as
    pgsched's drain analyzes tasks_hot: the peer's claim is planned for the queue it has.
    Without it the statistics were those of the emptied queue (or whatever autoanalyze
    had reached mid-drain), and PGQueuer's best setting drained 9,700 to 20,100 jobs/s
    from one run to the next. Returns the seconds the enqueue took."""
    peer.clear(dsn)
    schedule_s = float(peer.enqueue_now(dsn, n))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(peer.queue_table)))
    return schedule_s


def peer_drain(
    peer: Any, dsn: str, n: int, setting: dict[str, Any], cap_s: float, name: str
) -> dict[str, Any]:
    """n no-op jobs due now (plus whatever backlog is there), one or more worker processes;
    the rate from the peer's own log: completions over first start -> last completion."""
    schedule_s = prepare_drain(peer, dsn, n)
    out = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    pm = measure.postmaster_pid(dsn)
    procs = peer.workers(dsn, name, setting["processes"], setting, out).start()
    sampler = XactSampler(dsn, name)
    sampler.start()
    meter = CpuMeter(procs.pids, pm)
    meter.begin()
    trace = CpuTrace(procs.pids, pm)
    trace.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            finished, waited = wait_until(
                lambda: (lambda c: (c >= n, c))(peer.completed(conn)), cap_s, procs
            )
        cpu = meter.end()
    finally:
        trace.stop()
        codes = procs.stop(dsn=dsn)
        xacts = sampler.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        figures = peer.rate(conn)
        audit = peer.audit(conn, max(figures["completed"], 1))
    result = {
        "system": peer.name,
        "tasks": n,
        **{k: v for k, v in setting.items() if k != "label"},
        "setting": setting["label"],
        "finished": finished,
        "capped_after_s": None if finished else round(waited, 1),
        "schedule_s": round(schedule_s, 3),
        **figures,
        **measure.working_cpu(cpu, trace, figures),
        "audit": audit,
        "xacts": xacts,
        "worker_exit_codes": codes,
        "worker_warnings": procs.warnings(),
    }
    procs.cleanup()
    for path in out.iterdir():
        path.unlink()
    out.rmdir()
    return result


def peer_lateness(
    peer: Any,
    dsn: str,
    rate: float,
    duration: float,
    setting: dict[str, Any],
    name: str,
    finish_wait_s: float = 120.0,
) -> dict[str, Any]:
    n = int(rate * duration)
    peer.clear(dsn)
    commit_ms = measure.commit_latency(dsn, 20)["ms"]["p50"]
    out = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    procs = peer.workers(dsn, name, setting["processes"], setting, out).start()
    stall: list[Any] = []
    try:
        wait_connected(dsn, name, setting["processes"])
        time.sleep(2.0)  # imports done, schema checked, listening
        procs.check_alive()
        lead = 3.0 + n / 5_000
        first_due = db_now(dsn) + timedelta(seconds=lead)
        due = [first_due + timedelta(seconds=i / rate) for i in range(n)]
        lo, hi, schedule_s = peer.enqueue_at(dsn, due)
        margin = (first_due - db_now(dsn)).total_seconds()
        while (wait := (due[-1] - db_now(dsn)).total_seconds()) > 0:
            procs.check_alive()
            time.sleep(min(wait, 0.5))
        with psycopg.connect(dsn, autocommit=True) as conn:
            done, _ = wait_until(
                lambda: (lambda c: (c >= n, c))(peer.completed(conn)), finish_wait_s, procs, 30.0
            )
            if not done:
                # What the workers were doing when they fell behind (for the report).
                stall = [
                    list(r)
                    for r in conn.execute(
                        "SELECT state, wait_event_type, wait_event,"
                        " round(extract(EPOCH FROM clock_timestamp() - query_start)::numeric, 2),"
                        " left(regexp_replace(query, '\\s+', ' ', 'g'), 100)"
                        " FROM pg_stat_activity WHERE application_name LIKE %s",
                        (f"{name}-%",),
                    ).fetchall()
                ]
    finally:
        codes = procs.stop(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        values = peer.lateness(conn, lo, hi, out)
    result = {
        "system": peer.name,
        "rate_per_s": rate,
        "duration_s": duration,
        "setting": setting["label"],
        **{k: v for k, v in setting.items() if k != "label"},
        "lead_s": round(lead, 2),
        "schedule_s": round(schedule_s, 3),
        "schedule_margin_s": round(margin, 3),
        "all_completed": done,
        "commit_p50_ms_before": commit_ms,
        "stall_snapshot": stall,
        **lateness_figures(values, n),
        "worker_exit_codes": codes,
        "worker_warnings": procs.warnings(),
    }
    procs.cleanup()
    for path in out.iterdir():
        path.unlink()
    out.rmdir()
    return result


def run_peer(peer: Any, server: Any, plan: Plan) -> dict[str, Any]:
    """Cases 2, 3 and 4 for one peer, in its own database on the suite's server."""
    dbname = "peer_" + peer.name.lower()
    dsn = measure.create_database(server, dbname)
    peer.setup(dsn)
    out: dict[str, Any] = {"system": peer.name, "version": peer.version, "database": dbname}
    settings = peer.sweep(plan)

    # case 3 first: its best setting is the one cases 2 and 4 use
    runs = []
    for i, setting in enumerate(settings, 1):
        step(
            f"peers, case 3: {peer.name} throughput {i}/{len(settings)}:"
            f" {plan.peer_tasks:,} no-op jobs, {setting['label']}"
        )
        r = peer_drain(peer, dsn, plan.peer_tasks, setting, plan.peer_cap_s, f"bench-{dbname}")
        note(drain_line(r) + f"; log rows/job {r['audit']['log_rows_per_job']}")
        runs.append(r)
    best = max(
        (r for r in runs if r.get("tasks_per_s")), key=lambda r: r["tasks_per_s"], default=None
    )
    out["throughput"] = {"runs": runs, "best": best}
    chosen = next((s for s in settings if best and s["label"] == best["setting"]), settings[0])
    one_proc = [s for s in settings if s["processes"] == 1]
    if chosen["processes"] != 1 and one_proc:
        # cases 2 and 4 run one worker process, as pgsched's do: the best such setting
        best_one = max(
            (r for r in runs if r["processes"] == 1 and r.get("tasks_per_s")),
            key=lambda r: r["tasks_per_s"],
            default=None,
        )
        chosen = next(
            (s for s in one_proc if best_one and s["label"] == best_one["setting"]), one_proc[0]
        )
    out["chosen_setting"] = chosen["label"]

    # case 2: backlog flatness
    points = []
    for backlog in plan.peer_backlog_points:
        if backlog:
            with psycopg.connect(dsn, autocommit=True) as conn:
                present = backlog_present(peer, conn)
            extra = backlog - present
            step(f"peers, case 2: {peer.name}: scheduling {extra:,} future jobs over 365 days")
            seconds = peer.schedule_backlog(dsn, extra)
            note(f"{extra:,} in {seconds:.1f}s = {extra / seconds:,.0f} jobs/s (its batch API)")
            points_meta = {
                "backlog_schedule_s": round(seconds, 2),
                "backlog_rows_per_s": round(extra / seconds),
            }
        else:
            points_meta = {}
        reps = []
        for k in range(plan.peer_repeats):
            step(
                f"peers, case 2: {peer.name} with {backlog:,} future jobs,"
                f" run {k + 1}/{plan.peer_repeats}:"
                f" {plan.peer_tasks:,} no-op jobs, {chosen['label']}"
            )
            r = peer_drain(peer, dsn, plan.peer_tasks, chosen, plan.peer_cap_s, f"bench-{dbname}")
            note(drain_line(r))
            reps.append(r)
        points.append(
            {
                "backlog": backlog,
                **points_meta,
                "runs": reps,
                "median_tasks_per_s": measure.median([r.get("tasks_per_s") for r in reps]),
            }
        )
    base = points[0]["median_tasks_per_s"] if points else None
    for p in points:
        p["ratio_to_empty"] = (
            round(p["median_tasks_per_s"] / base, 3) if base and p["median_tasks_per_s"] else None
        )
    out["backlog"] = {"points": points, "setting": chosen["label"]}

    # case 4: lateness (the backlog is cleared first: lateness is measured on an empty queue,
    # as pgsched's is)
    clear_backlog(peer, dsn)
    lat = []
    for rate in plan.peer_lateness_rates:
        step(
            f"peers, case 4: {peer.name} lateness at {rate:,}/s"
            f" for {plan.lateness_duration_s:g}s, {chosen['label']}"
        )
        r = peer_lateness(
            peer,
            dsn,
            rate,
            plan.lateness_duration_s,
            chosen,
            f"bench-{dbname}-late",
            plan.peer_finish_wait_s,
        )
        note(lateness_line(r))
        lat.append(r)
    if isinstance(peer, Procrastinate):
        default_poll = {**chosen, "poll": 5.0, "label": chosen["label"] + ", default 5 s poll"}
        rate = plan.peer_lateness_rates[0]
        step(
            f"peers, case 4: procrastinate lateness at {rate}/s"
            " with its default fetch_job_polling_interval (5 s)"
        )
        r = peer_lateness(
            peer,
            dsn,
            rate,
            plan.lateness_duration_s,
            default_poll,
            f"bench-{dbname}-late",
            plan.peer_finish_wait_s,
        )
        r["default_poll"] = True
        note(lateness_line(r))
        lat.append(r)
    out["lateness"] = lat
    return out


def backlog_present(peer: Any, conn: psycopg.Connection[Any]) -> int:
    if isinstance(peer, Procrastinate):
        return int(
            one(
                conn,
                "SELECT count(*) FROM procrastinate_jobs"
                " WHERE scheduled_at >= now() + interval '1 day'",
            )
        )
    return int(
        one(conn, "SELECT count(*) FROM pgqueuer WHERE execute_after >= now() + interval '1 day'")
    )


def clear_backlog(peer: Any, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if isinstance(peer, Procrastinate):
            conn.execute("TRUNCATE procrastinate_jobs, procrastinate_events CASCADE")
        else:
            conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        conn.execute("CHECKPOINT")


# --------------------------------------------------------------------------------------
# worker subprocess entry point


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run one peer worker process until SIGTERM")
    worker.add_argument("system", choices=["procrastinate", "pgqueuer"])
    worker.add_argument("--dsn", required=True)
    worker.add_argument("--concurrency", type=int, default=30)
    worker.add_argument("--poll", type=float, default=0.1)
    worker.add_argument("--managers", type=int, default=1)
    worker.add_argument("--batch-size", type=int, default=10)
    worker.add_argument("--driver", choices=["psycopg", "asyncpg"], default="psycopg")
    args = parser.parse_args(argv)
    out = os.environ.get(OUT_ENV)
    if args.system == "procrastinate":
        asyncio.run(_procrastinate_worker(args.dsn, args.concurrency, args.poll, out))
    else:
        asyncio.run(_pgq_worker(args.dsn, args.managers, args.batch_size, out, args.driver))


if __name__ == "__main__":
    main()
