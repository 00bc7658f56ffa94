"""Feeding the Redis hot tier after a commit, against a real redis-server and Postgres:
tasks scheduled through an App configured with Redis, and tasks a worker retried or
released, are in the lane's sorted set before any further mirror pass; a push that fails
loses nothing; tasks scheduled by plain SQL are still found; `hot_tier_due_by_ids` from
plain SQL."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgsched import App
from pgsched.hot_tier import HotTierConfig
from pgsched.hot_tier.claims import RedisClaimSource
from pgsched.hot_tier.keys import LaneKeys, score
from pgsched.hot_tier.mirror import MirrorSweep
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer
from tests.support.worker_helpers import PGSCHED, Workers, schedule, wait_until

LEASE = timedelta(seconds=30)
NORMAL = LaneKeys("pgsched", "NORMAL")


@pytest.fixture(autouse=True)
def plain_order_lanes(conn: psycopg.Connection) -> None:
    """The hot tier serves lanes whose claims are in plain priority order."""
    for lane in ("HIGH", "NORMAL", "LOW", "BATCH"):
        conn.execute("SELECT pgsched.lane_set_fairness(%s, false)", (lane,))


def built_mirror(conn: psycopg.Connection, server: RedisServer) -> MirrorSweep:
    """The leader's first pass: every served lane's set and meta key exist afterwards."""
    sweep = MirrorSweep(HotTierConfig(server.url))
    sweep.run_once(conn, datetime.now())
    with server.client() as c:
        assert c.exists(NORMAL.meta)
    return sweep


def scores(server: RedisServer, keys: LaneKeys = NORMAL) -> dict[int, int]:
    with server.client() as c:
        return {int(m): int(s) for m, s in c.zrange(keys.due, 0, -1, withscores=True)}


def expected_score(conn: psycopg.Connection, task_id: int) -> int:
    row = conn.execute(
        "SELECT priority, next_run_at FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return score(row[0], row[1])


def in_seconds(conn: psycopg.Connection, seconds: float) -> datetime:
    row = conn.execute("SELECT now() + %s * interval '1 second'", (seconds,)).fetchone()
    assert row is not None
    return row[0]


def claim_through_redis(
    dsn: str, server: RedisServer, n: int
) -> tuple[list[int], RedisClaimSource]:
    async def go() -> tuple[list[int], RedisClaimSource]:
        source = RedisClaimSource(HotTierConfig(server.url), policy_checked=True)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            await source.open(aconn)
            tasks, _ = await source.claim(aconn, "NORMAL", n, "feed-test", LEASE)
        await source.close()
        return sorted(t.id for t in tasks), source

    return asyncio.run(go())


# -- hot_tier_due_by_ids, from plain SQL --------------------------------------------------


def test_due_by_ids_returns_only_what_the_mirror_holds(conn: psycopg.Connection) -> None:
    due = schedule(conn, "fn_async", priority=5)
    soon = schedule(conn, "fn_async", priority=5, run_at=in_seconds(conn, 600))
    beyond = schedule(conn, "fn_async", priority=5, run_at=in_seconds(conn, 7200))
    cancelled = schedule(conn, "fn_async", priority=5)
    conn.execute("SELECT pgsched.cancel_task(%s)", (cancelled,))
    high = schedule(conn, "fn_async", priority=9)
    conn.execute("SELECT pgsched.lane_set_fairness('HIGH', true)")  # no longer served
    rows = conn.execute(
        "SELECT id, lane, priority FROM pgsched.hot_tier_due_by_ids(%s) ORDER BY id",
        ([due, soon, beyond, cancelled, high, 987654321],),
    ).fetchall()
    assert rows == [(due, "NORMAL", 5), (soon, "NORMAL", 5)]


def test_due_by_ids_refuses_bad_input(conn: psycopg.Connection) -> None:
    for args in ("NULL::bigint[]", "array_fill(1::bigint, ARRAY[10001])"):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
            conn.execute(f"SELECT * FROM pgsched.hot_tier_due_by_ids({args})")
        assert str(refused.value).startswith("ids")


@pytest.fixture
def producer_login(conn: psycopg.Connection) -> Iterator[Callable[[str], str]]:
    """producer_login(tenant) -> a LOGIN role in pgsched_producer bound to that tenant."""
    created: list[str] = []

    def make(tenant: str) -> str:
        name = f"t_{uuid.uuid4().hex[:10]}_feed_producer"
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgsched_producer").format(sql.Identifier(name))
        )
        conn.execute(
            "INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%s, %s)",
            (name, tenant),
        )
        created.append(name)
        return name

    yield make
    for name in created:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        conn.execute("DELETE FROM pgsched.producer_tenants WHERE role_name = %s", (name,))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_producer_learns_only_of_its_own_tenants_tasks(
    conn: psycopg.Connection, db_dsn: str, producer_login: Callable[[str], str]
) -> None:
    mine = schedule(conn, "fn_async", tenant_id="acme")
    theirs = schedule(conn, "fn_async", tenant_id="globex")
    role = producer_login("acme")
    with psycopg.connect(db_dsn, user=role, autocommit=True) as as_producer:
        rows = as_producer.execute(
            "SELECT id FROM pgsched.hot_tier_due_by_ids(%s)", ([mine, theirs],)
        ).fetchall()
    assert rows == [(mine,)]


# -- the App's post-commit feed -----------------------------------------------------------


def test_a_task_scheduled_through_the_app_is_in_redis_before_the_next_pass(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    built_mirror(conn, redis_server)
    assert scores(redis_server) == {}
    app = App(db_dsn, redis=redis_server.url)
    one = app.schedule("fn_async", {"n": 1})
    many = app.schedule_many(
        [
            {"task_type": "fn_async", "payload": {"n": 2}},
            {"task_type": "fn_async", "run_at": in_seconds(conn, 300)},
            {"task_type": "fn_async", "run_at": in_seconds(conn, 7200)},  # beyond the window
        ]
    )
    # No pass since: only the feed can have put them there, each at its claim order.
    held = scores(redis_server)
    assert held == {t: expected_score(conn, t) for t in (one, many[0], many[1])}
    # Through Redis: the due ones are popped and claimed by id, with no top-up.
    claimed, source = claim_through_redis(db_dsn, redis_server, 10)
    assert claimed == sorted([one, many[0]])
    assert (source.claimed_by_id, source.topped_up) == (2, 0)


def test_the_feed_wakes_the_lane_when_the_task_is_due(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    built_mirror(conn, redis_server)
    app = App(db_dsn, redis=redis_server.url)
    with redis_server.client() as c, c.pubsub() as sub:
        sub.subscribe(NORMAL.wake)
        assert sub.get_message(timeout=5)["type"] == "subscribe"
        app.schedule("fn_async", run_at=in_seconds(conn, 300))  # not due: no wake-up
        app.schedule("fn_async")
        message = sub.get_message(timeout=5)
        assert message is not None and message["data"] == "1"
        assert sub.get_message(timeout=0.5) is None


def test_a_task_in_the_callers_open_transaction_waits_for_the_pass(
    connect: Callable[..., psycopg.Connection], db_dsn: str, redis_server: RedisServer
) -> None:
    conn = connect()
    sweep = built_mirror(conn, redis_server)
    app = App(db_dsn, redis=redis_server.url)
    caller = connect(autocommit=False)
    task_id = app.schedule("fn_async", conn=caller)
    assert scores(redis_server) == {}  # not committed: never pushed
    caller.rollback()
    with caller.transaction():
        kept = app.schedule("fn_async", conn=caller)
    assert scores(redis_server) == {}  # committed by the caller: left to the pass
    sweep.run_once(conn, datetime.now())
    assert list(scores(redis_server)) == [kept]
    assert conn.execute("SELECT 1 FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone() is None
    # The caller's own autocommit connection: committed by the statement, pushed.
    auto = connect(autocommit=True)
    pushed = app.schedule("fn_async", conn=auto)
    assert set(scores(redis_server)) == {kept, pushed}


def test_a_duplicate_is_not_pushed_again(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    built_mirror(conn, redis_server)
    app = App(db_dsn, redis=redis_server.url)
    first = app.schedule("fn_async", idempotency_key="once")
    with redis_server.client() as c:
        c.zrem(NORMAL.due, int(first))  # say a worker popped it
    again = app.schedule("fn_async", idempotency_key="once")
    assert again == first and not again.created
    assert scores(redis_server) == {}


def test_no_mirror_no_push(
    conn: psycopg.Connection, db_dsn: str, redis_server: RedisServer
) -> None:
    """A lane the leader does not mirror (never built, flushed, or not served) gets no set
    from a push: nobody would pop it, and nothing would clear it."""
    app = App(db_dsn, redis=redis_server.url)
    app.schedule("fn_async")
    with redis_server.client() as c:
        assert c.keys("*") == []


def test_redis_down_at_push_time_loses_nothing(
    conn: psycopg.Connection,
    db_dsn: str,
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sweep = built_mirror(conn, redis_server)
    app = App(db_dsn, redis=redis_server.url)
    redis_server.kill()
    with caplog.at_level(logging.WARNING, logger="pgsched.hot_tier.feed"):
        task_id = app.schedule("fn_async")
        later = app.schedule("fn_async")
    assert task_id.created and later.created
    failures = [r.getMessage() for r in caplog.records if r.name == "pgsched.hot_tier.feed"]
    assert failures and f"pushing tasks {task_id} " in failures[0], failures
    assert "the mirror's next pass adds them" in failures[0]
    redis_server.start()  # empty
    # Claims find both in Postgres at once (no mirror: no pop), then the pass rebuilds it.
    claimed, source = claim_through_redis(db_dsn, redis_server, 1)
    assert len(claimed) == 1 and source.topped_up == 1
    sweep.run_once(conn, datetime.now())
    left = ({task_id, later} - set(claimed)).pop()
    assert list(scores(redis_server)) == [left]


# -- a worker's post-commit feed of retried and released tasks -----------------------------


def test_a_retried_task_reappears_in_redis_with_its_new_due_time(
    conn: psycopg.Connection, workers: Workers, redis_server: RedisServer
) -> None:
    built_mirror(conn, redis_server)  # no sweeper runs: no later pass
    w = workers.start("w-retry", extra=["--redis", redis_server.url])
    w.wait_running()
    task_id = schedule(conn, "fails_retry_later", priority=5)

    def retried() -> bool:
        row = conn.execute(
            "SELECT attempts, status::text, next_run_at > now() FROM pgsched.tasks WHERE id = %s",
            (task_id,),
        ).fetchone()
        return row == (1, "QUEUED", True)

    wait_until(retried, 30, what="the task to fail once and be retried")
    wait_until(lambda: task_id in scores(redis_server), 15, what="the retry to reach Redis")
    # Its new due time (five minutes on), as the database wrote it.
    assert scores(redis_server)[task_id] == expected_score(conn, task_id)
    w.send(signal.SIGTERM)
    assert w.wait_exit(30) == 0


def test_a_task_released_at_shutdown_is_back_in_redis(
    conn: psycopg.Connection, workers: Workers, redis_server: RedisServer
) -> None:
    built_mirror(conn, redis_server)
    w = workers.start("w-release", grace=0.5, extra=["--redis", redis_server.url])
    w.wait_running()
    task_id = schedule(conn, "sleepy", '{"seconds": 60}')

    def started() -> bool:
        row = conn.execute(
            "SELECT count(*) FROM public.worker_test_log WHERE task_id = %s AND step = 'start'",
            (task_id,),
        ).fetchone()
        return bool(row and row[0])

    wait_until(started, 30, what="the task to start")
    w.send(signal.SIGTERM)
    assert w.wait_exit(30) == 0
    status = conn.execute("SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,))
    assert status.fetchone() == ("QUEUED",)
    assert scores(redis_server) == {task_id: expected_score(conn, task_id)}


def test_redis_down_when_a_worker_retries_loses_nothing(
    conn: psycopg.Connection, workers: Workers, redis_server: RedisServer
) -> None:
    built_mirror(conn, redis_server)
    w = workers.start("w-down", extra=["--redis", redis_server.url])
    w.wait_running()
    redis_server.kill()
    # Fails twice, 0.4 s apart: the retry's push fails; the second attempt is claimed
    # from Postgres all the same.
    task_id = schedule(conn, "always_fails", max_attempts=2)

    def failed() -> bool:
        row = conn.execute(
            "SELECT status::text, attempts FROM pgsched.tasks WHERE id = %s", (task_id,)
        ).fetchone()
        return row == ("FAILED", 2)

    wait_until(failed, 30, what="both attempts to run")
    w.send(signal.SIGTERM)
    assert w.wait_exit(30) == 0
    assert f"pushing requeued tasks {task_id} " in w.log()


# -- producers without Redis --------------------------------------------------------------


def test_sql_and_app_producers_alike_run_once_through_redis(
    conn: psycopg.Connection,
    db_env: dict[str, str],
    db_dsn: str,
    workers: Workers,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """A sweeper mirroring every 0.2 s and two workers with --redis: tasks scheduled by
    plain SQL (no Redis anywhere near the producer) and through an App with Redis all run
    exactly once."""
    log_path = tmp_path / "sweeper.log"
    with log_path.open("wb") as out:
        sweeper = subprocess.Popen(
            [PGSCHED, "sweeper", "--redis", redis_server.url, "--redis-mirror-interval", "0.2"],
            cwd=REPO_ROOT,
            env=db_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        started = [
            workers.start(f"w{n}", extra=["--redis", redis_server.url, "--concurrency", "8"])
            for n in range(2)
        ]
        for w in started:
            w.wait_running()

        def mirrored() -> bool:
            with redis_server.client() as c:
                return bool(c.exists(NORMAL.meta))

        wait_until(mirrored, 15, what="the sweeper to build the mirror")
        by_sql = [
            int(r[0])
            for r in conn.execute(
                "SELECT pgsched.schedule_task('fn_async',"
                " run_at => now() + (i % 20) * interval '100 ms')"
                " FROM generate_series(1, 100) AS i"
            ).fetchall()
        ]
        app = App(db_dsn, redis=redis_server.url)
        by_app = [int(app.schedule("fn_async", {"i": i})) for i in range(100)]
        ids = by_sql + by_app

        def all_completed() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'COMPLETED'",
                (ids,),
            ).fetchone()
            return bool(row and row[0] == len(ids))

        wait_until(all_completed, 60, what=f"{len(ids)} tasks to complete")
        runs = conn.execute(
            "SELECT count(*), count(DISTINCT task_id) FROM public.worker_test_log"
            " WHERE task_id = ANY(%s) AND step = 'execute'",
            (ids,),
        ).fetchone()
        assert runs == (len(ids), len(ids)), "a task ran twice, or not at all"
        for w in started:
            w.send(signal.SIGTERM)
        for w in started:
            assert w.wait_exit(30) == 0
    finally:
        sweeper.send_signal(signal.SIGTERM)
        try:
            sweeper.wait(timeout=15)
        except subprocess.TimeoutExpired:
            sweeper.kill()
