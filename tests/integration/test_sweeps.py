"""The sweeps against a real database: one occurrence per fire time with racing and crashing
schedulers, leader election between `pgsched sweeper` processes, promotion, rescue,
retention, and a recurring schedule run end to end by a real worker with --sweeps.

Simulated time is passed as `now=`/`as_of`; the sweeps that read the database clock
(promotion, rescue, retention) are driven by moving rows in time instead (`as_of` when
scheduling, `updated_at`/`occurred_at` pushed back).
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched import App
from pgsched.sweeps import PromotionSweep, RecurringSweep, RescueSweep, RetentionSweep
from tests.apps.recurring_app import create_tables
from tests.support.paths import REPO_ROOT
from tests.support.processes import RECURRING_APP, Processes, run_cli
from tests.support.table_stats import table_stats
from tests.support.worker_helpers import schedule, wait_until

# -- helpers ----------------------------------------------------------------------------


def events(conn: psycopg.Connection, task_id: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT from_status::text, to_status::text, occurred_at, attempt, worker, detail"
            " FROM pgsched.task_events WHERE task_id = %s ORDER BY id",
            (task_id,),
        ).fetchall()


def start_worker(processes: Processes, worker_id: str, *extra: str) -> int:
    index = processes.start(
        f"worker-{worker_id}",
        "worker",
        "--app",
        RECURRING_APP,
        "--lanes",
        "normal",
        "--worker-id",
        worker_id,
        "--lease",
        "5",
        "--poll-interval",
        "1",
        "--grace",
        "5",
        *extra,
    )
    processes.wait_log(index, f"worker {worker_id} running lanes", 30)
    return index


def db_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def placement(conn: psycopg.Connection, task_id: int) -> tuple[str, str, str | None]:
    """(status, partition, status_reason) of a task."""
    row = conn.execute(
        "SELECT status::text, tableoid::regclass::text, status_reason FROM pgsched.tasks"
        " WHERE id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None, f"no task {task_id}"
    return row[0], row[1], row[2]


def task_exists(conn: psycopg.Connection, task_id: int) -> bool:
    row = conn.execute("SELECT count(*) FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()
    return bool(row and row[0])


# -- 4. one occurrence per fire time: racing, crashing sweepers -----------------------------

SWEEPER = r"""
import json, os, sys
from datetime import datetime

import psycopg

import pgsched.sweeps as sweeps

real_arm = sweeps.arm


def traced(conn, row, now=None):
    # The real arm, reporting each call so the test can kill this process mid-sweep.
    task_id = real_arm(conn, row, now)
    print(json.dumps({"arm": row.id, "task": task_id}), flush=True)
    return task_id


sweeps.arm = traced
conn = psycopg.connect(os.environ["PGSCHED_DSN"], autocommit=True)
print(json.dumps({"ready": conn.info.backend_pid}), flush=True)
for line in sys.stdin:
    counts = sweeps.RecurringSweep().run_once(conn, datetime.fromisoformat(line.strip()))
    print(json.dumps({"done": counts}), flush=True)
"""


class Sweeper:
    """A process running RecurringSweep.run_once on its own connection, once per line sent."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SWEEPER],
            env=env,
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._backend_pid: int | None = None

    @property
    def backend_pid(self) -> int:
        """Its session's server pid (waits for the process to have connected)."""
        if self._backend_pid is None:
            ready = self.next(60)
            assert "ready" in ready, ready
            self._backend_pid = int(ready["ready"])
        return self._backend_pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout: float) -> dict[str, Any]:
        try:
            got = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"sweeper {self.proc.pid} silent for {timeout}s") from None
        if got is None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"sweeper {self.proc.pid} exited: {err}")
        return got

    def sweep(self, now: datetime) -> None:
        assert self.backend_pid and self.proc.stdin is not None
        self.proc.stdin.write(now.isoformat() + "\n")
        self.proc.stdin.flush()

    def done(self, timeout: float = 60) -> dict[str, int]:
        while True:
            got = self.next(timeout)
            if "done" in got:
                return got["done"]

    def kill_mid_sweep(self, timeout: float = 60) -> bool:
        """SIGKILL once this sweeper has armed (or tried) one schedule; True if the kill
        landed before it finished its sweep."""
        while True:
            got = self.next(timeout)
            if "arm" in got:
                self.proc.kill()
                self.proc.wait(10)
                return True
            if "done" in got:
                self.proc.kill()
                self.proc.wait(10)
                return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def sweepers(db_env: dict[str, str]) -> Iterator[list[Sweeper]]:
    started: list[Sweeper] = []
    yield started
    for sweeper in started:
        sweeper.close()


def test_one_occurrence_per_fire_time_with_racing_and_killed_sweepers(
    conn: psycopg.Connection, db_env: dict[str, str], sweepers: list[Sweeper]
) -> None:
    n_schedules, minutes = 50, 60
    t0 = datetime(2026, 6, 15, 8, 0, tzinfo=UTC)  # in the past: every occurrence is QUEUED
    # Every minute of the simulated hour (08:00-08:59 UTC). Not '* * * * *': pgsched.cron
    # plans a next fire by laying out every fire time of two whole local days (2,880 for
    # '* * * * *', 120 for '* 8 * * *'), and ~7,000 plans of the former cost minutes of CPU.
    conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'tick', cron_expression => '* 8 * * *',"
        " as_of => %s) FROM generate_series(1, %s)",
        (t0 - timedelta(seconds=30), n_schedules),
    )
    schedule_ids = [r[0] for r in conn.execute("SELECT id FROM pgsched.schedules ORDER BY id")]
    assert len(schedule_ids) == n_schedules

    def spawn() -> Sweeper:
        sweeper = Sweeper(db_env)
        sweepers.append(sweeper)
        return sweeper

    pool = [spawn(), spawn()]
    kills = mid_run_kills = 0
    for minute in range(minutes):
        if minute == minutes // 2:
            pool += [spawn() for _ in range(3)]  # the second half hour: 5 racing sweepers
        sim_now = t0 + timedelta(minutes=minute, seconds=5)
        # Between rounds: whatever is due has run (QUEUED -> PROCESSING -> COMPLETED).
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'PROCESSING', attempts = attempts + 1,"
            " locked_by = 'sim' WHERE schedule_id IS NOT NULL AND status = 'QUEUED'"
            " AND next_run_at <= %s",
            (sim_now,),
        )
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'COMPLETED'"
            " WHERE schedule_id IS NOT NULL AND status = 'PROCESSING'"
        )
        for sweeper in pool:
            sweeper.sweep(sim_now)
        victim = pool[0] if minute % 8 == 1 else None
        if victim is not None:
            kills += 1
            mid_run_kills += victim.kill_mid_sweep()
            pool[0] = spawn()  # starts while the others finish this round

            # Its session ends with it (and with the session, any row lock it held).
            def backend_gone(pid: int = victim.backend_pid) -> bool:
                alive = conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
                return alive.fetchone() is None

            wait_until(
                backend_gone,
                20,
                what="the killed sweeper's backend to end",
            )
        for sweeper in pool[1:] if victim is not None else pool:
            sweeper.done()

        # After every round: each schedule has exactly one live occurrence, this minute's.
        live = conn.execute(
            "SELECT schedule_id, count(*), min(next_run_at) FROM pgsched.tasks"
            " WHERE status IN ('PENDING', 'QUEUED', 'PROCESSING') GROUP BY schedule_id"
            " ORDER BY schedule_id"
        ).fetchall()
        fire = t0 + timedelta(minutes=minute)
        assert live == [(sid, 1, fire) for sid in schedule_ids], f"minute {minute}"

    assert kills == 8 and mid_run_kills >= 1, (kills, mid_run_kills)
    fires = [t0 + timedelta(minutes=m) for m in range(minutes)]
    # Exactly one ARMED occurrence and one task per (schedule, fire time); nothing missed.
    per_fire = conn.execute(
        "SELECT o.schedule_id, o.fire_at, o.outcome, count(t.id), min(t.id) = o.task_id"
        " FROM pgsched.schedule_occurrences AS o"
        " LEFT JOIN pgsched.tasks AS t ON t.schedule_id = o.schedule_id"
        "  AND t.next_run_at = o.fire_at"
        " GROUP BY o.schedule_id, o.fire_at, o.outcome, o.task_id"
        " ORDER BY o.schedule_id, o.fire_at"
    ).fetchall()
    assert per_fire == [(sid, f, "ARMED", 1, True) for sid in schedule_ids for f in fires]
    dup = conn.execute(
        "SELECT schedule_id, next_run_at, count(*) FROM pgsched.tasks"
        " GROUP BY 1, 2 HAVING count(*) > 1"
    ).fetchall()
    assert dup == []
    total = conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone()
    assert total is not None and total[0] == n_schedules * minutes
    armed = conn.execute(
        "SELECT count(*) FROM pgsched.schedules AS s JOIN pgsched.tasks AS t"
        " ON t.id = s.armed_task_id AND t.next_run_at = s.last_fire_at"
        " WHERE s.last_fire_at = %s",
        (fires[-1],),
    ).fetchone()
    assert armed is not None and armed[0] == n_schedules


# -- 4b. leader election between `pgsched sweeper` processes ------------------------------


def lease_row(conn: psycopg.Connection) -> dict[str, Any]:
    """The leader lease: holder, generation, and whether it runs (expires in the future)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT holder, generation, expires_at > now() AS live FROM pgsched.sweep_leader"
        ).fetchone()
    assert row is not None
    return row


def armed_task(conn: psycopg.Connection, schedule_id: int) -> int | None:
    row = conn.execute(
        "SELECT armed_task_id FROM pgsched.schedules WHERE id = %s", (schedule_id,)
    ).fetchone()
    return row[0] if row else None


LEASE_S = 3.0


def test_exactly_one_scheduler_leads_and_another_takes_over_when_it_dies(
    conn: psycopg.Connection, db_env: dict[str, str], processes: Processes
) -> None:
    elected = "sweeper became leader"
    lease = ("--leader-retry", "1", "--leader-lease", str(LEASE_S))
    for name in ("sweeper-a", "sweeper-b", "sweeper-c"):
        processes.start(name, "sweeper", *lease, "--log-level", "INFO")
    first = wait_until(lambda: processes.logged(elected), 30, what="a sweep leader")
    # Three of the followers' retries and two of the leader's renewals (every lease / 3).
    time.sleep(3)
    assert processes.logged(elected) == first and len(first) == 1, processes.logs()
    leader = first[0]
    followers = [i for i in range(3) if i != leader]
    held = lease_row(conn)
    assert held["live"] and held["generation"] == 1, held
    assert f"holder {held['holder']}" in processes.log(leader)
    assert all(processes.proc(i).poll() is None for i in range(3))

    # The leader runs the sweeps: a schedule made without a first fire time is armed at
    # once (NOTIFY pgsched_recurring), not at the next minute.
    made = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'tick', cron_expression => '*/5 * * * *')"
    ).fetchone()
    assert made is not None
    wait_until(lambda: armed_task(conn, made[0]), 10, what="the leader to arm the schedule")

    # Only the elected process may run the sweeps once, from the command line too.
    once = run_cli(db_env, "sweeper", "--once")
    assert once.returncode == 0 and once.stdout == "", once.stdout + once.stderr

    # SIGKILL: nothing releases the lease; a follower takes it once it runs out.
    processes.proc(leader).kill()
    killed_at = time.monotonic()
    new_leader = wait_until(
        lambda: [i for i in followers if elected in processes.log(i)],
        15,
        what="a follower to take over",
        interval=0.02,
    )
    takeover = time.monotonic() - killed_at
    assert takeover < LEASE_S + 1.0, f"took {takeover:.2f}s\n{processes.logs()}"
    assert len(new_leader) == 1, processes.logs()
    time.sleep(1.5)  # the other follower keeps trying, and stays a follower
    assert [i for i in followers if elected in processes.log(i)] == new_leader
    taken = lease_row(conn)
    assert taken["live"] and taken["generation"] == 2 and taken["holder"] != held["holder"]

    made = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'tick', cron_expression => '*/5 * * * *')"
    ).fetchone()
    assert made is not None
    wait_until(lambda: armed_task(conn, made[0]), 10, what="the new leader to arm the schedule")

    # SIGTERM: the leader stops cleanly and releases the lease; the last one takes over at
    # its next try, well within a lease period.
    proc = processes.proc(new_leader[0])
    proc.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    assert proc.wait(10) == 0, processes.logs()
    last = next(i for i in followers if i != new_leader[0])
    wait_until(lambda: elected in processes.log(last), 10, what="the last sweeper to lead")
    assert time.monotonic() - stopped_at < LEASE_S, processes.logs()
    assert lease_row(conn)["generation"] == 3
    processes.proc(last).send_signal(signal.SIGTERM)
    assert processes.proc(last).wait(10) == 0, processes.logs()
    wait_until(lambda: not lease_row(conn)["live"], 5, what="the lease to be released")
    # `scheduler`, the old name, still works for one release, and says so.
    once = run_cli(db_env, "scheduler", "--once")
    assert once.returncode == 0, once.stderr
    assert "`pgsched scheduler` is deprecated" in once.stderr
    assert "use `pgsched sweeper`" in once.stderr
    names = [line.split(":")[0] for line in once.stdout.splitlines()]
    assert names == [
        "promotion",
        "recurring",
        "rescue",
        "deadlines",
        "retention",
        "horizon",
    ], once.stdout


# -- 5. promotion and rescue ------------------------------------------------------------------


def test_promotion_moves_exactly_the_cold_tasks_coming_due_into_the_hot_window(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    h = timedelta(hours=1)
    # Scheduled a day ago, so beyond the hot window (24 h) then: cold.
    soon = schedule(conn, "p", run_at=now + 2 * h, as_of=now - 23 * h)
    later = schedule(conn, "p", run_at=now + 20 * h, as_of=now - 23 * h)
    beyond = schedule(conn, "p", run_at=now + 30 * h)
    far = schedule(conn, "p", run_at=now + 72 * h)
    hot = schedule(conn, "p", run_at=now + h)
    for task_id in (soon, later, beyond, far):
        assert placement(conn, task_id)[:2] == ("PENDING", "pgsched.tasks_cold")
    assert placement(conn, hot)[:2] == ("QUEUED", "pgsched.tasks_hot")
    listener = psycopg.connect(conn.info.dsn, autocommit=True)
    try:
        listener.execute("LISTEN pgsched_normal")
        sweep = PromotionSweep()
        assert sweep.run_once(conn, now) == {"promoted": 2, "chunks": 1}
        for task_id in (soon, later):
            assert placement(conn, task_id) == (
                "QUEUED",
                "pgsched.tasks_hot",
                "promoted into the hot window",
            )
            assert [
                (e["from_status"], e["to_status"], e["detail"]) for e in events(conn, task_id)
            ] == [("PENDING", "QUEUED", "promoted into the hot window")]
        for task_id in (beyond, far):
            assert placement(conn, task_id) == ("PENDING", "pgsched.tasks_cold", None)
        assert events(conn, hot) == []
        assert sweep.run_once(conn, now) == {"promoted": 0, "chunks": 1}
        # Nothing promoted is due within the immediate window: no lane is woken.
        assert list(listener.notifies(timeout=0.5)) == []
    finally:
        listener.close()

    # A wider hot window brings the 30-hour task in; the 72-hour one stays cold.
    conn.execute("UPDATE pgsched.settings SET hot_window = '48 hours'")
    assert PromotionSweep().run_once(conn, now) == {"promoted": 1, "chunks": 1}
    assert placement(conn, beyond)[:2] == ("QUEUED", "pgsched.tasks_hot")
    assert placement(conn, far)[:2] == ("PENDING", "pgsched.tasks_cold")


def test_promotion_works_in_bounded_chunks_and_wakes_the_lane_for_imminent_work(
    conn: psycopg.Connection,
) -> None:
    now = db_now(conn)
    ids = [
        schedule(conn, "p", run_at=now + timedelta(minutes=5 + n), as_of=now - timedelta(days=2))
        for n in range(5)
    ]
    assert {placement(conn, i)[0] for i in ids} == {"PENDING"}
    listener = psycopg.connect(conn.info.dsn, autocommit=True)
    try:
        listener.execute("LISTEN pgsched_normal")
        sweep = PromotionSweep(chunk=2)
        assert sweep.run_once(conn, now) == {"promoted": 5, "chunks": 3}
        assert len(sweep.chunk_seconds) == 3
        # Each chunk commits on its own and wakes the lane (identical NOTIFYs fold only
        # within one transaction).
        woken = {n.channel for n in listener.notifies(timeout=2, stop_after=1)}
        assert woken == {"pgsched_normal"}
    finally:
        listener.close()
    assert {placement(conn, i)[1] for i in ids} == {"pgsched.tasks_hot"}


def test_rescue_promotes_a_cold_task_whose_promotion_was_missed_and_it_runs(
    conn: psycopg.Connection, processes: Processes
) -> None:
    create_tables(conn)
    now = db_now(conn)
    # Scheduled two days ago for five minutes ago: it went cold and nobody promoted it.
    missed = schedule(
        conn, "note", run_at=now - timedelta(minutes=5), as_of=now - timedelta(days=2)
    )
    not_due = schedule(
        conn, "note", run_at=now + timedelta(hours=2), as_of=now - timedelta(hours=23)
    )
    assert placement(conn, missed)[:2] == ("PENDING", "pgsched.tasks_cold")

    counted = RescueSweep().run_once(conn, now)

    assert counted["promoted_late"] == 1 and counted["leases_rescued"] == 0
    # Promoted and already overdue by more than a minute: its lane is woken too.
    assert counted["overdue_woken"] == 1
    status, part, reason = placement(conn, missed)
    assert (status, part) == ("QUEUED", "pgsched.tasks_hot")
    assert reason is not None and reason.startswith("promoted late")
    assert [(e["to_status"], e["detail"]) for e in events(conn, missed)] == [("QUEUED", reason)]
    # The rescue only takes what is already due.
    assert placement(conn, not_due) == ("PENDING", "pgsched.tasks_cold", None)

    start_worker(processes, "R1")
    wait_until(
        lambda: placement(conn, missed)[0] == "COMPLETED", 20, what="the rescued task to run"
    )
    ran = conn.execute(
        "SELECT task_id, worker FROM public.recurring_test_log ORDER BY id"
    ).fetchall()
    assert ran == [(missed, "R1")]
    assert placement(conn, not_due)[0] == "PENDING"


def test_rescue_returns_expired_leases_with_a_reason(conn: psycopg.Connection) -> None:
    now = db_now(conn)
    lease = "30 seconds"

    def claim_one(max_attempts: int, as_of: datetime, lease_for: str) -> int:
        task_id = schedule(
            conn, "p", run_at=as_of - timedelta(minutes=1), max_attempts=max_attempts
        )
        claimed = conn.execute(
            "SELECT id FROM pgsched.task_claim_many('NORMAL', 5, 'lost-worker', %s, %s)",
            (lease_for, as_of),
        ).fetchall()
        assert claimed == [(task_id,)]
        return task_id

    expired = claim_one(3, now - timedelta(minutes=10), lease)
    exhausted = claim_one(1, now - timedelta(minutes=10), lease)
    held = claim_one(3, now, "5 minutes")

    listener = psycopg.connect(conn.info.dsn, autocommit=True)
    try:
        listener.execute("LISTEN pgsched_normal")
        counted = RescueSweep().run_once(conn, now)
        assert counted["leases_rescued"] == 2 and counted["promoted_late"] == 0
        # The queued-again task is overdue by minutes: the lane is woken for it.
        assert counted["overdue_woken"] == 1
        woken = {n.channel for n in listener.notifies(timeout=2, stop_after=1)}
        assert woken == {"pgsched_normal"}
    finally:
        listener.close()

    assert placement(conn, expired) == (
        "QUEUED",
        "pgsched.tasks_hot",
        "worker lost: lease expired; queued again",
    )
    last = events(conn, expired)[-1]
    assert (last["from_status"], last["to_status"], last["worker"], last["attempt"]) == (
        "PROCESSING",
        "QUEUED",
        "lost-worker",
        1,
    )
    assert last["detail"] == "worker lost: lease expired; queued again"
    status, part, reason = placement(conn, exhausted)
    assert (status, part) == ("FAILED", "pgsched.tasks_done")
    assert reason == "worker lost: lease expired, attempts exhausted (1 of 1)"
    assert events(conn, exhausted)[-1]["detail"] == reason
    assert placement(conn, held)[0] == "PROCESSING"
    assert RescueSweep().run_once(conn, now)["leases_rescued"] == 0


# -- 7. retention --------------------------------------------------------------------------


def finish(conn: psycopg.Connection, task_id: int, outcome: str) -> None:
    """Claim `task_id` (alone due in its lane) and report `outcome` for it."""
    row = conn.execute("SELECT lane::text FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many(%s, 1, 'w', '30 seconds')",
        (row[0],),
    ).fetchall()
    assert [c[0] for c in claimed] == [task_id]
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(%s, %s, %s)",
        ([task_id], [claimed[0][1]], [outcome]),
    )


def age(
    conn: psycopg.Connection, task_ids: list[int], by: timedelta, *, with_events: bool = True
) -> None:
    """Push tasks, their idempotency keys (and their events) back in time."""
    conn.execute(
        "UPDATE pgsched.tasks SET updated_at = updated_at - %s WHERE id = ANY(%s)",
        (by, task_ids),
    )
    if with_events:
        conn.execute(
            "UPDATE pgsched.task_events SET occurred_at = occurred_at - %s WHERE task_id = ANY(%s)",
            (by, task_ids),
        )
    conn.execute(
        "UPDATE pgsched.idempotency_keys SET created_at = created_at - %s WHERE task_id = ANY(%s)",
        (by, task_ids),
    )


def table_counts(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.tasks), (SELECT count(*) FROM pgsched.task_events),"
        " (SELECT count(*) FROM pgsched.idempotency_keys),"
        " (SELECT count(*) FROM pgsched.schedule_occurrences)"
    ).fetchone()
    assert row is not None
    return dict(zip(["tasks", "events", "keys", "occurrences"], row, strict=True))


def test_retention_prunes_old_finished_work_and_keeps_live_and_dead_tasks(
    conn: psycopg.Connection,
) -> None:
    old = timedelta(days=40)
    done_old = schedule(conn, "r", idempotency_key="done-old")
    finish(conn, done_old, "COMPLETED")
    cancelled_old = schedule(conn, "r", run_at=db_now(conn) + timedelta(hours=1))
    conn.execute("SELECT pgsched.cancel_task(%s, 'no longer needed')", (cancelled_old,))
    dead_old = schedule(conn, "r", max_attempts=1, idempotency_key="dead-old")
    finish(conn, dead_old, "FAILED")
    done_recent = schedule(conn, "r", idempotency_key="done-recent")
    finish(conn, done_recent, "COMPLETED")
    queued_old = schedule(conn, "r", run_at=db_now(conn) + timedelta(hours=2))
    pending_old = schedule(conn, "r", run_at=db_now(conn) + timedelta(days=90))
    running_old = schedule(conn, "r")
    conn.execute("SELECT 1 FROM pgsched.task_claim_many('NORMAL', 1, 'w', '1 hour')").fetchall()
    age(conn, [done_old, cancelled_old], old)
    # These were last touched long ago too; their events are the subject of their own
    # test below, so only the rows (and keys) are aged here.
    age(conn, [dead_old, queued_old, pending_old, running_old], old, with_events=False)
    old_events = conn.execute(
        "SELECT count(*) FROM pgsched.task_events WHERE task_id = ANY(%s)",
        ([done_old, cancelled_old],),
    ).fetchone()
    assert old_events is not None and old_events[0] == 3  # claim, completion, cancel
    before = table_counts(conn)

    pruned = RetentionSweep(keep=timedelta(days=30)).run_once(conn, db_now(conn))

    # Nothing else: the partitions were made ahead and none has expired yet.
    assert pruned == {
        "tasks": 2,
        "idempotency_keys": 1,
        "occurrences": 0,
        "ledger": 0,
        "dependencies": 0,
        "result_waiters": 0,
    }
    assert not task_exists(conn, done_old) and not task_exists(conn, cancelled_old)
    for kept in (dead_old, done_recent, queued_old, pending_old, running_old):
        assert task_exists(conn, kept), kept
    assert placement(conn, dead_old)[0] == "FAILED"
    assert placement(conn, running_old)[0] == "PROCESSING"
    keys = [r[0] for r in conn.execute("SELECT idempotency_key FROM pgsched.idempotency_keys")]
    assert sorted(keys) == ["dead-old", "done-recent"]
    # Events are not deleted: they go with their whole period, once it is older than the
    # retention period (test_event_partitions).
    assert len(events(conn, done_old)) == 2 and len(events(conn, cancelled_old)) == 1
    assert len(events(conn, done_recent)) == 2
    after = table_counts(conn)
    assert after["tasks"] == before["tasks"] - 2
    assert after["events"] == before["events"]

    # Twice is harmless: nothing more goes.
    again = RetentionSweep(keep=timedelta(days=30)).run_once(conn, db_now(conn))
    assert again == {
        "tasks": 0,
        "idempotency_keys": 0,
        "occurrences": 0,
        "ledger": 0,
        "dependencies": 0,
        "result_waiters": 0,
    }
    assert table_counts(conn) == after


def test_retention_keeps_once_keys_forever_and_counts_the_ledger_apart(
    conn: psycopg.Connection,
) -> None:
    """`ctx.once` is documented as true the first time ever: retention must not forget a
    once-key however old it is. The keyed ledger rows it does delete are counted as
    `ledger`, not as idempotency keys (which are a different table)."""
    keyed = schedule(conn, "r", idempotency_key="invoice:7")
    finish(conn, keyed, "COMPLETED")  # the completion writes the ledger row for invoice:7
    once = "SELECT pgsched.work_once('default', 'r', 'welcome-email', %s)"
    assert conn.execute(once, (keyed,)).fetchone() == (True,)
    age(conn, [keyed], timedelta(days=400))
    conn.execute("UPDATE pgsched.completed_work SET completed_at = now() - interval '400 days'")
    ledger = "SELECT task_type, idempotency_key FROM pgsched.completed_work ORDER BY task_type"
    assert conn.execute(ledger).fetchall() == [("r", "invoice:7"), ("r#once", "welcome-email")]

    pruned = RetentionSweep(keep=timedelta(days=30)).run_once(conn, db_now(conn))

    assert pruned == {
        "tasks": 1,
        "idempotency_keys": 1,
        "occurrences": 0,
        "ledger": 1,
        "dependencies": 0,
        "result_waiters": 0,
    }
    assert conn.execute(ledger).fetchall() == [("r#once", "welcome-email")]
    assert conn.execute(once, (keyed,)).fetchone() == (False,)  # still once, a year on


def test_retention_keeps_the_events_of_the_tasks_it_keeps(conn: psycopg.Connection) -> None:
    dead = schedule(conn, "r", max_attempts=1)
    finish(conn, dead, "FAILED")
    queued = schedule(conn, "r", max_attempts=3)
    finish(conn, queued, "RETRY")  # back to QUEUED, attempt 1 recorded
    age(conn, [dead, queued], timedelta(days=40))
    conn.execute("UPDATE pgsched.tasks SET updated_at = now() WHERE id = %s", (queued,))
    history_before = {t: events(conn, t) for t in (dead, queued)}
    assert all(len(h) == 2 for h in history_before.values())

    # Forty days on, the periods holding these events have expired and been dropped.
    pruned = RetentionSweep(keep=timedelta(days=30)).run_once(
        conn, db_now(conn) + timedelta(days=40)
    )
    assert pruned["partitions_dropped"] >= 1 and pruned["events_archived"] == 4

    assert task_exists(conn, dead) and task_exists(conn, queued)
    assert {t: events(conn, t) for t in (dead, queued)} == history_before


def test_retention_works_in_chunks_and_keeps_each_schedules_latest_occurrence(
    conn: psycopg.Connection,
) -> None:
    ids = []
    for n in range(5):
        task_id = schedule(conn, "r", idempotency_key=f"k{n}")
        finish(conn, task_id, "COMPLETED")
        ids.append(task_id)
    age(conn, ids, timedelta(days=31))
    # A schedule with three occurrences, all created long ago.
    made = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'tick', cron_expression => '0 * * * *',"
        " as_of => %s)",
        (datetime(2026, 1, 1, 0, 30, tzinfo=UTC),),
    ).fetchone()
    assert made is not None
    schedule_id = made[0]
    sweep = RecurringSweep()
    for hour in range(3):
        now = datetime(2026, 1, 1, hour + 1, 0, 10, tzinfo=UTC)
        assert sweep.run_once(conn, now) == {"armed": 1, "not_armed": 0}
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'PROCESSING' WHERE schedule_id = %s"
            " AND status = 'QUEUED'",
            (schedule_id,),
        )
        conn.execute(
            "UPDATE pgsched.tasks SET status = 'COMPLETED' WHERE schedule_id = %s"
            " AND status = 'PROCESSING'",
            (schedule_id,),
        )
    conn.execute(
        "UPDATE pgsched.schedule_occurrences SET created_at = created_at - interval '60 days'"
    )
    latest = datetime(2026, 1, 1, 3, 0, tzinfo=UTC)

    pruned = RetentionSweep(keep=timedelta(days=30), chunk=2).run_once(conn, db_now(conn))

    # The 5 old one-off tasks, and the schedule's 3 occurrences: armed (as of their sweep's
    # `now`, January) and finished then, they too are past the 30 days kept.
    assert pruned["tasks"] == 5 + 3 and pruned["idempotency_keys"] == 5
    assert pruned["occurrences"] == 2
    assert not any(task_exists(conn, i) for i in ids)
    left = conn.execute(
        "SELECT fire_at FROM pgsched.schedule_occurrences WHERE schedule_id = %s", (schedule_id,)
    ).fetchall()
    assert left == [(latest,)]
    # The schedule keeps advancing from its last fire time, never re-arming a pruned one.
    now = datetime(2026, 1, 1, 4, 0, 10, tzinfo=UTC)
    assert sweep.run_once(conn, now) == {"armed": 1, "not_armed": 0}
    row = conn.execute(
        "SELECT last_fire_at FROM pgsched.schedules WHERE id = %s", (schedule_id,)
    ).fetchone()
    assert row is not None and row[0] == latest + timedelta(hours=1)


# -- 9. end to end: a real worker with --sweeps fires an every-minute schedule on time -----


@pytest.mark.slow
def test_every_minute_schedule_fires_on_the_minute_and_arms_the_next(
    conn: psycopg.Connection, db_dsn: str, processes: Processes
) -> None:
    create_tables(conn)
    worker = start_worker(processes, "E1", "--sweeps")
    processes.wait_log(worker, "sweeper became leader", 15)
    # Not within a few seconds of a minute boundary: the first fire must lie ahead.
    if 60 - datetime.now(UTC).second < 3:
        time.sleep(4)
    created = datetime.now(UTC)
    schedule_id = App(db_dsn).schedule_recurring("minutely", "* * * * *")
    with conn.cursor(row_factory=dict_row) as cur:
        s = cur.execute("SELECT * FROM pgsched.schedules WHERE id = %s", (schedule_id,)).fetchone()
    assert s is not None
    fire = s["last_fire_at"]
    assert fire.second == 0 and fire.microsecond == 0
    assert timedelta(0) < fire - created <= timedelta(seconds=60)
    first_task = s["armed_task_id"]

    completed = wait_until(
        lambda: conn.execute(
            "SELECT occurred_at FROM pgsched.task_events WHERE task_id = %s"
            " AND to_status = 'COMPLETED'",
            (first_task,),
        ).fetchone(),
        75,
        what="the first occurrence to complete",
        interval=0.1,
    )[0]
    # The next occurrence is armed right after the completion (by the worker).
    nxt = wait_until(
        lambda: conn.execute(
            "SELECT armed_task_id, last_fire_at FROM pgsched.schedules"
            " WHERE id = %s AND armed_task_id <> %s",
            (schedule_id, first_task),
        ).fetchone(),
        10,
        what="the next occurrence to be armed",
    )
    assert processes.proc(worker).poll() is None

    runs = conn.execute(
        "SELECT scheduled_for, started_at, worker, outcome FROM pgsched.task_runs"
        " WHERE task_id = %s",
        (first_task,),
    ).fetchall()
    assert len(runs) == 1
    scheduled_for, started_at, ran_by, outcome = runs[0]
    assert (scheduled_for, ran_by, outcome) == (fire, "E1", "COMPLETED")
    lateness = started_at - fire
    assert timedelta(0) <= lateness <= timedelta(seconds=0.5), lateness
    logged = conn.execute(
        "SELECT task_id, schedule_id, at FROM public.recurring_test_log"
    ).fetchall()
    assert [(r[0], r[1]) for r in logged] == [(first_task, schedule_id)]
    assert logged[0][2] >= fire
    assert nxt is not None
    next_task, next_fire = nxt
    assert next_fire == fire + timedelta(minutes=1)
    occurrence = conn.execute(
        "SELECT outcome, task_id, created_at FROM pgsched.schedule_occurrences"
        " WHERE schedule_id = %s AND fire_at = %s",
        (schedule_id, next_fire),
    ).fetchone()
    assert occurrence is not None and occurrence[:2] == ("ARMED", next_task)
    assert occurrence[2] - completed < timedelta(seconds=2)
    status = conn.execute(
        "SELECT status::text FROM pgsched.tasks WHERE id = %s", (next_task,)
    ).fetchone()
    assert status is not None and status[0] == "QUEUED"


def test_promotion_reads_only_the_slice_coming_due(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    """A sweep with a big cold tier reads the rows it moves, not the whole tier (0005's
    filter could not use the due index: every sweep read every cold row)."""
    now = db_now(conn)
    conn.execute(
        "SELECT pgsched.schedule_tasks("
        "  task_types => array_fill('far'::text, ARRAY[30000]),"
        "  run_ats => array_fill(%s::timestamptz, ARRAY[30000]))",
        (now + timedelta(days=10),),
    )
    soon = [
        schedule(conn, "p", run_at=now + timedelta(hours=2), as_of=now - timedelta(days=2))
        for _ in range(3)
    ]
    conn.execute("ANALYZE pgsched.tasks_cold")
    sweeper = connect(autocommit=True)

    def cold_tuples_read() -> int:
        stats = table_stats(sweeper, "pgsched.tasks_cold")
        return stats["seq_tup_read"] + stats["idx_tup_fetch"]

    before = cold_tuples_read()
    assert PromotionSweep().run_once(sweeper, now) == {"promoted": 3, "chunks": 1}
    read = cold_tuples_read() - before
    assert read < 100, f"the sweep read {read} cold rows to promote 3"
    assert {placement(conn, i)[1] for i in soon} == {"pgsched.tasks_hot"}
