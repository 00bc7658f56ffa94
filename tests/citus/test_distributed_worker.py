"""Real `pgsched worker` processes on a distributed database (`pgsched migrate
--distributed` on the three-node cluster): claims tenant by tenant over both worker nodes,
completions, retries into the DEAD lane, the audit written by the functions (every
transition, with its worker and attempt), keys per tenant, and a worker SIGKILLed mid-task
whose task another worker rescues and runs: nothing lost, nothing run twice. The DEAD
lane's retry from SQL (`pgsched.dead_retry`) here; its commands, cancel and fan-out in
test_distributed_cancel_dead_fanout.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support.citus_cluster import CitusCluster
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import PGSCHED, Workers, run_cli, wait_until

APP = "tests.apps.distributed_app:app"
TENANTS = [f"tenant-{i}" for i in range(6)]


def schedule(conn: psycopg.Connection, task_type: str, tenants: list[str], **kw: Any) -> list[int]:
    keys = kw.get("keys")
    rows = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks(array_fill(%s::text, ARRAY[%s]),"
        " tenant_ids => %s, idempotency_keys => %s, max_attempts => %s)",
        (task_type, len(tenants), tenants, keys, kw.get("max_attempts")),
    ).fetchall()
    return [int(r[0]) for r in rows]


def statuses(conn: psycopg.Connection, ids: list[int]) -> dict[int, str]:
    rows = conn.execute(
        "SELECT id, status::text FROM pgsched.tasks WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    return {int(i): s for i, s in rows}


def all_ended(conn: psycopg.Connection, ids: list[int]) -> bool:
    done = statuses(conn, ids)
    return len(done) == len(ids) and all(s in ("COMPLETED", "FAILED") for s in done.values())


def story(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str, int, str | None]]:
    rows = conn.execute(
        "SELECT from_status::text, to_status::text, attempt, worker FROM pgsched.task_events"
        " WHERE task_id = %s ORDER BY occurred_at, id",
        (task_id,),
    ).fetchall()
    return [(f, t, int(a), w) for f, t, a, w in rows]


def test_two_workers_run_every_tenants_tasks_once_with_every_transition_recorded(
    citus: CitusCluster, dconn: psycopg.Connection, dworkers: Workers
) -> None:
    tenants = [t for t in TENANTS for _ in range(5)]
    echo = schedule(dconn, "echo", tenants)
    # The tenants' shards are on both worker nodes.
    ports = dconn.execute(
        "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name ="
        " 'pgsched.tasks'::regclass AND shardid IN (SELECT"
        " get_shard_id_for_distribution_column('pgsched.tasks', t) FROM unnest(%s::text[]) t)",
        (TENANTS,),
    ).fetchone()
    assert ports == (2,)
    flaky = schedule(dconn, "flaky", ["tenant-1"], max_attempts=[3])
    dead = schedule(dconn, "always_fails", ["tenant-2"], max_attempts=[2])
    keyed = schedule(dconn, "echo", ["tenant-3", "tenant-4"], keys=["k", "k"])

    for name in ("a", "b"):
        dworkers.start(name, app=APP, lease=5.0, poll=0.2)
    ids = echo + flaky + dead + keyed
    wait_until(lambda: all_ended(dconn, ids), 60, what="every task to end")

    assert statuses(dconn, echo + keyed) == dict.fromkeys(echo + keyed, "COMPLETED")
    results = dconn.execute(
        "SELECT id, tenant_id, result FROM pgsched.tasks WHERE id = ANY(%s)", (echo,)
    ).fetchall()
    assert all(r[2]["tenant"] == r[1] and r[2]["attempt"] == 1 for r in results)
    # Each ran once: one claim, one completion, by one worker.
    for task_id in echo + keyed:
        events = story(dconn, task_id)
        assert [(f, t, a) for f, t, a, _ in events] == [
            ("QUEUED", "PROCESSING", 1),
            ("PROCESSING", "COMPLETED", 1),
        ], (task_id, events)
        assert events[0][3] == events[1][3] and events[0][3] in ("a", "b")

    [flaky_id] = flaky
    assert statuses(dconn, flaky) == {flaky_id: "COMPLETED"}
    assert [(f, t, a) for f, t, a, _ in story(dconn, flaky_id)] == [
        ("QUEUED", "PROCESSING", 1),
        ("PROCESSING", "QUEUED", 1),
        ("QUEUED", "PROCESSING", 2),
        ("PROCESSING", "COMPLETED", 2),
    ]
    [dead_id] = dead
    assert statuses(dconn, dead) == {dead_id: "FAILED"}
    assert [(f, t, a) for f, t, a, _ in story(dconn, dead_id)][-1] == ("PROCESSING", "FAILED", 2)
    # Retried from the DEAD lane (from SQL): it runs its attempts again and fails again.
    assert dconn.execute("SELECT pgsched.dead_retry(%s)", (dead_id,)).fetchall() == [(dead_id,)]

    def failed_twice() -> bool:
        ends = [t for _, t, _, _ in story(dconn, dead_id) if t == "FAILED"]
        return len(ends) == 2

    wait_until(failed_twice, 30, what="the retried task to fail again")
    assert [(f, t) for f, t, _, _ in story(dconn, dead_id)][4:] == [
        ("FAILED", "QUEUED"),
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "QUEUED"),
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "FAILED"),
    ]


def test_a_worker_killed_mid_task_loses_nothing_and_runs_nothing_twice(
    dconn: psycopg.Connection, dworkers: Workers
) -> None:
    dconn.execute(
        "SELECT pgsched.schedule_task('slow', '{\"seconds\": 4}', tenant_id => 'tenant-5')"
    )
    [slow_id] = [
        int(r[0])
        for r in dconn.execute("SELECT id FROM pgsched.tasks WHERE task_type = 'slow'").fetchall()
    ]
    doomed = dworkers.start("doomed", app=APP, lease=2.0, poll=0.2)
    wait_until(lambda: statuses(dconn, [slow_id]) == {slow_id: "PROCESSING"}, 30, what="the claim")
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait_exit(10)
    dworkers.start("rescuer", app=APP, lease=2.0, poll=0.2)
    wait_until(lambda: all_ended(dconn, [slow_id]), 60, what="the rescued task to end")
    assert statuses(dconn, [slow_id]) == {slow_id: "COMPLETED"}
    events = story(dconn, slow_id)
    assert [(f, t, a, w) for f, t, a, w in events] == [
        ("QUEUED", "PROCESSING", 1, "doomed"),
        ("PROCESSING", "QUEUED", 1, "doomed"),
        ("QUEUED", "PROCESSING", 2, "rescuer"),
        ("PROCESSING", "COMPLETED", 2, "rescuer"),
    ]
    reason = dconn.execute(
        "SELECT detail FROM pgsched.task_events WHERE task_id = %s AND to_status = 'QUEUED'",
        (slow_id,),
    ).fetchone()
    assert reason == ("worker lost: lease expired; queued again",)


def test_the_sweeper_promotes_fires_schedules_judges_deadlines_and_prunes(
    dist_dsn: str, dconn: psycopg.Connection, dworkers: Workers, tmp_path: Path
) -> None:
    """A real `pgsched sweeper` on the distributed database, beside a worker: far-future work
    promoted from the cold tier, a recurring schedule fired and armed again, a missed
    deadline judged, and finished work pruned by `pgsched sweeper --once`."""
    env = {**os.environ, "PGSCHED_DSN": dist_dsn}
    # Work due beyond this hot window waits in the cold tier for the promotion sweep.
    dconn.execute(
        "UPDATE pgsched.settings SET immediate_window = '1 second', hot_window = '2 seconds'"
    )
    later = schedule(dconn, "echo", ["tenant-0", "tenant-3"])  # due now: hot
    dconn.execute(
        "SELECT pgsched.schedule_task('echo', tenant_id => t,"
        " run_at => now() + interval '6 seconds') FROM unnest(ARRAY['tenant-1', 'tenant-4']) t"
    )
    cold = [
        int(r[0])
        for r in dconn.execute(
            "SELECT id FROM pgsched.tasks WHERE status = 'PENDING' ORDER BY id"
        ).fetchall()
    ]
    assert len(cold) == 2
    schedule_id = dconn.execute(
        "SELECT pgsched.schedule_recurring('echo', '* * * * *', 'UTC', tenant_id => 'tenant-5',"
        " first_fire_at => now() + interval '1 second')"
    ).fetchone()
    assert schedule_id is not None
    missed = dconn.execute(
        "SELECT pgsched.schedule_task('slow', '{\"seconds\": 3}', tenant_id => 'tenant-2',"
        " complete_by => now() + interval '1 second')"
    ).fetchone()
    assert missed is not None

    dworkers.start("w", app=APP, lease=5.0, poll=0.2)
    log_path = tmp_path / "sweeper.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [PGSCHED, "sweeper", "--promotion-interval", "0.5", "--recurring-interval", "0.5"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_until(lambda: all_ended(dconn, later + cold), 60, what="promoted work to run")
    for task_id in cold:
        assert [(f, t) for f, t, _, _ in story(dconn, task_id)][:2] == [
            ("PENDING", "QUEUED"),
            ("QUEUED", "PROCESSING"),
        ]

    def fired() -> list[Any]:
        return dconn.execute(
            "SELECT o.task_id, t.status::text FROM pgsched.schedule_occurrences AS o"
            " JOIN LATERAL (SELECT status FROM pgsched.tasks WHERE id = o.task_id) AS t ON true"
            " WHERE o.schedule_id = %s ORDER BY o.fire_at",
            (schedule_id[0],),
        ).fetchall()

    occurrences = wait_until(
        # The next minute may pass meanwhile: that occurrence runs, and one more is armed.
        lambda: (rows := fired()) and rows[0][1] == "COMPLETED" and len(rows) >= 2 and rows,
        60,
        what="the first occurrence to run and the next to be armed",
    )
    assert occurrences[-1][1] in ("PENDING", "QUEUED", "PROCESSING")

    outcome = wait_until(
        lambda: (
            (
                row := dconn.execute(
                    "SELECT deadline_outcome FROM pgsched.tasks WHERE id = %s", (missed[0],)
                ).fetchone()
            )
            and row[0]
        ),
        60,
        what="the deadline to be judged",
    )
    assert outcome == "missed"
    assert dconn.execute(
        "SELECT count(*) FROM pgsched.task_events WHERE task_id = %s"
        " AND detail LIKE 'deadline missed:%%'",
        (missed[0],),
    ).fetchone() == (1,)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    sweeper_log = log_path.read_text()
    assert "failed" not in sweeper_log, sweeper_log

    time.sleep(1.5)
    old = (
        "SELECT count(*) FROM pgsched.tasks WHERE status = 'COMPLETED'"
        " AND updated_at < %s - interval '1 second'"
    )
    [started] = dconn.execute("SELECT now()").fetchone() or [None]
    before = dconn.execute(old, (started,)).fetchone()
    assert before is not None and before[0] >= 5
    # Keep about a second: every task that finished a second before this started goes.
    pruned = run_cli(env, "sweeper", "--once", "--retention-days", "0.00001")
    assert pruned.returncode == 0, pruned
    assert "retention" in pruned.stdout, pruned.stdout
    assert dconn.execute(old, (started,)).fetchone() == (0,), pruned.stdout
