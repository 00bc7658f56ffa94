"""The sweep leader's lease from plain SQL (sql/0019): compare-and-set acquisition, renewal
and release fenced by the generation, the fence a leader's writes run behind, bad input;
and the Python side: a deposed leader's fenced statements are refused.

Time is moved with `as_of` where a function takes it, never by sleeping."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from pgsched.leadership import DEPOSED_SQLSTATE, LeaderLease, connect_fenced, is_deposed


def acquire(conn: psycopg.Connection, holder: str, lease: str = "30 seconds", as_of: Any = None):
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM pgsched.sweep_leader_acquire(%s, %s::interval, %s)",
            (holder, lease, as_of),
        ).fetchone()


def renew(conn: psycopg.Connection, holder: str, generation: int, as_of: Any = None):
    row = conn.execute(
        "SELECT pgsched.sweep_leader_renew(%s, %s, '30 seconds', %s)", (holder, generation, as_of)
    ).fetchone()
    assert row is not None
    return row[0]


def now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def test_one_holder_at_a_time_and_each_takeover_a_new_generation(
    conn: psycopg.Connection,
) -> None:
    t0 = now(conn)
    first = acquire(conn, "a", as_of=t0)
    assert first["acquired"] is True and first["generation"] == 1 and first["leader"] == "a"
    assert first["expires_at"] == t0 + timedelta(seconds=30)
    # Live: nobody else takes it, and they are told who holds it and for how long.
    other = acquire(conn, "b", as_of=t0 + timedelta(seconds=10))
    assert (other["acquired"], other["generation"], other["leader"]) == (False, 1, "a")
    assert other["expires_in_s"] == pytest.approx(20.0)
    # Nor does the holder take it again (a second process under the same name).
    assert acquire(conn, "a", as_of=t0 + timedelta(seconds=10))["acquired"] is False

    # Renewal pushes the expiry on while the generation is the holder's.
    renewed = renew(conn, "a", 1, as_of=t0 + timedelta(seconds=25))
    assert renewed == t0 + timedelta(seconds=55)
    assert acquire(conn, "b", as_of=t0 + timedelta(seconds=40))["acquired"] is False
    assert renew(conn, "b", 1, as_of=t0 + timedelta(seconds=40)) is None  # not b's

    # Expired: the next candidate takes it with a new generation; the old holder's renewal
    # is refused from then on (NULL), even though its name is unchanged.
    taken = acquire(conn, "b", as_of=t0 + timedelta(seconds=55))
    assert (taken["acquired"], taken["generation"], taken["leader"]) == (True, 2, "b")
    assert renew(conn, "a", 1, as_of=t0 + timedelta(seconds=56)) is None
    # A lease that lapsed while nobody took it is still its holder's: nobody led meanwhile.
    assert renew(conn, "b", 2, as_of=t0 + timedelta(seconds=90)) is not None


def test_release_lets_the_next_candidate_in_at_once_and_only_the_holder_releases(
    conn: psycopg.Connection,
) -> None:
    assert acquire(conn, "a")["acquired"]
    released = "SELECT pgsched.sweep_leader_release(%s, %s)"
    assert conn.execute(released, ("b", 1)).fetchone() == (False,)
    assert conn.execute(released, ("a", 7)).fetchone() == (False,)
    assert acquire(conn, "b")["acquired"] is False
    assert conn.execute(released, ("a", 1)).fetchone() == (True,)
    taken = acquire(conn, "b")
    assert taken["acquired"] and taken["generation"] == 2


def test_racing_candidates_take_an_expired_lease_exactly_once(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    sessions = [connect() for _ in range(8)]
    gate = threading.Barrier(len(sessions))
    results: list[bool] = []

    def race(session: psycopg.Connection, name: str) -> None:
        gate.wait()
        results.append(bool(acquire(session, name)["acquired"]))

    threads = [threading.Thread(target=race, args=(s, f"c{i}")) for i, s in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 7 + [True]
    row = conn.execute("SELECT generation FROM pgsched.sweep_leader").fetchone()
    assert row == (1,)


def test_the_fence_refuses_a_deposed_generation_and_holds_off_a_takeover(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    assert acquire(conn, "a", "2 seconds")["acquired"]
    conn.execute("SELECT pgsched.sweep_leader_fence('a', 1)")  # current: passes
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("SELECT pgsched.sweep_leader_fence('a', 2)")
    assert refused.value.sqlstate == DEPOSED_SQLSTATE
    assert "sweep leader a generation 2 no longer leads" in str(refused.value)

    # A fenced transaction holds the row: a candidate, seeing the lease expired, waits for
    # it (here: gives up after its lock_timeout) instead of taking over mid-write.
    leader = connect(autocommit=False)
    leader.execute("SELECT pgsched.sweep_leader_fence('a', 1)")
    candidate = connect()
    candidate.execute("SET lock_timeout = '300ms'")
    later = now(conn) + timedelta(seconds=5)
    with pytest.raises(errors.LockNotAvailable):
        acquire(candidate, "b", as_of=later)
    leader.commit()
    assert acquire(candidate, "b", as_of=later)["acquired"]
    # Deposed: the old leader's next fenced statement is refused.
    with pytest.raises(psycopg.Error) as late:
        leader.execute("SELECT pgsched.sweep_leader_fence('a', 1)")
    assert late.value.sqlstate == DEPOSED_SQLSTATE
    leader.rollback()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ("SELECT * FROM pgsched.sweep_leader_acquire('', '10 seconds')", "holder"),
        ("SELECT * FROM pgsched.sweep_leader_acquire(NULL, '10 seconds')", "holder"),
        ("SELECT * FROM pgsched.sweep_leader_acquire(repeat('x', 201), '10 seconds')", "holder"),
        ("SELECT * FROM pgsched.sweep_leader_acquire('a', '0 seconds')", "lease"),
        ("SELECT * FROM pgsched.sweep_leader_acquire('a', '2 hours')", "lease"),
        ("SELECT * FROM pgsched.sweep_leader_acquire('a', NULL)", "lease"),
        ("SELECT pgsched.sweep_leader_renew('a', 1, '-1 seconds')", "lease"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    conn: psycopg.Connection, call: str, field: str
) -> None:
    before = conn.execute("SELECT * FROM pgsched.sweep_leader").fetchone()
    with pytest.raises(errors.InvalidParameterValue) as refused:
        conn.execute(call)
    assert refused.value.sqlstate == "22023"
    assert f"{field} must be" in str(refused.value)
    assert conn.execute("SELECT * FROM pgsched.sweep_leader").fetchone() == before


def test_a_worker_login_leads_through_the_functions_but_cannot_write_the_row(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}_sweeper"
    role = sql.Identifier(name)
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgsched_worker").format(role))
    try:
        with psycopg.connect(make_conninfo(db_dsn, user=name), autocommit=True) as login:
            assert acquire(login, "w")["acquired"]
            assert renew(login, "w", 1) is not None
            login.execute("SELECT pgsched.sweep_leader_fence('w', 1)")
            assert login.execute("SELECT holder FROM pgsched.sweep_leader").fetchone() == ("w",)
            with pytest.raises(errors.InsufficientPrivilege):
                login.execute("UPDATE pgsched.sweep_leader SET expires_at = 'infinity'")
    finally:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        conn.execute(sql.SQL("DROP ROLE {}").format(role))


def test_a_deposed_leaders_fenced_connection_writes_nothing(
    conn: psycopg.Connection, db_dsn: str
) -> None:
    """What the sweeper's work connection does: each statement outside a transaction runs
    in one behind the fence; once another generation leads, it is refused and rolled back."""
    lease = LeaderLease("old", lease_seconds=2)
    with connect_fenced(db_dsn, prepare_threshold=None) as work:
        assert lease.try_acquire(work).acquired and lease.held()
        work.fence = lease.fence()
        row = work.execute("SELECT pgsched.schedule_task('fenced_ok')").fetchone()
        assert row is not None
        # Taken over after the lease ran out (moved on in time by as_of).
        later = now(conn) + timedelta(seconds=3)
        assert acquire(conn, "new", as_of=later)["acquired"]
        with pytest.raises(psycopg.Error) as refused:
            work.execute("SELECT pgsched.schedule_task('fenced_late')")
        assert is_deposed(refused.value)
        # Without a fence the same connection runs statements as usual; the lease's own
        # renewal (unfenced, as on the renewer's connection) finds it deposed.
        work.fence = None
        assert not lease.renew(work) and not lease.held()
        assert work.execute("SELECT 1").fetchone() == (1,)
    types = conn.execute("SELECT task_type FROM pgsched.tasks ORDER BY id").fetchall()
    assert types == [("fenced_ok",)]
