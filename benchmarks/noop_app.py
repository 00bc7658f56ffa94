"""No-op handlers for the benchmarks: `pgsched worker --app benchmarks.noop_app:app`.

noop        async, does nothing: measures the engine, not the handler
noop_sync   plain def, does nothing: adds the thread-pool hop that sync handlers take
noop_sync_timeout  plain def with a timeout, does nothing: runs in a handler process
sleep       async, sleeps payload['seconds']: holds a slot (the limits benchmark)
"""

from __future__ import annotations

import asyncio

from pgsched import App
from pgsched.handlers import TaskContext

app = App()


@app.handler("noop")
async def noop(ctx: TaskContext) -> None:
    return None


@app.handler("noop_sync")
def noop_sync(ctx: TaskContext) -> None:
    return None


@app.handler("noop_sync_timeout", timeout=60)
def noop_sync_timeout(ctx: TaskContext) -> None:
    return None


@app.handler("sleep")
async def sleep(ctx: TaskContext) -> None:
    """Sleeps payload['seconds'] (0.05 by default): a task that holds its slot a while."""
    await asyncio.sleep(float(ctx.payload.get("seconds", 0.05)))
