"""The Redis hot tier against a real redis-server and a real Postgres: the claim-by-ids SQL
function from plain SQL, the mirror (order, loss detection, rebuild), the worker's claim
source (popped ids claimed, stale ones dropped, top-up from Postgres), wake-ups, and the
maxmemory-policy refusal of the CLI."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsched.hot_tier import HotTierConfig
from pgsched.hot_tier.claims import RedisClaimSource
from pgsched.hot_tier.keys import LaneKeys
from pgsched.hot_tier.mirror import MirrorSweep
from pgsched.hot_tier.wakeups import RedisWakeups
from pgsched.lanes import Lane
from tests.support.redis_server import RedisServer, free_port
from tests.support.worker_helpers import APP, run_cli, schedule

LEASE = timedelta(seconds=30)


@pytest.fixture(autouse=True)
def plain_order_lanes(conn: psycopg.Connection) -> None:
    """The hot tier serves lanes whose claims are in plain priority order (fair claims
    across tenants are the default): every work lane here is one."""
    for lane in ("HIGH", "NORMAL", "LOW", "BATCH"):
        conn.execute("SELECT pgsched.lane_set_fairness(%s, false)", (lane,))


def in_seconds(conn: psycopg.Connection, seconds: float) -> datetime:
    row = conn.execute("SELECT now() + %s * interval '1 second'", (seconds,)).fetchone()
    assert row is not None
    return row[0]


def mirror(conn: psycopg.Connection, server: RedisServer) -> tuple[MirrorSweep, dict[str, int]]:
    sweep = MirrorSweep(HotTierConfig(server.url))
    return sweep, sweep.run_once(conn, datetime.now())


def members(server: RedisServer, lane: str) -> list[int]:
    with server.client() as c:
        return [int(m) for m in c.zrange(LaneKeys("pgsched", lane).due, 0, -1)]


def claim_through_redis(
    dsn: str, server: RedisServer, lane: str, n: int
) -> tuple[list[int], RedisClaimSource]:
    async def go() -> tuple[list[int], RedisClaimSource]:
        source = RedisClaimSource(HotTierConfig(server.url), policy_checked=True)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            await source.open(aconn)
            tasks, undecodable = await source.claim(aconn, lane, n, "redis-test", LEASE)
        await source.close()
        assert not undecodable
        return sorted(t.id for t in tasks), source

    return asyncio.run(go())


# -- task_claim_ids, from plain SQL -----------------------------------------------------


def test_task_claim_ids_claims_only_due_queued_rows_of_the_lane(conn: psycopg.Connection) -> None:
    due = schedule(conn, "fn_async", priority=5)
    later = schedule(conn, "fn_async", priority=5, run_at=in_seconds(conn, 3600))
    cancelled = schedule(conn, "fn_async", priority=5)
    conn.execute("SELECT pgsched.cancel_task(%s)", (cancelled,))
    other_lane = schedule(conn, "fn_async", priority=9)
    ids = [due, later, cancelled, other_lane, 987654321]
    claimed = conn.execute(
        "SELECT id, status::text, locked_by, attempts, lease_token IS NOT NULL"
        " FROM pgsched.task_claim_ids('NORMAL', %s, 'w-sql')",
        (ids,),
    ).fetchall()
    assert claimed == [(due, "PROCESSING", "w-sql", 1, True)]
    # The same events as a normal claim: the trigger recorded QUEUED -> PROCESSING.
    event = conn.execute(
        "SELECT from_status::text, to_status::text, worker FROM pgsched.task_events"
        " WHERE task_id = %s ORDER BY id DESC LIMIT 1",
        (due,),
    ).fetchone()
    assert event == ("QUEUED", "PROCESSING", "w-sql")
    # Claimed already: a second claim of the same id takes nothing.
    again = conn.execute(
        "SELECT id FROM pgsched.task_claim_ids('NORMAL', %s, 'w-other')", ([due],)
    ).fetchall()
    assert again == []
    statuses: dict[int, str] = dict(
        conn.execute(
            "SELECT id, status::text FROM pgsched.tasks WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    )
    assert statuses == {
        due: "PROCESSING",
        later: "QUEUED",
        cancelled: "CANCELLED",
        other_lane: "QUEUED",
    }


def test_task_claim_ids_skips_rows_another_session_holds(connect: Any) -> None:
    a = connect()
    task_id = schedule(a, "fn_async")
    holder = connect(autocommit=False)
    holder.execute("SELECT 1 FROM pgsched.tasks WHERE id = %s FOR UPDATE", (task_id,))
    a.execute("SET lock_timeout = '2s'")
    rows = a.execute(
        "SELECT id FROM pgsched.task_claim_ids('NORMAL', %s, 'w')", ([task_id],)
    ).fetchall()
    assert rows == []
    holder.rollback()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ("NULL::bigint[], 'w'", "ids"),
        ("array_fill(1::bigint, ARRAY[10001]), 'w'", "ids"),
        ("ARRAY[1]::bigint[], ''", "worker"),
        ("ARRAY[1]::bigint[], 'w', interval '0'", "lease"),
    ],
)
def test_task_claim_ids_refuses_bad_input(conn: psycopg.Connection, args: str, field: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        conn.execute(f"SELECT * FROM pgsched.task_claim_ids('NORMAL', {args})")
    assert refused.value.diag.message_primary is not None
    assert refused.value.diag.message_primary.startswith(field)


# -- the mirror -------------------------------------------------------------------------


def test_mirror_holds_the_immediate_window_in_claim_order(
    conn: psycopg.Connection, redis_server: RedisServer
) -> None:
    now_p5 = schedule(conn, "fn_async", priority=5)
    now_p7 = schedule(conn, "fn_async", priority=7, run_at=in_seconds(conn, 1))
    soon_p5 = schedule(conn, "fn_async", priority=5, run_at=in_seconds(conn, 600))
    schedule(conn, "fn_async", priority=5, run_at=in_seconds(conn, 7200))  # beyond the window
    high = schedule(conn, "fn_async", priority=9)
    _, counts = mirror(conn, redis_server)
    # No meta yet: every lane is built (and swapped in), none drifted.
    assert counts["rebuilt"] == 4
    assert members(redis_server, "NORMAL") == [now_p7, now_p5, soon_p5]
    assert members(redis_server, "HIGH") == [high]
    with redis_server.client() as c:
        meta = c.hgetall(LaneKeys("pgsched", "NORMAL").meta)
    system_id = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
    assert system_id is not None
    assert meta["run_id"] == redis_server.run_id()
    assert meta["system_id"] == system_id[0]
    assert meta["epoch"] == "1"


def test_a_task_scheduled_by_plain_sql_is_mirrored_on_the_next_pass(
    conn: psycopg.Connection, redis_server: RedisServer
) -> None:
    sweep, _ = mirror(conn, redis_server)
    task_id = conn.execute("SELECT pgsched.schedule_task('fn_async')").fetchone()
    assert task_id is not None
    counts = sweep.run_once(conn, datetime.now())
    assert counts == {"mirrored": 1, "added": 1, "rebuilt": 0, "drift": 0}
    assert members(redis_server, "NORMAL") == [task_id[0]]


@pytest.mark.parametrize("loss", ["flushall", "restart"])
def test_a_lost_mirror_is_claimed_around_then_rebuilt(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer, loss: str
) -> None:
    ids = sorted(schedule(conn, "fn_async") for _ in range(3))
    sweep, _ = mirror(conn, redis_server)
    if loss == "flushall":
        redis_server.flushall()
    else:
        redis_server.kill()
        redis_server.start()
    # No mirror: the worker claims from Postgres at once, all of it.
    claimed, source = claim_through_redis(db_dsn, redis_server, "NORMAL", 2)
    assert len(claimed) == 2
    assert source.popped == 0 and source.topped_up == 2
    counts = sweep.run_once(conn, datetime.now())
    assert counts["rebuilt"] == 4
    left = sorted(set(ids) - set(claimed))
    assert members(redis_server, "NORMAL") == left
    with redis_server.client() as c:
        assert c.hget(LaneKeys("pgsched", "NORMAL").meta, "run_id") == redis_server.run_id()
    claimed_again, source = claim_through_redis(db_dsn, redis_server, "NORMAL", 5)
    assert claimed_again == left
    assert source.claimed_by_id == 1 and source.topped_up == 0


def test_a_mirror_built_from_another_database_is_not_used(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    task_id = schedule(conn, "fn_async")
    sweep, _ = mirror(conn, redis_server)
    keys = LaneKeys("pgsched", "NORMAL")
    with redis_server.client() as c:
        c.hset(keys.meta, "system_id", "another-cluster")
    claimed, source = claim_through_redis(db_dsn, redis_server, "NORMAL", 5)
    assert claimed == [task_id]
    assert source.popped == 0 and source.topped_up == 1
    assert sweep.run_once(conn, datetime.now())["rebuilt"] == 1


def test_stale_ids_are_dropped_and_the_rest_topped_up_from_postgres(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    runnable = schedule(conn, "fn_async")
    cancelled = schedule(conn, "fn_async")
    taken = schedule(conn, "fn_async")
    mirror(conn, redis_server)
    conn.execute("SELECT pgsched.cancel_task(%s)", (cancelled,))
    conn.execute("SELECT 1 FROM pgsched.task_claim_ids('NORMAL', %s, 'elsewhere')", ([taken],))
    not_mirrored = schedule(conn, "fn_async")  # after the pass: only Postgres knows it
    claimed, source = claim_through_redis(db_dsn, redis_server, "NORMAL", 10)
    assert claimed == sorted([runnable, not_mirrored])
    assert (source.popped, source.claimed_by_id, source.dropped) == (3, 1, 2)
    assert source.topped_up == 1
    assert members(redis_server, "NORMAL") == []
    status: dict[int, str] = dict(
        conn.execute(
            "SELECT id, status::text FROM pgsched.tasks WHERE id = ANY(%s)",
            ([cancelled, taken],),
        ).fetchall()
    )
    assert status == {cancelled: "CANCELLED", taken: "PROCESSING"}
    locked_by = conn.execute("SELECT locked_by FROM pgsched.tasks WHERE id = %s", (taken,))
    assert locked_by.fetchone() == ("elsewhere",)


def test_ids_not_yet_due_are_not_popped(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    later = schedule(conn, "fn_async", run_at=in_seconds(conn, 300))
    mirror(conn, redis_server)
    claimed, source = claim_through_redis(db_dsn, redis_server, "NORMAL", 10)
    assert claimed == [] and source.popped == 0
    assert members(redis_server, "NORMAL") == [later]


def test_redis_wakeups_wake_the_lane(redis_server: RedisServer) -> None:
    async def go() -> bool:
        events = {Lane.NORMAL: asyncio.Event(), Lane.HIGH: asyncio.Event()}
        wakeups = RedisWakeups(HotTierConfig(redis_server.url), events)
        runner = asyncio.create_task(wakeups.run())
        try:
            # Subscribed once it woke every lane (as it does on (re)connecting).
            await asyncio.wait_for(events[Lane.HIGH].wait(), 5)
            events[Lane.HIGH].clear()
            events[Lane.NORMAL].clear()
            with redis_server.client() as c:
                c.publish(LaneKeys("pgsched", "NORMAL").wake, 1)
            await asyncio.wait_for(events[Lane.NORMAL].wait(), 5)
            return not events[Lane.HIGH].is_set()
        finally:
            runner.cancel()

    assert asyncio.run(go())


# -- the CLI: noeviction ----------------------------------------------------------------


@pytest.mark.parametrize("process", ["worker", "sweeper"])
def test_cli_refuses_a_redis_that_may_evict(
    conn: psycopg.Connection, db_env: dict[str, str], tmp_path: Path, process: str
) -> None:
    lru = RedisServer(tmp_path, policy="allkeys-lru")
    lru.start()
    try:
        task_id = schedule(conn, "fn_async")
        args = ["--app", APP, "--lanes", "normal"] if process == "worker" else []
        done = run_cli(db_env, process, *args, "--redis", lru.url, timeout=60)
    finally:
        lru.kill()
    assert done.returncode == 2, done.stderr
    assert "maxmemory-policy is 'allkeys-lru'" in done.stderr
    assert "noeviction" in done.stderr and "--redis-allow-eviction" in done.stderr
    assert "Traceback" not in done.stderr
    status = conn.execute("SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,))
    assert status.fetchone() == ("QUEUED",)


def test_cli_refuses_a_malformed_redis_url(db_env: dict[str, str]) -> None:
    done = run_cli(db_env, "sweeper", "--redis", "localhost:6379")
    assert done.returncode == 2
    assert "--redis" in done.stderr and "not a Redis URL" in done.stderr


def test_unreachable_redis_at_start_is_no_refusal(db_env: dict[str, str]) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    done = run_cli(db_env, "sweeper", "--once", "--redis", closed)
    assert done.returncode == 0, done.stderr
    assert "unreachable at start" in done.stderr
    assert "redis_mirror" in done.stdout


def test_an_id_lost_from_the_mirror_is_added_back_when_reconciling(
    conn: psycopg.Connection, redis_server: RedisServer
) -> None:
    task_id = schedule(conn, "fn_async")
    sweep, _ = mirror(conn, redis_server)
    keys = LaneKeys("pgsched", "NORMAL")
    # Popped by a worker that died before its claim: still QUEUED, gone from Redis.
    with redis_server.client() as c:
        c.zrem(keys.due, task_id)
    sweep.run_once(conn, datetime.now())
    assert members(redis_server, "NORMAL") == []  # a plain pass adds only what is new
    sweep._next_reconcile = 0.0
    counts = sweep.run_once(conn, datetime.now())
    assert counts["added"] == 1
    assert members(redis_server, "NORMAL") == [task_id]


@pytest.mark.parametrize("why", ["fair", "limited"])
def test_a_fair_or_limited_lane_is_claimed_from_postgres_only(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer, why: str
) -> None:
    ids = sorted(schedule(conn, "fn_async", tenant_id=tenant) for tenant in ("a", "a", "b"))
    sweep, _ = mirror(conn, redis_server)
    assert members(redis_server, "NORMAL") == ids
    if why == "fair":
        conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', true)")
    else:
        conn.execute("SELECT pgsched.limit_set('tenant', 'a', max_processing => 1)")
    # From plain SQL: claims by id would bypass fairness or the limit, so they claim nothing.
    by_id = conn.execute(
        "SELECT id FROM pgsched.task_claim_ids('NORMAL', %s, 'w-sql')", (ids,)
    ).fetchall()
    assert by_id == []
    claimed, source = claim_through_redis(db_dsn, redis_server, "NORMAL", 3)
    assert source.popped == 0  # the worker does not even pop
    if why == "fair":
        assert claimed == ids
    else:
        # The limit holds: one of tenant a's two, and tenant b's.
        tenants = conn.execute(
            "SELECT tenant_id FROM pgsched.tasks WHERE id = ANY(%s) ORDER BY tenant_id",
            (claimed,),
        ).fetchall()
        assert tenants == [("a",), ("b",)]
    sweep.run_once(conn, datetime.now())
    assert members(redis_server, "NORMAL") == []  # no longer mirrored
