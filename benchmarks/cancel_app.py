"""Handlers for the cancel benchmark: `pgsched worker --app benchmarks.cancel_app:app`.

wait_async   async, waits until cancelled (asyncio.CancelledError)
wait_sync    plain def, checks ctx.cancelled every 50 ms and stops by raising
"""

from __future__ import annotations

import asyncio

from pgsched import App
from pgsched.handlers import TaskContext

app = App()


@app.handler("wait_async")
async def wait_async(ctx: TaskContext) -> None:
    await asyncio.sleep(600)


@app.handler("wait_sync")
def wait_sync(ctx: TaskContext) -> None:
    for _ in range(12_000):
        if ctx.wait_cancelled(0.05):
            ctx.raise_if_cancelled()
