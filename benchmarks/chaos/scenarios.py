"""The chaos scenarios, each a function of a Scenario and its length: the short form
(tests/chaos) and the long form (`python -m benchmarks.chaos`) run the same code."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.chaos_harness import (
    APP,
    FINAL,
    PGSCHED,
    Cluster,
    Figures,
    Producer,
    Scenario,
    WorkerProcess,
    Workers,
    give_to_server_user,
    wait_for,
)
from tests.support.pgbouncer_server import PgBouncer
from tests.support.redis_server import RedisServer


def _work(seconds: float = 0.05) -> Any:
    return lambda n: ("work", {"seconds": seconds}, {"max_attempts": 25})


def sigkill_workers(s: Scenario, *, seconds: float, kills: int = 2) -> Figures:
    """Three workers under a steady load; `kills` times, evenly over `seconds`, the oldest
    live one is SIGKILLed (a supervisor starts a replacement each time). Recovery: from a
    kill until every task the dead worker had started has run again elsewhere (bounded by
    the lease); the worst kill."""
    for n in range(3):
        s.workers.start(f"K{n}", app=APP, lease=2.0, extra=["--concurrency", "8"])
    for w in s.workers.started:
        w.wait_running()
    recoveries: list[float] = []
    killed = 0
    with Producer(s.dsn, 40, _work(0.3)) as producer:
        for round_ in range(kills):
            time.sleep(seconds / (kills + 1))
            victim = next(w for w in s.workers.started if w.alive())
            victim.send(signal.SIGKILL)
            killed_at = time.time()
            killed += 1
            s.workers.start(f"K{round_}b", app=APP, lease=2.0, extra=["--concurrency", "8"])
            orphans = _unfinished_by(s, victim.worker_id, killed_at)
            if orphans:
                rerun = wait_for(partial(_all_rerun, s, orphans, killed_at), 30, "orphans re-run")
                recoveries.append(rerun - killed_at)
        time.sleep(seconds / (kills + 1))
    final = s.settle(producer.ids, 60)
    return s.figures(
        producer.ids,
        final,
        recovery_s=max(recoveries) if recoveries else None,
        killed=killed,
        orphaned=len(recoveries),
    )


def _unfinished_by(s: Scenario, worker: str, before: float) -> set[int]:
    """Tasks the worker started before `before` and that are not final now."""
    started = {tid for tid, _, w, at in s.runs() if w == worker and at <= before}
    if not started:
        return set()
    now = s.statuses(sorted(started))
    return {tid for tid, st in now.items() if st != "COMPLETED"}


def _all_rerun(s: Scenario, orphans: set[int], after: float) -> float | None:
    last: dict[int, float] = {}
    for tid, _, _, at in s.runs():
        if tid in orphans and at > after:
            last.setdefault(tid, at)
    return max(last.values()) if len(last) == len(orphans) else None


def postgres_restart(s: Scenario, mode: str, *, seconds: float) -> Figures:
    """Two workers under load while the server restarts (-m fast or -m immediate).
    Recovery: from the server accepting connections again to the next handler start."""
    for n in range(2):
        s.workers.start(f"R{n}", app=APP, lease=3.0, extra=["--concurrency", "8"])
    for w in s.workers.started:
        w.wait_running()
    with Producer(s.dsn, 30, _work(0.1)) as producer:
        time.sleep(seconds / 2)
        s.cluster.restart(mode)
        s.cluster.wait_accepting()
        back = time.time()
        ran = wait_for(lambda: s.first_run_after(back), 60, "a handler to run after the restart")
        time.sleep(seconds / 2)
    final = s.settle(producer.ids, 60)
    alive = sum(w.alive() for w in s.workers.started)
    return s.figures(
        producer.ids,
        final,
        recovery_s=ran - back,
        refused_while_down=producer.refused,
        workers_alive=alive,
    )


def _listeners(s: Scenario) -> list[int]:
    rows = s.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
    ).fetchall()
    return [int(r[0]) for r in rows]


def listener_killed(s: Scenario, *, rounds: int) -> Figures:
    """One worker polling every 30 s, so only its LISTEN session wakes it promptly; that
    session is terminated, then a task is scheduled. Recovery: from the kill to the task's
    handler start (the worst round)."""
    w = s.workers.start("L0", app=APP, lease=3.0, poll=30.0)
    w.wait_running()
    ids: list[int] = []
    recoveries: list[float] = []
    for _ in range(rounds):
        pids = wait_for(lambda: _listeners(s), 20, "the worker's LISTEN session")
        s.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
        killed_at = time.time()
        task_id = s.schedule("work", {"seconds": 0})
        ids.append(task_id)
        ran = wait_for(partial(s.first_run_after, killed_at, [task_id]), 40, "probe run")
        recoveries.append(ran - killed_at)
        # A few more once the listener is back.
        ids.extend(s.schedule("work", {"seconds": 0}) for _ in range(5))
    final = s.settle(ids, 30)
    return s.figures(ids, final, recovery_s=max(recoveries), worker_alive=w.alive())


def idle_session_timeout(s: Scenario, *, trickles: int) -> Figures:
    """idle_session_timeout = 2s on the database and work trickling in slower than that:
    every pooled, heartbeat and listener session is cut while idle. Recovery: the worst
    delay from a trickled task's scheduling to its handler start."""
    s.execute(
        sql.SQL("ALTER DATABASE {} SET idle_session_timeout = '2s'").format(
            sql.Identifier(s.dbname)
        )
    )
    w = s.workers.start("I0", app=APP, lease=7.5, poll=30.0)
    w.wait_running()
    ids: list[int] = []
    delays: list[float] = []
    kinds = ("work", "work_sync", "work_tx")
    for n in range(trickles):
        time.sleep(2.5)
        asked = time.time()
        task_id = s.schedule(kinds[n % 3], {"seconds": 0})
        ids.append(task_id)
        ran = wait_for(partial(s.first_run_after, asked, [task_id]), 30, "a trickled task")
        delays.append(ran - asked)
    final = s.settle(ids, 30)
    return s.figures(ids, final, recovery_s=max(delays), worker_alive=w.alive())


def _terminate_sessions(s: Scenario) -> None:
    with s.cluster.connect() as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (s.dbname,),
        )


def database_read_only(s: Scenario, *, seconds: float) -> Figures:
    """Under load, the database turns read-only (default_transaction_read_only, sessions
    terminated so they reconnect under it) for `seconds`, then writable again. Recovery:
    from writable again to the next handler start."""
    for n in range(2):
        s.workers.start(f"O{n}", app=APP, lease=3.0, extra=["--concurrency", "8"])
    for w in s.workers.started:
        w.wait_running()
    db = sql.Identifier(s.dbname)
    with Producer(s.dsn, 20, _work(0.05)) as producer:
        time.sleep(2)
        with s.cluster.connect() as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(db)
            )
        _terminate_sessions(s)
        time.sleep(seconds)
        with s.cluster.connect() as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(db)
            )
        _terminate_sessions(s)
        back = time.time()
        ran = wait_for(lambda: s.first_run_after(back), 60, "a handler run once writable")
        time.sleep(2)
    final = s.settle(producer.ids, 60)
    alive = sum(w.alive() for w in s.workers.started)
    return s.figures(
        producer.ids,
        final,
        recovery_s=ran - back,
        refused_while_read_only=producer.refused,
        workers_alive=alive,
    )


def unstorable_error_text(s: Scenario, *, count: int) -> Figures:
    """Handlers whose errors carry a NUL byte or invalid UTF-8, mixed with plain work: each
    bad one ends FAILED with its text made storable, the others complete."""
    w = s.workers.start("N0", app=APP, extra=["--concurrency", "8"])
    expected: dict[int, str] = {}
    for n in range(count):
        kind = ("nul_error", "invalid_text_error", "work")[n % 3]
        task_id = s.schedule(kind, {"seconds": 0}, max_attempts=1)
        expected[task_id] = "FAILED" if kind != "work" else "COMPLETED"
    ids = list(expected)
    final = s.settle(ids, 60)
    return s.figures(ids, final, expected=expected, recovery_s=None, worker_alive=w.alive())


def base_exceptions(s: Scenario, *, count: int) -> Figures:
    """Handlers raising SystemExit, KeyboardInterrupt and GeneratorExit, mixed with plain
    work: each such attempt fails (retried, then FAILED), the worker runs on."""
    w = s.workers.start("B0", app=APP, extra=["--concurrency", "8"])
    w.wait_running()
    expected: dict[int, str] = {}
    names = ("SystemExit", "KeyboardInterrupt", "GeneratorExit")
    for n in range(count):
        if n % 2:
            task_id = s.schedule("raises_base", {"raise": names[n % 3]}, max_attempts=2)
            expected[task_id] = "FAILED"
        else:
            expected[s.schedule("work", {"seconds": 0})] = "COMPLETED"
    ids = list(expected)
    final = s.settle(ids, 60)
    return s.figures(ids, final, expected=expected, recovery_s=None, worker_alive=w.alive())


def hung_low_handlers(s: Scenario, *, urgent: int) -> Figures:
    """One worker serving HIGH and LOW; LOW fills with plain handlers hung far past their
    1 s timeout while HIGH work falls due. Recovery: HIGH's worst lateness (due to start)."""
    w = s.workers.start(
        "H0",
        app=APP,
        lanes="high,low",
        lease=5.0,
        extra=["--concurrency", "4", "--max-stuck-threads", "100"],
    )
    w.wait_running()
    hung = [s.schedule("hung_sync", {"seconds": 30}, priority=1, max_attempts=1) for _ in range(12)]
    time.sleep(2.5)
    now = s.execute("SELECT clock_timestamp()").fetchone()[0]
    ids = [
        s.schedule("work", {"seconds": 0}, priority=9, run_at=now + timedelta(seconds=1 + i * 0.1))
        for i in range(urgent)
    ]
    final = s.settle(ids, 30)
    lateness = _lateness(s, ids)
    hung_failed = sum(1 for st in s.statuses(hung).values() if st == "FAILED")
    return s.figures(
        ids,
        final,
        recovery_s=max(lateness) if lateness else None,
        hung_low_failed=hung_failed,
        worker_alive=w.alive(),
    )


WORKER_APP_NAME = "pgsched-chaos-worker"  # every worker session's application_name


def _terminate_worker_sessions(s: Scenario) -> int:
    rows = s.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = %s",
        (WORKER_APP_NAME,),
    ).fetchall()
    return len(rows)


def _stop(w: WorkerProcess, timeout: float = 30) -> tuple[int | None, float]:
    """SIGTERM; the exit status (None: still running after `timeout`) and seconds taken."""
    asked = time.monotonic()
    w.send(signal.SIGTERM)
    try:
        code: int | None = w.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    return code, round(time.monotonic() - asked, 2)


def _transactional_work(n: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    return ("work_tx", "work_tx_sync")[n % 2], {"seconds": 0.05}, {"max_attempts": 25}


def _writes_not_once(s: Scenario, ids: list[int], final: dict[int, str]) -> int:
    """Completed transactional tasks whose handler write is not there exactly once."""
    transactional = {
        int(r[0])
        for r in s.execute(
            "SELECT id FROM pgsched.tasks WHERE id = ANY(%s) AND task_type LIKE 'work_tx%%'",
            (ids,),
        ).fetchall()
    }
    counts = dict(
        s.execute(
            "SELECT task_id, count(*) FROM public.chaos_tx WHERE task_id = ANY(%s)"
            " GROUP BY task_id",
            (ids,),
        ).fetchall()
    )
    return sum(1 for i in transactional if final.get(i) == "COMPLETED" and counts.get(i) != 1)


def terminated_backends(s: Scenario, *, seconds: float, rate: float = 20) -> Figures:
    """One worker running transactional handlers (async and plain, alternately) at `rate`
    tasks/s while every session of the worker (pool, heartbeat, listener) is terminated
    every 1 to 3 s. Each handler's write commits with its completion, so a completed task's
    write must be there exactly once. Then SIGTERM: the worker must exit 0 promptly.
    Recovery: the worst time from a kill to the next handler start."""
    w = s.workers.start("T0", app=APP, lease=3.0, extra=["--concurrency", "8"])
    w.wait_running()
    kills: list[float] = []
    stop = threading.Event()
    rng = random.Random(12)

    def killer() -> None:
        while not stop.wait(rng.uniform(1.0, 3.0)):
            if _terminate_worker_sessions(s):
                kills.append(time.time())

    with Producer(s.dsn, rate, _transactional_work) as producer:
        thread = threading.Thread(target=killer, name="chaos-killer", daemon=True)
        thread.start()
        time.sleep(seconds)
        stop.set()
        thread.join()
        # Work keeps arriving a little longer: each kill's recovery is measured.
        time.sleep(3)
    final = s.settle(producer.ids, 90)
    recoveries = [ran - k for k in kills if (ran := s.first_run_after(k)) is not None]
    alive = w.alive()
    code, took = _stop(w)
    return s.figures(
        producer.ids,
        final,
        recovery_s=max(recoveries) if len(recoveries) == len(kills) and kills else None,
        kills=len(kills),
        writes_not_once=_writes_not_once(s, producer.ids, final),
        worker_alive=alive,
        sigterm_exit=code,
        sigterm_s=took,
    )


CHAOS_ROLE = "pgsched_chaos_worker"


def _worker_login(s: Scenario) -> dict[str, str]:
    """The workers' environment with a login that is not a superuser: the server keeps
    `superuser_reserved_connections` slots from it (for the harness's own sessions)."""
    s.execute(
        sql.SQL(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {name}) THEN"
            " CREATE ROLE {role} LOGIN IN ROLE pgsched_worker; END IF; END $$"
        ).format(name=sql.Literal(CHAOS_ROLE), role=sql.Identifier(CHAOS_ROLE))
    )
    s.execute(sql.SQL("GRANT INSERT ON public.chaos_tx TO {}").format(sql.Identifier(CHAOS_ROLE)))
    return {**s.env, "PGSCHED_DSN": make_conninfo(s.dsn, user=CHAOS_ROLE)}


def too_few_connection_slots(
    s: Scenario, *, seconds: float, workers: int = 4, max_connections: int = 20
) -> Figures:
    """The server restarted with `max_connections` (three of them kept for superusers)
    while `workers` workers, each wanting more sessions than its share (a pool, a
    heartbeat, a listener; transactional handlers hold a pooled connection each), start
    together under load. Expected: each worker short of slots says so (its own line or the
    server's refusal) and retries with backoff; none exits (no crash loop); the tasks
    complete. Recovery: from the workers' start to the first handler run."""
    env = _worker_login(s)
    s.cluster.restart("fast", [f"max_connections={int(max_connections)}"])
    s.cluster.wait_accepting()
    try:
        with Producer(s.dsn, 20, _mixed_work) as producer:
            started = time.time()
            for n in range(workers):
                s.workers.start(f"S{n}", app=APP, lease=3.0, extra=["--concurrency", "8"], env=env)
            time.sleep(seconds)
        final = s.settle(producer.ids, 90)
        ran_by: dict[str, float] = {}
        for _, _, worker, at in s.runs():
            ran_by.setdefault(worker, at)
        alive = sum(w.alive() for w in s.workers.started)
        logs = [w.log() for w in s.workers.started]
        short = sum(1 for log in logs if "connection slots" in log)
        silent = sum(
            1
            for w, log in zip(s.workers.started, logs, strict=True)
            if w.worker_id not in ran_by and "connection slots" not in log
        )
        starts = sum(log.count("worker starting") for log in logs)
        tracebacks = sum(log.count("Traceback") for log in logs)
        stops = [_stop(w) for w in s.workers.started]
    finally:
        s.cluster.restart("fast", ())
        s.cluster.wait_accepting()
    return s.figures(
        producer.ids,
        final,
        recovery_s=min(ran_by.values()) - started if ran_by else None,
        workers_alive=alive,
        worker_starts=starts,
        workers_that_ran=len(ran_by),
        workers_saying_short=short,
        workers_idle_unexplained=silent,
        tracebacks=tracebacks,
        writes_not_once=_writes_not_once(s, producer.ids, final),
        sigterm_exits=sorted({str(code) for code, _ in stops}),
    )


def _mixed_work(n: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    kind = ("work", "work_tx", "work_tx_sync")[n % 3]
    return kind, {"seconds": 0.05}, {"max_attempts": 25}


def _sample(s: Scenario) -> dict[str, float]:
    """Cumulative counters: claims (calls, ms) from pg_stat_user_functions, tasks_hot's dead
    tuples, rows moved into tasks_done (failures) and into tasks_finished's partitions
    (completions, sql/0027)."""
    s.execute("SELECT pg_stat_clear_snapshot()")
    row = s.execute(
        "SELECT"
        " (SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions"
        "   WHERE schemaname = 'pgsched' AND funcname = 'task_claim_many'),"
        " (SELECT coalesce(sum(total_time), 0) FROM pg_stat_user_functions"
        "   WHERE schemaname = 'pgsched' AND funcname = 'task_claim_many'),"
        " (SELECT n_dead_tup FROM pg_stat_user_tables"
        "   WHERE schemaname = 'pgsched' AND relname = 'tasks_hot'),"
        " (SELECT sum(n_tup_ins) FROM pg_stat_user_tables"
        "   WHERE schemaname = 'pgsched'"
        "     AND (relname = 'tasks_done' OR relname LIKE 'tasks\\_finished\\_%'))"
    ).fetchone()
    return {
        "claims": float(row[0]),
        "claim_ms": float(row[1]),
        "dead": float(row[2] or 0),
        "done": float(row[3] or 0),
    }


def xmin_held(
    s: Scenario,
    *,
    hold_s: float,
    before_s: float = 10,
    after_s: float = 20,
    rate: float = 200,
    window_s: float = 2,
) -> Figures:
    """Tasks flow at `rate`/s through two workers while another session holds a REPEATABLE
    READ transaction (with an xid and a snapshot) open for `hold_s`: VACUUM can remove
    nothing that died after it began, so each claimed and finished task leaves dead tuples
    in tasks_hot and a dead entry in its claim index that every later claim steps over.
    Sampled per window: tasks_hot's dead tuples (n_dead_tup), claim queries and their mean
    time (pg_stat_user_functions), completions and arrivals. Recovery: from the COMMIT
    until a window's mean claim time is back within max(2 x, +2 ms) of the one before."""
    for n in range(2):
        s.workers.start(f"X{n}", app=APP, lease=5.0, extra=["--concurrency", "16"])
    for w in s.workers.started:
        w.wait_running()
    series: list[dict[str, Any]] = []
    holder = psycopg.connect(s.dsn, autocommit=True)
    began = time.monotonic()
    phases = (("before", before_s), ("hold", hold_s), ("after", after_s))
    with Producer(s.dsn, rate, _work(0)) as producer:
        last, arrived, last_t = _sample(s), len(producer.ids), time.monotonic()
        for phase, length in phases:
            if phase == "hold":
                holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT txid_current(), count(*) FROM pgsched.tasks_hot")
                held_at = time.monotonic()
            elif phase == "after":
                holder.execute("COMMIT")
                released_at, released_mono = time.time(), time.monotonic()
            end = time.monotonic() + length
            while time.monotonic() < end:
                time.sleep(min(window_s, max(end - time.monotonic(), 0.05)))
                now, now_arrived, now_t = _sample(s), len(producer.ids), time.monotonic()
                claims = now["claims"] - last["claims"]
                series.append(
                    {
                        "t": round(now_t - began, 1),
                        "s": round(now_t - last_t, 2),
                        "at": time.time(),
                        "phase": phase,
                        "arrived": now_arrived - arrived,
                        "completed": int(now["done"] - last["done"]),
                        "claims": int(claims),
                        "claim_ms": round((now["claim_ms"] - last["claim_ms"]) / claims, 3)
                        if claims
                        else None,
                        "dead_tuples": int(now["dead"]),
                    }
                )
                last, arrived, last_t = now, now_arrived, now_t
    holder.close()
    held_for = round(released_mono - held_at, 1)
    final = s.settle(producer.ids, 120)
    return s.figures(
        producer.ids,
        final,
        recovery_s=_claims_back_to_normal(series, released_at),
        series=series,
        held_s=held_for,
        **_xmin_summary(series),
    )


def _phase(series: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [w for w in series if w["phase"] == phase]


def _claim_ms(windows: list[dict[str, Any]]) -> float | None:
    """The mean claim time over `windows`, weighted by their claims."""
    timed = [(float(w["claim_ms"]), int(w["claims"])) for w in windows if w["claim_ms"] is not None]
    claims = sum(n for _, n in timed)
    return round(sum(ms * n for ms, n in timed) / claims, 3) if claims else None


def _per_s(windows: list[dict[str, Any]], key: str) -> float | None:
    seconds = sum(w["s"] for w in windows)
    return round(sum(w[key] for w in windows) / seconds, 1) if seconds else None


def _claims_back_to_normal(series: list[dict[str, Any]], released_at: float) -> float | None:
    """Seconds from the release until the end of the first window after it whose mean claim
    time is back within max(2 x, +2 ms) of the mean before the hold."""
    before = _claim_ms(_phase(series, "before"))
    if before is None:
        return None
    normal = max(2 * before, before + 2)
    for w in _phase(series, "after"):
        if w["claim_ms"] is not None and w["claim_ms"] <= normal:
            return round(float(w["at"]) - released_at, 2)
    return None


def _xmin_summary(series: list[dict[str, Any]]) -> dict[str, Any]:
    before, hold, after = (_phase(series, p) for p in ("before", "hold", "after"))
    tail = hold[-max(1, len(hold) // 5) :]  # the hold's last fifth

    def share(ws: list[dict[str, Any]]) -> float | None:
        arrived = sum(w["arrived"] for w in ws)
        return round(100 * sum(w["completed"] for w in ws) / arrived, 1) if arrived else None

    return {
        "claim_ms_before": _claim_ms(before),
        "claim_ms_hold_end": _claim_ms(tail),
        "claim_ms_after": _claim_ms(after[-max(1, len(after) // 5) :]),
        "claims_per_s_before": _per_s(before, "claims"),
        "claims_per_s_hold_end": _per_s(tail, "claims"),
        "completed_per_s_before": _per_s(before, "completed"),
        "completed_per_s_hold_end": _per_s(tail, "completed"),
        "completed_pct_of_arrivals_hold": share(hold),
        "completed_pct_of_arrivals_hold_end": share(tail),
        "dead_tuples_peak": max((w["dead_tuples"] for w in series), default=0),
    }


def _work_due_soon(seconds: float = 0.05, ahead: float = 2.0) -> Any:
    """Work due `ahead` seconds after it is scheduled: mirrored to Redis before it is due,
    so the workers claim it through the hot tier (work due now is mostly claimed by the
    Postgres top-up before a mirror pass sees it)."""

    def make(n: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
        run_at = datetime.now(UTC) + timedelta(seconds=ahead)
        return "work", {"seconds": seconds}, {"max_attempts": 25, "run_at": run_at}

    return make


def redis_faults(s: Scenario, *, seconds: float) -> Figures:
    """Two workers claiming through the Redis hot tier (one also runs the sweeps, so it
    mirrors), under a steady load, while Redis is: unreachable at the second worker's
    start, flushed (FLUSHALL), SIGKILLed and restarted empty, and at its maxmemory (writes
    refused with OOM). Recovery: the longest time from a fault's end until every lane's
    mirror was rebuilt on the live server (claims never wait for it: they fall back to
    Postgres at once)."""
    redis = RedisServer(s.workdir)  # started below, after the first worker
    try:
        return _redis_faults(s, redis, seconds)
    finally:
        redis.kill()


def _redis_faults(s: Scenario, redis: RedisServer, seconds: float) -> Figures:
    # The hot tier serves lanes in plain priority order (fair claims are the default).
    s.execute("SELECT pgsched.lane_set_fairness('NORMAL', false)")
    keys = ["pgsched:{NORMAL}:meta"]  # the one lane mirrored: the others are fair

    def rebuilt() -> bool:
        try:
            with redis.client() as c:
                run_id = c.info("server")["run_id"]
                return all(c.hget(key, "run_id") == run_id for key in keys)
        except Exception:
            return False

    redis_args = ["--redis", redis.url, "--concurrency", "8"]
    # Redis is not up yet: this worker starts on Postgres claims alone.
    s.workers.start("H1", app=APP, lease=3.0, extra=redis_args)
    s.workers.started[0].wait_log("unreachable at start")
    redis.start()
    s.workers.start("H0", app=APP, lease=3.0, extra=[*redis_args, "--sweeps"])
    for w in s.workers.started:
        w.wait_running()
    wait_for(rebuilt, 30, "the first mirror")
    recoveries: dict[str, float] = {}
    with Producer(s.dsn, 40, _work_due_soon()) as producer:
        time.sleep(seconds / 4)
        redis.flushall()
        fault_end = time.time()
        wait_for(rebuilt, 30, "the mirror rebuilt after FLUSHALL")
        recoveries["flushall"] = time.time() - fault_end
        time.sleep(seconds / 4)
        redis.kill()
        time.sleep(1.0)
        redis.start()
        fault_end = time.time()
        wait_for(rebuilt, 30, "the mirror rebuilt after a restart")
        recoveries["restart"] = time.time() - fault_end
        time.sleep(seconds / 4)
        with redis.client() as c:
            used = int(c.info("memory")["used_memory"])
            # Below what it uses: every write that may grow memory is refused (OOM).
            c.config_set("maxmemory", str(used // 2))
            time.sleep(seconds / 4)
            c.config_set("maxmemory", "0")
    final = s.settle(producer.ids, 60)
    rows = s.execute(
        "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(EPOCH FROM"
        " started_at - scheduled_for)) * 1000, max(extract(EPOCH FROM started_at"
        " - scheduled_for)) * 1000 FROM pgsched.task_runs WHERE task_id = ANY(%s)",
        (producer.ids,),
    ).fetchone()
    stop_codes = _stop_all(s)
    by_id = sum(
        int(n) for w in s.workers.started for n in re.findall(r"(\d+) claimed by id", w.log())
    )
    return s.figures(
        producer.ids,
        final,
        recovery_s=max(recoveries.values()),
        recovery_by_fault={k: round(v, 2) for k, v in recoveries.items()},
        lateness_p99_ms=round(float(rows[0] or 0), 1),
        lateness_max_ms=round(float(rows[1] or 0), 1),
        stop_codes=stop_codes,
        claimed_by_id=by_id,
        # The mirror's writes refused while Redis was at its maxmemory (pops still work:
        # they free memory; what the mirror could not add was claimed from Postgres).
        oom_seen=any("used memory > 'maxmemory'" in w.log() for w in s.workers.started),
    )


def _stop_all(s: Scenario) -> list[int]:
    """SIGTERM every worker (their last lines count the claims made through Redis)."""
    for w in s.workers.started:
        if w.alive():
            w.send(signal.SIGTERM)
    return [w.proc.wait(timeout=30) for w in s.workers.started]


def pgbouncer_restart(s: Scenario, *, seconds: float, down_s: float = 3.0) -> Figures:
    """Two workers and a producer through a PgBouncer in transaction mode (the workers with
    `--prepare-threshold none`, LISTENing on a direct connection) under a steady load of
    plain and transactional handlers; mid-run the pooler is SIGKILLed and, `down_s` later,
    started again on the same port. Recovery: from the kill until lateness is normal again
    (every run from then on within max(2 x, +0.25 s) of the p99 before the kill)."""
    bouncer = PgBouncer(s.cluster.host, s.cluster.port)
    try:
        bouncer.start()
        return _pgbouncer_restart(s, bouncer, seconds, down_s)
    finally:
        bouncer.stop()


def _pgbouncer_restart(s: Scenario, bouncer: PgBouncer, seconds: float, down_s: float) -> Figures:
    pooled = bouncer.dsn(s.dbname)
    env = {**s.env, "PGSCHED_DSN": pooled}
    pooler_args = ["--prepare-threshold", "none", "--listen-dsn", s.dsn]
    for n in range(2):
        s.workers.start(
            f"P{n}", app=APP, lease=3.0, extra=["--concurrency", "8", *pooler_args], env=env
        )
    for w in s.workers.started:
        w.wait_running()
    with Producer(pooled, 30, _mixed_work, prepare_threshold=None) as producer:
        time.sleep(seconds / 2)
        killed_at = time.time()
        bouncer.kill()
        time.sleep(down_s)
        bouncer.start()
        back = time.time()
        wait_for(lambda: s.first_run_after(back), 60, "a handler to run after the restart")
        time.sleep(seconds / 2)
    final = s.settle(producer.ids, 90)
    alive = sum(w.alive() for w in s.workers.started)
    runs = [
        (float(r[0]), float(r[1]))
        for r in s.execute(
            "SELECT extract(EPOCH FROM started_at)::float8,"
            " extract(EPOCH FROM started_at - scheduled_for)::float8"
            " FROM pgsched.task_runs WHERE task_id = ANY(%s) ORDER BY started_at",
            (producer.ids,),
        ).fetchall()
    ]
    before = sorted(late for at, late in runs if at < killed_at)
    p99_before = before[int(0.99 * (len(before) - 1))] if before else 0.0
    normal = max(2 * p99_before, p99_before + 0.25)
    return s.figures(
        producer.ids,
        final,
        recovery_s=_back_to_normal(runs, killed_at, normal),
        down_s=round(back - killed_at, 2),
        lateness_p99_before_ms=round(1000 * p99_before, 1),
        lateness_max_ms=round(1000 * max((late for _, late in runs), default=0.0), 1),
        refused_while_down=producer.refused,
        writes_not_once=_writes_not_once(s, producer.ids, final),
        workers_alive=alive,
    )


def _back_to_normal(
    runs: list[tuple[float, float]], fault_at: float, normal: float
) -> float | None:
    """Seconds from the fault to the start of the first run after it from which every run's
    lateness is within `normal` (None: the last run was still late)."""
    settled: float | None = None
    for at, late in runs:
        if at < fault_at:
            continue
        if late > normal:
            settled = None
        elif settled is None:
            settled = at
    return None if settled is None else settled - fault_at


def _lateness(s: Scenario, ids: list[int]) -> list[float]:
    return sorted(
        float(r[0])
        for r in s.execute(
            "SELECT extract(epoch FROM lateness)::float8 FROM pgsched.task_runs"
            " WHERE task_id = ANY(%s)",
            (ids,),
        ).fetchall()
    )


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)


def _urgent_stream(s: Scenario, rate: float, seconds: float, lead: float = 1.0) -> list[int]:
    """HIGH tasks due `rate` a second for `seconds`, the first `lead` seconds from now."""
    now = s.execute("SELECT clock_timestamp()").fetchone()[0]
    return [
        s.schedule(
            "work", {"seconds": 0}, priority=9, run_at=now + timedelta(seconds=lead + i / rate)
        )
        for i in range(int(rate * seconds))
    ]


def lanes_contained(
    s: Scenario, *, bad: str, seconds: float, rate: float = 20.0, hung: int = 20
) -> Figures:
    """`pgsched worker --lanes high,low` with the default flags. First a control: HIGH
    tasks due `rate` a second for `seconds`, alone. Then the same stream beside a LOW lane
    broken by `bad`:

    hung   `hung` plain handlers that hang far past their 2 s timeout (each attempt is
           killed with its handler process; two attempts, then DEAD);
    block  an `async def` handler that calls time.sleep for `seconds` / 2, blocking LOW's
           event loop, with quick LOW tasks falling due meanwhile (they run once it ends).

    Recovery: HIGH's p99 lateness beside the broken lane."""
    w = s.workers.start("L0", app=APP, lanes="high,low", lease=30.0, poll=2.0, grace=5.0)
    w.wait_running()
    control = _urgent_stream(s, rate, seconds)
    settled = s.settle(control, seconds + 30)
    control_lateness = _lateness(s, control)
    bad_ids: list[int] = []
    low_ids: list[int] = []
    expected: dict[int, str] = dict.fromkeys(control, "COMPLETED")
    if bad == "hung":
        bad_ids = [
            s.schedule("hangs", {"seconds": 3600}, priority=1, max_attempts=2) for _ in range(hung)
        ]
        expected.update(dict.fromkeys(bad_ids, "FAILED"))
        urgent = _urgent_stream(s, rate, seconds)
    else:
        block_s = seconds / 2
        bad_ids = [s.schedule("blocks_loop", {"seconds": block_s}, priority=1)]
        wait_for(
            lambda: any(run[0] == bad_ids[0] for run in s.runs()),
            20,
            "the blocking LOW task to start",
        )
        urgent = _urgent_stream(s, rate, seconds, lead=0.2)
        # LOW work falling due while its loop is blocked: it runs once the block ends.
        now = s.execute("SELECT clock_timestamp()").fetchone()[0]
        low_ids = [
            s.schedule("work", {"seconds": 0}, priority=1, run_at=now + timedelta(seconds=0.5))
            for _ in range(5)
        ]
        expected.update(dict.fromkeys(bad_ids + low_ids, "COMPLETED"))
    expected.update(dict.fromkeys(urgent, "COMPLETED"))
    ids = control + bad_ids + low_ids + urgent
    final = {**settled, **s.settle(bad_ids + low_ids + urgent, seconds + 60)}
    urgent_lateness = _lateness(s, urgent)
    errors = [
        r[0]
        for r in s.execute(
            "SELECT last_error FROM pgsched.tasks WHERE id = ANY(%s)", (bad_ids,)
        ).fetchall()
    ]
    return s.figures(
        ids,
        final,
        expected=expected,
        recovery_s=urgent_lateness[min(len(urgent_lateness) - 1, int(0.99 * len(urgent_lateness)))]
        if urgent_lateness
        else None,
        high_control_p50_ms=_p(control_lateness, 0.5),
        high_control_p99_ms=_p(control_lateness, 0.99),
        high_p50_ms=_p(urgent_lateness, 0.5),
        high_p99_ms=_p(urgent_lateness, 0.99),
        high_max_ms=_p(urgent_lateness, 1.0),
        high_ran=len(urgent_lateness),
        high_scheduled=len(urgent),
        bad_final=dict(Counter(final.get(i) for i in bad_ids)),
        bad_errors_timeout=sum(1 for e in errors if e and "timed out after 2.0s" in e),
        low_after_block=sum(1 for i in low_ids if final.get(i) == "COMPLETED"),
        worker_alive=w.alive(),
        worker_exit=w.proc.poll(),
    )


def handler_process_deaths(s: Scenario, *, count: int) -> Figures:
    """Handler processes that die mid-task (SIGKILL, as the OOM killer sends, and a real
    segmentation fault), mixed with ordinary work in the same lane: each death fails its
    attempt (retried, then DEAD, the signal named), the lane and the worker run on."""
    w = s.workers.start("D0", app=APP, lanes="normal", lease=30.0, poll=2.0)
    w.wait_running()
    expected: dict[int, str] = {}
    for n in range(count):
        how = ("sigkill", "segfault")[n % 2]
        expected[s.schedule("dies", {"how": how}, max_attempts=2)] = "FAILED"
        expected[s.schedule("work", {"seconds": 0})] = "COMPLETED"
    ids = list(expected)
    final = s.settle(ids, 60)
    errors = [
        r[0]
        for r in s.execute(
            "SELECT last_error FROM pgsched.tasks WHERE id = ANY(%s) AND task_type = 'dies'",
            (ids,),
        ).fetchall()
    ]
    return s.figures(
        ids,
        final,
        expected=expected,
        recovery_s=None,
        killed_named=sum(1 for e in errors if e and "killed by SIGKILL" in e),
        segfault_named=sum(1 for e in errors if e and "killed by SIGSEGV" in e),
        worker_alive=w.alive(),
    )


RESTORE_POINT = "pgsched_chaos_restore_point"


def _keyed_work(n: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Half the tasks carry an idempotency key, so the ledger is part of what is restored."""
    keyed = {"idempotency_key": f"pitr-{n}"} if n % 2 == 0 else {}
    return "work", {"seconds": 0.2}, {"max_attempts": 25, **keyed}


def _archived(s: Scenario, segment: str) -> bool:
    row = s.execute("SELECT last_archived_wal FROM pg_stat_archiver").fetchone()
    return row is not None and row[0] is not None and row[0] >= segment


def point_in_time_restore(s: Scenario, *, seconds: float) -> Figures:
    """Two workers under load (half the tasks keyed) on a server archiving its WAL; a base
    backup is taken while they run, then a named restore point; the load goes on past it,
    then the server and the workers die. A fresh cluster is recovered from the backup and
    the archive up to the restore point, and workers are started on it.

    Counted: every task acknowledged before the restore point is in the restored database
    (scheduled / lost); it reaches its final status there (completed); tasks PROCESSING
    at the point (their workers gone) are rescued by lease and run again, which
    at-least-once allows (reruns); a task COMPLETED in the restored database never runs
    again, nor does a keyed one whose key the restored ledger holds, even when its producer
    sends the call again (run_twice: both must be 0). Recovery: from the restored cluster
    accepting connections to the first handler start on it."""
    archive = s.cluster.root / f"archive-{s.name}"
    archive.mkdir()
    give_to_server_user(archive)
    backup = s.cluster.root / f"base-{s.name}"
    archiving = [
        "wal_level=replica",
        "archive_mode=on",
        f"archive_command='cp %p {archive}/%f'",
        # A base backup needs full-page images in the WAL it replays.
        "full_page_writes=on",
    ]
    s.cluster.restart("fast", settings=archiving)
    s.cluster.wait_accepting()
    restored: Cluster | None = None
    on_restored: Workers | None = None
    try:
        for n in range(2):
            s.workers.start(f"P{n}", app=APP, lease=3.0, extra=["--concurrency", "8"])
        for w in s.workers.started:
            w.wait_running()
        with Producer(s.dsn, 30, _keyed_work) as producer:
            time.sleep(seconds / 3)
            s.cluster.base_backup(backup)
            time.sleep(seconds / 3)
            # Every id the producer holds was acknowledged, so committed, before this.
            acknowledged = list(producer.ids)
            s.execute("SELECT pg_create_restore_point(%s)", (RESTORE_POINT,))
            segment = s.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()[0]
            wait_for(lambda: _archived(s, segment), 60, f"WAL segment {segment} archived")
            time.sleep(seconds / 3)
        for w in s.workers.started:
            w.send(signal.SIGKILL)
        s.cluster.stop_server()
        acknowledged_later = producer.ids[len(acknowledged) :]

        restored = Cluster.restored(
            backup,
            [
                f"restore_command='cp {archive}/%f %p'",
                f"recovery_target_name='{RESTORE_POINT}'",
                "recovery_target_action='promote'",
            ],
        )
        dsn = restored.dsn(s.dbname)
        back = time.time()
        at_restore: dict[int, str]
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Every task the restore kept: those acknowledged before the point, and those
            # committed before it whose acknowledgement came after.
            at_restore = dict(conn.execute("SELECT id, status::text FROM pgsched.tasks").fetchall())
            keyed = conn.execute(
                "SELECT id, idempotency_key FROM pgsched.tasks WHERE idempotency_key IS NOT NULL"
            ).fetchall()
        completed_at_restore = {i for i, st in at_restore.items() if st == "COMPLETED"}
        processing_at_restore = sum(1 for st in at_restore.values() if st == "PROCESSING")
        on_restored = Workers({**s.env, "PGSCHED_DSN": dsn}, s.workdir)
        for n in range(2):
            on_restored.start(f"Q{n}", app=APP, lease=3.0, extra=["--concurrency", "8"])
        # The producers of keyed calls, unsure what the restore kept, send them again.
        created_again = 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            for task_id, key in keyed:
                row = conn.execute(
                    "SELECT task_id, created FROM pgsched.schedule_task_ex('work',"
                    " '{\"seconds\": 0.2}'::jsonb, idempotency_key => %s, max_attempts => 25)",
                    (key,),
                ).fetchone()
                assert row is not None
                created_again += int(row[1] or row[0] != task_id)
        ran = wait_for(lambda: s.first_run_after(back), 60, "a handler to run after the restore")
        present = list(at_restore)
        deadline = time.monotonic() + 90
        final: dict[int, str] = {}
        while True:
            with psycopg.connect(dsn, autocommit=True) as conn:
                final = dict(
                    conn.execute(
                        "SELECT id, status::text FROM pgsched.tasks WHERE id = ANY(%s)",
                        (present,),
                    ).fetchall()
                )
            if all(st in FINAL for st in final.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        if on_restored is not None:
            on_restored.close()
        if restored is not None:
            restored.stop()
        # The shared cluster comes back under its own settings for the next scenario.
        with suppress(Exception):
            s.cluster.stop_server()
        s.cluster.start_server()
        s.cluster.wait_accepting()
    missing = [i for i in acknowledged if i not in at_restore]
    runs_after = [(tid, attempt) for tid, attempt, _, at in s.runs() if at >= back]
    ran_before = {tid for tid, _, _, at in s.runs() if at < back}
    figures = Figures(
        scenario=s.name,
        scheduled=len(acknowledged),
        completed=sum(1 for i in acknowledged if final.get(i) == "COMPLETED"),
        lost=len(missing) + sum(1 for st in final.values() if st not in FINAL),
        run_twice=sum(1 for tid, _ in runs_after if tid in completed_at_restore)
        + sum(n - 1 for n in Counter(runs_after).values() if n > 1),
        reruns=len({tid for tid, _ in runs_after} & ran_before),
        recovery_s=round(ran - back, 2),
        extra={
            "processing_at_restore": processing_at_restore,
            "completed_at_restore": len(completed_at_restore),
            "keyed_sent_again": len(keyed),
            "keyed_created_again": created_again,
            # Acknowledged after the point and not kept: what a restore to it gives up.
            "cut_off": sum(1 for i in acknowledged_later if i not in at_restore),
            "unacknowledged_kept": len(set(at_restore) - set(acknowledged)),
        },
    )
    print(figures.line(), flush=True)
    return figures


def _replicating(s: Scenario, name: str, synchronous: bool) -> bool:
    row = s.execute(
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s"
        " AND state = 'streaming'",
        (name,),
    ).fetchone()
    return row is not None and (row[0] == "sync" or not synchronous)


def _logged_times(worker: WorkerProcess, text: str) -> list[float]:
    """When the worker logged lines containing `text` (the log's own timestamps)."""
    times = []
    for line in worker.log().splitlines():
        if text in line:
            with suppress(ValueError):
                times.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return times


def failover(s: Scenario, *, synchronous: bool, promote_after: float, seconds: float) -> Figures:
    """Two workers (one also leading the sweeps) and a producer, all on a multi-host DSN
    (`host=primary,standby target_session_attrs=read-write`), under load; the primary is
    killed (-m immediate) and its streaming standby (synchronous or not) promoted
    `promote_after` seconds later. Counted: tasks acknowledged to the producer vs
    completed on the new primary, lost, run twice; recovery is from the promotion to the
    first handler start; the sweep leadership's return is measured from the promotion."""
    name = "pgsched_chaos_standby"
    primary = s.cluster
    replication = ["wal_level=replica", "full_page_writes=on", "max_wal_senders=5"]
    if synchronous:
        replication.append(f"synchronous_standby_names='{name}'")
    primary.restart("fast", settings=replication)
    primary.wait_accepting()
    standby = primary.standby(name)
    try:
        wait_for(lambda: _replicating(s, name, synchronous), 60, "the standby to stream")
        both = make_conninfo(
            host=f"{primary.host},{standby.host}",
            port=f"{primary.port},{standby.port}",
            user="postgres",
            dbname=s.dbname,
            target_session_attrs="read-write",
            connect_timeout="2",
        )
        env = {**s.env, "PGSCHED_DSN": both}
        # From here on the scenario's own reads follow the primary too.
        s.dsn, s._monitor = both, None
        # A schedule firing every minute across the switch: once each, never twice.
        schedule_id = s.execute(
            "SELECT pgsched.schedule_recurring('work', '* * * * *',"
            " payload => '{\"seconds\": 0.01}'::jsonb)"
        ).fetchone()[0]
        began = time.time()
        leader = s.workers.start("F0", app=APP, lease=3.0, extra=["--sweeps"], env=env)
        s.workers.start("F1", app=APP, lease=3.0, env=env)
        for w in s.workers.started:
            w.wait_running()
        doctor = subprocess.run(
            [PGSCHED, "doctor", "--json"],
            env={**s.env, "PGSCHED_DSN": primary.dsn(s.dbname)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        said: dict[str, Any] = next(
            c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "replication"
        )
        with Producer(both, 30, _work(0.1)) as producer:
            time.sleep(seconds / 2)
            acknowledged_before_kill = len(producer.ids)
            primary.stop_server()
            killed = time.time()
            time.sleep(promote_after)
            standby.promote()
            promoted = time.time()
            ran = wait_for(
                lambda: s.first_run_after(promoted), 120, "a handler to run after the promotion"
            )
            time.sleep(seconds / 2)
        final = s.settle(producer.ids, 90)

        def led_again() -> list[float]:
            led = _logged_times(leader, "sweeper became leader")
            return [round(at - promoted, 2) for at in led if at >= promoted]

        # The old leader's lease (restored with the standby) runs out first: up to 15 s.
        with suppress(AssertionError):
            wait_for(led_again, 40, "the sweep lead to be taken again")
        ended = time.time()
        occurrences = s.execute(
            "SELECT outcome, task_id FROM pgsched.schedule_occurrences WHERE schedule_id = %s",
            (schedule_id,),
        ).fetchall()
        fired = [task_id for outcome, task_id in occurrences if outcome == "ARMED"]
        schedule_runs = Counter(tid for tid, _, _, _ in s.runs() if tid in set(fired))
        return s.figures(
            producer.ids,
            final,
            recovery_s=ran - promoted,
            synchronous=synchronous,
            outage_s=round(promoted - killed, 1),
            doctor_replication=said["result"],
            acknowledged_before_kill=acknowledged_before_kill,
            refused_during_outage=producer.refused,
            leader_before=any(at < killed for at in _logged_times(leader, "sweeper became leader")),
            leader_back_s=next(iter(led_again()), None),
            minutes=int(ended // 60 - began // 60),
            schedule_fired=len(fired),
            schedule_missed=sum(1 for outcome, _ in occurrences if outcome == "MISSED"),
            schedule_run_twice=sum(n - 1 for n in schedule_runs.values() if n > 1),
            workers_alive=sum(w.alive() for w in s.workers.started),
        )
    finally:
        s.workers.close()
        s.dsn, s._monitor = primary.dsn(s.dbname), None
        standby.stop()
        # The shared cluster comes back, under its own settings, for the next scenario.
        with suppress(Exception):
            primary.stop_server()
        primary.start_server()
        primary.wait_accepting()
