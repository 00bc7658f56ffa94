"""Workflows seen from the operator's side: the DEAD lane says what each DEAD task holds
back (SQL view and `pgsched dead list`), and the sweep leader's metrics count releases,
holds and cascades (pgsched_workflow_transitions_total) from the events written since
its last read."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
from prometheus_client import CollectorRegistry, generate_latest

from pgsched.observability.metrics import SweeperMetrics
from tests.support.dashboard_server import env_without_auth, running_dashboard
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import PGSCHED


def schedule(conn: psycopg.Connection, task_type: str = "job", **kwargs: Any) -> int:
    names = "".join(f", {name} => %({name})s" for name in kwargs)
    row = conn.execute(
        f"SELECT pgsched.schedule_task(task_type => %(task_type)s{names})",
        {"task_type": task_type, **kwargs},
    ).fetchone()
    assert row is not None
    return int(row[0])


def run_to(conn: psycopg.Connection, task_id: int, outcome: str) -> None:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1000, 'w1')"
    ).fetchall()
    leases = {int(r[0]): r[1] for r in rows}
    others = [i for i in leases if i != task_id]
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(%s::bigint[], %s::uuid[], %s::text[], %s::text[])",
        (
            [task_id, *others],
            [leases[task_id], *(leases[i] for i in others)],
            [outcome, *(["RELEASED"] * len(others))],
            ["boom", *([None] * len(others))],
        ),
    )


def test_the_dead_lane_says_what_each_dead_task_holds_back(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    parent = schedule(conn, max_attempts=1)
    for _ in range(2):
        schedule(conn, "child", depends_on=[parent])
    schedule(conn, "gone", depends_on=[parent], on_parent_failure="cancel")
    run_to(conn, parent, "FAILED")
    assert conn.execute("SELECT id, holding_back FROM pgsched.lane_dead").fetchall() == [
        (parent, 2)
    ]
    listed = subprocess.run(
        [PGSCHED, "dead", "list"],
        cwd=REPO_ROOT,
        env=db_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert "HOLDING_BACK" in header
    assert row.split()[0] == str(parent) and " 2 " in row


def test_the_sweep_leader_counts_releases_holds_and_cascades(conn: psycopg.Connection) -> None:
    registry = CollectorRegistry()
    metrics = SweeperMetrics(registry, interval=15)
    metrics.follow(lambda: True)
    schedule(conn)  # an event before the count starts is not counted
    metrics.sweep.run_once(conn, datetime.now(UTC))
    ok, dead = schedule(conn), schedule(conn, max_attempts=1)
    schedule(conn, "released", depends_on=[ok])
    schedule(conn, "held", depends_on=[dead])
    schedule(conn, "cascaded", depends_on=[dead], on_parent_failure="cancel")
    run_to(conn, ok, "COMPLETED")
    run_to(conn, dead, "FAILED")
    metrics.sweep.run_once(conn, datetime.now(UTC))
    text = generate_latest(registry).decode()
    for kind in ("released", "held", "cascaded"):
        assert f'pgsched_workflow_transitions_total{{kind="{kind}"}} 1.0' in text, text
    # A read with nothing new adds nothing.
    metrics.sweep.run_once(conn, datetime.now(UTC))
    assert 'pgsched_workflow_transitions_total{kind="released"} 1.0' in (
        generate_latest(registry).decode()
    )


def test_the_dashboard_task_page_shows_parents_and_children(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    parent = schedule(conn, "charge")
    child = schedule(conn, "email", depends_on=[parent])
    env = env_without_auth(db_env)
    with running_dashboard(env) as dash:
        parent_page = httpx.get(f"{dash.url}/tasks/{parent}")
        child_page = httpx.get(f"{dash.url}/tasks/{child}")
    assert parent_page.status_code == child_page.status_code == 200
    assert "Waited for by <small>1 task</small>" in parent_page.text
    assert f'<a href="/tasks/{child}">{child}</a></td><td>email</td>' in parent_page.text
    assert "Waits for <small>1 task, 0 of those shown met</small>" in child_page.text
    assert f'<a href="/tasks/{parent}">{parent}</a></td><td>charge</td>' in child_page.text


def batch_row(html: str) -> str:
    found = re.search(r'<table id="batch">.*?<tbody><tr>(.*?)</tr>', html, re.DOTALL)
    assert found, html
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found[1])).strip()


def test_the_dashboard_task_page_shows_a_batchs_progress_from_its_callbacks_counters(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    row = conn.execute(
        "SELECT callback_id, member_ids FROM pgsched.schedule_batch("
        " ARRAY['member', 'member', 'member', 'member'], on_complete_type => 'album_ready',"
        " max_attempts => ARRAY[1, 1, 1, 1]::bigint[])"
    ).fetchone()
    assert row is not None
    callback, (done, dead, cancelled, left) = row
    run_to(conn, done, "COMPLETED")
    run_to(conn, dead, "FAILED")
    conn.execute("SELECT pgsched.cancel_task(%s, 'not needed')", (cancelled,))
    alone = schedule(conn, "alone")
    env = env_without_auth(db_env)
    with running_dashboard(env) as dash:
        member_page = httpx.get(f"{dash.url}/tasks/{left}")
        callback_page = httpx.get(f"{dash.url}/tasks/{callback}")
        alone_page = httpx.get(f"{dash.url}/tasks/{alone}")
        run_to(conn, left, "COMPLETED")
        released_page = httpx.get(f"{dash.url}/tasks/{callback}")
    assert {p.status_code for p in (member_page, callback_page, alone_page, released_page)} == {200}
    # members, completed, dead, cancelled, still waiting, the callback and its status
    assert "Member of a batch <small>4 members</small>" in member_page.text
    assert batch_row(member_page.text) == f"4 1 1 1 1 {callback} album_ready PENDING"
    assert "Callback of a batch <small>4 members</small>" in callback_page.text
    assert batch_row(callback_page.text) == f"4 1 1 1 1 {callback} album_ready PENDING"
    assert batch_row(released_page.text) == f"4 2 1 1 0 {callback} album_ready QUEUED"
    assert 'id="batch"' not in alone_page.text


def test_history_of_a_task_shows_its_workflow(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    parent = schedule(conn, "charge")
    child = schedule(conn, "email", depends_on=[parent])
    shown = subprocess.run(
        [PGSCHED, "history", "--task", str(child)],
        cwd=REPO_ROOT,
        env=db_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "waits for (parents):" in shown.stdout
    assert f"task {parent}  charge  QUEUED  (waiting)" in shown.stdout
