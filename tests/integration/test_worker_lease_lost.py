"""A lease the worker lost (another worker or the rescue owns the task now) stops being
heartbeated at once, and the handler is cancelled; a fan-out parent whose lease was lost
before it fanned out used to be heartbeated for as long as the worker lived.

The lease is lost on purpose: a trigger of this test replaces the lease token in the same
statement that claims the task, so the worker holds a token that was never valid."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support.worker_helpers import (
    Workers,
    count_function_calls,
    events,
    function_calls,
    schedule,
    statuses,
    steps,
    wait_until,
)

APP = "tests.apps.isolation:app"

STEAL_LEASES = """
CREATE FUNCTION public.steal_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgsched.tasks SET lease_token = gen_random_uuid() WHERE id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER steal_lease AFTER UPDATE ON pgsched.tasks_hot FOR EACH ROW
    WHEN (OLD.status = 'QUEUED' AND NEW.status = 'PROCESSING' AND NEW.payload ? 'steal')
    EXECUTE FUNCTION public.steal_lease();
"""


@pytest.fixture
def workers(workers: Workers, conn: psycopg.Connection) -> Workers:
    conn.execute(STEAL_LEASES)
    count_function_calls(conn)  # the heartbeat's
    return workers


def heartbeat_calls(conn: psycopg.Connection) -> int:
    return function_calls(conn, "task_heartbeat_many")


def test_a_fan_out_whose_lease_is_lost_is_no_longer_heartbeated(
    conn: psycopg.Connection, workers: Workers
) -> None:
    for tenant in ("crm-1", "crm-2"):
        conn.execute("SELECT pgsched.tenant_add(%s, 'crm')", (tenant,))
    parent = schedule(
        conn, "quick_async", '{"steal": true}', scope="product", product="crm", max_attempts=1
    )
    w = workers.start("W1", app=APP, lanes="normal", lease=2)
    w.wait_log(f"task {parent} (type quick_async, lane NORMAL, attempt 1): lease lost", 15)
    # Never fanned out: the lease was not ours. The rescue (every 5 s) ends it as lost.
    wait_until(lambda: statuses(conn, [parent])[parent] == "FAILED", 20, what="the rescue")
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE parent_id = %s", (parent,)
    ).fetchone() == (0,)
    assert any("stale" in (e["detail"] or "") for e in events(conn, parent)), events(conn, parent)

    # Nothing is held any more: the heartbeat stops calling (it called every 2/3 s while
    # the lost lease was held, for as long as the worker lived).
    time.sleep(1.5)
    before = heartbeat_calls(conn)
    time.sleep(6)
    after = heartbeat_calls(conn)
    assert after - before <= 1, f"{after - before} heartbeats in 6 s with nothing to renew"
    assert w.alive()


def test_a_running_task_whose_lease_is_lost_is_cancelled_and_no_longer_heartbeated(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "holds_a_lease", '{"steal": true, "seconds": 8}', max_attempts=1)
    w = workers.start("W1", app=APP, lanes="normal", lease=2)
    w.wait_log(f"task {task_id} (type holds_a_lease, lane NORMAL, attempt 1): lease lost", 10)
    started = steps(conn, task_id)
    assert [s["step"] for s in started] == ["start"]
    # The handler was cancelled: its 8 s of work never end, and nothing is heartbeated.
    time.sleep(1.5)
    before = heartbeat_calls(conn)
    time.sleep(6)
    assert heartbeat_calls(conn) - before <= 1
    wait_until(lambda: statuses(conn, [task_id])[task_id] == "FAILED", 20, what="the rescue")
    time.sleep(1)
    assert [s["step"] for s in steps(conn, task_id)] == ["start"]
    assert w.alive()
