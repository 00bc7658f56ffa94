"""The claim floor (sql/code/claim.sql, 0046; pgsched/worker/claim_floor.py) never hides a
queued row for long: rows queued behind a worker's floor, by an explicit past run_at or a
lease rescue, start within a couple of seconds, with the backup poll far away. And the SQL
side: a floor hides exactly the rows due before it, NULL is the claim as before, and task
limits make it ignored. A row behind the floor that no NOTIFY announced is found by the
probe; under a held snapshot the fair claim steps over no tenant's dead entries."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest

from pgsched.lanes import Lane
from pgsched.worker import Worker
from pgsched.worker.config import WorkerConfig
from tests.apps.dispatch import app
from tests.support.query_plans import logged_plans, plan_nodes
from tests.support.worker_helpers import (
    Workers,
    db_now,
    listener_backends,
    schedule,
    statuses,
    wait_until,
)

CLAIM = "SELECT id FROM pgsched.task_claim_many('NORMAL', 10, 'w-sql', '1 minute', NULL, %s)"
BOUNDED = re.compile(r"claimed \d+, reading from \d{4}-")


def started_after(conn: psycopg.Connection, task_id: int, since: float) -> float:
    row = conn.execute(
        "SELECT extract(epoch FROM started_at)::float8 FROM pgsched.task_runs"
        " WHERE task_id = %s ORDER BY attempt LIMIT 1",
        (task_id,),
    ).fetchone()
    assert row is not None, f"task {task_id} never started"
    return float(row[0]) - since


def db_epoch(conn: psycopg.Connection) -> float:
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def floor_in_use(conn: psycopg.Connection, workers: Workers) -> object:
    """A worker (backup poll 30 s) whose claims read from a floor: a few tasks due now ran
    in short claims, and its log shows a claim with a floor."""
    w = workers.start("W1", poll=30, extra=["--log-level", "DEBUG"])
    w.wait_running()
    wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")
    ids = [schedule(conn, "quick") for _ in range(3)]
    wait_until(
        lambda: set(statuses(conn, ids).values()) == {"COMPLETED"}, 10, what="the warm-up tasks"
    )
    # One more claim, which reads from the floor the warm-up's short claims set.
    last = schedule(conn, "quick")
    wait_until(lambda: statuses(conn, [last])[last] == "COMPLETED", 10, what="the last warm-up")
    wait_until(lambda: BOUNDED.search(w.log()), 10, what="a claim from a floor")
    return w


def test_a_task_scheduled_an_hour_in_the_past_starts_at_once(
    conn: psycopg.Connection, workers: Workers
) -> None:
    floor_in_use(conn, workers)
    since = db_epoch(conn)
    late = schedule(conn, "quick", run_at=db_now(conn) - timedelta(hours=1))
    wait_until(lambda: statuses(conn, [late])[late] == "COMPLETED", 10, what="the past task")
    assert started_after(conn, late, since) < 2.0


def test_a_rescued_lease_behind_the_floor_starts_at_once(
    conn: psycopg.Connection, workers: Workers
) -> None:
    # Claimed by a worker that is gone, its due time an hour back: rescued after the
    # running worker's floor passed it.
    ghost = schedule(conn, "quick", run_at=db_now(conn) - timedelta(hours=1))
    taken = conn.execute(
        "SELECT id FROM pgsched.task_claim_many('NORMAL', 10, 'w-gone', '1 second')"
    ).fetchall()
    assert taken == [(ghost,)]
    floor_in_use(conn, workers)
    wait_until(
        lambda: (
            conn.execute(
                "SELECT lease_expires_at < clock_timestamp() FROM pgsched.tasks WHERE id = %s",
                (ghost,),
            ).fetchone()
            == (True,)
        ),
        10,
        what="the ghost's lease to expire",
    )
    since = db_epoch(conn)
    conn.execute("SELECT pgsched.lease_rescue_expired('NORMAL')")
    wait_until(lambda: statuses(conn, [ghost])[ghost] == "COMPLETED", 10, what="the rescued task")
    assert started_after(conn, ghost, since) < 2.0


def test_the_floor_hides_the_rows_due_before_it_and_null_is_no_floor(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    old = schedule(conn, "quick", run_at=now - timedelta(minutes=10))
    new = schedule(conn, "quick", run_at=now - timedelta(seconds=1))
    with conn.transaction(force_rollback=True):
        got = conn.execute(CLAIM, (now - timedelta(minutes=5),)).fetchall()
        assert got == [(new,)]
        due = conn.execute(
            "SELECT next_due FROM pgsched.lane_next_due('NORMAL', %s)",
            (now - timedelta(minutes=5),),
        ).fetchone()
        assert due is not None and due[0] is None  # the older row is behind the floor
    with conn.transaction(force_rollback=True):
        assert sorted(conn.execute(CLAIM, (None,)).fetchall()) == sorted([(old,), (new,)])
    with conn.transaction(force_rollback=True):
        # Rows a limit holds back stay QUEUED behind any floor: with limits, none is used.
        conn.execute(
            "INSERT INTO pgsched.task_limits (scope, key, max_processing)"
            " VALUES ('task_type', 'other', 1)"
        )
        assert sorted(conn.execute(CLAIM, (now,)).fetchall()) == sorted([(old,), (new,)])


def test_a_row_behind_the_floor_no_notify_announced_is_found_by_the_probe(
    conn: psycopg.Connection, db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A row locked by another session while this worker's claims pass it (SKIP LOCKED)
    # and raise the floor past it, then released without a NOTIFY (a claim rolled back):
    # no claim reads it again; the probe, every second here, finds it.
    caplog.set_level(logging.DEBUG, logger="pgsched.worker")
    config = WorkerConfig(lanes=(Lane.NORMAL,), poll_interval=30, floor_probe_interval=1.0)
    worker = Worker(db_dsn, app.registry, config)
    running = threading.Thread(
        target=lambda: asyncio.run(worker.run(install_signal_handlers=False)), daemon=True
    )
    hidden = schedule(conn, "quick", run_at=db_now(conn) - timedelta(hours=1))
    try:
        with psycopg.connect(db_dsn) as holder:
            # What a claim that will roll back holds: the row's lock, the row still QUEUED.
            # Locked before the worker starts: a worker already running could claim the row
            # first, and its completion would then wait on this lock, and every outcome
            # after it (seen once under load: the others never completed).
            holder.execute("SELECT 1 FROM pgsched.tasks WHERE id = %s FOR UPDATE", (hidden,))
            running.start()
            wait_until(lambda: listener_backends(conn), 20, what="the worker's listener")
            ids = [schedule(conn, "quick") for _ in range(3)]
            wait_until(
                lambda: set(statuses(conn, ids).values()) == {"COMPLETED"}, 10, what="the others"
            )
            last = schedule(conn, "quick")
            wait_until(
                lambda: statuses(conn, [last])[last] == "COMPLETED", 10, what="the last other"
            )
            holder.rollback()
        assert statuses(conn, [hidden])[hidden] == "QUEUED"
        wait_until(
            lambda: statuses(conn, [hidden])[hidden] == "COMPLETED", 10, what="the hidden row"
        )
        assert "was behind the claim floor" in caplog.text
    finally:
        if running.is_alive():
            worker.request_stop()
            running.join(30)


def tenant_index_buffers(conn: psycopg.Connection, not_before: object) -> tuple[int, list[str]]:
    rows, plans = logged_plans(
        conn,
        "SELECT tenant_id FROM pgsched.task_claim_many('NORMAL', 100, 'w-sql', '1 minute',"
        " NULL, %s)",
        (not_before,),
    )
    scans = [
        n for p in plans for n in plan_nodes(p) if n.get("Index Name") == "tasks_hot_tenant_idx"
    ]
    assert scans, plans
    read = sum(int(n["Shared Hit Blocks"]) + int(n["Shared Read Blocks"]) for n in scans)
    return read, sorted(str(r[0]) for r in rows)


def test_under_a_held_snapshot_the_fair_claim_from_its_floor_skips_each_tenants_dead_entries(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    holder = connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot that keeps vacuum from the dead entries
    # Two tenants' 15,000 tasks each, claimed: 30,000 dead entries at the front of their
    # ranges in the tenant index, every one due before the floor, each at its own time
    # (entries with equal keys would share one index tuple).
    conn.execute(
        "SELECT pgsched.schedule_tasks(array_fill('job'::text, ARRAY[30000]),"
        " run_ats => (SELECT array_agg(now() - interval '1 minute' + i * interval '1 ms')"
        " FROM generate_series(1, 30000) AS i),"
        " tenant_ids => (SELECT array_agg(CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END)"
        " FROM generate_series(1, 30000) AS i))"
    )
    for _ in range(30):
        conn.execute("SELECT pgsched.task_claim_many('NORMAL', 1000, 'w-sql', '1 minute')")
    conn.execute("SELECT pg_sleep(1.1)")
    floor = db_now(conn) - timedelta(milliseconds=100)
    conn.execute(
        "SELECT pgsched.schedule_tasks(array_fill('job'::text, ARRAY[4]),"
        " tenant_ids => ARRAY['a', 'b', 'a', 'b'])"
    )
    read, claimed = tenant_index_buffers(conn, floor)
    holder.rollback()
    assert claimed == ["a", "a", "b", "b"]
    # Forward, the step to each tenant tested every one of its dead entries (232 buffers
    # of index here); backward, it enters each tenant at its live end.
    assert read <= 60, read


def test_the_lanes_next_due_time_is_read_in_the_claim_indexs_order_whatever_the_costs(
    conn: psycopg.Connection,
) -> None:
    # The body of lane_next_due is planned at each call with its arguments as parameters.
    # On a held horizon's statistics (few QUEUED rows, a claim index full of dead entries)
    # the planner priced the index scan past a bitmap scan of tasks_hot's whole heap: 400 ms
    # a call in bench_held_horizon. Pricing random reads a thousandfold does the same here.
    conn.execute("SELECT pgsched.schedule_tasks(array_fill('job'::text, ARRAY[3000]))")
    conn.execute("SELECT pgsched.task_claim_many('NORMAL', 3000, 'w-sql', '1 hour')")
    conn.execute("ANALYZE pgsched.tasks_hot")
    schedule(conn, "quick")
    conn.execute("SET random_page_cost = 4000")
    floor = db_now(conn) - timedelta(minutes=1)
    for not_before in (floor, None):
        rows, plans = logged_plans(
            conn, "SELECT next_due FROM pgsched.lane_next_due('NORMAL', %s)", (not_before,)
        )
        assert rows and rows[0][0] is not None
        body = [p for p in plans if "pgsched.lane_next_due(" not in p.get("Query Text", "")]
        nodes = [n["Node Type"] for p in body for n in plan_nodes(p)]
        assert "Index Scan" in nodes or "Index Only Scan" in nodes, nodes
        assert not {"Bitmap Heap Scan", "Seq Scan", "Sort"} & set(nodes), nodes
