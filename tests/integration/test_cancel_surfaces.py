"""Cancelling through each surface: `pgsched cancel` as a user runs it (one task, or by
filter with a count and a confirmation), `App.cancel` / `App.cancel_where`, and the
dashboard's cancel form (CSRF-guarded, recorded with the acting user). Running tasks are
claimed by hand with the worker's claim function: what matters here is the request."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from pgsched import App, CancelCounts, InvalidTaskError, TaskNotFoundError, TaskStateError
from tests.support.dashboard_server import csrf_field, env_without_auth, running_dashboard
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import PGSCHED, run_cli, schedule, status, task


def claim_all(conn: psycopg.Connection, lane: str = "NORMAL") -> list[int]:
    rows = conn.execute("SELECT id FROM pgsched.task_claim_many(%s, 100, 'w1')", (lane,))
    return [int(r[0]) for r in rows]


def snapshot(conn: psycopg.Connection) -> tuple[Any, ...]:
    rows = conn.execute("SELECT t::text FROM pgsched.tasks AS t ORDER BY id").fetchall()
    count = conn.execute("SELECT count(*) FROM pgsched.task_events").fetchone()
    return (tuple(r[0] for r in rows), count)


def cli_with_input(env: dict[str, str], text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args],
        cwd=REPO_ROOT,
        env=env,
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- the command line ----------------------------------------------------------------------


def test_cancel_one_task_queued_or_running(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    running = schedule(conn, "job")
    claim_all(conn)
    queued = schedule(conn, "job")
    done = run_cli(db_env, "cancel", str(queued), "--reason", "not needed")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cancelled {queued}"
    assert status(conn, queued) == "CANCELLED"
    done = run_cli(db_env, "cancel", str(running))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"task {running} is running: cancel requested by ")
    row = task(conn, running)
    assert row["status"] == "PROCESSING" and row["cancel_reason"] == "cancelled by operator"


def test_cancel_by_filter_shows_the_count_and_asks(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    mail = [schedule(conn, "mail", tenant_id="acme") for _ in range(2)]
    claim_all(conn)
    mail.append(schedule(conn, "mail", tenant_id="acme"))
    other = schedule(conn, "report", tenant_id="acme")
    args = ("cancel", "--type", "mail", "--tenant", "acme", "--reason", "campaign off")

    before = snapshot(conn)
    declined = cli_with_input(db_env, "n\n", *args)
    assert "3 unfinished task(s) match: 1 not started (cancelled at once), 2 running" in (
        declined.stdout
    )
    assert "cancel these 3 task(s)? [y/N]" in declined.stdout
    assert declined.returncode == 1  # aborted
    assert snapshot(conn) == before

    accepted = cli_with_input(db_env, "y\n", *args)
    assert accepted.returncode == 0, accepted.stderr
    assert "cancelled 1; asked the workers of 2 running task(s) to stop them" in accepted.stdout
    assert status(conn, mail[2]) == "CANCELLED"
    assert [task(conn, i)["cancel_reason"] for i in mail[:2]] == ["campaign off"] * 2
    assert status(conn, other) == "QUEUED"

    again = run_cli(db_env, *args, "--yes")
    assert again.returncode == 0 and "no unfinished task matches" in again.stdout
    skipped = run_cli(db_env, "cancel", "--type", "report", "--yes")
    assert skipped.returncode == 0 and "[y/N]" not in skipped.stdout
    assert status(conn, other) == "CANCELLED"


def test_cancel_by_due_time_range(conn: psycopg.Connection, db_env: dict[str, str]) -> None:
    now = datetime.now(UTC)
    soon = schedule(conn, "mail", run_at=now + timedelta(hours=1))
    later = schedule(conn, "mail", run_at=now + timedelta(days=3))
    done = run_cli(db_env, "cancel", "--due-from", "+2h", "--due-until", "+5d", "--yes")
    assert done.returncode == 0, done.stderr
    assert (status(conn, soon), status(conn, later)) == ("QUEUED", "CANCELLED")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cancel"], "give a task ID, or at least one filter"),
        (["cancel", "5", "--type", "mail"], "give a task ID or filters (--type), not both"),
        (["cancel", "--due-from", "yesterday"], "--due-from"),
        (["cancel", "--type", "", "--yes"], "task_type: must not be empty"),
        (
            ["cancel", "--due-from", "+2h", "--due-until", "-1h", "--yes"],
            "must be before due_until",
        ),
        (["cancel", "987654"], "no task with id 987654"),
        (["cancel", "--type", "mail", "--reason", "x" * 1001, "--yes"], "reason: at most 1000"),
    ],
)
def test_bad_input_exits_2_naming_the_problem_and_writes_nothing(
    conn: psycopg.Connection, db_env: dict[str, str], args: list[str], message: str
) -> None:
    schedule(conn, "mail")
    before = snapshot(conn)
    done = run_cli(db_env, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(conn) == before


def test_cancelling_a_finished_task_exits_1(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    task_id = schedule(conn, "mail")
    run_cli(db_env, "cancel", str(task_id))
    done = run_cli(db_env, "cancel", str(task_id))
    assert done.returncode == 1
    assert "is CANCELLED and cannot be cancelled: it has finished" in done.stderr


# --- Python --------------------------------------------------------------------------------


def test_app_cancel_and_cancel_where(conn: psycopg.Connection, db_dsn: str) -> None:
    app = App(db_dsn)
    running = schedule(conn, "job")
    claim_all(conn)
    queued = schedule(conn, "job")
    assert app.cancel(queued, "x").outcome == "CANCELLED"
    result = app.cancel(running, "runaway", actor="carol")
    assert (result.task_id, result.outcome) == (running, "CANCEL_REQUESTED")
    assert "cancel requested by carol (role " in result.detail
    with pytest.raises(TaskStateError):
        app.cancel(queued)
    with pytest.raises(TaskNotFoundError):
        app.cancel(987654)
    more = [schedule(conn, "job") for _ in range(2)]
    assert app.cancel_where(task_type="job", dry_run=True) == CancelCounts(2, 0)
    assert app.cancel_where(task_type="job") == CancelCounts(2, 0)
    assert {status(conn, i) for i in more} == {"CANCELLED"}
    with pytest.raises(InvalidTaskError, match="needs at least one filter"):
        app.cancel_where()


# --- the dashboard -------------------------------------------------------------------------


def test_dashboard_cancel_asks_first_needs_csrf_and_records_the_user(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    running = schedule(conn, "job")
    claim_all(conn)
    env = env_without_auth(db_env)
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        page = client.get(f"/tasks/{running}")
        assert f'href="/tasks/{running}/cancel" id="cancel"' in page.text
        assert "Stop running task" in page.text
        before = snapshot(conn)
        # Asking is not doing: the confirmation says what will happen, and changes nothing.
        confirm = client.get(f"/tasks/{running}/cancel")
        assert confirm.status_code == 200
        assert "its worker is asked to stop it" in confirm.text
        assert "via dashboard" in confirm.text  # who it will be recorded as
        assert snapshot(conn) == before
        token = csrf_field(confirm.text)
        for data in ({"reason": "x"}, {"reason": "x", "csrf_token": token + "x"}):
            refused = client.post(f"/tasks/{running}/cancel", data=data)
            assert refused.status_code == 403
        assert snapshot(conn) == before
        done = client.post(
            f"/tasks/{running}/cancel",
            data={"reason": "runaway", "csrf_token": token},
            follow_redirects=True,
        )
    assert done.status_code == 200
    row = task(conn, running)
    assert row["cancel_reason"] == "runaway"
    assert row["cancel_requested_by"].endswith(f"via dashboard (role {conn.info.user})")
    assert "cancel requested by " in done.text  # the request is on the task's timeline
    # ... and is neither an attempt of its own nor the end of the one that runs.
    attempts = done.text.split('id="attempts"')[1].split("</table>")[0]
    assert attempts.count("<tr><td>") == 1 and "<td>RUNNING</td>" in attempts


def test_dashboard_read_only_offers_no_cancel(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    queued = schedule(conn, "job")
    env = env_without_auth(db_env)
    with running_dashboard(env, "--read-only") as dash, httpx.Client(base_url=dash.url) as client:
        assert 'id="cancel"' not in client.get(f"/tasks/{queued}").text
        assert client.get(f"/tasks/{queued}/cancel").status_code == 403
    assert status(conn, queued) == "QUEUED"
