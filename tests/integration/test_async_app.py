"""AsyncApp against real Postgres: the same calls as App, awaited, on its own pool or in a
caller's AsyncConnection transaction."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgsched import App, AsyncApp, InvalidTaskError, RetryPolicy, TaskNotFoundError
from pgsched.errors import ResultTimeoutError, TaskFailedError
from pgsched.testing import drain

COLUMNS = (
    "task_type, tenant_id, payload, metadata, lane::text, priority, status::text,"
    " max_attempts, idempotency_key, next_run_at"
)


def _row(conn: psycopg.Connection[Any], task_id: int) -> tuple[Any, ...] | None:
    return conn.execute(f"SELECT {COLUMNS} FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()


def test_schedule_writes_what_app_writes(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    at = datetime.now(UTC) + timedelta(hours=3)
    options: dict[str, Any] = {
        "run_at": at,
        "tenant_id": "acme",
        "priority": 8,
        "max_attempts": 4,
        "metadata": {"source": "test"},
    }

    async def main() -> Any:
        async with AsyncApp(db_dsn) as app:
            first = await app.schedule("email", {"to": "a@b.c"}, idempotency_key="k1", **options)
            again = await app.schedule("email", {"to": "x@y.z"}, idempotency_key="k1", **options)
            return first, again

    first, again = asyncio.run(main())
    sync = App(db_dsn).schedule("email", {"to": "a@b.c"}, idempotency_key="k2", **options)
    assert first.created and not again.created and int(again) == int(first)
    ours, theirs = _row(conn, first), _row(conn, sync)
    assert ours is not None and theirs is not None
    assert ours[:8] == theirs[:8] and ours[9] == theirs[9]
    assert (ours[8], theirs[8]) == ("k1", "k2")


def test_a_callers_transaction_decides(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE public.orders (id int PRIMARY KEY)")

    async def main() -> tuple[int, int]:
        app = AsyncApp(db_dsn)
        async with await psycopg.AsyncConnection.connect(db_dsn) as c:
            await c.execute("INSERT INTO public.orders VALUES (1)")
            kept = await app.schedule("receipt", {"order": 1}, conn=c)
            await c.commit()
            await c.execute("INSERT INTO public.orders VALUES (2)")
            lost = await app.schedule("receipt", {"order": 2}, conn=c)
            await c.rollback()
        await app.close()
        return kept, lost

    kept, lost = asyncio.run(main())
    assert _row(conn, kept) is not None
    assert _row(conn, lost) is None
    assert conn.execute("SELECT array_agg(id) FROM public.orders").fetchone() == ([1],)


def test_schedule_many_in_order_and_one_bad_row_refuses_all(
    db_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    async def main() -> Any:
        async with AsyncApp(db_dsn) as app:
            ids = await app.schedule_many(
                [{"task_type": "t", "payload": {"n": n}} for n in range(5)], chunk_size=2
            )
            with pytest.raises(InvalidTaskError, match=r"tasks\[1\]: priority"):
                await app.schedule_many([{"task_type": "t"}, {"task_type": "t", "priority": 11}])
            with pytest.raises(InvalidTaskError, match=r"tasks\[1\]: .*run_at"):
                # Refused by the database (Python passes it): named by the caller's index.
                await app.schedule_many(
                    [
                        {"task_type": "t"},
                        {
                            "task_type": "t",
                            "lane": "BATCH",
                            "priority": 0,
                            "run_at": datetime(1960, 1, 1, tzinfo=UTC),
                        },
                    ]
                )
            return ids

    ids = asyncio.run(main())
    payloads = [
        conn.execute("SELECT payload FROM pgsched.tasks WHERE id = %s", (i,)).fetchone()[0]
        for i in ids
    ]
    assert payloads == [{"n": n} for n in range(5)]
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (5,)


def test_bad_input_changes_nothing(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    async def main() -> None:
        async with AsyncApp(db_dsn) as app:
            with pytest.raises(InvalidTaskError, match="tenant_id"):
                await app.schedule("t", tenant_id="no spaces")
            with pytest.raises(InvalidTaskError, match="must have five fields"):
                await app.schedule_recurring("t", "every day")
            with pytest.raises(TaskNotFoundError):
                await app.cancel(424242)

    asyncio.run(main())
    assert conn.execute("SELECT count(*) FROM pgsched.tasks").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgsched.schedules").fetchone() == (0,)


def test_recurring_cancel_and_the_dead_lane(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    handlers = App(db_dsn)

    @handlers.handler("fails", retry=RetryPolicy(base_seconds=1, cap_seconds=1))
    def fails(ctx: Any) -> None:
        raise RuntimeError("no")

    async def schedule() -> tuple[int, Any, Any, int]:
        async with AsyncApp.for_app(handlers) as app:
            schedule_id = await app.schedule_recurring(
                "digest", "0 9 * * *", timezone="Europe/Berlin"
            )
            later = await app.schedule("t", run_at=datetime.now(UTC) + timedelta(days=3))
            cancelled = await app.cancel(later, "not needed", actor="test")
            counts = await app.cancel_where(task_type="digest", dry_run=True)
            dead = await app.schedule("fails", max_attempts=1)
            return schedule_id, cancelled, counts, dead

    schedule_id, cancelled, counts, dead = asyncio.run(schedule())
    assert schedule_id > 0
    assert cancelled.outcome == "CANCELLED"
    assert (counts.cancelled, counts.cancel_requested) == (1, 0)  # the armed occurrence
    assert drain(handlers, lanes=["normal"]).failed == 1

    async def retry() -> list[int]:
        async with AsyncApp(db_dsn) as app:
            return await app.dead_retry(dead)

    assert asyncio.run(retry()) == [dead]
    assert conn.execute(
        "SELECT status::text, attempts FROM pgsched.tasks WHERE id = %s", (dead,)
    ).fetchone() == ("QUEUED", 0)


def test_one_app_serves_one_event_loop_after_another(db_dsn: str) -> None:
    # A test runner or a framework's test client may start a loop per call: each gets a
    # pool of its own.
    app = AsyncApp(db_dsn, min_size=0, max_size=2)

    async def one(n: int) -> int:
        return int(await app.schedule("t", {"n": n}))

    ids = [asyncio.run(one(n)) for n in range(3)]
    assert len(set(ids)) == 3
    asyncio.run(app.close())


def test_the_pool_opens_on_first_use_only(db_dsn: str) -> None:
    app = AsyncApp("host=nowhere.invalid dbname=x connect_timeout=1")
    assert app._pool is None  # building it connected to nothing
    assert AsyncApp(db_dsn)._pool is None


def test_result_waits_for_the_return_value_or_names_the_failure(
    db_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    handlers = App(db_dsn)

    @handlers.handler("adds")
    def adds(ctx: Any) -> dict[str, int]:
        return {"sum": ctx.payload["a"] + ctx.payload["b"]}

    @handlers.handler("refuses", retry=RetryPolicy(base_seconds=1, cap_seconds=1))
    def refuses(ctx: Any) -> None:
        raise RuntimeError("no")

    async def main() -> None:
        async with AsyncApp(db_dsn) as app:
            done = await app.schedule("adds", {"a": 2, "b": 3})
            dead = await app.schedule("refuses", max_attempts=1)
            later = await app.schedule(
                "adds", {"a": 1, "b": 1}, run_at=datetime.now(UTC) + timedelta(days=1)
            )
            # The result arrives while result() waits: drained in a thread meanwhile.
            waiting = asyncio.ensure_future(app.result(done, timeout=60))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await asyncio.to_thread(drain, handlers)
            assert await waiting == {"sum": 5}
            with pytest.raises(TaskFailedError, match=f"task {dead} is DEAD"):
                await app.result(dead, timeout=5)
            with pytest.raises(ResultTimeoutError, match=r"did not finish within 0\.3s"):
                await app.result(later, timeout=0.3)
            with pytest.raises(TaskNotFoundError):
                await app.result(10**12, timeout=1)
            with pytest.raises(InvalidTaskError, match="timeout must be 0 or more"):
                await app.result(done, timeout=-1)

    asyncio.run(main())
    # No waiter is left behind.
    assert conn.execute("SELECT count(*) FROM pgsched.task_result_waiters").fetchone() == (0,)
