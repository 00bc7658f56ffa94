"""Retention reaches the workflows' bookkeeping: the edges of task_dependencies (a batch's
among them) and the rows of task_result_waiters go once their tasks are gone, whether
retention_prune deleted the tasks or their period was dropped whole; those of live and DEAD
tasks stay. Deleted in chunks, through the rows' created_at index. Real Postgres, the sweep
as the sweeper runs it."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import psycopg

from pgsched.sweeps import RetentionSweep
from tests.support.worker_helpers import schedule

DAY = timedelta(days=1)


def db_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def run_all(conn: psycopg.Connection, outcomes: dict[int, str] | None = None) -> None:
    """Claim and finish whatever is due until nothing is: COMPLETED, or the outcome named."""
    outcomes = outcomes or {}
    while True:
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1000, 'w')"
        ).fetchall()
        if not claimed:
            return
        ids = [c[0] for c in claimed]
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[])",
            (ids, [c[1] for c in claimed], [outcomes.get(i, "COMPLETED") for i in ids]),
        )


def edges(conn: psycopg.Connection) -> set[tuple[int, int]]:
    rows = conn.execute("SELECT parent_id, child_id FROM pgsched.task_dependencies").fetchall()
    return {(r[0], r[1]) for r in rows}


def waiters(conn: psycopg.Connection) -> set[int]:
    return {r[0] for r in conn.execute("SELECT task_id FROM pgsched.task_result_waiters")}


def wait_for(conn: psycopg.Connection, task_id: int) -> None:
    """Register a waiter for task_id's outcome, as App.result does, and never unwait (a
    caller that died)."""
    conn.execute("SELECT * FROM pgsched.task_outcome(%s, %s)", (task_id, uuid.uuid4()))


def test_edges_and_waiters_of_pruned_tasks_go_and_those_of_kept_tasks_stay(
    conn: psycopg.Connection,
) -> None:
    # Finished and past retention: a chain, a batch and its callback.
    parent = schedule(conn, "step")
    child = schedule(conn, "step", depends_on=[parent])
    batch = conn.execute(
        "SELECT callback_id, member_ids FROM pgsched.schedule_batch("
        "ARRAY['member', 'member', 'member'], on_complete_type => 'callback')"
    ).fetchone()
    assert batch is not None
    callback, members = batch
    for task_id in (parent, child, callback):
        wait_for(conn, task_id)
    # DEAD (kept whatever its age) with a child that waits for its retry.
    dead = schedule(conn, "step", max_attempts=1)
    held = schedule(conn, "step", depends_on=[dead])
    wait_for(conn, dead)
    run_all(conn, {dead: "FAILED"})
    # Live: a child waiting for a parent not due for long.
    later = schedule(conn, "step", run_at=db_now(conn) + 90 * DAY)
    waiting = schedule(conn, "step", depends_on=[later])
    wait_for(conn, waiting)

    assert edges(conn) == {
        (parent, child),
        (dead, held),
        (later, waiting),
        *((m, callback) for m in members),
    }
    assert waiters(conn) == {parent, child, callback, dead, waiting}

    # Forty days on: the finished tasks' period is dropped whole, with them.
    counts = RetentionSweep(keep=timedelta(days=30), chunk=2).run_once(
        conn, db_now(conn) + 40 * DAY
    )

    assert counts["finished_partitions_dropped"] >= 1
    assert counts["dependencies"] == 4 and counts["result_waiters"] == 3
    assert edges(conn) == {(dead, held), (later, waiting)}
    assert waiters(conn) == {dead, waiting}
    found = conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s)",
        ([parent, child, callback, *members],),
    ).fetchone()
    assert found == (0,)

    # Twice is harmless: nothing more goes.
    again = RetentionSweep(keep=timedelta(days=30)).run_once(conn, db_now(conn) + 40 * DAY)
    assert again["dependencies"] == 0 and again["result_waiters"] == 0
    assert edges(conn) == {(dead, held), (later, waiting)}


def test_the_prune_reads_the_rows_through_their_created_at_index(
    conn: psycopg.Connection,
) -> None:
    """Each pass reads the edges and waiters from the oldest up to the cutoff, through their
    created_at indexes, never a scan of the table: the plans of the prune's own statements,
    as auto_explain reports them, name the indexes."""
    now = db_now(conn)
    conn.execute(
        "INSERT INTO pgsched.task_dependencies (parent_id, child_id, created_at)"
        " SELECT g, g + 1, %s - g * interval '1 second' FROM generate_series(1, 20000) AS g",
        (now,),
    )
    conn.execute(
        "INSERT INTO pgsched.task_result_waiters (task_id, token, created_at)"
        " SELECT g, gen_random_uuid(), %s - g * interval '1 second'"
        " FROM generate_series(1, 20000) AS g",
        (now,),
    )
    conn.execute("ANALYZE pgsched.task_dependencies, pgsched.task_result_waiters")
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting, value in {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_level": "notice",
        "client_min_messages": "notice",
    }.items():
        conn.execute("SELECT set_config(%s, %s, false)", (setting, value))

    # The rows are all newer than the cutoff: nothing goes, nothing of them is read.
    pruned = conn.execute(
        "SELECT dependencies, result_waiters FROM pgsched.retention_prune('30 days', 10000, %s)",
        (now,),
    ).fetchone()

    assert pruned == (0, 0)
    edge_plans = [p for p in plans if "DELETE FROM pgsched.task_dependencies" in p]
    waiter_plans = [p for p in plans if "DELETE FROM pgsched.task_result_waiters" in p]
    assert edge_plans and waiter_plans, plans
    assert "task_dependencies_created_idx" in edge_plans[0], edge_plans[0]
    assert "Seq Scan on task_dependencies" not in edge_plans[0], edge_plans[0]
    assert "task_result_waiters_created_idx" in waiter_plans[0], waiter_plans[0]
    assert "Seq Scan on task_result_waiters" not in waiter_plans[0], waiter_plans[0]
