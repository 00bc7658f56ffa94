"""The handlers the worker tests run, in real worker processes:

    pgsched worker --app tests.apps.dispatch:app --lanes normal ...

Handlers write what they did to ``public.worker_test_log`` (one row per step, with the
task, the attempt, the worker, the thread and the database clock), so a test can read the
order of steps, who ran what, and when. ``worker_helpers.create_test_tables`` creates the
tables before any worker starts. The database is the one in ``PGSCHED_DSN``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any

import psycopg

from pgsched import App, LoopLocal, RetryPolicy, TaskContext, TaskHandler

app = App()

_INSERT = (
    "INSERT INTO public.worker_test_log (task_id, attempt, worker, step, thread, detail)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)


def _dsn() -> str:
    return os.environ["PGSCHED_DSN"]


def _row(ctx: TaskContext, step: str, detail: str | None) -> tuple[Any, ...]:
    thread = threading.current_thread().name
    return (ctx.task.id, ctx.task.attempt, ctx.worker_id, step, thread, detail)


def record(ctx: TaskContext, step: str, detail: str | None = None) -> None:
    """Log a step from a plain (threaded) handler."""
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute(_INSERT, _row(ctx, step, detail))


async def arecord(ctx: TaskContext, step: str, detail: str | None = None) -> None:
    """Log a step from an async handler without blocking the event loop."""
    row = _row(ctx, step, detail)
    async with await psycopg.AsyncConnection.connect(_dsn(), autocommit=True) as conn:
        await conn.execute(_INSERT, row)


def flag_is_set(name: str) -> bool:
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM public.worker_test_flags WHERE name = %s)", (name,)
        ).fetchone()
    return bool(row and row[0])


# -- 1. the lifecycle, async and sync ---------------------------------------------------


class AsyncLifecycle(TaskHandler):
    """Every step async. payload: fail_execute / fail_after (bool)."""

    async def validate(self, ctx: TaskContext) -> None:
        await arecord(ctx, "validate")

    async def before_execute(self, ctx: TaskContext) -> None:
        ctx.state["prepared_by"] = "before_execute"
        await arecord(ctx, "before_execute")

    async def execute(self, ctx: TaskContext) -> None:
        await arecord(ctx, "execute", ctx.state.get("prepared_by"))
        if ctx.payload.get("fail_execute"):
            raise RuntimeError("execute failed on purpose")

    async def after_execute(self, ctx: TaskContext) -> None:
        await arecord(ctx, "after_execute")
        if ctx.payload.get("fail_after"):
            raise RuntimeError("after_execute failed on purpose")


class SyncLifecycle(TaskHandler):
    """Every step a plain def (run in the worker's thread pool)."""

    def validate(self, ctx: TaskContext) -> None:
        record(ctx, "validate")

    def before_execute(self, ctx: TaskContext) -> None:
        ctx.state["prepared_by"] = "before_execute"
        record(ctx, "before_execute")

    def execute(self, ctx: TaskContext) -> None:
        record(ctx, "execute", ctx.state.get("prepared_by"))
        if ctx.payload.get("fail_execute"):
            raise RuntimeError("execute failed on purpose")

    def after_execute(self, ctx: TaskContext) -> None:
        record(ctx, "after_execute")
        if ctx.payload.get("fail_after"):
            raise RuntimeError("after_execute failed on purpose")


app.register("lifecycle_async", AsyncLifecycle())
app.register("lifecycle_sync", SyncLifecycle())


@app.handler("fn_async")
async def fn_async(ctx: TaskContext) -> None:
    await arecord(ctx, "execute")


@app.handler("fn_sync")
def fn_sync(ctx: TaskContext) -> None:
    record(ctx, "execute")


@app.handler("switch_interval")
async def switch_interval(ctx: TaskContext) -> None:
    """Records the worker process' thread switch interval."""
    await arecord(ctx, "execute", repr(sys.getswitchinterval()))


# -- 2. validate refuses ----------------------------------------------------------------


class Refuses(TaskHandler):
    async def validate(self, ctx: TaskContext) -> None:
        await arecord(ctx, "validate")
        if "to" not in ctx.payload:
            raise ValueError("payload has no 'to': there is nobody to send it to")

    async def before_execute(self, ctx: TaskContext) -> None:
        await arecord(ctx, "before_execute")

    async def execute(self, ctx: TaskContext) -> None:
        await arecord(ctx, "execute")


app.register("refuses", Refuses())


# -- 3. retries with backoff ------------------------------------------------------------

# No jitter: the delays are exactly 0.4 s, then 1.0 s.
BACKOFF = RetryPolicy(base_seconds=0.4, factor=2.5, jitter=0.0)


@app.handler("always_fails", retry=BACKOFF)
async def always_fails(ctx: TaskContext) -> None:
    await arecord(ctx, "execute")
    raise RuntimeError(f"upstream said no (attempt {ctx.task.attempt})")


@app.handler("fails_slowly", retry=BACKOFF)
async def fails_slowly(ctx: TaskContext) -> None:
    """Fails after 1.5 s of work: the claim loop has long gone back to sleep by then."""
    await asyncio.sleep(1.5)
    await arecord(ctx, "execute")
    raise RuntimeError(f"upstream said no (attempt {ctx.task.attempt})")


# Retried five minutes later: QUEUED again within the immediate window (15 min), not due.
LATER = RetryPolicy(base_seconds=300.0, jitter=0.0)


@app.handler("fails_retry_later", retry=LATER)
async def fails_retry_later(ctx: TaskContext) -> None:
    await arecord(ctx, "execute")
    raise RuntimeError(f"try again later (attempt {ctx.task.attempt})")


# -- 4. the DEAD lane: fails until the flag 'healed' is set ------------------------------


def heals(ctx: TaskContext) -> None:
    healed = flag_is_set("healed")
    record(ctx, "execute", "healed" if healed else "broken")
    if not healed:
        raise RuntimeError("the dependency is down")


for _task_type in ("heal_a", "heal_b", "heal_c"):
    app.register(_task_type, heals)


# -- 5-7. long handlers -----------------------------------------------------------------


@app.handler("sleepy")
async def sleepy(ctx: TaskContext) -> None:
    """Sleeps payload['seconds'] on the attempts in payload['sleep_on'] (default: all)."""
    await arecord(ctx, "start")
    sleep_on = ctx.payload.get("sleep_on")
    if sleep_on is None or ctx.task.attempt in sleep_on:
        await asyncio.sleep(ctx.payload["seconds"])
    await arecord(ctx, "end")


@app.handler("sleepy_sync")
def sleepy_sync(ctx: TaskContext) -> None:
    record(ctx, "start")
    time.sleep(ctx.payload["seconds"])
    record(ctx, "end")


@app.handler("hog")
async def hog(ctx: TaskContext) -> None:
    """An async handler that never yields: it holds the event loop (and the CPU)."""
    await arecord(ctx, "start")
    deadline = time.monotonic() + ctx.payload["seconds"]
    spins = 0
    while time.monotonic() < deadline:
        spins += 1
    await arecord(ctx, "end", str(spins))


# -- 10. timeouts -----------------------------------------------------------------------

QUICK_RETRY = RetryPolicy(base_seconds=0.1, jitter=0.0)


@app.handler("slow_async", timeout=0.5, retry=QUICK_RETRY)
async def slow_async(ctx: TaskContext) -> None:
    await arecord(ctx, "start")
    await asyncio.sleep(5)
    await arecord(ctx, "end")


@app.handler("slow_sync", timeout=0.5, retry=QUICK_RETRY)
def slow_sync(ctx: TaskContext) -> None:
    record(ctx, "start")
    time.sleep(2)
    record(ctx, "end")


@app.handler("raises_timeout_error", retry=QUICK_RETRY)
async def raises_timeout_error(ctx: TaskContext) -> None:
    """No timeout registered: the handler's own TimeoutError is an ordinary failure."""
    raise TimeoutError("the upstream API did not answer within 30s")


# -- 11. transactional handlers ---------------------------------------------------------

_TX_INSERT = "INSERT INTO public.worker_test_tx (task_id, note) VALUES (%s, %s)"


@app.handler("tx_async", transactional=True)
async def tx_async(ctx: TaskContext) -> None:
    """payload: fail (raise after writing), linger (seconds of work after writing)."""
    await ctx.connection.execute(_TX_INSERT, (ctx.task.id, "async"))
    if ctx.payload.get("linger"):
        await asyncio.sleep(ctx.payload["linger"])
        await arecord(ctx, "end")
    if ctx.payload.get("fail"):
        raise RuntimeError("failed after writing")


@app.handler("tx_sync", transactional=True)
def tx_sync(ctx: TaskContext) -> None:
    ctx.connection.execute(_TX_INSERT, (ctx.task.id, "sync"))
    if ctx.payload.get("fail"):
        raise RuntimeError("failed after writing")


# -- 9, 12, 13. work that is over at once: the task's events tell the story ----------------


@app.handler("quick")
async def quick(ctx: TaskContext) -> None:
    return None


@app.handler("bulk")
async def bulk(ctx: TaskContext) -> None:
    await asyncio.sleep(0.01)


@app.handler("urgent")
async def urgent(ctx: TaskContext) -> None:
    return None


# -- many short tasks: each run is one row, written on one connection per worker process ---

# One connection per lane's event loop (a connection per run would cost more than the
# run; psycopg serialises the statements of concurrent handlers on it). An async
# connection belongs to the loop it was made on, and each lane has its own loop.
_shared_conn: LoopLocal[Any] = LoopLocal(
    lambda: psycopg.AsyncConnection.connect(_dsn(), autocommit=True)
)


async def _shared_connection() -> psycopg.AsyncConnection[Any]:
    conn: psycopg.AsyncConnection[Any] = await _shared_conn.get()
    if conn.closed:
        _shared_conn.forget()
        conn = await _shared_conn.get()
    return conn


@app.handler("counted")
async def counted(ctx: TaskContext) -> None:
    """Records that it ran (step 'ran'), before it returns: a task run twice has two rows."""
    conn = await _shared_connection()
    await conn.execute(_INSERT, _row(ctx, "ran", None))
