"""`pgsched doctor` against real databases, each with one problem planted: not migrated, no
sweeper leading while cold work is overdue, a transaction held open by another session, a
lease expired (set by UPDATE as a superuser), autovacuum off with dead tuples piling up, the
host clock ahead of the database's (under faketime), an unreachable server, a login in no
pgsched role. Each shows as the check that names it, and a fail exits 1."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import skewed_env

PGSCHED = str(Path(sys.executable).with_name("pgsched"))


def doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    done = subprocess.run(
        [PGSCHED, "doctor", "--json", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is (done.returncode == 0)
    return done.returncode, {c["name"]: c for c in report["checks"]}


def results(checks: dict[str, dict[str, str]]) -> dict[str, str]:
    return {name: c["result"] for name, c in checks.items()}


@pytest.fixture
def leader(connect: Any) -> psycopg.Connection:
    """The sweep leader's lease, taken as a running sweeper takes it."""
    session = connect()
    row = session.execute(
        "SELECT acquired FROM pgsched.sweep_leader_acquire('doctor-test', '10 minutes')"
    ).fetchone()
    assert row == (True,)
    return session


@pytest.fixture
def admin_env(
    db_dsn: str, db_env: dict[str, str], conn: psycopg.Connection
) -> Iterator[dict[str, str]]:
    """The environment of a production login: pgsched_admin, and pg_monitor to see every
    session (the xmin check reads other sessions' transactions)."""
    name = f"t_{uuid.uuid4().hex[:10]}_ops"
    conn.execute(
        sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgsched_admin, pg_monitor").format(
            sql.Identifier(name)
        )
    )
    env = dict(db_env, PGSCHED_DSN=make_conninfo(db_dsn, user=name), PGUSER=name)
    yield env
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
    )
    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_healthy_database_passes_every_check(admin_env: dict[str, str], leader: Any) -> None:
    code, checks = doctor(admin_env)
    assert results(checks) == {
        "database": "pass",
        "roles": "pass",
        "schema": "pass",
        "sweeper": "pass",
        "autovacuum": "pass",
        "dead tuples": "pass",
        "partitions": "pass",
        "xmin": "pass",
        "leases": "pass",
        "clock": "pass",
        "replication": "pass",
    }
    assert code == 0
    assert "no streaming standby" in checks["replication"]["detail"]
    assert "leader is doctor-test (lease generation 1," in checks["sweeper"]["detail"]
    assert "pgsched_admin" in checks["roles"]["detail"]
    table = subprocess.run(
        [PGSCHED, "doctor"],
        cwd=REPO_ROOT,
        env=admin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0
    assert [line.split()[0] for line in table.stdout.splitlines()] == ["PASS"] * 11


def test_a_superuser_login_is_a_warning_not_a_failure(db_env: dict[str, str], leader: Any):
    code, checks = doctor(db_env)
    assert checks["roles"]["result"] == "warn" and "superuser" in checks["roles"]["detail"]
    assert code == 0


def test_a_login_in_no_pgsched_role_fails(
    db_dsn: str, db_env: dict[str, str], conn: psycopg.Connection, leader: Any
):
    name = f"t_{uuid.uuid4().hex[:10]}_nobody"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        env = dict(db_env, PGSCHED_DSN=make_conninfo(db_dsn, user=name), PGUSER=name)
        code, checks = doctor(env)
        assert (
            checks["roles"]["result"] == "fail"
            and "in no pgsched role" in checks["roles"]["detail"]
        )
        assert code == 1
    finally:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_an_unmigrated_database_fails_the_schema_check(
    new_database: Any, db_env: dict[str, str]
) -> None:
    code, checks = doctor(dict(db_env, PGSCHED_DSN=new_database()))
    assert code == 1
    assert checks["schema"]["result"] == "fail"
    assert "not migrated: run `pgsched migrate`" in checks["schema"]["detail"]
    assert "sweeper" not in checks  # nothing of pgsched's to check further


def test_an_unreachable_server_fails_the_database_check(db_env: dict[str, str]) -> None:
    env = dict(db_env, PGSCHED_DSN="host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    code, checks = doctor(env)
    assert code == 1 and results(checks) == {"database": "fail"}
    assert "cannot reach the database" in checks["database"]["detail"]


def test_no_leader_warns_and_fails_once_cold_work_is_overdue(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    code, checks = doctor(db_env)
    assert checks["sweeper"]["result"] == "warn" and code == 0
    # Scheduled three days ago for an hour ago: cold, due, and only a sweeper promotes it.
    conn.execute(
        "SELECT pgsched.schedule_task('late', run_at => now() - interval '1 hour',"
        " as_of => now() - interval '3 days')"
    )
    code, checks = doctor(db_env)
    assert checks["sweeper"]["result"] == "fail" and code == 1
    assert "1 PENDING task(s) are overdue" in checks["sweeper"]["detail"]


def test_a_transaction_held_open_fails_the_xmin_check(
    connect: Any, admin_env: dict[str, str], leader: Any
) -> None:
    idle = connect(autocommit=False)
    idle.execute("SELECT txid_current()").fetchone()  # an xid, held: the horizon stops here
    pid = idle.info.backend_pid
    time.sleep(1.5)
    done = subprocess.run(
        [PGSCHED, "doctor", "--json", "--max-xact-age", "1"],
        cwd=REPO_ROOT,
        env=admin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert done.returncode == 1
    assert checks["xmin"]["result"] == "fail"
    assert f"pid {pid} " in checks["xmin"]["detail"]
    idle.rollback()
    done = subprocess.run(
        [PGSCHED, "doctor", "--json", "--max-xact-age", "1"],
        cwd=REPO_ROOT,
        env=admin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert {c["name"]: c for c in json.loads(done.stdout)["checks"]}["xmin"]["result"] == "pass"


def test_an_expired_lease_warns_with_a_leader_and_fails_without(
    conn: psycopg.Connection, connect: Any, db_env: dict[str, str]
) -> None:
    row = conn.execute("SELECT pgsched.schedule_task('stuck')").fetchone()
    assert row is not None
    task_id = row[0]
    conn.execute("SELECT pgsched.task_claim_many('NORMAL', 1, 'w-gone', '5 minutes')")
    conn.execute(
        "UPDATE pgsched.tasks SET lease_expires_at = now() - interval '2 minutes' WHERE id = %s",
        (task_id,),
    )
    code, checks = doctor(db_env)
    assert checks["leases"]["result"] == "fail" and code == 1
    assert f"task(s) {task_id} and no sweeper leads" in checks["leases"]["detail"]
    session = connect()
    session.execute("SELECT pgsched.sweep_leader_acquire('doctor-test', '10 minutes')")
    code, checks = doctor(db_env)
    assert checks["leases"]["result"] == "warn" and code == 0


def test_autovacuum_off_fails_and_dead_tuples_warn(
    conn: psycopg.Connection, db_env: dict[str, str], leader: Any
) -> None:
    conn.execute("ALTER TABLE pgsched.tasks_hot SET (autovacuum_enabled = false)")
    code, checks = doctor(db_env)
    assert (
        checks["autovacuum"]["result"] == "fail" and "tasks_hot" in checks["autovacuum"]["detail"]
    )
    assert checks["dead tuples"]["result"] == "pass"
    assert code == 1
    # 3,000 tasks queued then cancelled: each leaves a dead row in the hot partition.
    conn.execute("SELECT pgsched.schedule_tasks(array_fill('bulk'::text, ARRAY[3000]))")
    conn.execute("UPDATE pgsched.tasks SET status = 'CANCELLED' WHERE status = 'QUEUED'")
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        code, checks = doctor(db_env)
        if checks["dead tuples"]["result"] == "warn":
            break
        time.sleep(0.5)
    assert checks["dead tuples"]["result"] == "warn"
    assert "tasks_hot 3000 dead" in checks["dead tuples"]["detail"]


def test_a_host_clock_ahead_of_the_database_warns(db_env: dict[str, str], leader: Any) -> None:
    ahead = skewed_env(db_env, "+120s")
    code, checks = doctor(ahead)
    assert checks["clock"]["result"] == "warn"
    # The shift is 120 s give or take the time the command takes to start and query.
    found = re.search(r"database behind host by ([0-9.]+) s", checks["clock"]["detail"])
    assert found is not None, checks["clock"]["detail"]
    assert 115 < float(found.group(1)) < 125
    assert code == 0
    code, checks = doctor(ahead, "--max-skew", "300")
    assert checks["clock"]["result"] == "pass"
