"""A lane's claims take a full batch when the tasks just started finish at once.

Tasks started from a claim count as running until the event loop gets to them. A lane
that sized its next claim at once took only what the last claim left over, and the sizes
locked into a see-saw (60, 40, 60, 40... for a batch of 100): twice the claims, each with
its fixed cost, for the same work. Seen at 10,000 tasks/s due with the default flags
(claims of 44 and 56 rows in turn), where it put the lane hundreds of milliseconds behind.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg

from pgsched.claims import claim_many
from pgsched.handlers import TaskRow
from pgsched.lanes import Lane
from pgsched.worker.claim_loop import LaneLoop
from pgsched.worker.config import LaneSettings
from tests.support.lane_loops import next_due_in, opened_pool
from tests.support.stale_statistics import schedule

BATCH = 100
FIRST = 60  # due when the lane starts: its first claim comes back short
BACKLOG = 1_000  # due after the first claim, drained by full claims from then on
CLAIM_INTERVAL = 0.05


def test_claims_after_a_short_one_take_a_full_batch(db_dsn: str, conn: psycopg.Connection) -> None:
    schedule(conn, FIRST)
    sizes: list[int] = []

    async def scenario() -> None:
        async with opened_pool(db_dsn) as pool:
            drained = asyncio.Event()

            async def claim(lane: Lane, n: int) -> list[TaskRow]:
                async with pool.connection() as aconn:
                    tasks, _ = await claim_many(
                        aconn, lane.value, n, "w-slots", timedelta(seconds=30)
                    )
                if not sizes:
                    # The backlog comes due behind the first, short claim.
                    await asyncio.to_thread(schedule, conn, BACKLOG)
                    # Longer than the claim interval: the next claim is sized at once.
                    await asyncio.sleep(2 * CLAIM_INTERVAL)
                sizes.append(len(tasks))
                if sum(sizes) >= FIRST + BACKLOG:
                    drained.set()
                return tasks

            async def no_op(done: Any) -> None:
                done()

            def start(task: TaskRow, done: Any) -> None:
                asyncio.get_running_loop().create_task(no_op(done))

            lane_loop = LaneLoop(
                Lane.NORMAL,
                LaneSettings(concurrency=BATCH),
                batch_size=BATCH,
                poll_interval=0.05,
                wakeup=asyncio.Event(),
                claim=claim,
                next_due=next_due_in(pool),
                start=start,
                claim_interval=CLAIM_INTERVAL,
            )
            claimer = asyncio.create_task(lane_loop.run())
            try:
                async with asyncio.timeout(60):
                    await drained.wait()
            finally:
                claimer.cancel()
                await asyncio.gather(claimer, return_exceptions=True)

    asyncio.run(scenario())
    assert sizes[0] == FIRST
    assert sum(sizes) == FIRST + BACKLOG
    # 60, then ten full claims of 100. Sized at once they went 40, 60, 40, 60...
    assert sizes[1:] == [BATCH] * (BACKLOG // BATCH), sizes
