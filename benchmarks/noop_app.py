"""No-op handlers for the benchmarks: `pgsched worker --app benchmarks.noop_app:app`.

noop        async, does nothing: measures the engine, not the handler
noop_sync   plain def, does nothing: adds the thread-pool hop that sync handlers take
sleep       async, sleeps payload['seconds']: holds a slot (the limits benchmark)

No handler here runs in a handler process: one would make every benchmark worker start a
fork server that imports this app while the drain runs, 0.3 s of CPU a worker outside the
measured processes (bench_isolation_cost has its own app for handler processes).
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


@app.handler("sleep")
async def sleep(ctx: TaskContext) -> None:
    """Sleeps payload['seconds'] (0.05 by default): a task that holds its slot a while."""
    await asyncio.sleep(float(ctx.payload.get("seconds", 0.05)))
