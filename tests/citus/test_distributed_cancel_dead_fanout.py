"""Cancel, the DEAD lane's commands and fan-out on a distributed database (`pgsched migrate
--distributed` on the three-node cluster), with real `pgsched worker` processes and the
`pgsched` commands run as a user runs them: a task not started is cancelled at once, a
running one is stopped by its worker, a filter cancels across both worker nodes; `pgsched
dead list / retry / discard` work on tasks of tenants on both nodes; a product task fans out
to every tenant of the product, each child run once, and cancelling a fan-out stops the
tenants that have not finished. Every change is recorded by the functions."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.support.worker_helpers import Workers, run_cli, schedule, wait_until

APP = "tests.apps.distributed_app:app"


@pytest.fixture
def env(dist_dsn: str) -> dict[str, str]:
    return {**os.environ, "PGSCHED_DSN": dist_dsn}


def status_of(conn: psycopg.Connection, task_id: int) -> str:
    row = conn.execute(
        "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None, task_id
    return str(row[0])


def story(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str, str | None]]:
    rows = conn.execute(
        "SELECT from_status::text, to_status::text, detail FROM pgsched.task_events"
        " WHERE task_id = %s ORDER BY occurred_at, id",
        (task_id,),
    ).fetchall()
    return [(f, t, d) for f, t, d in rows]


def on_both_nodes(conn: psycopg.Connection, tenants: list[str]) -> bool:
    row = conn.execute(
        "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name ="
        " 'pgsched.tasks'::regclass AND shardid IN (SELECT"
        " get_shard_id_for_distribution_column('pgsched.tasks', t) FROM unnest(%s::text[]) t)",
        (tenants,),
    ).fetchone()
    return row == (2,)


def test_cancel_a_task_not_started_a_running_one_and_by_filter_across_the_nodes(
    env: dict[str, str], dconn: psycopg.Connection, dworkers: Workers
) -> None:
    tenants = [f"tenant-{i}" for i in range(6)]
    assert on_both_nodes(dconn, tenants)
    in_three_days = datetime.now(UTC) + timedelta(days=3)
    later = schedule(dconn, "echo", run_at=in_three_days, tenant_id="tenant-0")
    soon = schedule(
        dconn, "echo", run_at=datetime.now(UTC) + timedelta(minutes=5), tenant_id="tenant-1"
    )
    hourly = [schedule(dconn, "echo_hourly", tenant_id=t, run_at=in_three_days) for t in tenants]

    # Not started: cancelled at once, from the command line and from SQL.
    done = run_cli(env, "cancel", str(later), "--reason", "not needed")
    assert done.returncode == 0, done
    assert done.stdout.strip() == f"cancelled {later}"
    row = dconn.execute(
        "SELECT * FROM pgsched.cancel_task_ex(%s, 'also', 'ops')", (soon,)
    ).fetchone()
    assert row is not None and row[0] == "CANCELLED"
    assert story(dconn, later) == [("PENDING", "CANCELLED", "cancelled by postgres: not needed")]
    assert [(f, t) for f, t, _ in story(dconn, soon)] == [("QUEUED", "CANCELLED")]

    # By filter: counted, then cancelled, the tenants' rows on both worker nodes.
    counted = run_cli(env, "cancel", "--type", "echo_hourly", "--yes")
    assert counted.returncode == 0, counted
    assert "6 unfinished task(s) match: 6 not started" in counted.stdout
    assert "cancelled 6;" in counted.stdout
    assert {status_of(dconn, i) for i in hourly} == {"CANCELLED"}
    assert all(len(story(dconn, i)) == 1 for i in hourly)

    # Running: its worker is asked, the handler stops, the task ends CANCELLED.
    running = schedule(dconn, "until_cancelled", '{"seconds": 60}', tenant_id="tenant-4")
    dworkers.start("w", app=APP, lease=5.0, poll=0.2)
    wait_until(lambda: status_of(dconn, running) == "PROCESSING", 30, what="the claim")
    asked = run_cli(env, "cancel", str(running), "--reason", "runaway")
    assert asked.returncode == 0, asked
    assert asked.stdout.startswith(f"task {running} is running: cancel requested"), asked
    wait_until(lambda: status_of(dconn, running) == "CANCELLED", 30, what="the worker to stop it")
    assert [(f, t) for f, t, _ in story(dconn, running)] == [
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "PROCESSING"),
        ("PROCESSING", "CANCELLED"),
    ]

    # A finished task is refused, with nothing changed.
    refused = run_cli(env, "cancel", str(later))
    assert refused.returncode == 1, refused
    assert "has finished" in refused.stderr
    assert len(story(dconn, later)) == 1


def test_dead_list_retry_and_discard_from_the_command_line(
    env: dict[str, str], dconn: psycopg.Connection, dworkers: Workers
) -> None:
    tenants = ["tenant-0", "tenant-1", "tenant-2", "tenant-3"]
    assert on_both_nodes(dconn, tenants)
    dead = [
        schedule(dconn, "always_fails", tenant_id=t, max_attempts=1, lane="NORMAL") for t in tenants
    ]
    dworkers.start("w", app=APP, lease=5.0, poll=0.2)
    wait_until(
        lambda: {status_of(dconn, i) for i in dead} == {"FAILED"}, 60, what="every task to fail"
    )

    listed = run_cli(env, "dead", "list", "--json")
    assert listed.returncode == 0, listed
    page = json.loads(listed.stdout)
    assert page["total"] == 4
    assert sorted(t["id"] for t in page["tasks"]) == sorted(dead)
    assert all(t["holding_back"] == 0 for t in page["tasks"])
    one = run_cli(env, "dead", "list", "--tenant", "tenant-2", "--json")
    assert [t["id"] for t in json.loads(one.stdout)["tasks"]] == [dead[2]]

    # Discarded: CANCELLED, recorded; retried: run again (and fails again).
    gone = run_cli(env, "dead", "discard", str(dead[0]))
    assert gone.returncode == 0, gone
    assert status_of(dconn, dead[0]) == "CANCELLED"
    assert story(dconn, dead[0])[-1][:2] == ("FAILED", "CANCELLED")
    again = run_cli(env, "dead", "retry", str(dead[1]))
    assert again.returncode == 0, again

    def failed_twice() -> bool:
        return sum(t == "FAILED" for _, t, _ in story(dconn, dead[1])) == 2

    wait_until(failed_twice, 30, what="the retried task to fail again")
    assert [(f, t) for f, t, _ in story(dconn, dead[1])] == [
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "FAILED"),
        ("FAILED", "QUEUED"),
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "FAILED"),
    ]
    # "Did it run?": pgsched history answers from the events of both nodes' shards.
    history = run_cli(env, "history", "--task", str(dead[1]), "--json")
    assert history.returncode == 0, history
    runs = json.loads(history.stdout)
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "FAILED"), (1, "FAILED")]
    assert {r["tenant_id"] for r in runs} == {"tenant-1"}
    every = run_cli(env, "dead", "retry", "--type", "always_fails")
    assert every.returncode == 0, every
    wait_until(
        lambda: all(
            sum(t == "FAILED" for _, t, _ in story(dconn, i)) == 2 for i in (dead[2], dead[3])
        ),
        30,
        what="the tasks retried by type to fail again",
    )
    # Not in the DEAD lane: refused, nothing changed.
    refused = run_cli(env, "dead", "discard", str(dead[0]))
    assert refused.returncode != 0 and "not in the DEAD lane" in refused.stderr


def test_a_product_task_fans_out_over_both_nodes_and_a_fan_out_cancel_stops_the_rest(
    dconn: psycopg.Connection, dworkers: Workers
) -> None:
    tenants = ["fast", "slow1", "slow2", "slow3", "slow4"]
    for tenant in tenants:
        dconn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    assert on_both_nodes(dconn, tenants)
    # A tenant set inactive (the reference table's upsert and update) gets no child.
    dconn.execute("SELECT pgsched.tenant_add('paused', 'crm')")
    dconn.execute("SELECT pgsched.tenant_set_active('paused', false)")
    dworkers.start("w", app=APP, lanes="normal,batch", lease=5.0, poll=0.2)

    def children(parent: int) -> dict[str, tuple[int, str]]:
        rows = dconn.execute(
            "SELECT tenant_id, id, status::text FROM pgsched.tasks WHERE parent_id = %s",
            (parent,),
        ).fetchall()
        return {r[0]: (int(r[1]), r[2]) for r in rows}

    # Every tenant of the product gets its child, each run once.
    quick = schedule(dconn, "until_cancelled", '{"seconds": 0}', scope="product", product="crm")
    wait_until(
        lambda: (
            {s for _, s in children(quick).values()} == {"COMPLETED"}
            and len(children(quick)) == len(tenants)
        ),
        60,
        what="every tenant's child to complete",
    )
    assert status_of(dconn, quick) == "COMPLETED"
    for child, _ in children(quick).values():
        assert [(f, t) for f, t, _ in story(dconn, child)] == [
            ("QUEUED", "PROCESSING"),
            ("PROCESSING", "COMPLETED"),
        ]

    # A fan-out cancelled while its slow tenants run: they stop, the completed is named.
    slow = schedule(dconn, "until_cancelled", '{"seconds": 60}', scope="product", product="crm")

    def settled() -> bool:
        kids = children(slow)
        return (
            len(kids) == len(tenants)
            and kids["fast"][1] == "COMPLETED"
            and all(kids[t][1] == "PROCESSING" for t in tenants[1:])
        )

    wait_until(settled, 60, what="fast to complete and the slow tenants to start")
    row = dconn.execute(
        "SELECT outcome, detail FROM pgsched.cancel_task_ex(%s, 'campaign off', 'ops')", (slow,)
    ).fetchone()
    assert row is not None and row[0] == "FAN_OUT_CANCELLED", row
    assert "tenants completed: 1 (fast)" in row[1]
    assert "running, asked to stop: 4 (slow1, slow2, slow3, slow4)" in row[1]
    wait_until(
        lambda: (
            {t: s for t, (_, s) in children(slow).items()}
            == {"fast": "COMPLETED", **dict.fromkeys(tenants[1:], "CANCELLED")}
        ),
        30,
        what="the slow tenants to be cancelled",
    )


def test_workflows_are_refused_in_words_with_nothing_written(dconn: psycopg.Connection) -> None:
    """depends_on, schedule_workflow and schedule_batch are not built for distributed mode
    (docs/scaling.md): each is refused with SQLSTATE 0A000 naming why, and writes nothing."""
    parent = schedule(dconn, "echo", tenant_id="tenant-0")
    calls = [
        (
            "SELECT pgsched.schedule_task('echo', '{}'::jsonb, tenant_id => 'tenant-0',"
            " depends_on => ARRAY[%s]::bigint[])",
            (parent,),
        ),
        (
            "SELECT * FROM pgsched.schedule_tasks(ARRAY['echo', 'echo'],"
            " tenant_ids => ARRAY['tenant-0', 'tenant-0'], depends_on => ARRAY[%s]::bigint[])",
            (parent,),
        ),
        (
            "SELECT * FROM pgsched.schedule_workflow("
            """'[{"name": "a", "task_type": "echo"}, {"name": "b", "task_type": "echo","""
            """ "after": ["a"]}]'::jsonb, tenant_id => 'tenant-0')""",
            None,
        ),
        (
            "SELECT * FROM pgsched.schedule_batch(ARRAY['echo', 'echo'],"
            " on_complete_type => 'echo', tenant_id => 'tenant-0')",
            None,
        ),
    ]
    for sql, params in calls:
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            dconn.execute(sql, params)
        assert "not supported on a distributed database yet" in str(refused.value), sql
    assert dconn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (1,)
    assert dconn.execute("SELECT count(*) FROM pgsched.task_dependencies").fetchone() == (0,)
