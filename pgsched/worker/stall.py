"""The event-loop stall watchdog.

Async handlers share their lane's event loop: an `async def` that blocks (a `time.sleep`,
a synchronous HTTP call, a long CPU loop) holds its lane's claims, wake-ups and outcome
writes until it returns (other lanes run on loops of their own). Nothing on the loop can
notice that, so a thread does: a service on the loop stamps the time every few hundred
milliseconds, and when the stamp is older than the threshold the thread logs which task
the loop is running (the coroutine that has not yielded), then logs again once the loop
runs again, with how long it stood.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("pgsched.worker.stall")


class LoopStallWatchdog(threading.Thread):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threshold: float,
        blocking: Callable[[asyncio.AbstractEventLoop], str],
        name: str = "",
    ) -> None:
        super().__init__(name=f"pgsched-stall-watchdog {name}".strip(), daemon=True)
        self._loop = loop
        self._threshold = threshold
        self._blocking = blocking
        self._tick = min(threshold / 4, 0.25)
        self._stamp = time.monotonic()
        self._stop_event = threading.Event()
        self.stalls = 0

    @property
    def tick(self) -> float:
        """How often the loop must stamp (`stamp` runs as a Periodic service)."""
        return self._tick

    async def stamp(self) -> None:
        """Runs on the loop, every tick: proves it ticks."""
        self._stamp = time.monotonic()

    def stop(self) -> None:
        self._stop_event.set()

    def blocked_for(self) -> float:
        """Seconds the loop is past its next stamp now (0 while it ticks): /healthz."""
        return max(time.monotonic() - self._stamp - self._tick, 0.0)

    def run(self) -> None:
        reported: float | None = None  # the stamp of the stall already reported
        culprit = ""
        while not self._stop_event.wait(self._tick / 2):
            stamp = self._stamp
            if reported is not None and stamp != reported:
                log.warning(
                    "event loop ran again after %.0f ms blocked by %s",
                    (stamp - reported) * 1000,
                    culprit,
                )
                reported = None
            # The stamp is renewed every tick: a stall is the time past the next stamp due.
            behind = time.monotonic() - stamp - self._tick
            if reported is None and behind > self._threshold:
                reported = stamp
                self.stalls += 1
                culprit = self._blocking(self._loop)
                log.warning(
                    "event loop blocked for %.0f ms (threshold %.0f ms) by %s: an async "
                    "handler must await, not block (run blocking work in a plain def)",
                    behind * 1000,
                    self._threshold * 1000,
                    culprit,
                )
