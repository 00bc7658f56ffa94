"""Handlers of the burst benchmark: `pgsched worker --app benchmarks.burst_app:app`.

burst       async, does nothing: the million due in the same second
burst_high  async, does nothing but write down when it started: one line per task,
            "task_id started due" (epoch seconds, this host's clock, which the database
            on the same host shares) to $PGSCHED_BURST_LOG.<pid>
"""

from __future__ import annotations

import os
import time

from pgsched import App
from pgsched.handlers import TaskContext

app = App()

_LOG = os.environ.get("PGSCHED_BURST_LOG")
_out = open(f"{_LOG}.{os.getpid()}", "a", buffering=1) if _LOG else None  # noqa: SIM115


@app.handler("burst")
async def burst(ctx: TaskContext) -> None:
    return None


@app.handler("burst_high")
async def burst_high(ctx: TaskContext) -> None:
    started = time.time()
    if _out is not None:
        _out.write(f"{ctx.task.id} {started:.6f} {ctx.task.scheduled_for.timestamp():.6f}\n")
