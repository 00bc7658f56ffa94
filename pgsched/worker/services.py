"""The worker as a list of services of one shape.

Every background loop of a worker is a service: it has a name (its failures are logged
under `pgsched.worker.<name>`), `start()` and `stop()` (`stop` returns at once), and a
unit of work that ends (one claim, one flush, one rescue, one beat):

    LoopService  runs on the event loop that starts it until it is stopped; its unit of
                 work and its wait are its own (the claim loop sleeps until the next due
                 time or a wake-up, the outcome buffer until a batch fills or its
                 interval ends). It must never end on its own: one that does, or dies of
                 an exception, is logged by name and stops the worker (a supervisor
                 restarts the process; the leases keep its tasks safe).
    Periodic     a LoopService whose unit of work (`run_once`) runs every `interval`
                 seconds inside its own error boundary: a failed run is logged by name,
                 and the next one comes at its time.
    threads      the heartbeat (`LeaseKeeper`), a lane's stall watchdog, each lane engine
                 (an event loop of its own, on which its LoopServices run), the sweeper
                 (whose sweeps have the same shape: `name`, `interval`, `run_once`, an
                 error boundary each, pgsched/sweeps.py) and the metrics server have the
                 same `name`, `start()`, `stop()`.

Who starts them, in which order, and the order they stop in, reads in one place:
`Worker.run` (pgsched/worker/worker.py) for the process, `LaneEngine._run`
(pgsched/worker/lane_engine.py) for each lane.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from pgsched.worker.swallowed_cancels import raise_if_cancel_swallowed


class Service(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


def service_log(name: str) -> logging.Logger:
    """The logger a service's own lines go to."""
    return logging.getLogger(f"pgsched.worker.{name}")


class LoopService:
    """`work` on the event loop that calls `start`, until `stop` cancels it."""

    def __init__(self, name: str, work: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.log = service_log(name)
        self._work = work
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # Told when the service ended on its own (see module docstring).
        self.on_died: Callable[[], None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"pgsched-{self.name}")
        self._task.add_done_callback(self._ended)

    def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()

    async def ended(self) -> None:
        """Until the task has ended (whatever it ended with)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def run(self) -> None:
        """The whole run, until cancelled (`start` runs it as a task)."""
        await self._work()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopping:
            return
        exc = task.exception()
        self.log.critical("service %s died: %r; stopping", self.name, exc, exc_info=exc)
        if self.on_died is not None:
            self.on_died()


class Periodic(LoopService):
    """`run_once` every `interval` seconds (the first after one interval), each run in its
    own error boundary."""

    def __init__(self, name: str, interval: float, run_once: Callable[[], Awaitable[None]]) -> None:
        super().__init__(name, run_once)
        self.interval = interval

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._work()
            except Exception as exc:
                self.log.warning(
                    "%s failed (%s); it runs again in %gs",
                    self.name,
                    str(exc).strip() or type(exc).__name__,
                    self.interval,
                )
            # A cancel landing as a library handed over a connection is swallowed.
            raise_if_cancel_swallowed()


class LoopServices:
    """The LoopServices of one event loop: each started in its error boundary, and a
    death of any of them reported to `on_died`."""

    def __init__(self, on_died: Callable[[], None]) -> None:
        self._on_died = on_died

    def start(self, *services: LoopService) -> None:
        for service in services:
            service.on_died = self._on_died
            service.start()

    async def stop(self, *services: LoopService) -> None:
        """Stop them all at once, and return when every one has ended."""
        for service in services:
            service.stop()
        await asyncio.gather(*(service.ended() for service in services))
