"""Handlers for the distributed-mode tests (tests/citus), run in real worker processes:

    pgsched worker --app tests.apps.distributed_app:app --lanes normal ...

They touch nothing but pgsched: each returns a result naming its tenant and attempt, so
a test reads what ran from the tasks and their events alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pgsched import App, RetryPolicy, TaskContext

app = App()

QUICK_RETRY = RetryPolicy(base_seconds=0.1, jitter=0.0)


@app.handler("echo")
async def echo(ctx: TaskContext) -> dict[str, Any]:
    return {"tenant": ctx.tenant_id, "attempt": ctx.attempt, "payload": ctx.payload}


@app.handler("flaky", retry=QUICK_RETRY)
def flaky(ctx: TaskContext) -> dict[str, Any]:
    """Fails its first attempt, completes the next."""
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return {"tenant": ctx.tenant_id, "attempt": ctx.attempt}


@app.handler("always_fails", retry=QUICK_RETRY)
def always_fails(ctx: TaskContext) -> None:
    raise RuntimeError(f"{ctx.tenant_id} fails every time")


@app.handler("slow")
def slow(ctx: TaskContext) -> dict[str, Any]:
    """Runs for the payload's seconds: long enough to kill its worker mid-task."""
    time.sleep(float(ctx.payload.get("seconds", 5)))
    return {"tenant": ctx.tenant_id, "attempt": ctx.attempt}


@app.handler("until_cancelled")
async def until_cancelled(ctx: TaskContext) -> dict[str, Any]:
    """Waits to be cancelled (an async handler gets CancelledError); tenant 'fast' and a
    payload {"seconds": 0} return at once."""
    if ctx.tenant_id == "fast" or ctx.payload.get("seconds") == 0:
        return {"tenant": ctx.tenant_id}
    await asyncio.sleep(float(ctx.payload.get("seconds", 60)))
    return {"tenant": ctx.tenant_id, "attempt": ctx.attempt}
