"""The chaos scenarios, each a function of a Scenario and its length: the short form
(tests/chaos) and the long form (benchmarks/chaos.py) run the same code."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from functools import partial
from typing import Any

from harness import APP, Figures, Producer, Scenario, wait_for
from psycopg import sql


def _work(seconds: float = 0.05) -> Any:
    return lambda n: ("work", {"seconds": seconds}, {"max_attempts": 25})


def sigkill_workers(s: Scenario, *, seconds: float) -> Figures:
    """Three workers under a steady load; two are SIGKILLed mid-run (a supervisor starts a
    replacement each time). Recovery: from a kill until every task the dead worker had
    started has run again elsewhere (bounded by the lease)."""
    for n in range(3):
        s.workers.start(f"K{n}", app=APP, lease=2.0, extra=["--concurrency", "8"])
    for w in s.workers.started:
        w.wait_running()
    recoveries: list[float] = []
    killed = 0
    with Producer(s.dsn, 40, _work(0.3)) as producer:
        for round_ in range(2):
            time.sleep(seconds / 3)
            victim = s.workers.started[round_]
            victim.send(signal.SIGKILL)
            killed_at = time.time()
            killed += 1
            s.workers.start(f"K{round_}b", app=APP, lease=2.0, extra=["--concurrency", "8"])
            orphans = _unfinished_by(s, victim.worker_id, killed_at)
            if orphans:
                rerun = wait_for(partial(_all_rerun, s, orphans, killed_at), 30, "orphans re-run")
                recoveries.append(rerun - killed_at)
        time.sleep(seconds / 3)
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
    lateness = [
        float(r[0])
        for r in s.execute(
            "SELECT extract(epoch FROM lateness)::float8 FROM pgsched.task_runs"
            " WHERE task_id = ANY(%s)",
            (ids,),
        ).fetchall()
    ]
    hung_failed = sum(1 for st in s.statuses(hung).values() if st == "FAILED")
    return s.figures(
        ids,
        final,
        recovery_s=max(lateness) if lateness else None,
        hung_low_failed=hung_failed,
        worker_alive=w.alive(),
    )
