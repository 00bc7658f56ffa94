"""Deadlines: a task's complete_by, a schedule's complete_within, judged by the deadline sweep.

Plain SQL on a bare connection (as another language would call it), time moved with
`as_of`; the sweep as the sweeper runs it (`DeadlineSweep.run_once`), its log line and
count; `pgsched status` as a user runs it; the dashboard's overview.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg
import pytest

from pgsched.sweeps import DeadlineSweep
from tests.support.dashboard_server import env_without_auth, running_dashboard
from tests.support.worker_helpers import run_cli

BERLIN = ZoneInfo("Europe/Berlin")


def now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def sweep(conn: psycopg.Connection, at: datetime) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute(
        "SELECT task_id, status::text AS status, outcome, callback_task_id, schedule_id"
        " FROM pgsched.deadline_sweep(as_of => %s)",
        (at,),
    ).fetchall()


def schedule(conn: psycopg.Connection, task_type: str = "report", **args: Any) -> int:
    names = ", ".join(f"{k} => %({k})s" for k in args)
    row = conn.execute(
        f"SELECT pgsched.schedule_task(%(task_type)s{', ' if names else ''}{names})",
        {"task_type": task_type, **args},
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim_all(conn: psycopg.Connection, at: datetime) -> dict[int, str]:
    """Claim every due NORMAL task as a worker would at `at`, with an hour's lease."""
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 100, 'w1',"
        " interval '1 hour', %s)",
        (at,),
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def report(conn: psycopg.Connection, task_id: int, token: str, outcome: str, at: datetime) -> None:
    applied = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[],"
        " ARRAY[%s], ARRAY['boom'], NULL, %s)",
        (task_id, token, outcome, at),
    ).fetchall()
    assert applied == [(True,)]


def test_a_task_not_done_by_its_deadline_is_missed_once(conn: psycopg.Connection) -> None:
    t0 = now(conn)
    task = schedule(
        conn,
        tenant_id="acme",
        complete_by=t0 + timedelta(minutes=5),
        deadline_callback="report_late",
    )
    assert sweep(conn, t0 + timedelta(minutes=4)) == []  # not yet past, not completed
    judged = sweep(conn, t0 + timedelta(minutes=6))
    assert [(j["task_id"], j["status"], j["outcome"]) for j in judged] == [
        (task, "QUEUED", "missed")
    ]
    callback = judged[0]["callback_task_id"]
    row = conn.execute(
        "SELECT task_type, tenant_id, payload FROM pgsched.tasks WHERE id = %s", (callback,)
    ).fetchone()
    assert row is not None
    assert row[0:2] == ("report_late", "acme")
    assert row[2]["task_id"] == task and row[2]["status"] == "QUEUED"
    events = conn.execute(
        "SELECT from_status::text, to_status::text, detail FROM pgsched.task_events"
        " WHERE task_id = %s",
        (task,),
    ).fetchall()
    assert len(events) == 1
    assert events[0][0] == events[0][1] == "QUEUED"
    assert events[0][2].startswith("deadline missed: complete_by ")
    assert "not started (QUEUED" in events[0][2]
    # Judged once: a later sweep finds nothing, and the task stays listed as missed.
    assert sweep(conn, t0 + timedelta(hours=1)) == []
    missed = conn.execute("SELECT task_id, status::text FROM pgsched.deadline_misses").fetchall()
    assert missed == [(task, "QUEUED")]


def test_completed_in_time_is_met_late_dead_or_cancelled_is_missed(
    conn: psycopg.Connection,
) -> None:
    t0 = now(conn)
    due_by = t0 + timedelta(minutes=10)
    in_time = schedule(conn, complete_by=due_by)
    late = schedule(conn, complete_by=due_by)
    dead = schedule(conn, max_attempts=1, complete_by=due_by)
    cancelled = schedule(conn, complete_by=due_by)
    plain = schedule(conn)
    conn.execute("SELECT pgsched.cancel_task(%s)", (cancelled,))
    leases = claim_all(conn, t0 + timedelta(minutes=1))
    assert set(leases) == {in_time, late, dead, plain}
    report(conn, in_time, leases[in_time], "COMPLETED", t0 + timedelta(minutes=1))
    report(conn, dead, leases[dead], "FAILED", t0 + timedelta(minutes=1))
    # Completed before its deadline: met at once, without waiting for the deadline.
    early = sweep(conn, t0 + timedelta(minutes=2))
    assert [(j["task_id"], j["outcome"]) for j in early] == [(in_time, "met")]
    report(conn, late, leases[late], "COMPLETED", t0 + timedelta(minutes=11))
    judged = {j["task_id"]: (j["status"], j["outcome"]) for j in sweep(conn, due_by)}
    assert judged == {
        late: ("COMPLETED", "missed"),
        dead: ("FAILED", "missed"),
        cancelled: ("CANCELLED", "missed"),
    }
    details: dict[int, str] = dict(
        conn.execute(
            "SELECT task_id, detail FROM pgsched.task_events WHERE detail LIKE 'deadline missed:%%'"
        ).fetchall()
    )
    assert "completed late" in details[late]
    assert "failed (DEAD lane)" in details[dead]
    assert "cancelled" in details[cancelled]
    assert in_time not in details and plain not in details
    outcomes: dict[int, str | None] = dict(
        conn.execute("SELECT id, deadline_outcome FROM pgsched.tasks WHERE id <> %s", (plain,))
    )
    assert outcomes == {in_time: "met", late: "missed", dead: "missed", cancelled: "missed"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"complete_by": "now"}, "must be after the task is due"),
        ({"complete_by": "infinity"}, "complete_by infinity is out of range"),
        ({"deadline_callback": "report_late"}, "deadline_callback needs complete_by"),
        ({"complete_by": "+1h", "deadline_callback": "late one"}, "is not a plain identifier"),
        (
            {"complete_by": "+1h", "scope": "global"},
            "complete_by is for a tenant's task, not scope global",
        ),
        (
            {"complete_by": "+1h", "idempotency_key": "k", "debounce": "1 minute"},
            "cannot be combined with unique_for or debounce",
        ),
    ],
)
def test_a_bad_deadline_is_refused_and_writes_nothing(
    conn: psycopg.Connection, args: dict[str, Any], message: str
) -> None:
    t0 = now(conn)
    moments = {"now": t0, "+1h": t0 + timedelta(hours=1)}
    values = {k: moments.get(v, v) for k, v in args.items()}
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        schedule(conn, as_of=t0, **values)
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)


@pytest.mark.parametrize(
    ("within", "callback", "scope", "message"),
    [
        ("0", None, "tenant", "complete_within 00:00:00 is out of range"),
        ("-5 minutes", None, "tenant", "out of range"),
        ("400 days", None, "tenant", "out of range"),
        (None, "report_late", "tenant", "deadline_callback needs complete_within"),
        ("30 minutes", "x;y", "tenant", "is not a plain identifier"),
        ("30 minutes", None, "global", "complete_within is for a tenant's schedule"),
    ],
)
def test_a_bad_schedule_deadline_is_refused(
    conn: psycopg.Connection, within: str | None, callback: str | None, scope: str, message: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute(
            "SELECT pgsched.schedule_recurring('report', '0 9 * * *', 'Europe/Berlin',"
            " complete_within => %s::interval, deadline_callback => %s, scope => %s)",
            (within, callback, scope),
        )
    assert conn.execute("SELECT count(*) FROM pgsched.schedules").fetchone() == (0,)


def test_an_occurrence_is_due_by_its_fire_time_plus_complete_within_in_its_zone(
    conn: psycopg.Connection,
) -> None:
    """ "The 09:00 report done by 09:30 Europe/Berlin": 09:30 local on a winter day (08:30
    UTC), on the day the clocks go forward (07:30 UTC) and in summer (07:30 UTC). The fire
    time is placed by the schedule's zone and DST policy; the deadline counts from it."""
    days = [datetime(2026, 3, 28, 9, 0), datetime(2026, 3, 29, 9, 0), datetime(2026, 7, 1, 9, 0)]
    armed = []
    for day in days:
        fire = day.replace(tzinfo=BERLIN)
        schedule_id = conn.execute(
            "SELECT pgsched.schedule_recurring('report', '0 9 * * *', 'Europe/Berlin',"
            " tenant_id => 'acme', idempotency_key => %s, complete_within => '30 minutes',"
            " deadline_callback => 'report_late', first_fire_at => %s, as_of => %s)",
            (f"report:{day:%Y-%m-%d}", fire, fire - timedelta(hours=1)),
        ).fetchone()
        assert schedule_id is not None
        row = conn.execute(
            "SELECT id, complete_by, deadline_callback FROM pgsched.tasks WHERE schedule_id = %s",
            schedule_id,
        ).fetchone()
        assert row is not None
        armed.append((schedule_id[0], row[0]))
        assert row[1].astimezone(BERLIN).time().isoformat() == "09:30:00"
        assert row[2] == "report_late"
    by_utc = [
        row[1] for row in conn.execute("SELECT id, complete_by FROM pgsched.tasks ORDER BY id")
    ]
    assert [t.astimezone(UTC).strftime("%m-%d %H:%M") for t in by_utc] == [
        "03-28 08:30",
        "03-29 07:30",
        "07-01 07:30",
    ]
    # Not run at all: each occurrence's miss is on its schedule too, with its fire time.
    judged = sweep(conn, datetime(2026, 7, 2, tzinfo=UTC))
    assert sorted((j["schedule_id"], j["outcome"]) for j in judged) == sorted(
        (s, "missed") for s, _ in armed
    )
    events = conn.execute(
        "SELECT schedule_id, fire_at FROM pgsched.schedule_events"
        " WHERE what = 'deadline_missed' ORDER BY fire_at"
    ).fetchall()
    assert [(s, f.astimezone(BERLIN).replace(tzinfo=None)) for s, f in events] == [
        (s, d) for (s, _), d in zip(armed, days, strict=True)
    ]


def test_the_sweep_logs_each_miss_with_its_task_and_counts_it(
    conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    t0 = now(conn)
    missed = [schedule(conn, "report", complete_by=t0 + timedelta(seconds=30)) for _ in range(3)]
    schedule(conn, "digest", complete_by=t0 + timedelta(seconds=30))
    counted: list[str] = []
    deadlines = DeadlineSweep(chunk=2, on_missed=counted.append)
    with caplog.at_level(logging.WARNING, logger="pgsched.sweeps"):
        counts = deadlines.run_once(conn, t0 + timedelta(minutes=1))
    assert counts == {"deadlines_met": 0, "deadlines_missed": 4, "callbacks": 0}
    assert sorted(counted) == ["digest", "report", "report", "report"]
    lines = [r for r in caplog.records if getattr(r, "event", None) == "deadline_missed"]
    assert sorted(r.task_id for r in lines)[:3] == missed  # type: ignore[attr-defined]
    assert all("missed its deadline" in r.getMessage() for r in lines)
    assert deadlines.run_once(conn, t0 + timedelta(minutes=2))["deadlines_missed"] == 0


def test_status_and_the_dashboard_show_the_misses(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    t0 = now(conn)
    task = schedule(conn, "nightly_export", tenant_id="acme", complete_by=t0 + timedelta(seconds=1))
    sweep(conn, t0 + timedelta(seconds=2))
    # The deadline fell just now, so it is within status's last 24 h.
    shown = run_cli(db_env, "status")
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("deadline missed:"))
    assert f"task {task} (nightly_export, tenant acme) missed its deadline" in line
    assert "it is QUEUED" in line
    as_json = run_cli(db_env, "status", "--json")
    data = json.loads(as_json.stdout)
    assert data["deadline_misses_24h"] == 1
    assert [m["task_id"] for m in data["deadline_misses"]] == [task]
    # A late report is no stuck engine: status --check does not fail on it.
    assert run_cli(db_env, "status", "--check").returncode == 0
    with running_dashboard(env_without_auth(db_env)) as dash:
        page = httpx.get(dash.url + "/")
    assert page.status_code == 200
    assert "missed in the last 24 hours: <strong>1</strong>" in page.text
    assert f'data-task-id="{task}"' in page.text


def test_app_schedules_with_a_deadline_and_a_schedule_with_complete_within(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    from pgsched import App
    from pgsched.errors import InvalidTaskError

    app = App(db_dsn)
    t0 = now(conn)
    task = app.schedule(
        "export", tenant_id="acme", complete_by=t0 + timedelta(hours=1), deadline_callback="late"
    )
    row = conn.execute(
        "SELECT complete_by, deadline_callback FROM pgsched.tasks WHERE id = %s", (int(task),)
    ).fetchone()
    assert row == (t0 + timedelta(hours=1), "late")
    with pytest.raises(InvalidTaskError, match="must be after the task is due"):
        app.schedule("export", run_at=t0 + timedelta(hours=2), complete_by=t0 + timedelta(hours=1))
    with pytest.raises(InvalidTaskError, match="deadline_callback needs complete_by"):
        app.schedule("export", deadline_callback="late")
    schedule_id = app.schedule_recurring(
        "report",
        "0 9 * * *",
        timezone="Europe/Berlin",
        tenant_id="acme",
        complete_within=1800,
        deadline_callback="late",
    )
    armed = conn.execute(
        "SELECT t.complete_by - t.next_run_at, s.complete_within FROM pgsched.tasks AS t"
        " JOIN pgsched.schedules AS s ON s.id = t.schedule_id WHERE s.id = %s",
        (schedule_id,),
    ).fetchone()
    assert armed == (timedelta(minutes=30), timedelta(minutes=30))
    with pytest.raises(InvalidTaskError, match="complete_within"):
        app.schedule_recurring("report", "0 9 * * *", complete_within=-5)
    with pytest.raises(InvalidTaskError, match="complete_within: seconds or a timedelta"):
        app.schedule_recurring("report", "0 9 * * *", complete_within="soon")  # type: ignore[arg-type]
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (2,)


def test_the_command_line_schedules_with_deadlines(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    done = run_cli(
        db_env, "schedule", "export", "--complete-by", "+2h", "--deadline-callback", "late"
    )
    assert done.returncode == 0, done.stderr
    row = conn.execute(
        "SELECT complete_by - now(), deadline_callback FROM pgsched.tasks"
    ).fetchone()
    assert row is not None
    assert timedelta(minutes=119) < row[0] <= timedelta(hours=2) and row[1] == "late"
    recurring = run_cli(
        db_env,
        "schedule",
        "report",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
        "--complete-within",
        "30m",
    )
    assert recurring.returncode == 0, recurring.stderr
    assert conn.execute("SELECT complete_within FROM pgsched.schedules").fetchone() == (
        timedelta(minutes=30),
    )
    for args, message in (
        (["--complete-within", "30m"], "--complete-within is for a --cron schedule"),
        (["--cron", "0 9 * * *", "--complete-by", "+1h"], "--complete-by is for one task"),
        (["--at", "+2h", "--complete-by", "+1h"], "must be after the task is due"),
        (["--deadline-callback", "late"], "deadline_callback needs complete_by"),
        (["--complete-by", "soon"], "--complete-by"),
    ):
        refused = run_cli(db_env, "schedule", "export", *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert message in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stderr
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (2,)
