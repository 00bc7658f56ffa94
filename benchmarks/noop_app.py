"""No-op handlers for the benchmarks: `pgsched worker --app benchmarks.noop_app:app`.

    noop        async, does nothing: measures the engine, not the handler
    noop_sync   plain def, does nothing: adds the thread-pool hop that sync handlers take

When PGSCHED_BENCH_STARTS names a file, each handler notes (task id, time.time()) as it
starts, and the worker process writes the notes there, one "id start" line each, when it
exits (after a graceful SIGTERM). That gives the handler's real start time next to the
claim time the database records, without a round trip per task.
"""

from __future__ import annotations

import atexit
import os
import time

from pgsched import App
from pgsched.handlers import TaskContext

STARTS_ENV = "PGSCHED_BENCH_STARTS"

app = App()

_starts_path = os.environ.get(STARTS_ENV)
_starts: list[tuple[int, float]] = []


def _write_starts() -> None:
    if not _starts_path:
        return
    tmp = f"{_starts_path}.tmp"
    with open(tmp, "w") as out:
        out.writelines(f"{task_id} {at:.6f}\n" for task_id, at in _starts)
    os.replace(tmp, _starts_path)


if _starts_path:
    atexit.register(_write_starts)

    @app.handler("noop")
    async def noop_recorded(ctx: TaskContext) -> None:
        _starts.append((ctx.task.id, time.time()))

    @app.handler("noop_sync")
    def noop_sync_recorded(ctx: TaskContext) -> None:
        _starts.append((ctx.task.id, time.time()))

else:

    @app.handler("noop")
    async def noop(ctx: TaskContext) -> None:
        return None

    @app.handler("noop_sync")
    def noop_sync(ctx: TaskContext) -> None:
        return None
