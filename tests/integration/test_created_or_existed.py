"""An idempotent duplicate says so: SQL, Python and the CLI tell created from already existing."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import psycopg

from pgsched import App, ScheduledTask
from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))


def count_tasks(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone()[0])


def test_schedule_task_ex_from_sql(conn: psycopg.Connection) -> None:
    first = conn.execute(
        "SELECT task_id, created FROM pgsched.schedule_task_ex('invoice', '{\"n\": 1}',"
        " tenant_id => 'acme', idempotency_key => 'invoice:1')"
    ).fetchone()
    assert first is not None and first[1] is True
    again = conn.execute(
        "SELECT task_id, created FROM pgsched.schedule_task_ex('invoice', '{\"n\": 2}',"
        " tenant_id => 'acme', idempotency_key => 'invoice:1')"
    ).fetchone()
    assert again == (first[0], False)
    # Nothing changed: still one task, with the first payload.
    assert count_tasks(conn) == 1
    assert conn.execute("SELECT payload FROM pgsched.tasks").fetchone() == ({"n": 1},)
    # The same key under another tenant is another task.
    other = conn.execute(
        "SELECT task_id, created FROM pgsched.schedule_task_ex('invoice',"
        " tenant_id => 'globex', idempotency_key => 'invoice:1')"
    ).fetchone()
    assert other is not None and other[1] is True and other[0] != first[0]
    # schedule_task keeps its shape: the id alone, the existing one for a duplicate.
    assert conn.execute(
        "SELECT pgsched.schedule_task('invoice', tenant_id => 'acme',"
        " idempotency_key => 'invoice:1')"
    ).fetchone() == (first[0],)


def test_schedule_tasks_reports_created_per_row(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT ordinal, task_id, created FROM pgsched.schedule_tasks("
        " ARRAY['a', 'a', 'a'], idempotency_keys => ARRAY['k1', 'k1', NULL]) ORDER BY ordinal"
    ).fetchall()
    assert [r[2] for r in rows] == [True, False, True]
    assert rows[0][1] == rows[1][1]
    again = conn.execute(
        "SELECT created FROM pgsched.schedule_tasks(ARRAY['a'], idempotency_keys => ARRAY['k1'])"
    ).fetchall()
    assert again == [(False,)]


def test_app_schedule_and_schedule_many(db_dsn: str, conn: psycopg.Connection) -> None:
    app = App(db_dsn)
    first = app.schedule("invoice", {"n": 1}, tenant_id="acme", idempotency_key="invoice:7")
    assert isinstance(first, ScheduledTask) and first.created is True
    again = app.schedule("invoice", {"n": 2}, tenant_id="acme", idempotency_key="invoice:7")
    assert (int(again), again.created) == (int(first), False)
    assert count_tasks(conn) == 1

    many = app.schedule_many(
        [
            {"task_type": "invoice", "tenant_id": "acme", "idempotency_key": "invoice:7"},
            {"task_type": "invoice", "tenant_id": "acme", "idempotency_key": "invoice:8"},
            {"task_type": "invoice", "tenant_id": "acme"},
        ]
    )
    assert (int(many[0]), many[0].created) == (int(first), False)
    assert [t.created for t in many] == [False, True, True]
    assert count_tasks(conn) == 3
    # Still an int: usable wherever an id was, and it survives a pickle with its flag.
    assert conn.execute("SELECT id FROM pgsched.tasks WHERE id = %s", (many[1],)).fetchone() == (
        int(many[1]),
    )
    restored = pickle.loads(pickle.dumps(many[0]))
    assert (int(restored), restored.created) == (int(first), False)


def test_cli_says_created_or_already_exists(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PGSCHED, "schedule", *args],
            cwd=REPO_ROOT,
            env=db_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    made = run("invoice", "--tenant", "acme", "--key", "invoice:9", "--payload", '{"n": 1}')
    assert made.returncode == 0, made.stderr
    task_id = int(conn.execute("SELECT id FROM pgsched.tasks").fetchone()[0])
    assert made.stdout == f"created task {task_id}\n"

    again = run("invoice", "--tenant", "acme", "--key", "invoice:9", "--payload", '{"n": 2}')
    assert again.returncode == 0, again.stderr
    assert again.stdout == (
        f"task {task_id} already exists for key invoice:9 (tenant acme); nothing changed\n"
    )
    assert count_tasks(conn) == 1
    assert conn.execute("SELECT payload FROM pgsched.tasks").fetchone() == ({"n": 1},)
