"""Faults the sweeps and the long-running processes must contain, against a real database
and real `pgsched scheduler` / `pgsched worker` processes:

    a bad schedule is quarantined with its reason; the others fire on time
    a failing sweep stops only itself; the others keep their times
    a lost leader connection: "lost leadership", re-elected, timings kept
    every due / misfire / lease decision by the database clock, with the host clock of
        the sweeper or worker skewed by an hour (libfaketime, LD_PRELOAD on the subprocess)
    settings refused at start, naming the option
    a database not migrated, or migrated by an older / newer pgsched: exit 2 with what to run
    an unreachable database: retry with backoff, a log line per attempt
"""

from __future__ import annotations

import itertools
import logging
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.migrations import migrate
from pgsched.sweeps import (
    CHUNK_TIMINGS,
    PromotionSweep,
    RecurringSweep,
    Sweeper,
)
from tests.apps.recurring_app import create_tables
from tests.support.paths import REPO_ROOT
from tests.support.processes import PGSCHED, RECURRING_APP, Processes, run_cli
from tests.support.worker_helpers import skewed_env, wait_until

HOUR = timedelta(hours=1)


SCHEDULER = ("sweeper", "--log-level", "INFO", "--leader-retry", "1")


def db_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def schedule_row(conn: psycopg.Connection, schedule_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM pgsched.schedules WHERE id = %s", (schedule_id,)
        ).fetchone()
    assert row is not None
    return row


def make_schedule(conn: psycopg.Connection, cron: str = "* * * * *", **kwargs: Any) -> int:
    """pgsched.schedule_recurring from plain SQL, no first fire time: the sweep arms it."""
    names = "".join(f", {name} => %({name})s" for name in kwargs)
    row = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'minutely',"
        f" cron_expression => %(cron)s{names})",
        {"cron": cron, **kwargs},
    ).fetchone()
    assert row is not None
    return int(row[0])


def finish_armed(conn: psycopg.Connection, schedule_id: int) -> None:
    """The schedule's current occurrence ran (QUEUED/PENDING -> PROCESSING -> COMPLETED)."""
    task_id = schedule_row(conn, schedule_id)["armed_task_id"]
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'QUEUED' WHERE id = %s AND status = 'PENDING'",
        (task_id,),
    )
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
        " locked_by = 'test' WHERE id = %s",
        (task_id,),
    )
    conn.execute("UPDATE pgsched.tasks SET status = 'COMPLETED' WHERE id = %s", (task_id,))


def missed(conn: psycopg.Connection, schedule_id: int) -> list[datetime]:
    rows = conn.execute(
        "SELECT fire_at FROM pgsched.schedule_occurrences WHERE schedule_id = %s"
        " AND outcome = 'MISSED' ORDER BY fire_at",
        (schedule_id,),
    ).fetchall()
    return [r[0] for r in rows]


def next_minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0) + timedelta(minutes=1)


def test_a_schedule_the_database_refuses_is_quarantined_and_the_others_are_armed(
    conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """A row broken by hand (priority 11 written as superuser, past every check) made
    arming raise, which aborted the whole sweep before the schedules after it."""
    ids = [make_schedule(conn, "*/5 * * * *") for _ in range(4)]
    now = db_now(conn)
    assert RecurringSweep().run_once(conn, now) == {"armed": 4, "not_armed": 0}
    bad = ids[1]
    conn.execute("UPDATE pgsched.schedules SET priority = 11 WHERE id = %s", (bad,))
    before = {sid: schedule_row(conn, sid) for sid in ids}
    for sid in ids:
        finish_armed(conn, sid)

    with caplog.at_level(logging.ERROR, logger="pgsched.recurring"):
        counts = RecurringSweep().run_once(conn, now + timedelta(minutes=5))

    assert counts == {"armed": 3, "not_armed": 1}
    s = schedule_row(conn, bad)
    assert not s["enabled"]
    assert "priority 11 is out of range" in s["quarantine_reason"], s["quarantine_reason"]
    assert s["armed_task_id"] == before[bad]["armed_task_id"]
    events = conn.execute(
        "SELECT what, detail FROM pgsched.schedule_events WHERE schedule_id = %s", (bad,)
    ).fetchall()
    assert events == [("quarantined", s["quarantine_reason"])]
    logged = [r.getMessage() for r in caplog.records]
    assert any(f"schedule {bad} quarantined" in m and "priority 11" in m for m in logged), logged
    for sid in ids:
        if sid != bad:
            after = schedule_row(conn, sid)
            assert after["enabled"] and after["armed_task_id"] != before[sid]["armed_task_id"]
            assert after["last_fire_at"] == before[sid]["last_fire_at"] + timedelta(minutes=5)


@dataclass
class CountingSweep:
    name: str
    interval: float
    fail: bool = False
    runs: int = 0

    def run_once(self, conn: psycopg.Connection, now: datetime) -> dict[str, int]:
        self.runs += 1
        if self.fail:
            raise RuntimeError(f"{self.name} is broken")
        return {"runs": self.runs}


def test_a_failing_sweep_is_retried_at_its_interval_and_the_others_keep_theirs(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in one sweep ended the sweeper's thread (in-process) or restarted the
    leader (CLI), resetting every sweep's timing."""
    broken = CountingSweep("broken", 0.5, fail=True)
    steady = CountingSweep("steady", 0.2)
    hourly = CountingSweep("hourly", 3600.0)
    sweeper = Sweeper(db_dsn, [broken, steady, hourly], leader_retry=0.2)
    thread = threading.Thread(target=sweeper.run, daemon=True)
    with caplog.at_level(logging.INFO, logger="pgsched"):
        thread.start()
        try:
            wait_until(lambda: steady.runs >= 12, 20, what="the steady sweep to run 12 times")
            assert thread.is_alive() and sweeper.is_leader
        finally:
            sweeper.stop()
            thread.join(10)
    assert not thread.is_alive()
    # Run about every 0.5 s, never in a tight loop; the hourly sweep ran once, at start.
    assert 3 <= broken.runs <= 8, broken.runs
    assert hourly.runs == 1
    messages = [r.getMessage() for r in caplog.records]
    elected = [m for m in messages if "became leader" in m]
    assert len(elected) == 1 and elected[0].startswith("sweeper became leader (lease generation")
    assert sum("sweep broken failed (broken is broken)" in m for m in messages) == broken.runs


def test_in_a_running_sweeper_a_bad_schedule_stops_only_itself_and_a_lost_leader_returns(
    conn: psycopg.Connection, db_env: dict[str, str], processes: Processes
) -> None:
    sweeper = processes.start(
        "sweeper",
        *SCHEDULER,
        "--recurring-interval",
        "1",
        "--promotion-interval",
        "3600",
        "--rescue-interval",
        "3600",
        "--retention-interval",
        "3600",
    )
    processes.wait_log(sweeper, "sweeper became leader", 30)
    bad = make_schedule(conn, "*/5 * * * *")
    wait_until(lambda: schedule_row(conn, bad)["armed_task_id"], 10, what="the first arming")
    conn.execute("UPDATE pgsched.schedules SET priority = 11 WHERE id = %s", (bad,))
    finish_armed(conn, bad)
    # Made after the bad one: the sweep meets the bad row first (ORDER BY id).
    created = db_now(conn)
    good = [make_schedule(conn) for _ in range(3)]

    for sid in good:
        fire = wait_until(
            lambda: schedule_row(conn, sid)["last_fire_at"],  # noqa: B023 (waited for here)
            10,
            what=f"{sid} armed",
        )
        assert fire == next_minute(created) or fire == next_minute(created) + timedelta(
            minutes=1
        ), (fire, created)
        assert missed(conn, sid) == []
    wait_until(
        lambda: not schedule_row(conn, bad)["enabled"], 10, what="the bad schedule quarantined"
    )
    reason = schedule_row(conn, bad)["quarantine_reason"]
    assert "priority 11 is out of range" in reason, reason
    processes.wait_log(sweeper, f"schedule {bad} quarantined: {reason}", 5)

    status = run_cli(db_env, "status")
    assert status.returncode == 0, status.stderr
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith(f"! schedule {bad} ("))
    assert "is quarantined" in line and "priority 11 is out of range" in line, status.stdout

    # The leader's sessions are cut: it says so, is elected again, and its sweeps keep
    # their times (the hourly promotion sweep does not run again on re-election).
    pids = [
        r[0]
        for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
    ]
    assert len(pids) == 3, pids  # its lease (acquire, renew), work and LISTEN connections
    conn.execute("SELECT pg_terminate_backend(p) FROM unnest(%s::int[]) AS p", (pids,))
    processes.wait_log(sweeper, "sweeper lost leadership", 10)
    wait_until(
        lambda: processes.log(sweeper).count("sweeper became leader") == 2,
        15,
        what="re-election",
    )
    after = make_schedule(conn)
    wait_until(lambda: schedule_row(conn, after)["armed_task_id"], 10, what="arming again")
    log_text = processes.log(sweeper)
    assert log_text.count("sweep promotion:") == 1, log_text
    assert processes.proc(sweeper).poll() is None


def start_skewed(processes: Processes, name: str, skew: str, *args: str) -> int:
    """`pgsched ARGS` with its host clock shifted by `skew` (libfaketime's '+1h' / '-1h'),
    monotonic clocks left alone; logs to a file like Processes.start."""
    env = skewed_env(processes.env, skew)
    log_path = processes.log_dir / f"{name}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [PGSCHED, *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    processes.procs.append((name, proc, log_path))
    return len(processes.procs) - 1


def assert_host_clock_skewed(processes: Processes, index: int, skew: timedelta) -> None:
    """The process's log timestamps (its host clock) are `skew` away from ours: the shift
    really applied."""
    first = processes.log(index).splitlines()[0]
    stamped = datetime.strptime(first[:19], "%Y-%m-%d %H:%M:%S").astimezone(UTC)
    off = stamped - datetime.now(UTC)
    assert abs(off - skew) < timedelta(minutes=2), (first, off)


def test_a_sweeper_an_hour_ahead_moves_no_fire_time_and_judges_no_lease_early(
    conn: psycopg.Connection, processes: Processes
) -> None:
    now = db_now(conn)
    hot = conn.execute("SELECT hot_window FROM pgsched.settings").fetchone()
    assert hot is not None
    hot_window: timedelta = hot[0]

    def cold(run_at: datetime) -> int:
        row = conn.execute(
            "SELECT pgsched.schedule_task(task_type => 'note', run_at => %s, as_of => %s)",
            (run_at, now - 2 * hot_window),
        ).fetchone()
        assert row is not None
        return int(row[0])

    # Promotion: due within the hot window by the database clock, and just beyond it
    # (inside it by a clock an hour ahead).
    inside, beyond = (
        cold(now + hot_window - 30 * timedelta(minutes=1)),
        cold(now + hot_window + 30 * timedelta(minutes=1)),
    )
    # Leases: one expired a minute ago, one that expires in ten minutes.
    lost, alive = (
        int(r[0])
        for r in conn.execute(
            "SELECT pgsched.schedule_task(task_type => 'note') FROM generate_series(1, 2)"
        )
    )
    conn.execute(
        "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = 1, locked_by = 'w',"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + CASE id WHEN %s"
        " THEN interval '-1 minute' ELSE interval '10 minutes' END WHERE id IN (%s, %s)",
        (lost, lost, alive),
    )
    created = db_now(conn)
    schedule_id = make_schedule(conn)

    sweeper = start_skewed(processes, "scheduler+1h", "+1h", *SCHEDULER, "--rescue-interval", "1")
    processes.wait_log(sweeper, "sweeper became leader", 30)
    assert_host_clock_skewed(processes, sweeper, HOUR)

    fire = wait_until(
        lambda: schedule_row(conn, schedule_id)["last_fire_at"], 15, what="the schedule armed"
    )
    assert fire == next_minute(created) or fire == next_minute(created) + timedelta(minutes=1)
    assert missed(conn, schedule_id) == []

    def status(task_id: int) -> str:
        row = conn.execute(
            "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
        ).fetchone()
        assert row is not None
        return str(row[0])

    wait_until(lambda: status(lost) == "QUEUED", 15, what="the expired lease rescued")
    wait_until(lambda: status(inside) == "QUEUED", 15, what="the due cold task promoted")
    time.sleep(2.5)  # two more rescue sweeps
    assert status(alive) == "PROCESSING"
    assert status(beyond) == "PENDING"


def test_a_sweeper_an_hour_behind_records_the_misfires_of_a_real_outage(
    conn: psycopg.Connection, processes: Processes
) -> None:
    """Made 30 minutes ago and never armed (the sweeper was down): by the database clock
    about 29 fire times were missed; a clock an hour behind saw none and armed one 30
    minutes in the past."""
    now = db_now(conn)
    schedule_id = make_schedule(conn, misfire_policy="skip", as_of=now - 30 * timedelta(minutes=1))
    sweeper = start_skewed(processes, "scheduler-1h", "-1h", *SCHEDULER)
    processes.wait_log(sweeper, "sweeper became leader", 30)
    assert_host_clock_skewed(processes, sweeper, -HOUR)

    fire = wait_until(
        lambda: schedule_row(conn, schedule_id)["last_fire_at"], 15, what="the schedule armed"
    )
    assert fire >= now - timedelta(seconds=60), (fire, now)
    assert fire <= next_minute(db_now(conn)), fire
    gone = missed(conn, schedule_id)
    assert 27 <= len(gone) <= 31, gone
    assert gone[-1] < fire
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(gone))


def test_a_worker_an_hour_ahead_arms_the_next_occurrence_by_the_database_clock(
    conn: psycopg.Connection, processes: Processes
) -> None:
    """The worker arms the next occurrence after a completion; it judged misfires by its
    host clock (an hour ahead: the next 58 fire times "missed", one 58 minutes out armed)."""
    create_tables(conn)
    now = db_now(conn)
    first = now.replace(second=0, microsecond=0)  # due now: the worker runs it at once
    schedule_id = make_schedule(conn, first_fire_at=first)
    first_task = schedule_row(conn, schedule_id)["armed_task_id"]
    worker = start_skewed(
        processes,
        "worker+1h",
        "+1h",
        "worker",
        "--app",
        RECURRING_APP,
        "--lanes",
        "normal",
        "--worker-id",
        "skewed",
        "--lease",
        "5",
        "--poll-interval",
        "1",
    )
    wait_until(
        lambda: schedule_row(conn, schedule_id)["armed_task_id"] != first_task,
        30,
        what="the next occurrence armed by the worker",
    )
    assert_host_clock_skewed(processes, worker, HOUR)
    ran = conn.execute(
        "SELECT worker FROM public.recurring_test_log WHERE task_id = %s", (first_task,)
    ).fetchall()
    assert ran == [("skewed",)]
    assert schedule_row(conn, schedule_id)["last_fire_at"] == first + timedelta(minutes=1)
    assert missed(conn, schedule_id) == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--promotion-interval", "0"), "promotion sweep interval"),
        (("--recurring-interval", "-1"), "recurring sweep interval"),
        (("--retention-days", "0"), "retention sweep keep"),
        (("--leader-retry", "0"), "sweeper leader_retry"),
    ],
)
def test_the_sweeper_command_refuses_a_bad_setting_with_exit_2(
    db_env: dict[str, str], args: tuple[str, ...], named: str
) -> None:
    done = run_cli(db_env, "sweeper", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_promotion_keeps_a_bounded_record_of_chunk_timings(conn: psycopg.Connection) -> None:
    """Every chunk's timing was appended to a list kept for the process's life."""
    now = db_now(conn)
    n = CHUNK_TIMINGS + 50
    conn.execute(
        "SELECT pgsched.schedule_tasks(task_types => array_fill('note'::text, ARRAY[%s]),"
        " run_ats => array_fill(%s::timestamptz, ARRAY[%s]), as_of => %s)",
        (n, now + timedelta(hours=2), n, now - timedelta(days=2)),
    )
    sweep = PromotionSweep(chunk=1)
    assert sweep.run_once(conn, now) == {"promoted": n, "chunks": n + 1}
    assert len(sweep.chunk_seconds) == CHUNK_TIMINGS


def database_in_state(new_database: Callable[..., str], state: str) -> str:
    dsn = new_database()
    if state == "unmigrated":
        return dsn
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        if state == "older":  # as if the newest migration were not shipped yet
            c.execute(
                "DELETE FROM pgsched.schema_migrations"
                " WHERE version = (SELECT max(version) FROM pgsched.schema_migrations)"
            )
        elif state == "newer":
            c.execute(
                "INSERT INTO pgsched.schema_migrations (version, name, checksum)"
                " VALUES (9999, 'from_the_future', 'x')"
            )
    return dsn


WORKER = ("worker", "--app", RECURRING_APP, "--lanes", "normal")


@pytest.mark.parametrize("command", ["sweeper", "worker"])
@pytest.mark.parametrize(
    ("state", "says"),
    [
        ("unmigrated", "run `pgsched migrate`"),
        ("older", "run `pgsched migrate`"),
        ("newer", "upgrade pgsched"),
    ],
)
def test_a_process_on_a_schema_it_does_not_match_exits_2_saying_what_to_run(
    new_database: Callable[..., str],
    db_env: dict[str, str],
    command: str,
    state: str,
    says: str,
) -> None:
    dsn = database_in_state(new_database, state)
    env = {**db_env, "PGSCHED_DSN": dsn}
    args = ("sweeper",) if command == "sweeper" else WORKER
    started = time.monotonic()
    done = subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert time.monotonic() - started < 20


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", ["sweeper", "worker"])
def test_an_unreachable_database_is_retried_with_backoff_and_a_line_per_attempt(
    processes: Processes, db_env: dict[str, str], command: str
) -> None:
    dsn = f"host=127.0.0.1 port={closed_port()} dbname=nowhere user=nobody connect_timeout=2"
    processes.env = {**db_env, "PGSCHED_DSN": dsn}
    args = ("sweeper", "--log-level", "INFO") if command == "sweeper" else WORKER
    index = processes.start(command, *args)
    processes.wait_log(index, "cannot reach the database (attempt 4:", 30)
    lines = [ln for ln in processes.log(index).splitlines() if "cannot reach the database" in ln]
    delays = [float(ln.rsplit("retrying in ", 1)[1].rstrip("s")) for ln in lines[:4]]
    # Doubling from 0.5 s, jittered by 20 %.
    for n, delay in enumerate(delays):
        assert 0.5 * 2**n * 0.8 <= delay <= 0.5 * 2**n * 1.2, delays
    assert "Traceback" not in processes.log(index)
    proc = processes.proc(index)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0, processes.log(index)
