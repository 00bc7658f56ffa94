"""Recurring schedules against a real database: creating them (SQL, Python, CLI), arming the
first occurrence, misfire policies after an outage, and quarantine of broken rows.

Time is driven through `now=` (pgsched.recurring.arm, RecurringSweep.run_once), never by
sleeping: an outage is simulated by moving a schedule's last fire time into the past.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched import App
from pgsched.errors import InvalidTaskError
from pgsched.recurring import MISFIRE_GRACE, ScheduleRow, arm, arm_after_task
from pgsched.sweeps import RecurringSweep
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import db_now, skewed_env

HOUR = timedelta(hours=1)
# The simulated "now" of the outage tests: ten minutes past an hour, in the past, so every
# fire time of the simulation is due (QUEUED) whatever the real clock says.
NOW = datetime(2026, 6, 15, 12, 10, tzinfo=UTC)
TOP = NOW.replace(minute=0)  # the newest hourly fire time before NOW


PGSCHED = str(Path(sys.executable).with_name("pgsched"))


# -- helpers ----------------------------------------------------------------------------


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`pgsched ARGS` as a user runs it (not checked)."""
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def counts(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.schedules),"
        " (SELECT count(*) FROM pgsched.tasks),"
        " (SELECT count(*) FROM pgsched.schedule_occurrences),"
        " (SELECT count(*) FROM pgsched.schedule_events),"
        " (SELECT count(*) FROM pgsched.idempotency_keys)"
    ).fetchone()
    assert row is not None
    return dict(zip(["schedules", "tasks", "occurrences", "events", "keys"], row, strict=True))


def schedule_row(conn: psycopg.Connection, schedule_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT *, misfire_policy::text AS policy FROM pgsched.schedules WHERE id = %s",
            (schedule_id,),
        ).fetchone()
    assert row is not None, f"no schedule {schedule_id}"
    return row


def as_schedule_row(conn: psycopg.Connection, schedule_id: int) -> ScheduleRow:
    s = schedule_row(conn, schedule_id)
    return ScheduleRow(
        s["id"],
        s["cron_expression"],
        s["timezone"],
        s["policy"],
        s["catch_up_limit"],
        s["last_fire_at"],
        s["armed_task_id"],
        s["created_at"],
    )


def task_row(conn: psycopg.Connection, task_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT *, status::text AS status_text, tableoid::regclass::text AS part"
            " FROM pgsched.tasks WHERE id = %s",
            (task_id,),
        ).fetchone()
    assert row is not None, f"no task {task_id}"
    return row


def occurrences(
    conn: psycopg.Connection, schedule_id: int
) -> list[tuple[datetime, str, int | None]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT fire_at, outcome, task_id FROM pgsched.schedule_occurrences"
            " WHERE schedule_id = %s ORDER BY fire_at",
            (schedule_id,),
        ).fetchall()
    ]


def schedule_events(conn: psycopg.Connection, schedule_id: int) -> list[tuple[str, Any, Any]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT what, fire_at, detail FROM pgsched.schedule_events"
            " WHERE schedule_id = %s ORDER BY id",
            (schedule_id,),
        ).fetchall()
    ]


def create_unarmed(
    conn: psycopg.Connection,
    cron: str,
    *,
    zone: str = "UTC",
    policy: str = "run_once",
    catch_up_limit: int = 10,
    task_type: str = "tick",
) -> int:
    """A schedule made through SQL without first_fire_at: no task, no occurrence yet."""
    row = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => %s, cron_expression => %s,"
        " timezone => %s, misfire_policy => %s, catch_up_limit => %s)",
        (task_type, cron, zone, policy, catch_up_limit),
    ).fetchone()
    assert row is not None
    return int(row[0])


def simulate_outage(conn: psycopg.Connection, schedule_id: int, last_fire: datetime) -> None:
    """As if the schedule last fired at `last_fire` and nothing ran since."""
    conn.execute(
        "UPDATE pgsched.schedules SET last_fire_at = %s, armed_task_id = NULL,"
        " created_at = %s WHERE id = %s",
        (last_fire, last_fire - HOUR, schedule_id),
    )


def complete(conn: psycopg.Connection, task_id: int) -> None:
    """QUEUED -> PROCESSING -> COMPLETED by plain SQL (the trigger records both)."""
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
        " locked_by = 'test' WHERE id = %s AND status = 'QUEUED'",
        (task_id,),
    )
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'COMPLETED' WHERE id = %s AND status = 'PROCESSING'",
        (task_id,),
    )
    assert task_row(conn, task_id)["status_text"] == "COMPLETED"


def expected_daily(now: datetime, zone: str, at: time) -> datetime:
    """The first `at` wall-clock time in `zone` strictly after `now`, in UTC (by zoneinfo)."""
    tz = ZoneInfo(zone)
    day: date = now.astimezone(tz).date()
    while True:
        candidate = datetime.combine(day, at, tzinfo=tz).astimezone(UTC)
        if candidate > now:
            return candidate
        day += timedelta(days=1)


def hot_window(conn: psycopg.Connection) -> timedelta:
    row = conn.execute("SELECT hot_window FROM pgsched.settings").fetchone()
    assert row is not None
    return row[0]


# -- 2. creating schedules ----------------------------------------------------------------

BAD_SQL_INPUT: list[tuple[dict[str, Any], str]] = [
    ({"cron_expression": "not a cron"}, "five fields"),
    ({"cron_expression": "* * *"}, "five fields"),
    ({"cron_expression": ""}, "cron_expression is required"),
    ({"cron_expression": None}, "cron_expression is required"),
    ({"cron_expression": "0 0 31 2 *"}, "never fires"),
    ({"cron_expression": "0 0 30 2 *"}, "never fires"),
    ({"cron_expression": "@daily"}, "five fields"),
    ({"cron_expression": "0 0 * * 5#2"}, "not support|invalid cron"),
    ({"cron_expression": "0 0 * * 1;"}, "invalid cron"),
    ({"timezone": "PST"}, "unknown time zone 'PST'"),
    ({"timezone": "EST"}, "unknown time zone 'EST'"),
    ({"timezone": "Asia/Beijing"}, "unknown time zone"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"timezone": "posix/Europe/Berlin"}, "unknown time zone"),
    ({"timezone": ""}, "time zone is required"),
    ({"timezone": None}, "time zone is required"),
    ({"misfire_policy": "sometimes"}, "unknown misfire_policy"),
    ({"misfire_policy": None}, "unknown misfire_policy"),
    ({"catch_up_limit": 0}, "catch_up_limit must be at least 1"),
    ({"priority": 11}, "priority"),
]


def call_schedule_recurring(conn: psycopg.Connection, **override: Any) -> Any:
    args: dict[str, Any] = {
        "task_type": "tick",
        "cron_expression": "0 9 * * *",
        "timezone": "Europe/Berlin",
        "misfire_policy": "run_once",
        "idempotency_key": "k1",
        "first_fire_at": datetime.now(UTC) + HOUR,
        **override,
    }
    named = ", ".join(f"{name} => %({name})s" for name in args)
    return conn.execute(f"SELECT pgsched.schedule_recurring({named})", args).fetchone()


def test_sql_schedule_recurring_refuses_bad_input_and_writes_nothing(
    conn: psycopg.Connection,
) -> None:
    before = counts(conn)
    for override, message in BAD_SQL_INPUT:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            call_schedule_recurring(conn, **override)
        assert counts(conn) == before, override
    # The same call with good input writes the schedule, its task and its occurrence.
    call_schedule_recurring(conn)
    after = counts(conn)
    assert (after["schedules"], after["tasks"], after["occurrences"]) == (1, 1, 1)


@pytest.mark.parametrize("cron", ["61 * * * *", "0 24 * * *", "0 0 32 * *", "0 0 * 13 *"])
def test_sql_schedule_recurring_refuses_out_of_range_fields(
    conn: psycopg.Connection, cron: str
) -> None:
    before = counts(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="cron"):
        call_schedule_recurring(conn, cron_expression=cron, first_fire_at=None)
    assert counts(conn) == before


def test_sql_schedule_without_first_fire_is_armed_by_the_sweep(conn: psycopg.Connection) -> None:
    conn.execute("LISTEN pgsched_recurring")
    schedule_id = create_unarmed(conn, "*/5 * * * *")
    # The sweep is told at once that a schedule waits to be armed.
    assert [n.channel for n in conn.notifies(timeout=2, stop_after=1)] == ["pgsched_recurring"]
    s = schedule_row(conn, schedule_id)
    assert s["armed_task_id"] is None and s["last_fire_at"] is None
    assert counts(conn)["tasks"] == 0

    now = s["created_at"]
    counted = RecurringSweep().run_once(conn, now)
    assert counted == {"armed": 1, "not_armed": 0}
    s = schedule_row(conn, schedule_id)
    step = timedelta(minutes=5)
    first = datetime.fromtimestamp((now.timestamp() // 300 + 1) * 300, UTC)
    assert first - now <= step and first > now
    assert s["last_fire_at"] == first
    t = task_row(conn, s["armed_task_id"])
    assert t["next_run_at"] == first and t["schedule_id"] == schedule_id
    assert occurrences(conn, schedule_id) == [(first, "ARMED", t["id"])]
    # Armed means not unarmed: a second sweep does nothing.
    assert RecurringSweep().run_once(conn, now) == {"armed": 0, "not_armed": 0}


@pytest.mark.parametrize(
    ("cron", "zone", "wall"),
    [
        ("0 9 * * *", "Europe/Berlin", time(9, 0)),
        ("15 12 * * *", "America/New_York", time(12, 15)),
        ("45 23 * * *", "Australia/Lord_Howe", time(23, 45)),
    ],
)
def test_app_schedule_recurring_arms_the_first_occurrence_at_once(
    conn: psycopg.Connection, db_dsn: str, cron: str, zone: str, wall: time
) -> None:
    before = datetime.now(UTC)
    schedule_id = App(db_dsn).schedule_recurring(
        "report", cron, timezone=zone, payload={"n": 1}, tenant_id="acme", priority=6
    )
    after = datetime.now(UTC)
    s = schedule_row(conn, schedule_id)
    # Cron and zone are kept apart, as given.
    assert (s["cron_expression"], s["timezone"]) == (cron, zone)
    assert (s["tenant_id"], s["task_type"], s["policy"]) == ("acme", "report", "run_once")
    assert s["enabled"] and s["quarantine_reason"] is None

    expected = {expected_daily(before, zone, wall), expected_daily(after, zone, wall)}
    t = task_row(conn, s["armed_task_id"])
    assert t["next_run_at"] in expected
    assert t["next_run_at"].utcoffset() is not None
    # Stored as an instant: the UTC reading, computed in the zone.
    conn.execute("SET TIME ZONE 'UTC'")
    stored = conn.execute(
        "SELECT next_run_at::text FROM pgsched.tasks WHERE id = %s", (t["id"],)
    ).fetchone()
    assert stored is not None
    assert stored[0] == t["next_run_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S+00")
    local = t["next_run_at"].astimezone(ZoneInfo(zone))
    assert local.time() == wall
    assert t["schedule_type"] == "RECURRING" and t["schedule_id"] == schedule_id
    assert (t["cron_expression"], t["timezone"]) == (cron, zone)
    assert (t["tenant_id"], t["task_type"], t["payload"], t["priority"]) == (
        "acme",
        "report",
        {"n": 1},
        6,
    )
    # Routed like any task: a daily first fire is within the hot window.
    assert t["next_run_at"] - after < hot_window(conn)
    assert (t["status_text"], t["part"]) == ("QUEUED", "pgsched.tasks_hot")
    assert s["last_fire_at"] == t["next_run_at"]
    assert occurrences(conn, schedule_id) == [(t["next_run_at"], "ARMED", t["id"])]


def test_app_schedule_recurring_routes_a_far_first_fire_by_the_hot_window(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    now = datetime.now(UTC)
    tz = ZoneInfo("America/Santiago")
    # 1 January, 00:00 in Santiago: next year's (today is not 1 January at 00:00 sharp).
    expected = datetime(now.astimezone(tz).year + 1, 1, 1, tzinfo=tz).astimezone(UTC)
    schedule_id = App(db_dsn).schedule_recurring("yearly", "0 0 1 1 *", timezone="America/Santiago")
    t = task_row(conn, schedule_row(conn, schedule_id)["armed_task_id"])
    assert t["next_run_at"] == expected
    want = "PENDING" if expected - now >= hot_window(conn) else "QUEUED"
    part = {"PENDING": "pgsched.tasks_cold", "QUEUED": "pgsched.tasks_hot"}[want]
    assert (t["status_text"], t["part"]) == (want, part)


def test_same_key_per_tenant_returns_the_same_schedule(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    app = App(db_dsn)
    first = app.schedule_recurring("tick", "*/10 * * * *", idempotency_key="nightly")
    again = app.schedule_recurring("tick", "*/10 * * * *", idempotency_key="nightly")
    # Even with a different expression, the key names the schedule that exists.
    different = app.schedule_recurring("tick", "0 3 * * *", idempotency_key="nightly")
    other_tenant = app.schedule_recurring(
        "tick", "*/10 * * * *", idempotency_key="nightly", tenant_id="acme"
    )
    assert first == again == different
    assert other_tenant != first
    assert counts(conn)["schedules"] == 2
    # One armed occurrence per schedule: the repeats armed nothing.
    rows = conn.execute(
        "SELECT schedule_id, count(*) FROM pgsched.tasks GROUP BY schedule_id ORDER BY 1"
    ).fetchall()
    assert rows == [(first, 1), (other_tenant, 1)]
    assert schedule_row(conn, first)["cron_expression"] == "*/10 * * * *"
    # And the SQL function agrees.
    row = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'tick', cron_expression => '* * * * *',"
        " idempotency_key => 'nightly')"
    ).fetchone()
    assert row is not None and row[0] == first


def test_app_schedule_recurring_refuses_bad_input_and_writes_nothing(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    app = App(db_dsn)
    before = counts(conn)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cron_expression": "61 * * * *"}, "out of range"),
        ({"cron_expression": "0 0 31 2 *"}, "never fires"),
        ({"cron_expression": "0 0 L * *"}, "does not support"),
        ({"cron_expression": "0 0 * * 5#2"}, "not support|invalid cron"),
        ({"cron_expression": "0 0 15W * *"}, "not support|invalid cron"),
        ({"timezone": "PST"}, "unknown time zone 'PST'"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"misfire_policy": "sometimes"}, "unknown misfire_policy"),
        ({"catch_up_limit": 0}, "catch_up_limit"),
    ]
    for kwargs, message in cases:
        args: dict[str, Any] = {"cron_expression": "0 9 * * *", "timezone": "UTC", **kwargs}
        cron = args.pop("cron_expression")
        with pytest.raises(InvalidTaskError, match=message):
            app.schedule_recurring("tick", cron, idempotency_key="k", **args)
        assert counts(conn) == before, kwargs


def test_cli_schedule_cron_with_zone(conn: psycopg.Connection, db_env: dict[str, str]) -> None:
    before = datetime.now(UTC)
    done = run_cli(db_env, "schedule", "report", "--cron", "0 9 * * *", "--tz", "Europe/Berlin")
    after = datetime.now(UTC)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("schedule ")
    schedule_id = int(done.stdout.split()[1])
    s = schedule_row(conn, schedule_id)
    assert (s["cron_expression"], s["timezone"], s["policy"]) == (
        "0 9 * * *",
        "Europe/Berlin",
        "run_once",
    )
    t = task_row(conn, s["armed_task_id"])
    assert t["next_run_at"] in {
        expected_daily(before, "Europe/Berlin", time(9)),
        expected_daily(after, "Europe/Berlin", time(9)),
    }

    misfire = run_cli(db_env, "schedule", "sync", "--cron", "*/5 * * * *", "--misfire", "catch_up")
    assert misfire.returncode == 0, misfire.stderr
    s2 = schedule_row(conn, int(misfire.stdout.split()[1]))
    assert (s2["timezone"], s2["policy"]) == ("UTC", "catch_up")

    written = counts(conn)
    refused = run_cli(db_env, "schedule", "report", "--cron", "0 9 * * *", "--tz", "PST")
    assert refused.returncode != 0
    assert "unknown time zone 'PST'" in refused.stderr
    assert "IANA" in refused.stderr
    bad_cron = run_cli(db_env, "schedule", "report", "--cron", "0 0 31 2 *")
    assert bad_cron.returncode != 0 and "never fires" in bad_cron.stderr
    bad_policy = run_cli(db_env, "schedule", "report", "--cron", "* * * * *", "--misfire", "x")
    assert bad_policy.returncode != 0 and "--misfire" in bad_policy.stderr
    both = run_cli(db_env, "schedule", "report", "--cron", "* * * * *", "--at", "+1h")
    assert both.returncode != 0 and "exclude each other" in both.stderr
    assert counts(conn) == written


@pytest.mark.parametrize("skew", ["+1h", "-1h"])
def test_a_producer_whose_host_clock_is_off_arms_the_first_fire_by_the_database_clock(
    conn: psycopg.Connection, db_env: dict[str, str], skew: str
) -> None:
    env = skewed_env(db_env, skew)
    shifted = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    off = float(shifted.stdout) - datetime.now(UTC).timestamp()
    assert abs(off - int(skew[:-1]) * 3600) < 120, f"the host clock was shifted by {off:.0f}s"
    before = db_now(conn)
    done = run_cli(env, "schedule", "tick", "--cron", "*/5 * * * *")
    after = db_now(conn)
    assert done.returncode == 0, done.stderr
    fire = task_row(conn, schedule_row(conn, int(done.stdout.split()[1]))["armed_task_id"])
    # The first */5 boundary after the database's now: an hour ahead would skip twelve fire
    # times, an hour behind would arm one an hour in the past (run at once).
    assert before < fire["next_run_at"] <= after + timedelta(minutes=5), (before, fire)


# -- 3. misfire policies after a 12-hour outage -------------------------------------------

MISSED = [TOP - HOUR * n for n in range(11, -1, -1)]  # 12 hourly fire times, oldest first


def test_outage_setup_misses_twelve_fire_times() -> None:
    assert len(MISSED) == 12
    assert MISSED[0] == TOP - 11 * HOUR and MISSED[-1] == TOP
    assert all(fire < NOW - MISFIRE_GRACE for fire in MISSED)
    assert TOP + HOUR > NOW


def test_run_once_runs_the_newest_missed_fire_time_and_records_the_rest(
    conn: psycopg.Connection,
) -> None:
    schedule_id = create_unarmed(conn, "0 * * * *", policy="run_once")
    other = create_unarmed(conn, "0 * * * *", policy="run_once")
    simulate_outage(conn, schedule_id, TOP - 12 * HOUR)
    before = counts(conn)

    task_id = arm(conn, as_schedule_row(conn, schedule_id), now=NOW)

    assert task_id is not None
    t = task_row(conn, task_id)
    assert t["next_run_at"] == TOP and t["status_text"] == "QUEUED"
    occ = occurrences(conn, schedule_id)
    assert [(f, o) for f, o, _ in occ] == [(f, "MISSED") for f in MISSED[:-1]] + [(TOP, "ARMED")]
    assert occ[-1][2] == task_id and all(tid is None for _, _, tid in occ[:-1])
    events = schedule_events(conn, schedule_id)
    assert [(what, fire) for what, fire, _ in events] == [("missed", f) for f in MISSED[:-1]]
    assert all("run_once" in detail for _, _, detail in events)
    s = schedule_row(conn, schedule_id)
    assert (s["armed_task_id"], s["last_fire_at"]) == (task_id, TOP)
    after = counts(conn)
    assert after["tasks"] == before["tasks"] + 1
    assert after["occurrences"] == before["occurrences"] + 12
    # Nothing happened to the other schedule.
    assert occurrences(conn, other) == []

    # Arming again with the stale row (from before the arming) is refused.
    stale = ScheduleRow(schedule_id, "0 * * * *", "UTC", "run_once", 10, TOP - 12 * HOUR, None, NOW)
    assert arm(conn, stale, now=NOW) is None
    assert counts(conn) == after

    # Once it ran, the next occurrence is the next future fire time; nothing more is missed.
    complete(conn, task_id)
    next_task = arm(conn, as_schedule_row(conn, schedule_id), now=NOW)
    assert next_task is not None
    assert task_row(conn, next_task)["next_run_at"] == TOP + HOUR
    assert schedule_row(conn, schedule_id)["last_fire_at"] == TOP + HOUR
    assert len([o for o in occurrences(conn, schedule_id) if o[1] == "MISSED"]) == 11


def test_skip_records_every_missed_fire_time_and_arms_the_next_future_one(
    conn: psycopg.Connection,
) -> None:
    schedule_id = create_unarmed(conn, "0 * * * *", policy="skip")
    simulate_outage(conn, schedule_id, TOP - 12 * HOUR)

    task_id = arm(conn, as_schedule_row(conn, schedule_id), now=NOW)

    assert task_id is not None
    assert task_row(conn, task_id)["next_run_at"] == TOP + HOUR
    occ = occurrences(conn, schedule_id)
    assert [(f, o) for f, o, _ in occ] == [(f, "MISSED") for f in MISSED] + [(TOP + HOUR, "ARMED")]
    events = schedule_events(conn, schedule_id)
    assert [(w, f) for w, f, _ in events] == [("missed", f) for f in MISSED]
    assert all("skip" in d for _, _, d in events)
    assert schedule_row(conn, schedule_id)["last_fire_at"] == TOP + HOUR


def test_catch_up_runs_the_newest_missed_ones_oldest_first_up_to_the_limit(
    conn: psycopg.Connection,
) -> None:
    schedule_id = create_unarmed(conn, "0 * * * *", policy="catch_up", catch_up_limit=5)
    simulate_outage(conn, schedule_id, TOP - 12 * HOUR)
    sweep = RecurringSweep()

    assert sweep.run_once(conn, NOW) == {"armed": 1, "not_armed": 0}
    s = schedule_row(conn, schedule_id)
    assert s["last_fire_at"] == MISSED[7]  # the 8th missed: 12 - 5 + 1
    recorded = [f for f, o, _ in occurrences(conn, schedule_id) if o == "MISSED"]
    assert recorded == MISSED[:7]
    assert [f for w, f, _ in schedule_events(conn, schedule_id) if w == "missed"] == MISSED[:7]

    # Each completion lets the sweep arm the next missed one, in order, then the future.
    armed = [s["last_fire_at"]]
    lane = task_row(conn, s["armed_task_id"])["lane"]
    for _ in range(5):
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 10, 'w1', '30 seconds', %s)",
            (lane, NOW),
        ).fetchall()
        assert [r[0] for r in claimed] == [schedule_row(conn, schedule_id)["armed_task_id"]]
        conn.execute(
            "SELECT * FROM pgsched.task_finish_many(%s, %s, ARRAY['COMPLETED'], as_of => %s)",
            ([claimed[0][0]], [claimed[0][1]], NOW),
        )
        assert sweep.run_once(conn, NOW) == {"armed": 1, "not_armed": 0}
        armed.append(schedule_row(conn, schedule_id)["last_fire_at"])
    assert armed == [*MISSED[7:], TOP + HOUR]
    occ = occurrences(conn, schedule_id)
    assert [f for f, o, _ in occ if o == "MISSED"] == MISSED[:7]
    assert [f for f, o, _ in occ if o == "ARMED"] == [*MISSED[7:], TOP + HOUR]
    # One task per armed occurrence, each due at its own fire time.
    rows = conn.execute(
        "SELECT next_run_at, status::text FROM pgsched.tasks WHERE schedule_id = %s"
        " ORDER BY next_run_at",
        (schedule_id,),
    ).fetchall()
    assert rows == [(f, "COMPLETED") for f in MISSED[7:]] + [(TOP + HOUR, "QUEUED")]
    # Nothing runs ahead of its time: the future one waits.
    assert sweep.run_once(conn, NOW) == {"armed": 0, "not_armed": 0}


def test_catch_up_with_a_roomy_limit_runs_every_missed_fire_time(
    conn: psycopg.Connection,
) -> None:
    schedule_id = create_unarmed(conn, "0 * * * *", policy="catch_up", catch_up_limit=100)
    simulate_outage(conn, schedule_id, TOP - 12 * HOUR)
    task_id = arm(conn, as_schedule_row(conn, schedule_id), now=NOW)
    assert task_id is not None and task_row(conn, task_id)["next_run_at"] == MISSED[0]
    assert [o for o in occurrences(conn, schedule_id) if o[1] == "MISSED"] == []
    assert schedule_events(conn, schedule_id) == []


def test_a_fire_time_late_by_less_than_the_grace_is_not_a_misfire(
    conn: psycopg.Connection,
) -> None:
    schedule_id = create_unarmed(conn, "0 * * * *", policy="skip")
    simulate_outage(conn, schedule_id, TOP - HOUR)
    task_id = arm(conn, as_schedule_row(conn, schedule_id), now=TOP + MISFIRE_GRACE / 2)
    assert task_id is not None
    assert task_row(conn, task_id)["next_run_at"] == TOP
    assert occurrences(conn, schedule_id) == [(TOP, "ARMED", task_id)]


def test_worker_path_arms_the_next_occurrence_after_a_completion(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    schedule_id = App(db_dsn).schedule_recurring("tick", "*/5 * * * *")
    first = schedule_row(conn, schedule_id)
    complete(conn, first["armed_task_id"])
    second_task = arm_after_task(conn, first["armed_task_id"])
    assert second_task is not None
    assert task_row(conn, second_task)["next_run_at"] == first["last_fire_at"] + timedelta(
        minutes=5
    )
    # A task that is not a schedule's armed occurrence advances nothing.
    assert arm_after_task(conn, first["armed_task_id"]) is None
    assert arm_after_task(conn, 10**9) is None


def live_occurrences(conn: psycopg.Connection, schedule_id: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE schedule_id = %s"
        " AND status IN ('PENDING', 'QUEUED', 'PROCESSING')",
        (schedule_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_arming_while_the_current_occurrence_is_live_adds_no_second_one(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    # What a worker does when its COMPLETED report was stale (its lease was lost and the
    # task runs elsewhere): it still asks to advance the schedule. Nothing may be armed.
    schedule_id = App(db_dsn).schedule_recurring("tick", "*/5 * * * *")
    current = schedule_row(conn, schedule_id)["armed_task_id"]
    # The occurrence is running (another worker holds it).
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = 1, locked_by = 'w2',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'"
        " WHERE id = %s",
        (current,),
    )
    assert live_occurrences(conn, schedule_id) == 1
    arm_after_task(conn, current)
    arm(conn, as_schedule_row(conn, schedule_id))
    assert live_occurrences(conn, schedule_id) == 1
    assert schedule_row(conn, schedule_id)["armed_task_id"] == current


# -- 6. quarantine ------------------------------------------------------------------------


def test_broken_schedules_are_quarantined_and_the_others_keep_firing(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    app = App(db_dsn)
    bad_cron = app.schedule_recurring("tick", "*/5 * * * *", idempotency_key="bad-cron")
    bad_zone = app.schedule_recurring("tick", "*/5 * * * *", idempotency_key="bad-zone")
    never = app.schedule_recurring("tick", "*/5 * * * *", idempotency_key="never")
    good = [
        app.schedule_recurring("tick", "*/5 * * * *", idempotency_key=f"g{n}") for n in range(3)
    ]
    conn.execute(
        "UPDATE pgsched.schedules SET cron_expression = 'not a cron' WHERE id = %s", (bad_cron,)
    )
    conn.execute(
        "UPDATE pgsched.schedules SET timezone = 'Mars/Olympus' WHERE id = %s", (bad_zone,)
    )
    conn.execute(
        "UPDATE pgsched.schedules SET cron_expression = '0 0 31 2 *' WHERE id = %s", (never,)
    )
    # Every current occurrence finishes; the sweep must arm the next ones.
    firsts = {sid: schedule_row(conn, sid) for sid in [bad_cron, bad_zone, never, *good]}
    for s in firsts.values():
        complete(conn, s["armed_task_id"])
    before = counts(conn)

    now = datetime.now(UTC)
    result = RecurringSweep().run_once(conn, now)

    assert result == {"armed": 3, "not_armed": 3}
    for sid, what in [(bad_cron, "five fields"), (bad_zone, "Mars/Olympus"), (never, "never")]:
        s = schedule_row(conn, sid)
        assert not s["enabled"], sid
        assert what in s["quarantine_reason"], s["quarantine_reason"]
        assert s["armed_task_id"] == firsts[sid]["armed_task_id"]  # nothing new armed
        events = schedule_events(conn, sid)
        assert [(w, d) for w, _, d in events] == [("quarantined", s["quarantine_reason"])]
        assert len(occurrences(conn, sid)) == 1
    for sid in good:
        s = schedule_row(conn, sid)
        assert s["enabled"] and s["quarantine_reason"] is None
        assert s["last_fire_at"] == firsts[sid]["last_fire_at"] + timedelta(minutes=5)
        assert task_row(conn, s["armed_task_id"])["status_text"] == "QUEUED"
    after = counts(conn)
    assert after["tasks"] == before["tasks"] + 3
    assert after["events"] == before["events"] + 3

    # Quarantined rows are out of service: the next sweeps neither arm nor re-report them.
    assert RecurringSweep().run_once(conn, now) == {"armed": 0, "not_armed": 0}
    assert counts(conn) == after

    # Fixed and re-enabled, a schedule is armed again.
    conn.execute(
        "UPDATE pgsched.schedules SET cron_expression = '*/5 * * * *' WHERE id = %s", (bad_cron,)
    )
    conn.execute("SELECT pgsched.schedule_enable(%s)", (bad_cron,))
    assert schedule_row(conn, bad_cron)["quarantine_reason"] is None
    assert RecurringSweep().run_once(conn, now) == {"armed": 1, "not_armed": 0}
    assert [w for w, _, _ in schedule_events(conn, bad_cron)] == ["quarantined", "enabled"]


def test_a_broken_row_is_quarantined_on_the_worker_path_too(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    schedule_id = App(db_dsn).schedule_recurring("tick", "*/5 * * * *")
    task_id = schedule_row(conn, schedule_id)["armed_task_id"]
    conn.execute("UPDATE pgsched.schedules SET timezone = 'EST' WHERE id = %s", (schedule_id,))
    complete(conn, task_id)
    assert arm_after_task(conn, task_id) is None
    s = schedule_row(conn, schedule_id)
    assert not s["enabled"] and "unknown time zone 'EST'" in s["quarantine_reason"]
