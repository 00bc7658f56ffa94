"""Every path that puts a task in a tier agrees with pgsched.route(), at the window edges.

Single and bulk scheduling, recurring arming, the retry and release of an outcome, the
DEAD lane's retry, lease rescue and promotion each route a due time; here each one is
driven with its own clock parameter to just below, at and just above the 15 minute and
24 hour boundaries, and the tier it chose (status, partition and wake-up) is compared with
what route() says for the same due time and clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

AS_OF = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
MIN15 = timedelta(minutes=15)
DAY = timedelta(hours=24)
EDGES = [
    timedelta(0),
    MIN15 - US,
    MIN15,
    MIN15 + US,
    DAY - US,
    DAY,
    DAY + US,
    timedelta(days=40),
]
SENTINEL = "pgsched_router_sentinel"
STATUS_OF_TIER = {"IMMEDIATE": "QUEUED", "HOT": "QUEUED", "COLD": "PENDING"}
PARTITION_OF_TIER = {"IMMEDIATE": "tasks_hot", "HOT": "tasks_hot", "COLD": "tasks_cold"}


@pytest.fixture
def listener(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    listening = connect(autocommit=True)
    listening.execute("LISTEN pgsched_normal")
    listening.execute(f"LISTEN {SENTINEL}")
    return listening


def woken(listener: psycopg.Connection, sender: psycopg.Connection) -> bool:
    """Whether the NORMAL lane was notified since the last call (read up to a sentinel)."""
    sender.execute("SELECT pg_notify(%s, 'end')", (SENTINEL,))
    lane = False
    for note in listener.notifies(timeout=10):
        if note.channel == SENTINEL:
            return lane
        lane = lane or note.channel == "pgsched_normal"
    raise AssertionError("the sentinel notification never arrived")


def route(conn: psycopg.Connection, due: datetime, as_of: datetime) -> str:
    row = conn.execute("SELECT pgsched.route(%s, %s)", (due, as_of)).fetchone()
    assert row is not None
    return str(row[0])


def assert_routed(
    conn: psycopg.Connection,
    listener: psycopg.Connection,
    task_id: int,
    as_of: datetime,
    path: str,
) -> None:
    row = conn.execute(
        "SELECT status::text, tableoid::regclass::text, next_run_at FROM pgsched.tasks"
        " WHERE id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    status, partition, due = row
    tier = route(conn, due, as_of)
    assert (status, partition) == (STATUS_OF_TIER[tier], f"pgsched.{PARTITION_OF_TIER[tier]}"), (
        f"{path}: due {due - as_of} after its clock, route() says {tier}, the path chose {status}"
    )
    assert woken(listener, conn) == (tier == "IMMEDIATE"), f"{path}: wake-up disagrees ({tier})"


def claimed(
    conn: psycopg.Connection, as_of: datetime, lease: str = "30 seconds"
) -> tuple[int, str]:
    """A task scheduled due a second before `as_of` and claimed at `as_of`."""
    conn.execute(
        "SELECT pgsched.schedule_task('probe', run_at => %s, as_of => %s)",
        (as_of - timedelta(seconds=1), as_of - timedelta(seconds=1)),
    )
    row = conn.execute(
        "SELECT id, lease_token::text FROM pgsched.task_claim_many('NORMAL', 1, 'w', %s, %s)",
        (lease, as_of),
    ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


@pytest.mark.parametrize("offset", EDGES, ids=str)
def test_single_bulk_and_recurring_scheduling_agree_with_route(
    conn: psycopg.Connection, listener: psycopg.Connection, offset: timedelta
) -> None:
    due = AS_OF + offset
    woken(listener, conn)

    single = conn.execute(
        "SELECT pgsched.schedule_task('probe', run_at => %s, as_of => %s)", (due, AS_OF)
    ).fetchone()[0]
    assert_routed(conn, listener, single, AS_OF, "schedule_task")

    ex = conn.execute(
        "SELECT task_id, created FROM pgsched.schedule_task_ex('probe', run_at => %s, as_of => %s)",
        (due, AS_OF),
    ).fetchone()
    assert ex is not None
    ex_id, created = ex
    assert created is True
    assert_routed(conn, listener, ex_id, AS_OF, "schedule_task_ex")

    bulk = conn.execute(
        "SELECT task_id FROM pgsched.schedule_tasks(ARRAY['probe'], run_ats => ARRAY[%s],"
        " as_of => %s)",
        (due, AS_OF),
    ).fetchone()[0]
    assert_routed(conn, listener, bulk, AS_OF, "schedule_tasks")

    schedule_id = conn.execute(
        "SELECT pgsched.schedule_recurring('probe', '0 9 * * *', 'UTC', as_of => %s)", (AS_OF,)
    ).fetchone()[0]
    woken(listener, conn)
    armed = conn.execute(
        "SELECT pgsched.schedule_arm(%s, NULL, %s, '{}', %s)", (schedule_id, due, AS_OF)
    ).fetchone()[0]
    assert armed is not None
    assert_routed(conn, listener, armed, AS_OF, "schedule_arm")


@pytest.mark.parametrize("offset", EDGES, ids=str)
def test_retry_backoff_agrees_with_route(
    conn: psycopg.Connection, listener: psycopg.Connection, offset: timedelta
) -> None:
    task_id, token = claimed(conn, AS_OF)
    woken(listener, conn)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(ARRAY[%s::bigint], ARRAY[%s::uuid],"
        " ARRAY['RETRY'], ARRAY['boom'], ARRAY[%s::interval], %s)",
        (task_id, token, offset, AS_OF),
    )
    assert conn.execute(
        "SELECT next_run_at FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone() == (AS_OF + offset,)
    assert_routed(conn, listener, task_id, AS_OF, "task_finish_many RETRY")


def test_retry_delay_in_calendar_days_routes_by_its_due_time(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    """A '1 day' backoff that spans a spring-forward night is due in 23 hours: HOT, not COLD.

    The retry used to compare the delay with the window (`'1 day' >= '24 hours'`: COLD)
    while the due time it set was 23 hours away, which route() calls HOT.
    """
    conn.execute("SET TimeZone = 'Europe/Berlin'")
    as_of = datetime(2030, 3, 30, 12, 0, tzinfo=UTC)  # Berlin springs forward on the 31st
    task_id, token = claimed(conn, as_of)
    woken(listener, conn)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(ARRAY[%s::bigint], ARRAY[%s::uuid],"
        " ARRAY['RETRY'], ARRAY['boom'], ARRAY[interval '1 day'], %s)",
        (task_id, token, as_of),
    )
    due = conn.execute("SELECT next_run_at FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()
    assert due == (as_of + timedelta(hours=23),)
    assert route(conn, as_of + timedelta(hours=23), as_of) == "HOT"
    assert_routed(conn, listener, task_id, as_of, "task_finish_many RETRY (calendar day)")


def test_release_rescue_and_dead_retry_agree_with_route(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    released, token = claimed(conn, AS_OF)
    woken(listener, conn)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(ARRAY[%s::bigint], ARRAY[%s::uuid],"
        " ARRAY['RELEASED'], NULL, NULL, %s)",
        (released, token, AS_OF),
    )
    assert_routed(conn, listener, released, AS_OF, "task_finish_many RELEASED")

    rescued, _ = claimed(conn, AS_OF, lease="1 second")
    woken(listener, conn)
    later = AS_OF + timedelta(seconds=5)
    assert conn.execute(
        "SELECT pgsched.lease_rescue_expired(NULL, 1000, %s)", (later,)
    ).fetchone() == (1,)
    assert_routed(conn, listener, rescued, later, "lease_rescue_expired")

    failed, token = claimed(conn, AS_OF)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(ARRAY[%s::bigint], ARRAY[%s::uuid],"
        " ARRAY['FAILED'], ARRAY['refused'], NULL, %s)",
        (failed, token, AS_OF),
    )
    woken(listener, conn)
    assert conn.execute(
        "SELECT array_agg(r) FROM pgsched.dead_retry(%s, as_of => %s) AS r", (failed, later)
    ).fetchone() == ([failed],)
    assert_routed(conn, listener, failed, later, "dead_retry")


def test_dead_retry_follows_the_settings_like_every_path(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    """With no immediate window a task due now is HOT: queued, but no lane is woken."""
    failed, token = claimed(conn, AS_OF)
    conn.execute(
        "SELECT * FROM pgsched.task_finish_many(ARRAY[%s::bigint], ARRAY[%s::uuid],"
        " ARRAY['FAILED'], ARRAY['refused'], NULL, %s)",
        (failed, token, AS_OF),
    )
    conn.execute("UPDATE pgsched.settings SET immediate_window = '0'")
    woken(listener, conn)
    conn.execute("SELECT pgsched.dead_retry(%s, as_of => %s)", (failed, AS_OF))
    assert route(conn, AS_OF, AS_OF) == "HOT"
    assert_routed(conn, listener, failed, AS_OF, "dead_retry")


def test_promotion_agrees_with_route(
    conn: psycopg.Connection, listener: psycopg.Connection
) -> None:
    # Scheduled two days early, every edge starts COLD.
    early = AS_OF - timedelta(days=2)
    ids = {
        offset: conn.execute(
            "SELECT pgsched.schedule_task('probe', run_at => %s, as_of => %s)",
            (AS_OF + offset, early),
        ).fetchone()[0]
        for offset in EDGES
        if offset > timedelta(0)
    }
    for task_id in ids.values():
        assert conn.execute(
            "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
        ).fetchone() == ("PENDING",)
    woken(listener, conn)
    promoted = conn.execute("SELECT pgsched.task_promote_due(10000, %s)", (AS_OF,)).fetchone()[0]
    tiers = {offset: route(conn, AS_OF + offset, AS_OF) for offset in ids}
    assert promoted == sum(1 for tier in tiers.values() if tier != "COLD")
    lane_woken = woken(listener, conn)
    assert lane_woken == any(tier == "IMMEDIATE" for tier in tiers.values())
    for offset, task_id in ids.items():
        row = conn.execute(
            "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
        ).fetchone()
        assert row == (STATUS_OF_TIER[tiers[offset]],), f"promotion at {offset}: {tiers[offset]}"
