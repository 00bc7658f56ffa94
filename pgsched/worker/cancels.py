"""Stopping the running tasks that were asked to stop (`pgsched cancel`, `cancel_task`).

The worker learns of a request from a notification on `pgsched_cancel` (at once) or from
its heartbeat thread, which asks the database every second about the tasks it holds (in
case the notification was lost). Either way `request` is called on the event loop:

- the task's `CancelFlag` is set: its handler reads it as `ctx.cancelled`;
- a step running on the event loop (an async handler) is stopped at once: the task's
  asyncio task is cancelled, so the handler receives `asyncio.CancelledError`;
- a step running in a thread (a plain handler) cannot be interrupted (Python cannot stop a
  thread): it gets `--cancel-grace` seconds to notice and return; after that its attempt
  is abandoned like a timed-out one, and its thread is counted as stuck until it returns;
- a step running in a handler process sees `ctx.cancelled` there, gets the same grace,
  and then its process is killed.

The runner then reports CANCELLED (`TaskRunner.run`). A handler that completes before any
of this happens wins the race: the database records it COMPLETED, saying so. A fan-out
parent is left alone: the database stops it under its lock (`task_fan_out`).
"""

from __future__ import annotations

import asyncio
import logging

from pgsched.handlers import CancelFlag
from pgsched.observability.logs import task_fields
from pgsched.tasks import TaskRow, describe_task

log = logging.getLogger("pgsched.worker.cancels")

# Where cancel_task announces a request (payload: the task id).
CANCEL_CHANNEL = "pgsched_cancel"


class CancelRequests:
    def __init__(self, grace_seconds: float) -> None:
        self._grace = grace_seconds
        self._flags: dict[int, CancelFlag] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}

    def track(self, task_id: int) -> CancelFlag:
        """The flag of a task this worker starts running."""
        flag = self._flags[task_id] = CancelFlag()
        return flag

    def forget(self, task_id: int) -> None:
        """The task's run ended (whatever its outcome)."""
        self._flags.pop(task_id, None)
        timer = self._timers.pop(task_id, None)
        if timer is not None:
            timer.cancel()

    def running(self) -> list[int]:
        return list(self._flags)

    def request(self, task: TaskRow, handle: asyncio.Task[None]) -> None:
        """On the loop: the database says `task` was asked to stop."""
        flag = self._flags.get(task.id)
        if flag is None or flag.is_set() or handle.done():
            return  # not running here any more, or already being stopped
        if task.scope != "tenant":
            return  # a fan-out parent: task_fan_out stops it under its own lock
        flag.set()
        if not flag.started:
            # Started by its claim, not yet run: cancelling its asyncio task now would stop
            # the coroutine before its first line, with no outcome (and the lease renewed
            # for good). The runner sees the flag instead and records CANCELLED.
            log.warning(
                "%s: cancel requested before its handler started",
                describe_task(task),
                extra=task_fields(task, outcome="cancel_requested"),
            )
            flag.ending = "cancelled before its handler started"
            return
        if flag.work_done:
            log.info(
                "%s: cancel requested after its handler finished; it completes",
                describe_task(task),
                extra=task_fields(task, outcome="cancel_too_late"),
            )
            return
        if not flag.in_thread:
            log.warning(
                "%s: cancel requested; cancelling its async handler",
                describe_task(task),
                extra=task_fields(task, outcome="cancel_requested"),
            )
            flag.ending = "the async handler was cancelled (asyncio.CancelledError)"
            flag.task_cancelled = True
            handle.cancel()
            return
        log.warning(
            "%s: cancel requested; its plain handler sees ctx.cancelled and has %gs to return",
            describe_task(task),
            self._grace,
            extra=task_fields(task, outcome="cancel_requested"),
        )
        loop = asyncio.get_running_loop()
        self._timers[task.id] = loop.call_later(self._grace, self._abandon, task, handle, flag)

    def _abandon(self, task: TaskRow, handle: asyncio.Task[None], flag: CancelFlag) -> None:
        self._timers.pop(task.id, None)
        if handle.done():
            return
        log.warning(
            "%s: its plain handler did not return within the cancel grace of %gs; "
            "attempt abandoned",
            describe_task(task),
            self._grace,
            extra=task_fields(task, outcome="cancel_abandoned"),
        )
        flag.ending = (
            f"the plain handler did not return within the cancel grace of {self._grace:g}s"
        )
        flag.ending += (
            " and its handler process was killed"
            if flag.in_process
            else " and was abandoned (its thread runs on)"
        )
        # Cancels the awaited step: a handler process is killed (handler_processes.py), a
        # thread is counted as stuck (threads.py).
        flag.task_cancelled = True
        handle.cancel()
