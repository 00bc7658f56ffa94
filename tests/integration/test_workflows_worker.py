"""Workflows with real worker processes, from Python and the CLI: an order pipeline
(charge -> email, invoice -> archive) whose steps pass results down (ctx.parent_results,
in threads, on the event loop and in a handler process), a charge that fails once and is
retried, App.result waiting (LISTEN) and raising for DEAD, CANCELLED, a timeout and an
unknown id, a return value that is not JSON, and `pgsched schedule --after` / `show`."""

from __future__ import annotations

import subprocess
from typing import Any

import psycopg
import pytest

from pgsched import App, ResultTimeoutError, TaskFailedError, TaskNotFoundError
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import PGSCHED

APP = "tests.apps.workflow_app:app"


def test_an_order_pipeline_passes_results_down_and_survives_a_retry(
    db_dsn: str, workers: Any
) -> None:
    app = App(db_dsn)
    charge = app.schedule("wf_charge", {"order": "A-1", "amount": 42, "fail_once": True})
    email = app.schedule("wf_email", depends_on=[charge])
    invoice = app.schedule("wf_invoice", depends_on=[charge])
    archive = app.schedule("wf_archive", depends_on=[email, invoice])
    workers.start("W1", app=APP)
    assert app.result(archive, timeout=60) == [
        {"amount": 42, "emailed": "A-1"},
        {"invoiced": "A-1"},
    ]
    assert app.result(charge, timeout=5) == {"order": "A-1", "charged": 42}
    with psycopg.connect(db_dsn) as conn:
        attempts = conn.execute(
            "SELECT attempts FROM pgsched.tasks WHERE id = %s", (charge,)
        ).fetchone()
        released = conn.execute(
            "SELECT detail FROM pgsched.task_events WHERE task_id = %s AND to_status = 'QUEUED'",
            (archive,),
        ).fetchall()
    assert attempts == (2,)
    assert len(released) == 1 and released[0][0].startswith("released: parent task ")


def test_a_handler_process_returns_its_result(db_dsn: str, workers: Any) -> None:
    app = App(db_dsn)
    parent = app.schedule("wf_nothing")
    child = app.schedule("wf_in_process", depends_on=[parent])
    workers.start("W1", app=APP)
    result = app.result(child, timeout=60)
    assert result["parents"] == {str(parent): None}
    assert isinstance(result["pid"], int)


def test_result_raises_naming_dead_cancelled_timeout_and_unknown(db_dsn: str, workers: Any) -> None:
    app = App(db_dsn)
    dead = app.schedule("wf_dead", max_attempts=1)
    waiting = app.schedule("wf_nothing", depends_on=[dead])
    workers.start("W1", app=APP)
    with pytest.raises(TaskFailedError, match=rf"task {dead} is DEAD: .*this step always fails"):
        app.result(dead, timeout=60)
    with pytest.raises(ResultTimeoutError, match=rf"task {waiting} did not finish within 0.5s"):
        app.result(waiting, timeout=0.5)
    app.cancel(waiting, "no longer wanted")
    with pytest.raises(TaskFailedError, match=rf"task {waiting} is CANCELLED: .*no longer wanted"):
        app.result(waiting, timeout=5)
    with pytest.raises(TaskNotFoundError):
        app.result(10**12, timeout=1)
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgsched.task_result_waiters").fetchone() == (0,)


def test_a_return_value_that_is_not_json_fails_the_attempt_saying_why(
    db_dsn: str, workers: Any
) -> None:
    app = App(db_dsn)
    task = app.schedule("wf_not_json", max_attempts=1)
    workers.start("W1", app=APP)
    with pytest.raises(TaskFailedError, match="execute returned a value that is not JSON"):
        app.result(task, timeout=60)


def cli(db_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=db_env, capture_output=True, text=True, timeout=60
    )


def test_cli_schedule_after_and_show_list_parents_and_children(
    db_env: dict[str, str], db_dsn: str
) -> None:
    app = App(db_dsn)
    a, b = app.schedule("wf_nothing"), app.schedule("wf_nothing")
    made = cli(db_env, "schedule", "wf_archive", "--after", str(a), "--after", str(b))
    assert made.returncode == 0, made.stderr
    child = int(made.stdout.split()[-1])
    shown = cli(db_env, "show", str(child))
    assert shown.returncode == 0, shown.stderr
    assert "waits for (parents):" in shown.stdout
    assert f"task {a}  wf_nothing  QUEUED  (waiting)" in shown.stdout
    parent_view = cli(db_env, "show", str(a))
    assert f"task {child}  wf_archive  PENDING  (waiting)" in parent_view.stdout
    bad = cli(db_env, "schedule", "wf_archive", "--after", str(10**12))
    assert bad.returncode == 2
    assert f"depends_on: task {10**12} does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr
    lone = cli(db_env, "schedule", "wf_archive", "--on-parent-failure", "run")
    assert lone.returncode == 2 and "--on-parent-failure needs --after" in lone.stderr


def test_a_workflow_runs_its_steps_by_name_and_a_batch_callback_counts_its_members(
    db_dsn: str, workers: Any
) -> None:
    app = App(db_dsn)
    wf = app.workflow("order-B-2")
    wf.step("charge", "wf_charge", {"order": "B-2", "amount": 5})
    wf.step("email", "wf_step_email", after=["charge"])
    ids = wf.schedule()
    members: list[dict[str, Any]] = [
        {"task_type": "wf_member", "payload": {"n": n}} for n in range(5)
    ]
    members.append({"task_type": "wf_member", "payload": {"fail": True}, "max_attempts": 1})
    batch = app.batch(members, on_complete={"task_type": "wf_batch_done"})
    workers.start("W1", app=APP)
    assert app.result(ids["email"], timeout=60) == {"emailed": "B-2"}
    assert app.result(batch.callback_id, timeout=60) == {
        "total": 6,
        "completed": 5,
        "dead": 1,
        "members": 6,
    }
