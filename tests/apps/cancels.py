"""Handlers the cancel tests run in real worker processes:

    pgsched worker --app tests.apps.cancels:app --lanes normal,batch --cancel-grace 1 ...

Each logs its steps to ``public.worker_test_log`` (see tests/apps/dispatch.py), so a test
reads what the handler saw: that it started, that it received CancelledError or saw
``ctx.cancelled``, or that it returned anyway.
"""

from __future__ import annotations

import asyncio
import time

from pgsched import App, TaskContext

from .dispatch import arecord, record

app = App()


@app.handler("cancel_async_waits")
async def cancel_async_waits(ctx: TaskContext) -> None:
    """Waits a minute; when cancelled, logs the CancelledError it got and re-raises it."""
    await arecord(ctx, "started")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await arecord(ctx, "cancelled_error")
        raise
    await arecord(ctx, "returned")


@app.handler("cancel_sync_cooperates")
def cancel_sync_cooperates(ctx: TaskContext) -> None:
    """Works in small units for up to a minute, checking ctx.cancelled between them."""
    record(ctx, "started")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ctx.wait_cancelled(0.05):
            record(ctx, "saw_cancelled")
            ctx.raise_if_cancelled()
    record(ctx, "returned")


@app.handler("cancel_sync_ignores")
def cancel_sync_ignores(ctx: TaskContext) -> None:
    """Sleeps payload["seconds"] without looking at ctx.cancelled, then returns."""
    record(ctx, "started")
    time.sleep(float(ctx.payload["seconds"]))
    record(ctx, "returned", f"cancelled={ctx.cancelled}")


@app.handler("cancel_fan_out")
async def cancel_fan_out(ctx: TaskContext) -> None:
    """A fan-out's tenant task: tenant 'fast' completes at once, the others wait."""
    await arecord(ctx, "started", ctx.tenant_id)
    if ctx.tenant_id == "fast":
        return
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await arecord(ctx, "cancelled_error", ctx.tenant_id)
        raise
