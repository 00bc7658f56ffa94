"""One claim loop per lane.

Claim as many due tasks as there are free slots (at most `batch_size`) and start them.
A claim that got all it asked for is followed by the next one at once (a backlog is drained
back to back). A claim that got some rows but fewer is followed by the next one
`claim_interval` after it was sent: work is coming due steadily, and each claim has a fixed
cost (a round trip, its statements' planning, a commit), so waiting a few milliseconds
gathers what comes due meanwhile into one claim instead of many claims of a row or two.
The interval bounds the lateness it adds. Slots are gathered the same way: with fewer than
half a claim's worth free (`batch_size` or the lane's concurrency, whichever is less), the
next claim waits up to `claim_interval` for more to free. Tasks just started still count
as running until the event loop gets to them, so claiming at once would take whatever the
last claim left over: claims of 44, 56, 44, 56... rows at 10,000 tasks/s due, twice the
claims for the same work. A claim that got nothing sleeps until the
earliest of: the lane's next due time (asked of the database, measured by its clock), a
NOTIFY for the lane, or the jittered backup poll; never sooner than `claim_interval` after
the claim. Only due rows the claim could have taken but did not (others held them locked,
or a limit had no room) make it back off; rows that came due while it ran do not.

A NOTIFY is a hint that the lane may have work (its payload, the earliest due time queued,
goes to the lane's claim floor, pgsched/worker/claim_floor.py, not to this loop).
Wake-ups coalesce: a notification wakes the lane at once unless a notification already
woke it less than `debounce` ago; then the claim waits out the rest of that interval, and
every notification arriving meanwhile is served by that one claim. However many
notifications arrive, they cost at most one claim (and one next-due query) per lane per
`debounce`; a backlog's own claims (full batches, claimed back to back) are not delayed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgsched.lanes import Lane
from pgsched.tasks import TaskRow
from pgsched.worker.config import LaneSettings
from pgsched.worker.swallowed_cancels import raise_if_cancel_swallowed

log = logging.getLogger("pgsched.worker.claim_loop")

# Due rows the claim did not take (others hold them mid-claim, or a limit in
# pgsched.task_limits has no room): retry after 2 ms, doubling while that goes on, up to
# this. A limit frees room when a task finishes or its tokens refill; no signal says when.
SHORT_CLAIM_BACKOFF_MAX = 0.05


class RateLimiter:
    """A token bucket: at most `rate` starts per second, in bursts of at most a tenth of
    a second's worth (and at least one)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(rate / 10, 1.0)
        self.tokens = self.capacity
        self.updated = time.monotonic()

    def available(self) -> int:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        return int(self.tokens)

    def take(self, n: int) -> None:
        self.tokens -= n

    def wait_time(self) -> float:
        return max(0.0, (1 - self.tokens) / self.rate)


class LaneLoop:
    def __init__(
        self,
        lane: Lane,
        settings: LaneSettings,
        batch_size: int,
        poll_interval: float,
        wakeup: asyncio.Event,
        claim: Callable[[Lane, int], Awaitable[list[TaskRow]]],
        next_due: Callable[[Lane], Awaitable[tuple[datetime | None, datetime]]],
        start: Callable[[TaskRow, Callable[[], None]], Any],
        room: Callable[[], Awaitable[None]] | None = None,
        stuck_threads: Callable[[], int] | None = None,
        debounce: float = 0.0,
        claim_interval: float = 0.0,
    ) -> None:
        self.lane = lane
        self.settings = settings
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.wakeup = wakeup
        self._claim = claim
        self._next_due = next_due
        self._start = start
        self._room = room
        self._stuck_threads = stuck_threads
        self.debounce = debounce
        self.claim_interval = claim_interval
        self._notified_at = -debounce
        self._hold_until = 0.0
        # Half a claim's worth of free slots: fewer, and the claim waits for more a while.
        self._enough_free = max(1, min(batch_size, settings.concurrency) // 2)
        self._short_of_slots_since: float | None = None
        self._limiter = RateLimiter(settings.rate) if settings.rate else None
        self.in_flight = 0
        self._short_claims = 0
        self._next_due_failing = False
        self._slot_freed = asyncio.Event()
        self.claimed = 0
        self.claims = 0
        self.notified = 0

    def _free_slot(self) -> None:
        self.in_flight -= 1
        self._slot_freed.set()

    def capacity_changed(self) -> None:
        """A stuck handler thread came back: the lane may claim again."""
        self._slot_freed.set()

    def hold_claims(self, seconds: float) -> None:
        """Claim nothing for `seconds`: this worker has just given a task back because it
        cannot run it (no connection slot), and the NOTIFY of that release reaches every
        worker at once; claiming at once, this worker would win the race for the task it
        cannot run, again and again, while one that can run it waits."""
        self._hold_until = max(self._hold_until, time.monotonic() + seconds)

    async def run(self) -> None:
        while True:
            raise_if_cancel_swallowed()
            free = self.settings.concurrency - self.in_flight
            if self._stuck_threads is not None:
                # A thread still held by a timed-out handler cannot run a new task.
                free -= self._stuck_threads()
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            if free < self._enough_free and await self._gathered_slots():
                continue
            if self._room is not None:
                # Outcomes waiting to be written hold leases too: let them drain first.
                await self._room()
            want = min(free, self.batch_size)
            if self._limiter is not None:
                allowed = self._limiter.available()
                if allowed < 1:
                    await asyncio.sleep(self._limiter.wait_time())
                    continue
                want = min(want, allowed)
            if self._hold_until > time.monotonic():
                await self._sleep_until(self._hold_until)
                continue
            # Cleared before claiming: a NOTIFY that lands during the claim is kept.
            self.wakeup.clear()
            self._short_of_slots_since = None
            self.claims += 1
            sent = time.monotonic()
            try:
                tasks = await self._claim(self.lane, want)
            except psycopg.errors.SerializationFailure:
                # A row we tried to lock was finished (moved partitions) meanwhile: claim again.
                continue
            except Exception as exc:
                log.warning("claim on lane %s failed (%s); retrying", self.lane, exc)
                await asyncio.sleep(0.5)
                continue
            if log.isEnabledFor(logging.DEBUG):
                # Read by benchmarks/bench_held_horizon.py: a claim's cost, round trip included.
                log.debug(
                    "claim on lane %s: %d of %d rows in %.3f ms",
                    self.lane,
                    len(tasks),
                    want,
                    (time.monotonic() - sent) * 1e3,
                )
            if self._limiter is not None:
                self._limiter.take(len(tasks))
            for task in tasks:
                self.in_flight += 1
                self.claimed += 1
                self._start(task, self._free_slot)
            raise_if_cancel_swallowed()
            if len(tasks) >= want:
                self._short_claims = 0
            elif tasks:
                # Work is coming due as we go: gather the next claim's worth.
                self._short_claims = 0
                await self._sleep_until(sent + self.claim_interval)
            else:
                await self._sleep_until_work(sent)

    async def _gathered_slots(self) -> bool:
        """Wait, at most `claim_interval` from when the lane first came up short, for a
        slot to free; True when one did (count again), False when the time is up (claim
        what is free)."""
        now = time.monotonic()
        if self._short_of_slots_since is None:
            self._short_of_slots_since = now
        left = self._short_of_slots_since + self.claim_interval - now
        if left <= 0:
            return False
        self._slot_freed.clear()
        try:
            async with asyncio.timeout(left):
                await self._slot_freed.wait()
        except TimeoutError:
            return False
        return True

    async def _sleep_until(self, deadline: float) -> None:
        delay = deadline - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _sleep_until_work(self, sent: float) -> None:
        timeout = self.poll_interval * random.uniform(0.75, 1.25)
        try:
            next_due, db_now = await self._next_due(self.lane)
        except Exception as exc:
            # Once a streak: on a distributed database with a worker node down this fails
            # at every poll until the node is back.
            if not self._next_due_failing:
                log.warning("next-due query on lane %s failed (%s)", self.lane, exc)
            else:
                log.debug("next-due query on lane %s failed again (%s)", self.lane, exc)
            self._next_due_failing = True
            next_due, db_now = None, datetime.now()
        else:
            if self._next_due_failing:
                log.info("next-due query on lane %s works again", self.lane)
            self._next_due_failing = False
        raise_if_cancel_swallowed()
        earliest = sent + self.claim_interval
        if next_due is not None:
            # The claim began after `sent`: by the database's clock, no earlier than db_now
            # minus the time since. A row due by then was there for the claim to take.
            claim_began = db_now - timedelta(seconds=time.monotonic() - sent)
            if next_due <= claim_began:
                # Due rows the claim did not get (held by other claims, or over a limit):
                # back off briefly, doubling while it goes on.
                backoff = min(0.002 * 2**self._short_claims, SHORT_CLAIM_BACKOFF_MAX)
                self._short_claims = min(self._short_claims + 1, 16)
                await self._sleep_until(max(earliest, time.monotonic() + backoff))
                return
            timeout = min(timeout, max((next_due - db_now).total_seconds(), 0.0))
        # Never sooner than claim_interval after the last claim.
        timeout = max(timeout, earliest - time.monotonic())
        if timeout <= 0:
            return
        try:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that lands as
            # the wait completes (a wake-up arriving with a shutdown's cancel), and this loop
            # would claim on while the shutdown waits for it to end.
            async with asyncio.timeout(timeout):
                await self.wakeup.wait()
        except TimeoutError:
            return
        self.notified += 1
        since = time.monotonic() - self._notified_at
        if since < self.debounce:
            await asyncio.sleep(self.debounce - since)
        self._notified_at = time.monotonic()
        await self._sleep_until(earliest)
