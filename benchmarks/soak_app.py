"""Handlers for the soak benchmark: `pgsched worker --app benchmarks.soak_app:app`.

soak_ok      async, does nothing: the bulk of the traffic
soak_flaky   fails its first attempt, succeeds on the second (a retry after about 1 s)
soak_doomed  always fails: with max_attempts 2 it ends in the DEAD lane (kept by retention)
soak_tick    async, does nothing: the task type of the recurring schedules
"""

from __future__ import annotations

from pgsched import App, RetryPolicy
from pgsched.handlers import TaskContext

app = App()

# Short, so that the retry comes back within the run (and within a sample window).
QUICK_RETRY = RetryPolicy(base_seconds=1.0, cap_seconds=2.0, jitter=0.2)


class Flaky(Exception):
    """The failure the soak's failing task types raise on purpose."""


@app.handler("soak_ok")
async def soak_ok(ctx: TaskContext) -> None:
    return None


@app.handler("soak_flaky", retry=QUICK_RETRY)
async def soak_flaky(ctx: TaskContext) -> None:
    if ctx.task.attempt == 1:
        raise Flaky("first attempt fails on purpose")


@app.handler("soak_doomed", retry=QUICK_RETRY)
async def soak_doomed(ctx: TaskContext) -> None:
    raise Flaky("every attempt fails on purpose")


@app.handler("soak_tick")
async def soak_tick(ctx: TaskContext) -> None:
    return None
