"""Fair claims and limits, from plain SQL: pgsched.task_claim_many shares a lane between
its tenants, and pgsched.task_limits caps what a claim may take (limit_set / limit_clear /
limit_list / lane_set_fairness). Time is moved with `as_of`, never by sleeping."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest


def seed(
    conn: psycopg.Connection, tenant: str, n: int, *, task_type: str = "job", **kw: Any
) -> None:
    """n due tasks of `tenant`, due a minute ago (one set-based schedule_tasks call)."""
    priority = kw.get("priority", 5)
    age = kw.get("age", "1 minute")
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill(%(type)s::text, ARRAY[%(n)s]),"
        " tenant_ids => array_fill(%(tenant)s::text, ARRAY[%(n)s]),"
        " priorities => array_fill(%(priority)s::integer, ARRAY[%(n)s]),"
        " run_ats => ARRAY(SELECT now() - %(age)s::interval + g * interval '1 ms'"
        "                  FROM generate_series(1, %(n)s) AS g))",
        {"type": task_type, "n": n, "tenant": tenant, "priority": priority, "age": age},
    )


def claim(
    conn: psycopg.Connection, n: int, *, lane: str = "NORMAL", as_of: Any = None
) -> list[tuple[str, str]]:
    """Claim up to n; (tenant_id, task_type) of each claimed row, in the order returned."""
    rows = conn.execute(
        "SELECT tenant_id, task_type FROM pgsched.task_claim_many(%s, %s, 'w', '5 minutes', %s)",
        (lane, n, as_of),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def test_a_small_tenant_is_not_queued_behind_a_backlog(conn: psycopg.Connection) -> None:
    seed(conn, "big", 2000, age="1 hour")  # older than anything of small's
    seed(conn, "small", 10)
    first = claim(conn, 20)
    assert Counter(t for t, _ in first) == {"big": 10, "small": 10}
    # Round-robin: the batch alternates tenants.
    assert {first[0][0], first[1][0]} == {"big", "small"}


def test_the_old_order_when_fairness_is_off(conn: psycopg.Connection) -> None:
    seed(conn, "big", 2000, age="1 hour")
    seed(conn, "small", 10)
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', false)")
    assert Counter(t for t, _ in claim(conn, 20)) == {"big": 20}
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', true)")
    assert Counter(t for t, _ in claim(conn, 20)) == {"big": 10, "small": 10}


def test_shares_left_unused_go_to_tenants_with_more(conn: psycopg.Connection) -> None:
    seed(conn, "a", 500)
    seed(conn, "b", 2)
    seed(conn, "c", 3)
    got = Counter(t for t, _ in claim(conn, 30))
    assert got == {"a": 25, "b": 2, "c": 3}


def test_one_tenant_claims_by_priority_then_due(conn: psycopg.Connection) -> None:
    seed(conn, "solo", 5, priority=4, age="1 hour")
    seed(conn, "solo", 5, priority=7)
    rows = conn.execute(
        "SELECT priority FROM pgsched.task_claim_many('NORMAL', 7, 'w', '5 minutes')"
    ).fetchall()
    assert sorted((r[0] for r in rows), reverse=True) == [7, 7, 7, 7, 7, 4, 4]


def test_many_tenants_each_get_one(conn: psycopg.Connection) -> None:
    for n in range(40):
        seed(conn, f"t{n:02}", 3)
    got = Counter(t for t, _ in claim(conn, 40))
    assert len(got) == 40 and set(got.values()) == {1}


def test_concurrency_limit_caps_processing(conn: psycopg.Connection) -> None:
    seed(conn, "a", 50, task_type="mail")
    seed(conn, "a", 50, task_type="other")
    conn.execute("SELECT pgsched.limit_set('task_type', 'mail', max_processing => 5)")
    # Candidates over the limit are left QUEUED (this claim comes back short)...
    first = Counter(ty for _, ty in claim(conn, 40))
    assert first["mail"] == 5
    # ...and while the type is at its limit the claims skip it: the rest of the lane flows.
    rest = Counter(ty for _, ty in claim(conn, 100))
    assert rest == {"other": 50 - first["other"]}
    assert claim(conn, 40) == []
    # A finished one frees exactly one place.
    conn.execute(
        "SELECT pgsched.task_finish_many(ARRAY[id], ARRAY[lease_token], ARRAY['COMPLETED'],"
        " NULL, NULL)"
        " FROM pgsched.tasks WHERE status = 'PROCESSING' AND task_type = 'mail' LIMIT 1"
    )
    assert claim(conn, 40) == [("a", "mail")]
    listed = conn.execute(
        "SELECT scope, key, max_processing, processing FROM pgsched.limit_list()"
    ).fetchall()
    assert listed == [("task_type", "mail", 5, 5)]


def test_tenant_limit_and_zero_pauses(conn: psycopg.Connection) -> None:
    seed(conn, "a", 20)
    seed(conn, "b", 20)
    conn.execute("SELECT pgsched.limit_set('tenant', 'a', max_processing => 0)")
    assert Counter(t for t, _ in claim(conn, 10)) == {"b": 10}
    conn.execute("SELECT pgsched.limit_set('tenant', 'a', max_processing => 3)")
    assert Counter(t for t, _ in claim(conn, 10)) == {"a": 3, "b": 7}
    assert conn.execute("SELECT pgsched.limit_clear('tenant', 'a')").fetchone()[0] is True
    assert conn.execute("SELECT pgsched.limit_clear('tenant', 'a')").fetchone()[0] is False
    # b has 3 left; a, unlimited again, takes the rest of the batch.
    assert Counter(t for t, _ in claim(conn, 10)) == {"a": 7, "b": 3}


def test_rate_limit_refills_with_time(conn: psycopg.Connection) -> None:
    seed(conn, "a", 200, task_type="api", age="2 hours")
    conn.execute("SELECT pgsched.limit_set('task_type', 'api', rate => 60, per => 'minute')")
    t0 = conn.execute("SELECT now()").fetchone()[0]
    # Bursts of a tenth of the rate (6), then one per second.
    assert len(claim(conn, 100, as_of=t0)) == 6
    assert claim(conn, 100, as_of=t0) == []
    assert len(claim(conn, 100, as_of=t0 + timedelta(seconds=1))) == 1
    assert len(claim(conn, 100, as_of=t0 + timedelta(seconds=3.5))) == 2
    # A long pause refills only up to the burst.
    assert len(claim(conn, 100, as_of=t0 + timedelta(hours=1))) == 6
    total = conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE status = 'PROCESSING'"
    ).fetchone()[0]
    assert total == 15


def test_limited_tasks_stay_due_and_their_lateness_counts(conn: psycopg.Connection) -> None:
    seed(conn, "a", 3, task_type="mail")
    due = conn.execute("SELECT array_agg(next_run_at ORDER BY id) FROM pgsched.tasks").fetchone()[0]
    conn.execute("SELECT pgsched.limit_set('task_type', 'mail', max_processing => 0)")
    assert claim(conn, 10) == []
    rows = conn.execute(
        "SELECT status::text, next_run_at FROM pgsched.tasks ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == ["QUEUED"] * 3
    assert [r[1] for r in rows] == due
    conn.execute("SELECT pgsched.limit_set('task_type', 'mail', max_processing => 10)")
    later = conn.execute("SELECT now() + interval '1 minute'").fetchone()[0]
    claim(conn, 10, as_of=later)
    lateness = conn.execute(
        "SELECT min(last_run_at - next_run_at) FROM pgsched.tasks WHERE status = 'PROCESSING'"
    ).fetchone()[0]
    assert lateness >= timedelta(minutes=1)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ("pgsched.limit_set('kind', 'x', 5)", "scope"),
        ("pgsched.limit_set('task_type', '', 5)", "key"),
        ("pgsched.limit_set('task_type', 'x')", "max_processing or rate"),
        ("pgsched.limit_set('task_type', 'x', -1)", "max_processing"),
        ("pgsched.limit_set('task_type', 'x', rate => 0)", "rate"),
        ("pgsched.limit_set('task_type', 'x', rate => 5, per => 'hour')", "per"),
        ("pgsched.limit_clear('kind', 'x')", "scope"),
    ],
)
def test_bad_limit_refused_nothing_written(conn: psycopg.Connection, call: str, field: str) -> None:
    conn.execute("SELECT pgsched.limit_set('task_type', 'x', 3)")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        conn.execute(f"SELECT {call}")
    assert refused.value.sqlstate == "22023"
    assert field in str(refused.value)
    rows = conn.execute(
        "SELECT scope, key, max_processing, rate FROM pgsched.task_limits"
    ).fetchall()
    assert rows == [("task_type", "x", 3, None)]


def test_a_tenant_whose_head_is_not_due_still_gets_its_due_work(conn: psycopg.Connection) -> None:
    # Its highest-priority work is due in an hour (queued, hot); its lower priority is due.
    conn.execute(
        "SELECT pgsched.schedule_task('job', tenant_id => 'a', priority => 7,"
        " run_at => now() + interval '1 hour')"
    )
    seed(conn, "a", 5, priority=4)
    seed(conn, "b", 5)
    rows = conn.execute(
        "SELECT tenant_id, priority FROM pgsched.task_claim_many('NORMAL', 20, 'w', '5 minutes')"
    ).fetchall()
    assert Counter(rows) == {("a", 4): 5, ("b", 5): 5}
