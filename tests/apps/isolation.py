"""Handlers that misbehave, for the isolation tests (tests/test_worker_isolation.py):

    pgsched worker --app tests.apps.isolation:app --lanes high,low ...

Plain `def` handlers that hang past their timeout, an `async def` that blocks the event
loop, handlers that raise SystemExit / KeyboardInterrupt / GeneratorExit. Each records its
start in ``public.worker_test_log`` (see tests/apps/dispatch.py).
"""

from __future__ import annotations

import asyncio
import sys
import time

from pgsched import App, RetryPolicy, TaskContext

from .dispatch import arecord, record

app = App()

QUICK_RETRY = RetryPolicy(base_seconds=0.1, jitter=0.0)


@app.handler("hung_sync", timeout=1.0, retry=QUICK_RETRY)
def hung_sync(ctx: TaskContext) -> None:
    """Hangs far past its 1 s timeout: its thread stays busy after the attempt failed."""
    record(ctx, "start")
    time.sleep(ctx.payload.get("seconds", 60))


@app.handler("quick_sync")
def quick_sync(ctx: TaskContext) -> None:
    """Needs a thread of its lane's pool, and nothing else."""
    return None


@app.handler("quick_async")
async def quick_async(ctx: TaskContext) -> None:
    return None


@app.handler("blocks_loop")
async def blocks_loop(ctx: TaskContext) -> None:
    """An async handler that blocks the event loop (a bug the watchdog must name)."""
    await arecord(ctx, "start")
    time.sleep(ctx.payload["seconds"])


def raise_base(name: str) -> None:
    """What payload['raise'] names: each is a BaseException, not an Exception."""
    if name == "SystemExit":
        sys.exit(3)
    if name == "KeyboardInterrupt":
        raise KeyboardInterrupt("raised by a handler")
    if name == "GeneratorExit":
        raise GeneratorExit("raised by a handler")
    raise AssertionError(f"unknown exception {name!r}")


@app.handler("raises_base_async", retry=QUICK_RETRY)
async def raises_base_async(ctx: TaskContext) -> None:
    await arecord(ctx, "start")
    raise_base(ctx.payload["raise"])


@app.handler("raises_base_sync", retry=QUICK_RETRY)
def raises_base_sync(ctx: TaskContext) -> None:
    record(ctx, "start")
    raise_base(ctx.payload["raise"])


@app.handler("holds_a_lease")
async def holds_a_lease(ctx: TaskContext) -> None:
    """Works payload['seconds'] s; records 'end' only if nobody stopped it first."""
    await arecord(ctx, "start")
    await asyncio.sleep(ctx.payload["seconds"])
    await arecord(ctx, "end")
