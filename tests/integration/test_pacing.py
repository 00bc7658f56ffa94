"""Flushes of outcomes paced by their round trip (pgsched/worker/outcomes.py, `pace`).

Outcomes waited `flush_interval` after the last flush for others to share their statement.
On a busy database a flush takes longer than that, so flushes came back to back, each
carrying what finished during the last one, and their fixed cost took the CPU the due tasks
were waiting for. Now the wait stretches to twice the last flush's round trip, at most four
times `flush_interval`; on a quiet database it stays as configured.

The database is real; "busy" is a round trip made long on purpose (a sleep after the real
statement), so the spacing expected is known.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from datetime import timedelta
from typing import Any

import psycopg

from pgsched.claims import claim_many
from pgsched.worker.outcomes import Outcome, OutcomeBuffer, pace
from tests.support.lane_loops import opened_pool
from tests.support.stale_statistics import schedule

SLOW = 0.04  # the busy database's round trip, on top of the real one
TASKS = 600  # one outcome every 2 ms: 1.2 s of them


def test_pace() -> None:
    assert pace(0.005, 0.001) == 0.005  # quiet: as configured
    assert pace(0.005, 0.004) == 0.008  # busy: twice the round trip
    assert pace(0.005, 0.5) == 0.02  # at most four times the interval
    assert pace(0.0, 0.5) == 0.0  # no interval, no wait


def spacing(starts: list[float]) -> float:
    return statistics.median(b - a for a, b in itertools.pairwise(starts))


class TimedWrites(OutcomeBuffer):
    """An outcome buffer noting when each write began and its size, and the most outcomes
    that ever waited; each write takes `slow` longer."""

    def __init__(self, *args: Any, slow: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slow = slow
        self.write_starts: list[float] = []
        self.batch_sizes: list[int] = []
        self.most_waiting = 0

    def add(self, outcome: Outcome) -> None:
        super().add(outcome)
        self.most_waiting = max(self.most_waiting, len(self))

    async def _write(self, batch: list[Outcome], tenant: str | None = None) -> Any:
        self.write_starts.append(time.monotonic())
        self.batch_sizes.append(len(batch))
        rows = await super()._write(batch, tenant)
        await asyncio.sleep(self.slow)
        return rows


def flushed(
    db_dsn: str,
    conn: psycopg.Connection,
    flush_interval: float,
    slow: float,
    flush_size: int = 10_000,
    tasks: int = TASKS,
    every: float = 0.002,
) -> TimedWrites:
    """A buffer's flushes of `tasks` real outcomes arriving `every` seconds, each flush's
    round trip lengthened by `slow`; every outcome applied."""
    schedule(conn, tasks)

    async def scenario() -> tuple[TimedWrites, int]:
        async with opened_pool(db_dsn) as pool:
            async with pool.connection() as aconn:
                claimed, _ = await claim_many(
                    aconn, "NORMAL", tasks, "w-pace", timedelta(seconds=60)
                )
            assert len(claimed) == tasks
            applied: list[int] = []
            buffer = TimedWrites(
                pool,
                flush_size=flush_size,
                flush_interval=flush_interval,
                on_flushed=lambda batch, ok: applied.extend(ok),
                slow=slow,
            )
            running = asyncio.create_task(buffer.run())
            try:
                for task in claimed:
                    buffer.add(Outcome(task.id, task.lease_token, "COMPLETED"))
                    await asyncio.sleep(every)
                # The running loop writes the last batch. Not a flush from here: with the
                # loop's flush in flight the buffer is empty, such a flush returns at once,
                # and the cancel below would cut that write short.
                async with asyncio.timeout(10):
                    while len(applied) < tasks:
                        await asyncio.sleep(0.01)
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            return buffer, len(applied)

    buffer, applied = asyncio.run(scenario())
    assert applied == tasks
    return buffer


def flush_spacing(
    db_dsn: str, conn: psycopg.Connection, flush_interval: float, slow: float
) -> float:
    """The median time between flushes (the first follows a quiet start; the last carries
    what was left)."""
    return spacing(flushed(db_dsn, conn, flush_interval, slow).write_starts[1:-1])


def test_flushes_of_a_slow_database_wait_twice_their_round_trip(
    db_dsn: str, conn: psycopg.Connection
) -> None:
    gap = flush_spacing(db_dsn, conn, flush_interval=0.02, slow=SLOW)
    # A write (about 45 ms), then the first outcome after it waits twice that, capped at
    # four times the interval (80 ms): about 125 ms. Before, back to back: about 45 ms.
    assert gap >= 0.11, f"flushes {gap * 1e3:.1f} ms apart"


def test_flushes_of_a_quiet_database_keep_the_flush_interval(
    db_dsn: str, conn: psycopg.Connection
) -> None:
    flush_interval = 0.03
    gap = flush_spacing(db_dsn, conn, flush_interval=flush_interval, slow=0.0)
    # The interval and the flush's own few milliseconds: well under twice the interval.
    assert gap < 2 * flush_interval, f"flushes {gap * 1e3:.1f} ms apart"


def test_a_busy_database_flushes_at_half_the_flush_size(
    db_dsn: str, conn: psycopg.Connection
) -> None:
    # An outcome every millisecond and a stretched wait of 80 ms: about 80 would wait each
    # time, close to the flush size of 100 at which the lanes stop claiming. Half of it,
    # 50, starts the flush sooner.
    buffer = flushed(
        db_dsn, conn, flush_interval=0.02, slow=SLOW, flush_size=100, tasks=1_000, every=0.001
    )
    sizes = buffer.batch_sizes[1:-1]
    assert statistics.median(sizes) <= 70, sizes
    assert buffer.most_waiting < 100, buffer.batch_sizes
