"""Progress: the latest `ctx.progress(fraction, note)` of each running task, written in
batches.

The rule: a handler may call `ctx.progress` as often as it likes (in a tight loop too); a
call only replaces its task's latest value in memory. A lane's writer sends what changed
at most once every `interval` (one second), all its tasks in one statement
(`pgsched.task_progress_set_many`), so each task's row is written at most once a second
and the database sees one statement a second per lane at most, however many calls. The
last value a task reported is written within a second, also after the task ended.

A handler process (pgsched/worker/handler_processes.py) sends its task's progress over its
pipe at most every `CHILD_INTERVAL`, and the latest unsent value before each step's
reply; the worker's writer takes it from there.

A write that fails (the database unreachable) is logged and its values kept for the next
one, unless newer ones replaced them: progress is a report, never a reason to fail a task.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pgsched.queries import query

log = logging.getLogger("pgsched.worker.progress")

INTERVAL = 1.0  # seconds between two writes of a lane's progress
CHILD_INTERVAL = 0.25  # seconds between two progress messages of a handler process


class ProgressWriter:
    """One lane's progress reports, written together at most once every `interval`.

    `report` may be called from any thread (a plain handler runs in the lane's thread
    pool); the writes run on the lane's event loop, on a connection of its pool."""

    def __init__(self, pool: Any, interval: float = INTERVAL) -> None:
        self._pool = pool
        self._interval = interval
        self._lock = threading.Lock()
        self._latest: dict[int, tuple[float, str | None]] = {}
        self._flushing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_write = 0.0
        self._task: asyncio.Task[None] | None = None
        self.written = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the writes run on (the lane's); set once, before any report."""
        self._loop = loop

    def report(self, task_id: int, fraction: float, note: str | None) -> None:
        with self._lock:
            self._latest[task_id] = (fraction, note)
            if self._flushing:
                return
            self._flushing = True
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._start()
        else:
            loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            wait = self._last_write + self._interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            with self._lock:
                batch, self._latest = self._latest, {}
                if not batch:
                    self._flushing = False
                    return
            self._last_write = time.monotonic()
            try:
                await self._write(batch)
                self.written += len(batch)
            except Exception as exc:
                log.warning(
                    "writing the progress of %d tasks failed (%s); kept for the next write "
                    "(tasks %s)",
                    len(batch),
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    ",".join(str(task_id) for task_id in list(batch)[:20]),
                )
                with self._lock:
                    # Newer values replace the ones that failed.
                    self._latest = {**batch, **self._latest}

    async def _write(self, batch: dict[int, tuple[float, str | None]]) -> None:
        params = {
            "task_ids": list(batch),
            "fractions": [fraction for fraction, _ in batch.values()],
            "notes": [note for _, note in batch.values()],
        }
        async with self._pool.connection() as conn:
            await conn.execute(query("task_progress_set_many"), params)


class ChildProgress:
    """A handler process's side: reports go to the worker over the pipe, at most one
    every `CHILD_INTERVAL`; `flush` sends the latest unsent one (before a step's reply)."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send
        self._sent_at = 0.0
        self._pending: tuple[int, float, str | None] | None = None

    def report(self, task_id: int, fraction: float, note: str | None) -> None:
        now = time.monotonic()
        if now - self._sent_at >= CHILD_INTERVAL:
            self._sent_at = now
            self._pending = None
            self._send(("progress", task_id, fraction, note))
        else:
            self._pending = (task_id, fraction, note)

    def flush(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._sent_at = time.monotonic()
            self._send(("progress", *pending))
