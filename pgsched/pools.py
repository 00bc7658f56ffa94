"""Connection pools that come back as soon as the database does.

psycopg_pool retries a failed connection with a doubling delay (1, 2, 4, 8, 16, 32 s ...):
after a 40 s outage, or a failover whose standby is promoted late, a pool would still wait
out up to half the outage once the database answers again. pgsched's pools retry on a
short fixed interval instead (`RECONNECT_INTERVAL_S`), and a process that probes the
database by itself (a worker's listener connection) releases every waiting attempt the
moment it answers (`reconnect_now`). With a multi-host DSN (`host=a,b
target_session_attrs=read-write`) each attempt resolves the primary anew, so a promoted
standby is found by the next one.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast

from psycopg_pool import AsyncConnectionPool, ConnectionPool
from psycopg_pool.pool import AddConnection, MaintenanceTask
from psycopg_pool.pool_async import AddConnection as AsyncAddConnection
from psycopg_pool.pool_async import MaintenanceTask as AsyncMaintenanceTask

# The longest a pool waits before trying a lost connection again.
RECONNECT_INTERVAL_S = 1.0


class _Deferred:
    """One scheduled reconnection attempt, handed to the pool's workers once: when its
    time comes or when the database is known to answer, whichever is first."""

    __slots__ = ("_handed", "_lock", "task", "waiting")

    def __init__(self, task: Any, waiting: set[_Deferred]) -> None:
        self.task = task
        self.waiting = waiting
        self._handed = False
        # The sync pool's scheduler thread and a releasing thread may race for it.
        self._lock = threading.Lock()
        waiting.add(self)

    def take(self) -> bool:
        """True once: to whoever hands the attempt over."""
        self.waiting.discard(self)
        with self._lock:
            if self._handed:
                return False
            self._handed = True
            return True

    def tick(self) -> None:
        if self.take():
            self.task.tick()


class _AsyncDeferred(_Deferred):
    __slots__ = ()

    async def tick(self) -> None:  # type: ignore[override]
        if self.take():
            await self.task.tick()


class _ReconnectsNow:
    """What both pools share: the reconnection attempts waiting for their time."""

    _deferred: set[_Deferred]

    if TYPE_CHECKING:  # the pool's own, after this class in the method order

        def run_task(self, task: Any) -> None: ...

    def reconnect_now(self) -> int:
        """Hand every waiting reconnection attempt to the pool's workers now (callable from
        any thread); how many there were."""
        released = 0
        for deferred in list(self._deferred):
            if deferred.take():
                self.run_task(deferred.task)
                released += 1
        return released


class PromptAsyncPool(_ReconnectsNow, AsyncConnectionPool):
    """An AsyncConnectionPool whose lost connections are retried every
    RECONNECT_INTERVAL_S at most, and at once on `reconnect_now()`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._deferred: set[_Deferred] = set()
        super().__init__(*args, **kwargs)

    async def schedule_task(self, task: AsyncMaintenanceTask, delay: float) -> None:
        # Only reconnections: the pool's idle-connection shrink must keep its own period
        # (`max_idle`); run every second, it closed a just-opened connection before its
        # first use, and a process short of server slots lost the slot to another pool.
        if not isinstance(task, AsyncAddConnection):
            await super().schedule_task(task, delay)
            return
        deferred = _AsyncDeferred(task, self._deferred)
        await super().schedule_task(
            cast(AsyncMaintenanceTask, deferred), min(delay, RECONNECT_INTERVAL_S)
        )


class PromptPool(_ReconnectsNow, ConnectionPool):
    """A ConnectionPool whose lost connections are retried every RECONNECT_INTERVAL_S at
    most, and at once on `reconnect_now()` (callable from any thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._deferred: set[_Deferred] = set()
        super().__init__(*args, **kwargs)

    def schedule_task(self, task: MaintenanceTask, delay: float) -> None:
        if not isinstance(task, AddConnection):  # see PromptAsyncPool.schedule_task
            super().schedule_task(task, delay)
            return
        deferred = _Deferred(task, self._deferred)
        super().schedule_task(cast(MaintenanceTask, deferred), min(delay, RECONNECT_INTERVAL_S))
