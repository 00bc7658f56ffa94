"""pgsched through a real PgBouncer in transaction mode (Debian's pgbouncer, started here).

Two stacks run side by side, each on its own database behind the same PgBouncer: a producer,
two workers and two sweepers, every one of them connected through the pooler with
`--prepare-threshold none`. One stack LISTENs on a direct connection (`--listen-dsn`), the
other not at all (`--listen-dsn none`: its lanes poll). In each: tasks of every tier
(IMMEDIATE, HOT, COLD: the windows shrunk to seconds) run on time, a recurring schedule
fires exactly once per minute slot across a SIGKILL of the sweep leader, and no task is
lost or run twice.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from pgsched import App
from tests.apps.recurring_app import create_tables
from tests.support.paths import REPO_ROOT
from tests.support.pgbouncer_server import PgBouncer, running_pgbouncer

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
APP = "tests.apps.recurring_app:app"

# The tiers in seconds instead of minutes and hours: due within IMMEDIATE_S is IMMEDIATE,
# within HOT_S is HOT, later is COLD (promoted by the sweeper when it comes within HOT_S).
IMMEDIATE_S, HOT_S = 5, 12
# The polling stack polls every second; the listening one every 3 s (below IMMEDIATE_S, so
# a HOT task is always seen before it is due), where only LISTEN starts IMMEDIATE work fast.
POLL_WITHOUT_LISTEN, POLL_WITH_LISTEN = 1.0, 3.0
LEASE_S = 3


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(0.2)


@dataclass
class Stack:
    name: str
    direct: str  # the database's own DSN: setup, checks, and --listen-dsn
    pooled: str  # the same database through PgBouncer
    listen: bool
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def poll(self) -> float:
        return POLL_WITH_LISTEN if self.listen else POLL_WITHOUT_LISTEN

    def env(self) -> dict[str, str]:
        # PGSCHED_DSN is also where the test app's handler logs each run: the pooler too.
        return {**os.environ, "PGSCHED_DSN": self.pooled}

    def start(self, name: str, *args: str) -> None:
        listen = ("--listen-dsn", self.direct if self.listen else "none")
        with (self.log_dir / f"{self.name}-{name}.log").open("wb") as out:
            self.procs[name] = subprocess.Popen(
                [PGSCHED, *args, "--prepare-threshold", "none", *listen],
                cwd=REPO_ROOT,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, name: str) -> str:
        return (self.log_dir / f"{self.name}-{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {self.name}-{n} ---\n{self.log(n)}" for n in self.procs)

    def leaders(self) -> list[str]:
        return [n for n in self.procs if n.startswith("s") and "became leader" in self.log(n)]

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def stack_database(conn: psycopg.Connection) -> None:
    conn.execute(
        "UPDATE pgsched.settings SET immediate_window = %s, hot_window = %s",
        (timedelta(seconds=IMMEDIATE_S), timedelta(seconds=HOT_S)),
    )
    create_tables(conn)


@pytest.fixture
def bouncer(pg_server: Any) -> Iterator[PgBouncer]:
    with running_pgbouncer(pg_server.host, pg_server.port, pg_server.user) as running:
        yield running


@pytest.fixture
def stacks(
    db_dsn: str,
    new_database: Callable[..., str],
    pg_server: Any,
    bouncer: PgBouncer,
    tmp_path: Path,
) -> Iterator[list[Stack]]:
    made: list[Stack] = []
    for name, direct, listen in (
        ("listening", db_dsn, True),
        ("polling", new_database(pg_server.template_dbname), False),
    ):
        dbname = str(conninfo_to_dict(direct)["dbname"])
        made.append(Stack(name, direct, bouncer.dsn(dbname), listen, tmp_path))
    yield made
    for stack in made:
        stack.close()


def schedule_tiers(app: App) -> dict[str, list[int]]:
    """Ten tasks of each tier, through the pooler: IMMEDIATE one by one (each call its own
    connection, so each is a producer's fresh arrival), HOT and COLD in bulk."""
    ids: dict[str, list[int]] = {"IMMEDIATE": [], "HOT": [], "COLD": []}
    for _ in range(10):
        ids["IMMEDIATE"].append(int(app.schedule("note")))
        time.sleep(0.3)
    now = datetime.now(UTC)
    # Small chunks: many statements on one producer connection.
    hot = [{"task_type": "note", "run_at": now + timedelta(seconds=7 + i / 5)} for i in range(10)]
    ids["HOT"] = [int(t) for t in app.schedule_many(hot, chunk_size=2)]
    cold = [{"task_type": "note", "run_at": now + timedelta(seconds=20 + i / 5)} for i in range(10)]
    ids["COLD"] = [int(t) for t in app.schedule_many(cold, chunk_size=2)]
    return ids


def statuses(conn: psycopg.Connection, task_ids: list[int]) -> set[str]:
    rows = conn.execute(
        "SELECT DISTINCT status::text FROM pgsched.tasks WHERE id = ANY(%s)", (task_ids,)
    ).fetchall()
    return {r[0] for r in rows}


def ever_pending(conn: psycopg.Connection, task_ids: list[int]) -> int:
    row = conn.execute(
        "SELECT count(DISTINCT task_id) FROM pgsched.task_events WHERE task_id = ANY(%s)"
        " AND from_status = 'PENDING'",
        (task_ids,),
    ).fetchone()
    return int(row[0]) if row else 0


def all_completed(conn: psycopg.Connection, task_ids: list[int]) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'COMPLETED'",
        (task_ids,),
    ).fetchone()
    return row is not None and row[0] == len(task_ids)


def first_completed_fire(conn: psycopg.Connection, schedule_id: int) -> datetime | None:
    row = conn.execute(
        "SELECT min(next_run_at) FROM pgsched.tasks WHERE schedule_id = %s"
        " AND status = 'COMPLETED'",
        (schedule_id,),
    ).fetchone()
    return row[0] if row else None


def slot_completed(conn: psycopg.Connection, schedule_id: int, fire_at: datetime) -> bool:
    row = conn.execute(
        "SELECT 1 FROM pgsched.tasks WHERE schedule_id = %s AND next_run_at = %s"
        " AND status = 'COMPLETED'",
        (schedule_id, fire_at),
    ).fetchone()
    return row is not None


def logged(stack: Stack, process: str, text: str) -> bool:
    return text in stack.log(process)


def lateness(conn: psycopg.Connection, task_ids: list[int]) -> list[float]:
    rows = conn.execute(
        "SELECT extract(EPOCH FROM started_at - scheduled_for)::float8 FROM pgsched.task_runs"
        " WHERE task_id = ANY(%s)",
        (task_ids,),
    ).fetchall()
    return sorted(r[0] for r in rows)


def test_producers_workers_and_sweepers_through_pgbouncer_transaction_mode(
    stacks: list[Stack], bouncer: PgBouncer
) -> None:
    conns = {s.name: psycopg.connect(s.direct, autocommit=True) for s in stacks}
    try:
        for stack in stacks:
            stack_database(conns[stack.name])
            for worker in ("w1", "w2"):
                stack.start(
                    worker,
                    "worker",
                    "--app",
                    APP,
                    "--lanes",
                    "high,normal,low",
                    "--poll-interval",
                    str(stack.poll),
                    "--lease",
                    "10",
                    "--worker-id",
                    f"{stack.name}-{worker}",
                )
            for sweeper in ("s1", "s2"):
                stack.start(
                    sweeper,
                    "sweeper",
                    "--promotion-interval",
                    "1",
                    "--recurring-interval",
                    "5",
                    "--rescue-interval",
                    "5",
                    "--leader-retry",
                    "1",
                    "--leader-lease",
                    str(LEASE_S),
                )
        for stack in stacks:
            wait_until(stack.leaders, 30, f"{stack.name}: a leader")
            for worker in ("w1", "w2"):
                wait_until(
                    partial(logged, stack, worker, "running lanes"),
                    30,
                    f"{stack.name}-{worker} to run",
                )
        # Every process talks through the pooler (its admin console lists them as clients).
        for stack in stacks:
            dbname = str(conninfo_to_dict(stack.direct)["dbname"])
            assert len(bouncer.clients(dbname)) >= 4, bouncer.admin("SHOW CLIENTS")

        # A recurring schedule, every minute, made through the pooler; not within a few
        # seconds of a minute boundary, so its first fire time lies ahead.
        if 60 - datetime.now(UTC).second < 4:
            time.sleep(5)
        producers = {s.name: App(s.pooled, prepare_threshold=None) for s in stacks}
        schedules = {
            name: int(app.schedule_recurring("minutely", "* * * * *"))
            for name, app in producers.items()
        }
        tier_ids: dict[str, dict[str, list[int]]] = {}
        for name, app in producers.items():
            ids = tier_ids[name] = schedule_tiers(app)
            conn = conns[name]
            # Routed by due time: HOT waits in the hot tier, COLD in the cold one (both due
            # seconds from now); IMMEDIATE went straight to the hot tier, never cold.
            assert statuses(conn, ids["HOT"]) == {"QUEUED"}
            assert statuses(conn, ids["COLD"]) == {"PENDING"}
            assert ever_pending(conn, ids["IMMEDIATE"]) == 0

        for stack in stacks:
            conn, ids = conns[stack.name], tier_ids[stack.name]
            all_ids = [i for tier in ids.values() for i in tier]
            wait_until(
                partial(all_completed, conn, all_ids),
                60,
                f"{stack.name}: every tier's tasks to complete",
            )

        # The first minute slot has fired in both stacks: SIGKILL each stack's leader; the
        # other sweeper takes over within a lease period, and the next slot fires once.
        first_fires: dict[str, datetime] = {}
        for stack in stacks:
            conn = conns[stack.name]
            first_fires[stack.name] = wait_until(
                partial(first_completed_fire, conn, schedules[stack.name]),
                75,
                f"{stack.name}: the first minute slot to run",
            )
        for stack in stacks:
            (leader,) = stack.leaders()
            stack.procs[leader].send_signal(signal.SIGKILL)
            stack.procs[leader].wait(10)
            other = "s2" if leader == "s1" else "s1"
            wait_until(
                partial(logged, stack, other, "became leader"),
                LEASE_S + 5,
                f"{stack.name}: {other} to take over",
            )
        for stack in stacks:
            conn = conns[stack.name]
            second = first_fires[stack.name] + timedelta(minutes=1)
            wait_until(
                partial(slot_completed, conn, schedules[stack.name], second),
                75,
                f"{stack.name}: the second minute slot to run",
            )

        for stack in stacks:
            check_stack(stack, conns[stack.name], tier_ids[stack.name], schedules[stack.name])
        check_tenant_binding(stacks[1], conns[stacks[1].name], producers[stacks[1].name])
        check_operator_commands(stacks[1])
        # Nothing a pooler cannot hold was asked of it: no prepared statement went missing.
        for stack in stacks:
            assert "prepared statement" not in stack.logs()
    except BaseException:
        print("\n".join(s.logs() for s in stacks))
        print(f"--- pgbouncer ---\n{bouncer.log()}")
        raise
    finally:
        for conn in conns.values():
            conn.close()


def check_stack(
    stack: Stack, conn: psycopg.Connection, ids: dict[str, list[int]], schedule_id: int
) -> None:
    where = f"{stack.name}\n{stack.logs()}"
    # On time. IMMEDIATE work waits for a wake-up: LISTEN on the direct connection, or the
    # next poll (the polling stack's --poll-interval, jittered by up to 25 %).
    immediate = lateness(conn, ids["IMMEDIATE"])
    for tier in ids:
        late = lateness(conn, ids[tier])
        print(
            f"{stack.name}: {tier} lateness (s) p50 {late[len(late) // 2]:.3f}"
            f" max {late[-1]:.3f} over {len(late)} tasks"
        )
    bound = 1.0 if stack.listen else POLL_WITHOUT_LISTEN * 1.25 + 0.75
    assert len(immediate) == 10 and immediate[-1] < bound, (immediate, where)
    # HOT and COLD work is due later: the lanes sleep until it is due, LISTEN or not (COLD
    # after the leader promoted it into the hot tier).
    for tier in ("HOT", "COLD"):
        late = lateness(conn, ids[tier])
        assert len(late) == 10 and late[-1] < 1.0, (tier, late, where)
    promoted = conn.execute(
        "SELECT count(*) FROM pgsched.task_events WHERE task_id = ANY(%s)"
        " AND from_status = 'PENDING' AND to_status = 'QUEUED'",
        (ids["COLD"],),
    ).fetchone()
    assert promoted == (10,), where

    # Exactly once per minute slot: one occurrence, one task, one run, one handler call.
    with conn.cursor(row_factory=dict_row) as cur:
        slots = cur.execute(
            "SELECT o.fire_at, o.outcome, count(t.id) AS tasks,"
            " count(t.id) FILTER (WHERE t.status = 'COMPLETED') AS completed"
            " FROM pgsched.schedule_occurrences AS o"
            " LEFT JOIN pgsched.tasks AS t ON t.schedule_id = o.schedule_id"
            "  AND t.next_run_at = o.fire_at"
            " WHERE o.schedule_id = %s GROUP BY o.fire_at, o.outcome ORDER BY o.fire_at",
            (schedule_id,),
        ).fetchall()
    fired = [s for s in slots if s["completed"]]
    assert len(fired) >= 2, (slots, where)
    assert all(s["outcome"] == "ARMED" and s["tasks"] == 1 for s in slots), (slots, where)
    gaps = [b["fire_at"] - a["fire_at"] for a, b in itertools.pairwise(slots)]
    assert set(gaps) == {timedelta(minutes=1)}, (slots, where)
    recurring = conn.execute(
        "SELECT id FROM pgsched.tasks WHERE schedule_id = %s AND status = 'COMPLETED'",
        (schedule_id,),
    ).fetchall()
    recurring_ids = [r[0] for r in recurring]
    late = lateness(conn, recurring_ids)
    assert len(late) == len(recurring_ids) and late[-1] < 1.0, (late, where)

    # No task lost, none run twice: every task scheduled completed, each handler ran once.
    everything = [i for tier in ids.values() for i in tier] + recurring_ids
    runs = conn.execute(
        "SELECT task_id, count(*) FROM public.recurring_test_log WHERE task_id = ANY(%s)"
        " GROUP BY task_id",
        (everything,),
    ).fetchall()
    assert sorted(runs) == sorted((i, 1) for i in everything), where
    failed = conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE status IN ('FAILED', 'CANCELLED')"
    ).fetchone()
    assert failed == (0,), where

    # LISTEN ran on the direct connection only in the listening stack; nowhere in the other.
    listeners = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'LISTEN%%'"
    ).fetchone()
    assert listeners is not None
    assert (listeners[0] > 0) is stack.listen, (listeners, where)
    # The lease changed hands once, by SIGKILL: generation 2, held by the survivor.
    lease = conn.execute(
        "SELECT generation, expires_at > now() FROM pgsched.sweep_leader"
    ).fetchone()
    assert lease is not None and lease[0] >= 2 and lease[1], (lease, where)


def check_tenant_binding(stack: Stack, conn: psycopg.Connection, app: App) -> None:
    """A transactional handler's tenant is bound inside its transaction: each sees its own
    task's tenant through the pooler, and no server session keeps it for the next client."""
    tasks = {
        int(app.schedule(task_type, tenant_id=tenant)): tenant
        for task_type in ("tenant_seen", "tenant_seen_async")
        for tenant in ("acme", "globex", "initech")
    }
    wait_until(partial(all_completed, conn, list(tasks)), 30, f"{stack.name}: tenant tasks")
    rows = conn.execute("SELECT task_id, tenant_seen FROM public.tenant_seen_log").fetchall()
    seen: dict[int, str] = dict(rows)
    assert seen == tasks, stack.logs()
    for _ in range(20):
        with psycopg.connect(stack.pooled, autocommit=True) as client:
            row = client.execute("SELECT current_setting('pgsched.tenant_id', true)").fetchone()
        assert row is not None and row[0] in (None, ""), row


def check_operator_commands(stack: Stack) -> None:
    """`pgsched status` and `doctor` work through the pooler too (as a user runs them)."""
    env = stack.env()
    status = subprocess.run(
        [PGSCHED, "status", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stderr
    leader = json.loads(status.stdout)["sweeper_leader"]
    assert leader is not None and leader["generation"] >= 2, leader
    doctor = subprocess.run(
        [PGSCHED, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert doctor.returncode in (0, 1), doctor.stderr
    checks = {c["name"]: c["result"] for c in json.loads(doctor.stdout)["checks"]}
    assert checks["database"] == checks["schema"] == checks["sweeper"] == "pass", checks
