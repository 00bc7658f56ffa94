"""Dependencies from plain SQL, as another language would use them: depends_on on
schedule_task and schedule_tasks, waiting in the cold tier, the release (exactly once, routed
as if scheduled then), the failure policies (hold, cancel, run) on DEAD, discarded and
cancelled parents, results, bad input. Workers are played with the worker's own SQL
functions (task_claim_many, task_finish_many)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests.support.query_plans import log_every_plan


def schedule(conn: psycopg.Connection, task_type: str = "job", **kwargs: Any) -> int:
    names = "".join(f", {name} => %({name})s" for name in kwargs)
    row = conn.execute(
        f"SELECT pgsched.schedule_task(task_type => %(task_type)s{names})",
        {"task_type": task_type, **kwargs},
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim(conn: psycopg.Connection, lane: str = "NORMAL") -> dict[int, Any]:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 1000, 'w1')", (lane,)
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def finish(
    conn: psycopg.Connection,
    leases: dict[int, Any],
    outcome: str = "COMPLETED",
    error: str | None = None,
    results: list[str | None] | None = None,
) -> None:
    ids = list(leases)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[],"
        " %s::text[], NULL, NULL, %s::jsonb[])",
        (ids, [leases[i] for i in ids], [outcome] * len(ids), [error] * len(ids), results),
    )


def status(conn: psycopg.Connection, task_id: int) -> str:
    row = conn.execute(
        "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def row(conn: psycopg.Connection, task_id: int) -> tuple[Any, ...]:
    found = conn.execute(
        "SELECT status::text, waiting_for, next_run_at, status_reason FROM pgsched.tasks"
        " WHERE id = %s",
        (task_id,),
    ).fetchone()
    assert found is not None
    return tuple(found)


def details(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str, str | None]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT from_status::text, to_status::text, detail FROM pgsched.task_events"
            " WHERE task_id = %s ORDER BY id",
            (task_id,),
        )
    ]


def run_to(conn: psycopg.Connection, task_id: int, outcome: str, **kw: Any) -> None:
    leases = claim(conn)
    assert task_id in leases, f"task {task_id} was not claimable: {status(conn, task_id)}"
    finish(conn, {task_id: leases[task_id]}, outcome, **kw)
    others = {i: t for i, t in leases.items() if i != task_id}
    if others:
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[])",
            (list(others), list(others.values()), ["RELEASED"] * len(others)),
        )


def test_a_child_waits_in_the_cold_tier_and_is_released_once_by_its_last_parent(
    conn: psycopg.Connection,
) -> None:
    a, b = schedule(conn), schedule(conn)
    child = schedule(conn, "child", depends_on=[a, b])
    assert row(conn, child)[:2] == ("PENDING", 2)
    # Due now, yet never promoted: waiting tasks are not the promotion sweep's.
    conn.execute("SELECT pgsched.task_promote_due(1000)")
    assert status(conn, child) == "PENDING"
    leases = claim(conn)
    assert set(leases) == {a, b}
    finish(conn, {a: leases[a]})
    assert row(conn, child)[:2] == ("PENDING", 1)
    finish(conn, {b: leases[b]})
    assert row(conn, child)[:2] == ("QUEUED", None)
    # Released once: one transition out of the cold tier, naming the parent.
    assert details(conn, child) == [("PENDING", "QUEUED", f"released: parent task {b} completed")]


def test_release_routes_the_child_as_if_scheduled_then(conn: psycopg.Connection) -> None:
    a, b = schedule(conn), schedule(conn)
    child = schedule(conn, "child", depends_on=[a, b, a])
    later = schedule(conn, "later", depends_on=[a], run_at=datetime.now(UTC) + timedelta(days=3))
    run_to(conn, a, "COMPLETED")
    assert row(conn, child)[:2] == ("PENDING", 1)
    # Its own run_at is beyond the hot window: released into the cold tier, promotable.
    status_, waiting, due, reason = row(conn, later)
    assert (status_, waiting) == ("PENDING", None)
    assert due > datetime.now(UTC) + timedelta(days=2)
    assert reason == f"released: parent task {a} completed"
    assert details(conn, later)[-1] == ("PENDING", "PENDING", reason)
    run_to(conn, b, "COMPLETED")
    status_, waiting, due, reason = row(conn, child)
    assert (status_, waiting, reason) == ("QUEUED", None, f"released: parent task {b} completed")
    # As if scheduled now: its due time is the release, not its (earlier) scheduling.
    assert due >= conn.execute("SELECT now()").fetchone()[0] - timedelta(seconds=5)
    assert details(conn, child) == [("PENDING", "QUEUED", reason)]
    assert conn.execute(
        "SELECT count(*) FROM pgsched.task_dependencies WHERE child_id = %s AND met", (child,)
    ).fetchone() == (2,)


def test_a_completed_parent_counts_as_met(conn: psycopg.Connection) -> None:
    a = schedule(conn)
    run_to(conn, a, "COMPLETED")
    child = schedule(conn, "child", depends_on=[a])
    assert row(conn, child)[:2] == ("QUEUED", None)
    assert conn.execute(
        "SELECT relation, id, status::text, met FROM pgsched.task_graph(%s)", (child,)
    ).fetchall() == [("parent", a, "COMPLETED", True)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"depends_on": [10**12]}, "depends_on: task 1000000000000 does not exist"),
        ({"depends_on": [None]}, "depends_on holds a NULL task id"),
        ({"on_parent_failure": "explode"}, "on_parent_failure 'explode' is not one of"),
        ({"depends_on": "OTHER"}, "belongs to another tenant"),
        ({"depends_on": "CANCELLED"}, "was cancelled; nothing can wait for it"),
    ],
)
def test_bad_dependencies_are_refused_naming_the_argument_and_change_nothing(
    conn: psycopg.Connection, args: dict[str, Any], message: str
) -> None:
    if args.get("depends_on") == "OTHER":
        args = {"depends_on": [schedule(conn, tenant_id="acme")]}
    elif args.get("depends_on") == "CANCELLED":
        gone = schedule(conn)
        conn.execute("SELECT pgsched.cancel_task(%s)", (gone,))
        args = {"depends_on": [gone]}
    before = conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone()
    with pytest.raises(errors.InvalidParameterValue, match=message):
        schedule(conn, "child", **args)
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == before
    assert conn.execute("SELECT count(*) FROM pgsched.task_dependencies").fetchone() == (0,)


def test_a_global_parent_may_be_waited_for_by_any_tenant(conn: psycopg.Connection) -> None:
    parent = schedule(conn, scope="global")
    child = schedule(conn, "child", tenant_id="acme", depends_on=[parent])
    assert row(conn, child)[:2] == ("PENDING", 1)


def test_hold_a_dead_parent_holds_its_child_until_a_retry_completes(
    conn: psycopg.Connection,
) -> None:
    parent = schedule(conn, max_attempts=1)
    child = schedule(conn, "child", depends_on=[parent])
    run_to(conn, parent, "FAILED", error="boom")
    assert status(conn, parent) == "FAILED"
    assert row(conn, child)[:2] == ("PENDING", 1)
    assert details(conn, child) == [("PENDING", "PENDING", f"held: parent task {parent} is DEAD")]
    conn.execute("SELECT pgsched.dead_retry(task_id => %s)", (parent,))
    assert status(conn, child) == "PENDING"
    run_to(conn, parent, "COMPLETED")
    assert row(conn, child)[:2] == ("QUEUED", None)
    assert details(conn, child)[-1] == (
        "PENDING",
        "QUEUED",
        f"released: parent task {parent} completed",
    )


def test_cancel_cascades_through_the_waiting_descendants_naming_the_parent(
    conn: psycopg.Connection,
) -> None:
    parent = schedule(conn, max_attempts=1)
    child = schedule(conn, "child", depends_on=[parent], on_parent_failure="cancel")
    grandchild = schedule(conn, "grandchild", depends_on=[child], on_parent_failure="cancel")
    held = schedule(conn, "held", depends_on=[child])
    cleanup = schedule(conn, "cleanup", depends_on=[child], on_parent_failure="run")
    run_to(conn, parent, "FAILED", error="boom")
    assert details(conn, child) == [
        (
            "PENDING",
            "CANCELLED",
            f"cancelled: parent task {parent} is DEAD (on_parent_failure cancel)",
        )
    ]
    assert details(conn, grandchild) == [
        (
            "PENDING",
            "CANCELLED",
            f"cancelled: parent task {child} is CANCELLED (on_parent_failure cancel)",
        )
    ]
    assert details(conn, held) == [
        ("PENDING", "PENDING", f"held: parent task {child} is CANCELLED")
    ]
    assert details(conn, cleanup) == [
        (
            "PENDING",
            "QUEUED",
            f"released: parent task {child} is CANCELLED (on_parent_failure run)",
        )
    ]


def test_a_long_chain_cancels_without_recursion(conn: psycopg.Connection) -> None:
    first = schedule(conn)
    ids = conn.execute(
        """
        WITH RECURSIVE chain(n, id) AS (
            SELECT 1, %s::bigint
            UNION ALL
            SELECT n + 1, pgsched.schedule_task('link', depends_on => ARRAY[id],
                                                on_parent_failure => 'cancel')
              FROM chain WHERE n < 300
        )
        SELECT array_agg(id ORDER BY n) FROM chain
        """,
        (first,),
    ).fetchone()[0]
    conn.execute("SELECT pgsched.cancel_task(%s, 'stop the chain')", (first,))
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'CANCELLED'", (ids,)
    ).fetchone() == (300,)


def test_run_releases_the_child_when_its_parent_dies(conn: psycopg.Connection) -> None:
    parent = schedule(conn, max_attempts=1)
    ok = schedule(conn)
    finalizer = schedule(conn, "finalizer", depends_on=[parent, ok], on_parent_failure="run")
    run_to(conn, parent, "FAILED", error="boom")
    assert row(conn, finalizer)[:2] == ("PENDING", 1)
    # A later retry of the parent that completes does not count it twice.
    conn.execute("SELECT pgsched.dead_retry(task_id => %s)", (parent,))
    run_to(conn, parent, "COMPLETED")
    assert row(conn, finalizer)[:2] == ("PENDING", 1)
    run_to(conn, ok, "COMPLETED")
    assert row(conn, finalizer)[:2] == ("QUEUED", None)


def test_discarding_a_dead_parent_applies_the_policy(conn: psycopg.Connection) -> None:
    parent = schedule(conn, max_attempts=1)
    held = schedule(conn, "held", depends_on=[parent])
    gone = schedule(conn, "gone", depends_on=[parent], on_parent_failure="cancel")
    run_to(conn, parent, "FAILED", error="boom")
    assert status(conn, gone) == "CANCELLED"
    conn.execute("SELECT pgsched.dead_discard(%s)", (parent,))
    assert status(conn, parent) == "CANCELLED"
    assert details(conn, held)[-1] == (
        "PENDING",
        "PENDING",
        f"held: parent task {parent} is CANCELLED",
    )


def test_cancelling_a_parent_applies_the_policy(conn: psycopg.Connection) -> None:
    parent = schedule(conn)
    runs = schedule(conn, "runs", depends_on=[parent], on_parent_failure="run")
    conn.execute("SELECT pgsched.cancel_task(%s, 'not needed')", (parent,))
    assert row(conn, runs)[:2] == ("QUEUED", None)


def test_schedule_tasks_makes_every_row_wait_for_the_same_parents(
    conn: psycopg.Connection,
) -> None:
    parent = schedule(conn)
    rows = conn.execute(
        "SELECT task_id, created FROM pgsched.schedule_tasks(ARRAY['a', 'b', 'c'],"
        " depends_on => ARRAY[%s]::bigint[], on_parent_failure => 'cancel')",
        (parent,),
    ).fetchall()
    kids = [r[0] for r in rows]
    assert all(r[1] for r in rows)
    assert [row(conn, k)[:2] for k in kids] == [("PENDING", 1)] * 3
    run_to(conn, parent, "COMPLETED")
    assert [status(conn, k) for k in kids] == ["QUEUED"] * 3


def test_results_are_stored_on_completion_and_read_from_sql(conn: psycopg.Connection) -> None:
    parent = schedule(conn)
    child = schedule(conn, "child", depends_on=[parent])
    assert conn.execute("SELECT pgsched.task_result(%s)", (parent,)).fetchone() == (None,)
    run_to(conn, parent, "COMPLETED", results=['{"charged": 42}'])
    assert conn.execute("SELECT pgsched.task_result(%s)", (parent,)).fetchone() == (
        {"charged": 42},
    )
    assert conn.execute(
        "SELECT parent_id, status::text, result FROM pgsched.task_parent_results(%s)", (child,)
    ).fetchall() == [(parent, "COMPLETED", {"charged": 42})]
    with pytest.raises(errors.NoDataFound, match="no task with id"):
        conn.execute("SELECT pgsched.task_result(%s)", (10**12,))


def test_a_result_over_the_cap_fails_the_attempt_saying_why(conn: psycopg.Connection) -> None:
    conn.execute("UPDATE pgsched.settings SET max_result_bytes = 100")
    task_id = schedule(conn, max_attempts=2)
    run_to(conn, task_id, "COMPLETED", results=['"' + "x" * 200 + '"'])
    found = conn.execute(
        "SELECT status::text, last_error, result FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert found == (
        "QUEUED",
        "result is 202 bytes, over the cap of 100 bytes (pgsched.settings.max_result_bytes)",
        None,
    )


@pytest.mark.slow
def test_race_parents_finishing_at_once_release_their_child_exactly_once(
    conn: psycopg.Connection, connect: Any
) -> None:
    """Two workers finish the 500 parents of one child, half each, committing at the same
    moment; 1,000 runs of the race: the child is released once every time, never twice,
    never missed."""
    runs, parents = 1000, 500
    workers = [connect(autocommit=False), connect(autocommit=False)]
    conn.execute("UPDATE pgsched.settings SET immediate_window = '0', hot_window = '1 day'")
    double = missed = 0
    for _ in range(runs):
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT task_id FROM pgsched.schedule_tasks(array_fill('p'::text, ARRAY[%s]))",
                (parents,),
            )
        ]
        child = schedule(conn, "child", depends_on=ids)
        leases = claim(conn)
        items = list(leases.items())
        halves = [dict(items[: parents // 2]), dict(items[parents // 2 :])]
        ready = threading.Barrier(2)

        def finish_half(
            worker: psycopg.Connection, half: dict[int, Any], ready: threading.Barrier
        ) -> None:
            ready.wait(timeout=30)
            finish(worker, half)
            worker.commit()

        threads = [
            threading.Thread(target=finish_half, args=(w, h, ready))
            for w, h in zip(workers, halves, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        released = conn.execute(
            "SELECT count(*) FROM pgsched.task_events WHERE task_id = %s AND to_status = 'QUEUED'",
            (child,),
        ).fetchone()[0]
        waiting = row(conn, child)[1]
        double += released > 1
        missed += released == 0 or waiting is not None
        conn.execute("SELECT pgsched.cancel_task(%s)", (child,))
    assert (double, missed) == (0, 0)


def test_releasing_a_child_compiles_nothing_just_in_time(conn: psycopg.Connection) -> None:
    # Sequential scans are off in the settling functions, which costs a read of the one-row
    # settings table past jit_above_cost: JIT compiled it at every finish of a parent
    # (150 ms a link of a chain, five times the rest of the finish).
    parent = schedule(conn)
    schedule(conn, "child", depends_on=[parent])
    leases = claim(conn)
    conn.execute("SET jit = on")
    plans = log_every_plan(conn)
    finish(conn, {parent: leases[parent]})
    conn.execute("RESET client_min_messages")
    settled = [p for p in plans if "task_dependencies_settle" in p or "tier_horizons" in p]
    assert settled, plans
    assert not [p for p in plans if "JIT:" in p], [p for p in plans if "JIT:" in p]


def test_many_parents_are_checked_by_joins_not_each_against_every_other(
    conn: psycopg.Connection,
) -> None:
    # Once a session's plan of the parents' check went generic (after a few calls), the
    # check compared every wanted parent with every parent found, unhashed: 30,000 parents
    # took 21 s. Forcing the generic plan shows it in the plan, however many parents.
    parents = [
        int(r[0])
        for r in conn.execute(
            "SELECT task_id FROM pgsched.schedule_tasks(array_fill('job'::text, ARRAY[2000]))"
        )
    ]
    missing = max(parents) + 1000
    conn.execute("SET plan_cache_mode = force_generic_plan")
    plans = log_every_plan(conn)
    with pytest.raises(errors.InvalidParameterValue, match=f"task {missing} does not exist"):
        schedule(conn, "child", depends_on=[*parents, missing])
    child = schedule(conn, "child", depends_on=parents)
    conn.execute("RESET client_min_messages")
    assert row(conn, child)[:2] == ("PENDING", 2000)
    checks = [p for p in plans if "unnest" in p]
    assert checks, plans
    assert not [p for p in checks if "<> ALL" in p], [p for p in checks if "<> ALL" in p]
