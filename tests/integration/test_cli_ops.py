"""The operator's commands as a user runs them (subprocesses, a real Postgres): show, schedules
(list / show / pause / resume / delete, duplicates refused or reported), dead list (filters,
total, paging), history in 100 columns saying what happened to each attempt, status flags,
and --json on each (one document that parses)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import schedule

PGSCHED = str(Path(sys.executable).with_name("pgsched"))


def run_cli(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def as_json(env: dict[str, str], *args: str) -> Any:
    return json.loads(run_cli(env, *args, "--json").stdout)


def claim(conn: psycopg.Connection, task_id: int, lease: str = "5 minutes") -> Any:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 10, 'w-1', %s)",
        (lease,),
    ).fetchall()
    assert task_id in [r[0] for r in rows]
    return dict(rows)[task_id]


def finish(conn: psycopg.Connection, task_id: int, token: Any, outcome: str, error: str) -> None:
    rows = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(%s, %s, %s, %s, %s)",
        ([task_id], [token], [outcome], [error], [timedelta(minutes=5)]),
    ).fetchall()
    assert rows == [(True,)]


def make_dead(conn: psycopg.Connection, task_type: str, tenant: str, error: str) -> int:
    task_id = schedule(conn, task_type, tenant_id=tenant)
    finish(conn, task_id, claim(conn, task_id), "FAILED", error)
    return task_id


def test_show_prints_the_row_and_the_timeline(conn: psycopg.Connection, db_env: dict[str, str]):
    task_id = schedule(conn, "invoice", tenant_id="acme", payload='{"n": 1}')
    finish(conn, task_id, claim(conn, task_id), "RETRY", "upstream timed out")

    shown = as_json(db_env, "show", str(task_id))
    assert shown["task"]["id"] == task_id and shown["task"]["status"] == "QUEUED"
    assert shown["task"]["last_error"] == "upstream timed out"
    assert shown["task"]["payload"] == {"n": 1}
    assert [e["what"] for e in shown["timeline"]] == ["scheduled", "PROCESSING", "QUEUED"]

    table = run_cli(db_env, "show", str(task_id)).stdout
    assert "upstream timed out" in table and "PROCESSING" in table
    assert max(len(line) for line in table.splitlines() if "OCCURRED_AT" in line) <= 100

    missing = run_cli(db_env, "show", "999999", ok=False)
    assert missing.returncode == 2 and "no task with id 999999" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_history_fits_100_columns_and_says_what_happened(
    conn: psycopg.Connection, db_env: dict[str, str]
):
    tenant = "a_tenant_with_a_rather_long_name_for_a_table"
    retried = schedule(conn, "nightly_ledger_reconciliation_export", tenant_id=tenant)
    finish(conn, retried, claim(conn, retried), "RETRY", "ConnectionError: " + "x" * 200)
    dead = schedule(conn, "short", tenant_id="t")
    finish(
        conn,
        dead,
        claim(
            conn,
            dead,
        ),
        "FAILED",
        "ValueError: bad payload",
    )

    out = run_cli(db_env, "history").stdout.splitlines()
    assert len(out) == 3
    assert max(len(line) for line in out) <= 100, out
    assert out[0].split() == ["ID", "TENANT", "TYPE", "TRY", "STARTED", "LATE", "OUTCOME"]
    retried_line = next(line for line in out if line.lstrip().startswith(str(retried)))
    assert "failed → retry at" in retried_line and "QUEUED" not in retried_line
    assert "…" in retried_line  # the long names were cut, not wrapped
    dead_line = next(line for line in out if line.lstrip().startswith(str(dead)))
    assert "failed → DEAD: ValueError: bad payload" in dead_line

    runs = as_json(db_env, "history")
    by_id = {r["task_id"]: r for r in runs}
    assert by_id[retried]["outcome"] == "QUEUED" and by_id[retried]["then_attempt"] == 1
    assert by_id[retried]["then_due"] > by_id[retried]["finished_at"]
    wide = run_cli(db_env, "history", "--wide").stdout.splitlines()[0].split()
    assert wide[-2:] == ["OUTCOME", "DETAIL"]


def count_schedules(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM pgsched.schedules").fetchone()
    assert row is not None
    return int(row[0])


def test_a_duplicate_schedule_is_refused_or_reported(
    conn: psycopg.Connection, db_env: dict[str, str]
):
    cron = ["schedule", "report", "--cron", "0 9 * * *", "--tz", "Europe/Berlin"]
    first = run_cli(db_env, *cron).stdout.split()
    assert first[0] == "schedule"
    again = run_cli(db_env, *cron, ok=False)
    assert again.returncode == 2
    assert f"schedule {first[1]} already runs report" in again.stderr
    assert count_schedules(conn) == 1
    run_cli(db_env, *cron, "--allow-duplicate")
    assert count_schedules(conn) == 2

    keyed = run_cli(db_env, *cron, "--key", "daily-report").stdout.split()
    repeat = run_cli(db_env, "schedule", "report", "--cron", "*/5 * * * *", "--key", "daily-report")
    assert repeat.stdout.startswith(f"schedule {keyed[1]} already exists for key daily-report")
    assert count_schedules(conn) == 3


def test_schedules_list_show_pause_resume_delete(conn: psycopg.Connection, db_env: dict[str, str]):
    sid = int(run_cli(db_env, "schedule", "report", "--cron", "0 9 * * *").stdout.split()[1])
    run_cli(db_env, "sweeper", "--once")  # arms its next occurrence
    listed = as_json(db_env, "schedules", "list")
    assert [(s["id"], s["state"]) for s in listed] == [(sid, "active")]
    armed = listed[0]["armed_task_id"]
    assert armed is not None and listed[0]["next_fire_at"] is not None
    assert "report" in run_cli(db_env, "schedules", "list").stdout

    assert run_cli(db_env, "schedules", "pause", str(sid)).stdout.strip() == (
        f"paused schedule {sid}"
    )
    status = conn.execute("SELECT status::text FROM pgsched.tasks WHERE id = %s", (armed,))
    assert status.fetchone() == ("CANCELLED",)
    shown = as_json(db_env, "schedules", "show", str(sid))
    assert shown["schedule"]["state"] == "paused"
    assert shown["events"][0]["what"] == "paused"
    assert f"armed task {armed} cancelled" in shown["events"][0]["detail"]

    run_cli(db_env, "schedules", "resume", str(sid))
    assert as_json(db_env, "schedules", "show", str(sid))["schedule"]["state"] == "active"

    refused = run_cli(db_env, "schedules", "delete", str(sid), ok=False)  # no --yes, no tty
    assert refused.returncode != 0 and count_schedules(conn) == 1
    run_cli(db_env, "schedules", "delete", str(sid), "--yes")
    assert count_schedules(conn) == 0
    events = conn.execute(
        "SELECT what FROM pgsched.schedule_events WHERE schedule_id = %s ORDER BY id", (sid,)
    ).fetchall()
    assert [e[0] for e in events][-3:] == ["paused", "resumed", "deleted"]

    for verb in ("pause", "resume", "delete", "show"):
        extra = ["--yes"] if verb == "delete" else []
        unknown = run_cli(db_env, "schedules", verb, "424242", *extra, ok=False)
        assert unknown.returncode == 2, (verb, unknown.stderr)
        assert "no schedule with id 424242" in unknown.stderr


def test_dead_list_filters_counts_and_pages(conn: psycopg.Connection, db_env: dict[str, str]):
    made = [make_dead(conn, "email", "acme", f"boom {i}") for i in range(5)]
    other = make_dead(conn, "sms", "globex", "nope")

    everything = as_json(db_env, "dead", "list")
    assert everything["total"] == 6
    assert [t["id"] for t in everything["tasks"]] == [other, *reversed(made)]

    page = as_json(db_env, "dead", "list", "--type", "email", "--limit", "2", "--page", "2")
    assert page["total"] == 5 and page["offset"] == 2
    assert [t["id"] for t in page["tasks"]] == [made[2], made[1]]
    past_the_end = as_json(db_env, "dead", "list", "--type", "email", "--offset", "10")
    assert past_the_end["total"] == 5 and past_the_end["tasks"] == []
    assert as_json(db_env, "dead", "list", "--tenant", "globex")["total"] == 1
    assert as_json(db_env, "dead", "list", "--since", "+1h")["total"] == 0
    assert as_json(db_env, "dead", "list", "--since", "-1h")["total"] == 6

    table = run_cli(db_env, "dead", "list", "--tenant", "acme", "--limit", "3")
    assert len(table.stdout.splitlines()) == 4
    assert "5 DEAD task(s) match; showing 1-3" in table.stderr
    bad = run_cli(db_env, "dead", "list", "--limit", "0", ok=False)
    assert bad.returncode == 2 and "--limit" in bad.stderr


def test_status_flags_what_is_stuck(conn: psycopg.Connection, connect: Any, db_env: dict[str, str]):
    # Cold work that became due while no sweeper ran: scheduled 3 days ago for an hour ago.
    due_now = schedule(conn, "hot_job")  # due, but in the hot partition: not stuck
    conn.execute(
        "SELECT pgsched.schedule_task('late', run_at => now() - interval '1 hour',"
        " as_of => now() - interval '3 days')"
    )
    leased = schedule(conn, "stuck_job")
    claim(conn, leased)
    # Its worker died a minute ago: the lease ran out, as a superuser can make it.
    conn.execute(
        "UPDATE pgsched.tasks SET lease_expires_at = now() - interval '1 minute' WHERE id = %s",
        (leased,),
    )
    sid = int(run_cli(db_env, "schedule", "rep", "--cron", "0 9 * * *").stdout.split()[1])
    conn.execute("SELECT pgsched.schedule_quarantine(%s, 'handler raised 5 times')", (sid,))

    out = run_cli(db_env, "status").stdout
    assert "sweeper leader: none" in out
    assert "1 PENDING task(s) overdue" in out and "no sweeper holds the leader lease" in out
    assert f"task {leased} (stuck_job, tenant default) is PROCESSING on w-1" in out
    assert f"task {due_now} " not in out
    assert f"schedule {sid} (rep, tenant default) is quarantined: handler raised 5 times" in out

    data = as_json(db_env, "status")
    assert [lane["lane"] for lane in data["lanes"]][:2] == ["HIGH", "NORMAL"]
    assert data["sweeper_leader"] is None and data["overdue_pending"] == 1
    assert [t["id"] for t in data["lease_expired"]] == [leased]

    # The lease, taken from plain SQL as a sweeper takes it: seen in the lease row.
    taken = conn.execute(
        "SELECT acquired, generation FROM pgsched.sweep_leader_acquire('sweeper-x', '1 minute')"
    ).fetchone()
    assert taken is not None and taken[0] is True
    led = as_json(db_env, "status")
    assert led["sweeper_leader"]["holder"] == "sweeper-x"
    assert led["sweeper_leader"]["generation"] == taken[1]
    assert not any("PENDING" in flag for flag in led["flags"])
    text = run_cli(db_env, "status").stdout
    assert f"sweeper leader: sweeper-x (lease generation {taken[1]}," in text
    # A lease that ran out (its leader died) is no leadership.
    conn.execute("UPDATE pgsched.sweep_leader SET expires_at = now() - interval '1 second'")
    assert as_json(db_env, "status")["sweeper_leader"] is None


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["history"],
        ["dead", "list"],
        ["schedules", "list"],
        ["tenants", "list"],
        ["doctor"],
    ],
)
def test_every_data_command_prints_one_json_document(
    db_env: dict[str, str], argv: list[str]
) -> None:
    done = subprocess.run(
        [PGSCHED, *argv, "--json"],
        cwd=REPO_ROOT,
        env=db_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr  # doctor exits 1 on a failed check
    json.loads(done.stdout)


# Every command that prints data, with arguments that find something to print.
DATA_COMMANDS = [
    ("status",),
    ("history",),
    ("show", "{task}"),
    ("dead", "list"),
    ("schedules", "list"),
    ("schedules", "show", "{schedule}"),
    ("doctor",),
    ("tenants", "list"),
]


def test_every_data_command_prints_one_json_document_with_iso_times(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    task = make_dead(conn, "email", "acme", "boom")
    conn.execute("SELECT pgsched.tenant_add('acme', 'crm')")
    made = run_cli(db_env, "schedule", "tick", "--cron", "0 9 * * *")
    ids = {"task": str(task), "schedule": made.stdout.split()[1]}
    for command in DATA_COMMANDS:
        argv = [arg.format(**ids) for arg in command]
        done = run_cli(db_env, *argv, "--json", ok=False)
        assert done.returncode in (0, 1), (argv, done.stderr)  # doctor: 1 when a check fails
        document = json.loads(done.stdout)
        assert document, argv
        # Times as ISO 8601 ("T" between date and time), the same in every document.
        stamps = [
            v
            for v in _leaves(document)
            if isinstance(v, str) and len(v) >= 19 and v[4] == "-" and v[7] == "-" and ":" in v
        ]
        assert all(v[10] == "T" for v in stamps), (argv, stamps)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_history_limit_must_be_positive(db_env: dict[str, str]) -> None:
    for limit in ("0", "-1"):
        refused = run_cli(db_env, "history", "--limit", limit, ok=False)
        assert refused.returncode == 2, refused.stderr
        assert "--limit" in refused.stderr and "Traceback" not in refused.stderr


def test_show_says_when_the_task_was_first_due_not_when_its_retry_is(
    conn: psycopg.Connection, db_env: dict[str, str]
):
    task_id = schedule(conn, "invoice", run_at=datetime.now(UTC) - timedelta(minutes=1))
    first_due = conn.execute(
        "SELECT format('due %%s', next_run_at) FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    finish(conn, task_id, claim(conn, task_id), "RETRY", "upstream timed out")
    retry_due = conn.execute(
        "SELECT format('due %%s', next_run_at) FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert first_due is not None and retry_due is not None and first_due != retry_due

    timeline = as_json(db_env, "show", str(task_id))["timeline"]
    assert (timeline[0]["what"], timeline[0]["detail"]) == ("scheduled", first_due[0])
    table = run_cli(db_env, "show", str(task_id)).stdout
    scheduled_line = next(line for line in table.splitlines() if " scheduled " in f" {line} ")
    assert first_due[0].split()[1] in scheduled_line  # its date, at least, fits the column

    # Not yet run: the due time is the task's own.
    waiting = schedule(conn, "invoice", run_at=datetime.now(UTC) + timedelta(hours=1))
    now_due = conn.execute(
        "SELECT format('due %%s', next_run_at) FROM pgsched.tasks WHERE id = %s", (waiting,)
    ).fetchone()
    assert now_due is not None
    assert as_json(db_env, "show", str(waiting))["timeline"][0]["detail"] == now_due[0]


def test_dead_list_aligns_text_left_and_numbers_right_under_their_headers(
    conn: psycopg.Connection, db_env: dict[str, str]
):
    make_dead(conn, "email", "a_rather_long_tenant", "boom")
    for _ in range(9):  # ids of one and two digits
        make_dead(conn, "sms_notification", "t", "no route")
    lines = run_cli(db_env, "dead", "list").stdout.splitlines()
    header, rows = lines[0], lines[1:]
    assert len(rows) == 10

    def start(name: str) -> int:
        return header.index(name)

    def end(name: str) -> int:
        return header.index(name) + len(name)

    for line in rows:
        cells = line.split()
        task_id, tenant, task_type, attempts = cells[0], cells[1], cells[2], cells[3]
        # Numbers end under the end of their header; text starts under its start.
        assert line[: end("ID")].rstrip().endswith(task_id) and line[end("ID")] == " ", line
        assert line[start("TENANT_ID") :].startswith(tenant), line
        assert line[start("TASK_TYPE") :].startswith(task_type), line
        assert line[: end("ATTEMPTS")].endswith(attempts), line
        assert line[start("LAST_ERROR") :].startswith(("boom", "no route")), line
