"""Faults after a claim end in an outcome, and connections that die are survived.

Real worker processes (tests/apps/faults.py) against the test Postgres:
- error text Postgres cannot store (NUL, invalid UTF-8) is made storable, and an outcome
  the database refuses is recorded alone with a safe reason while the others are written;
- transactional handlers keep completing while the worker's backends are terminated;
- idle_session_timeout on the database does not strand trickling work;
- a claimed row the worker cannot decode fails alone; its batch-mates run;
- an outcome written while the database is read-only is retried until it is writable;
- a role with fewer connection slots than the worker wants: it starts with what it gets.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.worker_helpers import (
    Workers,
    create_test_tables,
    running_workers,
    schedule,
    statuses,
    task,
    wait_until,
)

APP = "tests.apps.faults:app"
VICTIM = "pgsched-fault-victim"


@pytest.fixture
def workers(db_env: dict[str, str], tmp_path: Path, conn: psycopg.Connection) -> Iterator[Workers]:
    create_test_tables(conn)
    # Every worker session carries this application_name, so a test can aim at them alone.
    env = {**db_env, "PGAPPNAME": VICTIM}
    with running_workers(env, tmp_path) as started:
        yield started


def _all_done(conn: psycopg.Connection, ids: list[int]) -> dict[int, str] | None:
    now = statuses(conn, ids)
    return now if all(s in ("COMPLETED", "FAILED") for s in now.values()) else None


def test_unstorable_error_text_and_a_refused_outcome_block_nothing(
    conn: psycopg.Connection, workers: Workers
) -> None:
    nul = schedule(conn, "nul_error", max_attempts=1)
    surrogate = schedule(conn, "surrogate_error", max_attempts=1)
    refused = schedule(conn, "retry_beyond_time", max_attempts=3)
    quick = [schedule(conn, "quick") for _ in range(20)]
    ids = [nul, surrogate, refused, *quick]
    w = workers.start("W1", app=APP)
    final = wait_until(lambda: _all_done(conn, ids), 20, what="every task finished")

    assert {i: final[i] for i in quick} == dict.fromkeys(quick, "COMPLETED")
    assert final[nul] == "FAILED"
    assert task(conn, nul)["last_error"].startswith("RuntimeError: upstream said \\x00 and stopped")
    assert final[surrogate] == "FAILED"
    assert task(conn, surrogate)["last_error"].startswith("RuntimeError: file b'\\xff' is named ")
    # The retry's delay is beyond any timestamp: the database refuses that row alone.
    assert final[refused] == "FAILED"
    refused_row = task(conn, refused)
    assert refused_row["attempts"] == 1
    # 22023 (invalid_parameter_value, naming the delay): the documented refusal.
    assert refused_row["last_error"].startswith("outcome could not be stored: 22023")
    w.wait_log(f"task {refused}: outcome refused by the database")

    # More work after the faults is written as usual, and shutdown is prompt.
    later = [schedule(conn, "quick") for _ in range(5)]
    wait_until(lambda: _all_done(conn, later), 10, what="later tasks")
    w.send(signal.SIGTERM)
    assert w.wait_exit(10) == 0
    assert "Traceback" not in w.log()


def _terminate_victims(dsn: str, stop: threading.Event, every: float, kills: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as killer:
        while not stop.wait(every):
            rows = killer.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s",
                (VICTIM,),
            ).fetchall()
            kills.append(len(rows))


def test_transactional_handlers_survive_terminated_backends(
    conn: psycopg.Connection, workers: Workers, db_dsn: str
) -> None:
    w = workers.start("W1", app=APP, lease=3.0, extra=["--concurrency", "8"])
    w.wait_running()
    stop = threading.Event()
    kills: list[int] = []
    killer = threading.Thread(target=_terminate_victims, args=(db_dsn, stop, 1.0, kills))
    killer.start()
    ids: list[int] = []
    try:
        for n in range(60):
            kind = "tx_async" if n % 2 else "tx_sync"
            ids.append(schedule(conn, kind, '{"linger": 0.2}', max_attempts=25))
            time.sleep(0.1)
        final = wait_until(lambda: _all_done(conn, ids), 60, what="every tx task finished")
    finally:
        stop.set()
        killer.join()
    assert sum(kills) > 0
    assert set(final.values()) == {"COMPLETED"}
    # The handler's write committed with the completion: exactly once per task.
    written = conn.execute(
        "SELECT task_id, count(*) FROM public.worker_test_tx GROUP BY task_id"
    ).fetchall()
    assert dict(written) == dict.fromkeys(ids, 1)
    w.send(signal.SIGTERM)
    assert w.wait_exit(15) == 0
    assert "never retrieved" not in w.log()
    assert "comes from pool" not in w.log()


def test_idle_session_timeout_strands_nothing(
    conn: psycopg.Connection, workers: Workers, db_name: str
) -> None:
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET idle_session_timeout = '2s'").format(sql.Identifier(db_name))
    )
    w = workers.start("W1", app=APP, lease=7.5, poll=30.0)
    w.wait_running()
    # Outlives its lease, with the heartbeat connection idle longer than the timeout
    # between beats.
    long_one = schedule(conn, "sleepy", '{"seconds": 9}', max_attempts=1)
    trickle: list[int] = []
    for n in range(6):
        time.sleep(2.5)
        kind = ("quick", "tx_async", "tx_sync")[n % 3]
        started = time.monotonic()
        trickle.append(schedule(conn, kind))
        wait_until(lambda: _all_done(conn, trickle[-1:]), 5, what=f"trickled task {n}")
        assert time.monotonic() - started < 5
    final = wait_until(lambda: _all_done(conn, [long_one, *trickle]), 15, what="all done")
    assert set(final.values()) == {"COMPLETED"}
    assert task(conn, long_one)["attempts"] == 1
    w.send(signal.SIGTERM)
    assert w.wait_exit(10) == 0


def _plant_undecodable(conn: psycopg.Connection, task_id: int) -> None:
    """A due time Python cannot represent, written past the SQL API's input checks."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "UPDATE pgsched.tasks SET next_run_at = '0044-03-15 12:00 BC' WHERE id = %s",
            (task_id,),
        )


def test_an_undecodable_row_fails_alone_and_its_batch_runs(
    conn: psycopg.Connection, workers: Workers
) -> None:
    bad = schedule(conn, "quick", max_attempts=3)
    _plant_undecodable(conn, bad)
    mates = [schedule(conn, "quick", max_attempts=3) for _ in range(5)]
    w = workers.start("W1", app=APP)
    final = wait_until(lambda: _all_done(conn, [bad, *mates]), 20, what="all finished")
    assert {i: final[i] for i in mates} == dict.fromkeys(mates, "COMPLETED")
    assert {task(conn, i)["attempts"] for i in mates} == {1}
    assert final[bad] == "FAILED"
    # (Its row cannot be read whole from Python either: its time stays as text here.)
    row = conn.execute(
        "SELECT last_error, next_run_at::text FROM pgsched.tasks WHERE id = %s", (bad,)
    ).fetchone()
    assert row is not None
    assert row[0].startswith("undecodable row: scheduled_for = '0044-03-15")
    w.wait_log(f"task {bad}: undecodable row")


def _set_read_only(conn: psycopg.Connection, db_name: str, on: bool) -> None:
    """The database read-only (or writable again) for new sessions; the worker's sessions
    are cut so that they reconnect under the new setting."""
    db = sql.Identifier(db_name)
    if on:
        conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(db))
    else:
        conn.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(db))
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = %s",
        (VICTIM,),
    )


def test_an_outcome_refused_by_a_read_only_database_is_retried(
    conn: psycopg.Connection, workers: Workers, db_name: str
) -> None:
    # The lease outlasts the read-only spell: the outcome, not the rescue, must finish it.
    w = workers.start("W1", app=APP, lease=10.0)
    w.wait_running()
    long_one = schedule(conn, "sleepy", '{"seconds": 1.5}', max_attempts=1)
    wait_until(lambda: statuses(conn, [long_one])[long_one] == "PROCESSING", 10, what="claimed")
    _set_read_only(conn, db_name, True)
    try:
        # The handler returns while the database is read-only: its outcome is refused.
        wait_until(
            lambda: re.search(rf"pgsched\.worker\.outcomes: .*\btasks? {long_one}\b", w.log()),
            15,
            what="the outcome write failing",
        )
    finally:
        _set_read_only(conn, db_name, False)
    final = wait_until(lambda: _all_done(conn, [long_one]), 15, what="the outcome written")
    assert final == {long_one: "COMPLETED"}
    row = task(conn, long_one)
    assert row["attempts"] == 1 and row["last_error"] is None
    w.send(signal.SIGTERM)
    assert w.wait_exit(10) == 0


@contextmanager
def _role_with_slots(
    conn: psycopg.Connection, db_dsn: str, slots: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A login with `slots` connection slots (superusers ignore connection limits)."""
    role = f"pgsched_slots_{int(time.time() * 1000) % 10**9}"
    conn.execute(
        sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {} IN ROLE pgsched_worker").format(
            sql.Identifier(role), sql.Literal(slots)
        )
    )
    conn.execute(
        sql.SQL("GRANT INSERT ON public.worker_test_tx TO {}").format(sql.Identifier(role))
    )
    params = {**conninfo_to_dict(db_dsn), "user": role}
    try:
        yield role, params
    finally:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def limited_role(conn: psycopg.Connection, db_dsn: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A login with 3 connection slots."""
    with _role_with_slots(conn, db_dsn, 3) as role:
        yield role


def test_too_few_connection_slots_start_with_what_is_there(
    conn: psycopg.Connection,
    workers: Workers,
    limited_role: tuple[str, dict[str, Any]],
) -> None:
    _, params = limited_role
    workers.env = {**workers.env, "PGSCHED_DSN": make_conninfo(**params), "PGUSER": params["user"]}
    # Runs three leases long: only heartbeats on their own connection keep it.
    long_one = schedule(conn, "sleepy", '{"seconds": 6}', max_attempts=1)
    w = workers.start("W1", app=APP, lease=2.0)
    quick = [schedule(conn, "quick") for _ in range(10)]
    final = wait_until(lambda: _all_done(conn, [long_one, *quick]), 25, what="all done")
    assert set(final.values()) == {"COMPLETED"}
    assert task(conn, long_one)["attempts"] == 1
    assert w.alive()
    w.wait_log("connection slots short")
    w.send(signal.SIGTERM)
    assert w.wait_exit(10) == 0
    assert "Traceback" not in w.log()


def test_slots_taken_between_start_up_checks_do_not_stop_the_worker(
    conn: psycopg.Connection, workers: Workers, db_dsn: str
) -> None:
    # One slot, held by another session nearly all the time. Start-up asked the database
    # twice: once for its schema (retried while refused) and once more, unguarded, whether
    # it is distributed. A refusal between the two ended the worker with "cannot reach the
    # database" where it should have waited like the first.
    with _role_with_slots(conn, db_dsn, 1) as (role, params):
        stop = threading.Event()

        def hog() -> None:
            while not stop.is_set():
                try:
                    with psycopg.connect(**params, autocommit=True):
                        time.sleep(0.03)
                except psycopg.OperationalError:
                    pass
                time.sleep(0.001)

        hogger = threading.Thread(target=hog, daemon=True)
        hogger.start()
        try:
            workers.env = {
                **workers.env,
                "PGSCHED_DSN": make_conninfo(**params),
                "PGUSER": params["user"],
            }
            w = workers.start("W1", app=APP, lease=3.0)
            w.wait_log("too many connections for role")
            time.sleep(8)
            assert w.alive(), w.log()
        finally:
            stop.set()
            hogger.join(5)
        conn.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 10").format(sql.Identifier(role)))
        task_id = schedule(conn, "quick")
        final = wait_until(lambda: _all_done(conn, [task_id]), 30, what="the task done")
        assert final == {task_id: "COMPLETED"}
        assert "cannot reach the database:" not in w.log() and "Traceback" not in w.log()
        w.send(signal.SIGTERM)
        assert w.wait_exit(10) == 0


def test_a_worker_with_no_plain_connection_lets_its_plain_tasks_go_soon(
    conn: psycopg.Connection,
    workers: Workers,
    limited_role: tuple[str, dict[str, Any]],
) -> None:
    # Three slots: heartbeat, listener and the async pool's first connection; none is left
    # for the plain transactional handlers' pool. Waiting out that pool's 30 s timeout, the
    # worker held the task while other workers could have run it, and, taking it again at
    # its next claim, could hold it for good.
    plain_env = workers.env
    _, params = limited_role
    workers.env = {**workers.env, "PGSCHED_DSN": make_conninfo(**params), "PGUSER": params["user"]}
    short = workers.start("W1", app=APP, lease=3.0)
    short.wait_log("no connection yet for plain transactional handlers")
    task_id = schedule(conn, "tx_sync")
    short.wait_log(f"task {task_id}: no connection for its transaction", timeout=15)
    workers.env = plain_env
    able = workers.start("W2", app=APP, lease=3.0)
    able.wait_log("running lanes")
    gave_back = f"task {task_id}: no connection for its transaction"
    before = short.log().count(gave_back)
    final = wait_until(lambda: _all_done(conn, [task_id]), 30, what="the task done")
    assert final == {task_id: "COMPLETED"}
    # Its release wakes both workers: the one that cannot run it holds its claims, so the
    # other takes it at once, not after losing the race for it round after round.
    assert short.log().count(gave_back) - before <= 1, short.log()
    assert short.alive()
    assert "Traceback" not in short.log()


def test_plain_transactional_handlers_keep_a_connection_when_slots_are_short(
    conn: psycopg.Connection, workers: Workers, db_dsn: str
) -> None:
    # Four slots: heartbeat, listener, one for the async pool, one for the plain handlers'
    # pool. Were the async pool to grow first, it would take the last slot, and each plain
    # transactional task would wait out the pool timeout, again and again.
    with _role_with_slots(conn, db_dsn, 4) as (role, params):
        conn.execute(
            sql.SQL("GRANT INSERT ON public.worker_test_tx TO {}").format(sql.Identifier(role))
        )
        workers.env = {
            **workers.env,
            "PGSCHED_DSN": make_conninfo(**params),
            "PGUSER": params["user"],
        }
        w = workers.start("W1", app=APP, lease=3.0)
        w.wait_running()
        ids = [schedule(conn, ("tx_sync", "tx_async", "quick")[n % 3]) for n in range(12)]
        final = wait_until(lambda: _all_done(conn, ids), 20, what="all done")
        assert set(final.values()) == {"COMPLETED"}
        assert {task(conn, i)["attempts"] for i in ids} == {1}
        w.wait_log("connection slots short")
        w.send(signal.SIGTERM)
        assert w.wait_exit(10) == 0
