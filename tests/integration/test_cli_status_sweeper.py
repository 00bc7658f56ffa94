"""`pgsched status` says when work will not run for want of a sweeper, as a user runs it
(subprocesses, a real Postgres): a recurring schedule made from SQL is armed only by the
sweeper's recurring sweep, and cold (PENDING) work reaches the workers only through its
promotion sweep. With no sweeper holding the leader lease each is a `!` line naming the
fix, and `status --check` exits 1 while any `!` line stands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
THE_FIX = "start `pgsched sweeper` (or run a worker with `pgsched worker --sweeps`)"


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def flags(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("! ")]


def test_a_schedule_made_from_sql_with_no_sweeper_is_flagged_and_fails_the_check(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    healthy = run_cli(db_env, "status", "--check")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert flags(healthy) == []

    row = conn.execute("SELECT pgsched.schedule_recurring('tick', '*/5 * * * *')").fetchone()
    assert row is not None
    schedule_id = row[0]
    listed = json.loads(run_cli(db_env, "schedules", "list", "--json").stdout)
    assert [(s["id"], s["next_fire_at"]) for s in listed] == [(schedule_id, None)]
    table = run_cli(db_env, "schedules", "list").stdout.splitlines()
    assert table[1].split()[0] == str(schedule_id) and table[1].endswith("active  not armed")

    shown = run_cli(db_env, "status")
    assert shown.returncode == 0, shown.stderr  # a report; only --check turns it into a verdict
    assert flags(shown) == [
        f"! schedule {schedule_id} (tick, tenant default) has no armed occurrence and no"
        f" sweeper holds the leader lease: it will not fire; {THE_FIX}"
    ]
    checked = run_cli(db_env, "status", "--check")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert flags(checked) == flags(shown)
    as_json = run_cli(db_env, "status", "--check", "--json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert [s["id"] for s in document["unarmed_schedules"]] == [schedule_id]

    # A sweeper leads (the lease taken from SQL, as a sweeper takes it): it will arm it.
    conn.execute("SELECT pgsched.sweep_leader_acquire('sweeper-x', '1 minute')")
    led = run_cli(db_env, "status", "--check")
    assert led.returncode == 0, led.stdout
    assert flags(led) == []


def test_pending_work_coming_due_with_no_sweeper_is_flagged(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    # Scheduled three days ago for two hours from now: cold, waiting for promotion.
    conn.execute(
        "SELECT pgsched.schedule_task('report', run_at => now() + interval '2 hours',"
        " as_of => now() - interval '3 days')"
    )
    conn.execute(
        "SELECT pgsched.schedule_task('report', run_at => now() + interval '3 hours',"
        " as_of => now() - interval '3 days')"
    )
    shown = run_cli(db_env, "status", "--check")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    [flag] = flags(shown)
    assert flag.startswith("! 2 PENDING task(s) come due within the hot window (the first in 2")
    assert flag.endswith(f"no sweeper holds the leader lease: nothing will promote them; {THE_FIX}")
    document = json.loads(run_cli(db_env, "status", "--json").stdout)
    assert document["pending_coming_due"] == 2

    conn.execute("SELECT pgsched.sweep_leader_acquire('sweeper-x', '1 minute')")
    assert run_cli(db_env, "status", "--check").returncode == 0
