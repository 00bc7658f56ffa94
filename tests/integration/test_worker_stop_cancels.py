"""Shutdown cancels the worker's loops (the lane claim loops, then the outcome buffer and the
ledger writer) and waits for them to end. A cancel that lands just as the event a loop
waits on is set (a wake-up, a full batch) must still end the loop: asyncio.wait_for on
Python 3.11 returns the wait's result instead and swallows the cancel, and the loop runs
on while the shutdown waits for it for good (the worker hung after "signal received",
never releasing its running tasks nor exiting).

Each test parks a loop on its event, then sets the event and cancels the loop in the same
step of the event loop: the race, made certain. The same goes for a loop waiting for a
pooled connection (the outcome buffer, the ledger writer, the lease rescue): the tests at
the end cancel it at each step of the pool's hand-over in turn."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from functools import partial
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from redis import asyncio as redis_async

from pgsched.claims import claim_many
from pgsched.handlers import TaskRow
from pgsched.hot_tier import HotTierConfig
from pgsched.hot_tier.claims import RedisClaimSource
from pgsched.hot_tier.wakeups import RedisWakeups
from pgsched.lanes import Lane
from pgsched.worker.claim_loop import LaneLoop
from pgsched.worker.config import LaneSettings
from pgsched.worker.ledger import LedgerWriter
from pgsched.worker.outcomes import Outcome, OutcomeBuffer
from pgsched.worker.services import Periodic
from tests.support.lane_loops import bare_lane_engine, next_due_in, opened_pool
from tests.support.redis_server import RedisServer

# Generous: a loop that heeds its cancel ends within a step or two of the event loop.
ENDS_WITHIN = 10.0


async def parked_on(event: asyncio.Event) -> None:
    """Return once something waits on `event` (the loop under test is parked there)."""
    for _ in range(3000):
        if event._waiters:  # asyncio.Event keeps its waiters' futures here
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the loop never came to wait on its event")


async def ends_cancelled(loop_task: asyncio.Task[None]) -> bool:
    done, _ = await asyncio.wait({loop_task}, timeout=ENDS_WITHIN)
    if not done:
        loop_task.cancel()  # the test failed: do not leave the loop running
        await asyncio.wait({loop_task}, timeout=ENDS_WITHIN)
        return False
    return loop_task.cancelled()


def test_a_lane_loop_cancelled_as_a_wake_up_arrives_stops(db_dsn: str) -> None:
    async def scenario() -> bool:
        async with opened_pool(db_dsn) as pool:

            async def claim(lane: Lane, n: int) -> list[TaskRow]:
                async with pool.connection() as conn:
                    tasks, _ = await claim_many(
                        conn, lane.value, n, "w-stop", timedelta(seconds=30)
                    )
                return tasks

            wakeup = asyncio.Event()
            lane_loop = LaneLoop(
                Lane.NORMAL,
                LaneSettings(concurrency=4),
                batch_size=4,
                poll_interval=60,  # nothing due: the loop waits for a wake-up
                wakeup=wakeup,
                claim=claim,
                next_due=next_due_in(pool),
                start=lambda task, done: None,
            )
            claimer = asyncio.create_task(lane_loop.run())
            await parked_on(wakeup)
            assert lane_loop.claims == 1
            wakeup.set()
            claimer.cancel()
            return await ends_cancelled(claimer)

    assert asyncio.run(scenario()), "the claim loop swallowed the cancel and ran on"


def test_a_lane_loop_cancelled_while_its_claim_talks_to_redis_stops(
    db_dsn: str, conn: psycopg.Connection, redis_server: RedisServer
) -> None:
    """The shutdown's cancel lands in the claim's call to Redis (its first wait there is
    redis-py sending the pop script, under asyncio.wait_for, which drops the cancel on
    Python 3.11): the claim goes on, and so must not the loop."""
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', false)")  # served by Redis

    async def scenario() -> bool:
        source = RedisClaimSource(HotTierConfig(redis_server.url), policy_checked=True)
        async with opened_pool(db_dsn) as pool:
            async with pool.connection() as aconn:
                await source.open(aconn)
            claimer: asyncio.Task[None] | None = None

            async def claim(lane: Lane, n: int) -> list[TaskRow]:
                async with pool.connection() as aconn:
                    if lane_loop.claims == 2:
                        # The cancel arrives at the claim's first wait, in Redis.
                        assert claimer is not None
                        asyncio.get_running_loop().call_soon(claimer.cancel)
                    tasks, _ = await source.claim(
                        aconn, lane.value, n, "w-stop", timedelta(seconds=30)
                    )
                return tasks

            wakeup = asyncio.Event()
            lane_loop = LaneLoop(
                Lane.NORMAL,
                LaneSettings(concurrency=4),
                batch_size=4,
                poll_interval=60,
                wakeup=wakeup,
                claim=claim,
                next_due=next_due_in(pool),
                start=lambda task, done: None,
            )
            claimer = asyncio.create_task(lane_loop.run())
            # The first claim reads which lanes Redis serves and connects to Redis.
            await parked_on(wakeup)
            wakeup.set()  # the second claim is the one cancelled
            stopped = await ends_cancelled(claimer)
            await source.close()
            return stopped and source.popped == 0 and lane_loop.claims == 2

    assert asyncio.run(scenario()), "the claim loop ran on after its claim swallowed the cancel"


def test_the_outcome_buffer_cancelled_as_its_batch_fills_stops(db_dsn: str) -> None:
    async def scenario() -> tuple[bool, int, int]:
        async with opened_pool(db_dsn) as pool:
            flushed: list[Outcome] = []
            buffer = OutcomeBuffer(
                pool,
                flush_size=2,
                flush_interval=60,
                on_flushed=lambda batch, applied: flushed.extend(batch),
            )
            buffer.add(Outcome(1, None, "COMPLETED"))
            running = asyncio.create_task(buffer.run())
            await parked_on(buffer._full)
            buffer.add(Outcome(2, None, "COMPLETED"))  # the batch is full
            running.cancel()
            return await ends_cancelled(running), len(buffer), len(flushed)

    stopped, waiting, flushed = asyncio.run(scenario())
    assert stopped, "the outcome buffer swallowed the cancel and ran on"
    # Cancelled before its flush: both outcomes wait for the shutdown's final flush.
    assert (waiting, flushed) == (2, 0)


def test_the_ledger_writer_cancelled_as_its_batch_fills_stops(db_dsn: str) -> None:
    async def scenario() -> bool:
        async with opened_pool(db_dsn) as pool:
            writer = LedgerWriter(pool, batch_size=2, window=60)
            recording: list[asyncio.Task[Any]] = [asyncio.create_task(writer.record_done(1, None))]
            running = asyncio.create_task(writer.run())
            await parked_on(writer._full)
            # The second entry fills the batch in the next step; the cancel comes right
            # after it, in the same step.
            recording.append(asyncio.create_task(writer.record_done(2, None)))
            asyncio.get_running_loop().call_soon(running.cancel)
            stopped = await ends_cancelled(running)
            # Their waiters hear that the writer stopped.
            await asyncio.wait(recording, timeout=ENDS_WITHIN)
            for waiting in recording:
                if not waiting.done():
                    waiting.cancel()
                elif not waiting.cancelled():
                    waiting.exception()  # read: no "never retrieved" warning
            return stopped

    assert asyncio.run(scenario()), "the ledger writer swallowed the cancel and ran on"


# -- a cancel at a pool's hand-over ---------------------------------------------------------
#
# psycopg_pool waits for a connection under asyncio.wait_for: on Python 3.11 a cancel
# landing as the pool hands the connection over is dropped, and the wait returns the
# connection. A loop whose next wait is on its own event would then run on for good.
# Where exactly the cancel must land is a few steps of the event loop after the connection
# is given back: each test tries every step in a range, one try each.

HAND_OVER_STEPS = range(12)


def after_steps(steps: int, callback: Any) -> None:
    """Call `callback` `steps` steps of the event loop from now."""
    if steps == 0:
        callback()
    else:
        asyncio.get_running_loop().call_soon(after_steps, steps - 1, callback)


async def cancelled_at_hand_over(
    pool: AsyncConnectionPool, held: Any, loop_task: asyncio.Task[None], steps: int
) -> bool:
    """Once `loop_task` waits for the pool's one connection (held by the test), give the
    connection back and cancel the loop `steps` steps later; whether the loop ended."""
    for _ in range(3000):
        if pool.get_stats().get("requests_waiting"):
            break
        await asyncio.sleep(0.001)
    else:
        raise AssertionError("the loop never came to wait for a connection")
    after_steps(steps, loop_task.cancel)
    await pool.putconn(held)
    return await ends_cancelled(loop_task)


def test_the_outcome_buffer_cancelled_as_the_pool_hands_it_a_connection_stops(
    db_dsn: str,
) -> None:
    async def scenario() -> list[int]:
        ran_on = []
        async with opened_pool(db_dsn, max_size=1) as pool:
            for steps in HAND_OVER_STEPS:
                held = await pool.getconn()
                buffer = OutcomeBuffer(
                    pool, flush_size=1, flush_interval=60, on_flushed=lambda batch, applied: None
                )
                buffer.add(Outcome(-1, None, "COMPLETED"))  # no such task: refused as stale
                running = asyncio.create_task(buffer.run())
                if not await cancelled_at_hand_over(pool, held, running, steps):
                    ran_on.append(steps)
        return ran_on

    ran_on = asyncio.run(scenario())
    assert not ran_on, f"the outcome buffer ran on after a cancel {ran_on} steps after hand-over"


def test_the_ledger_writer_cancelled_as_the_pool_hands_it_a_connection_stops(
    db_dsn: str,
) -> None:
    async def scenario() -> list[int]:
        ran_on = []
        async with opened_pool(db_dsn, max_size=1) as pool:
            for steps in HAND_OVER_STEPS:
                held = await pool.getconn()
                writer = LedgerWriter(pool, batch_size=1, window=60)
                recording = asyncio.create_task(writer.record_done(-1, None))
                running = asyncio.create_task(writer.run())
                if not await cancelled_at_hand_over(pool, held, running, steps):
                    ran_on.append(steps)
                # The task waiting for its entry hears back whenever the cancel lands: a
                # cancel mid-write left its batch unanswered, and it waited for good.
                await asyncio.wait({recording}, timeout=ENDS_WITHIN)
                if recording.done() and not recording.cancelled():
                    recording.exception()  # read: no "never retrieved" warning
                else:
                    recording.cancel()
                    unanswered.append(steps)
        return ran_on

    unanswered: list[int] = []
    ran_on = asyncio.run(scenario())
    assert not ran_on, f"the ledger writer ran on after a cancel {ran_on} steps after hand-over"
    assert not unanswered, f"a waiter never heard back after a cancel {unanswered} steps in"


def test_the_lease_rescue_loop_cancelled_as_the_pool_hands_it_a_connection_stops(
    db_dsn: str,
) -> None:
    lane = bare_lane_engine(db_dsn, "w-stop")

    async def scenario() -> list[int]:
        ran_on = []
        async with opened_pool(db_dsn, max_size=1) as pool:
            for steps in HAND_OVER_STEPS:
                held = await pool.getconn()
                rescue = Periodic(
                    "lease_rescue", lane.config.rescue_interval, partial(lane._rescue, pool)
                )
                running = asyncio.create_task(rescue.run())
                if not await cancelled_at_hand_over(pool, held, running, steps):
                    ran_on.append(steps)
        return ran_on

    ran_on = asyncio.run(scenario())
    assert not ran_on, f"the lease rescue ran on after a cancel {ran_on} steps after hand-over"


# -- a cancel while the Redis wake-ups (re)subscribe ----------------------------------------
#
# The wake-ups' subscriber has no socket timeout, so redis-py sends SUBSCRIBE without
# asyncio.wait_for, and its connect and read timeouts are asyncio.timeout, which lets an
# outside cancel through. Should either change (a socket timeout on the subscriber, a
# redis-py that sends under wait_for), a cancel landing as the send completes would be
# dropped and the loop would listen for good. These tests cancel at each step of the event
# loop from the start of the subscription, and from the loss of the connection (redis-py
# then reconnects and subscribes again before the loop sees the error), until the scan has
# gone past the subscription a few times over.

PAST_THE_SUBSCRIPTION = 5  # consecutive tries that cancelled after it: the scan is done
MAX_STEPS = 2000


async def wake_ups_cancelled_after(
    url: str, started: Any, subscribed: Any, steps: int
) -> tuple[bool, bool]:
    """Run the wake-ups, await `started(wakeups)` and cancel them `steps` steps later:
    whether they ended, and whether `subscribed(wakeups)` was true at the cancel."""
    events = {Lane.NORMAL: asyncio.Event(), Lane.HIGH: asyncio.Event()}
    wakeups = RedisWakeups(HotTierConfig(url), events)
    running = asyncio.create_task(wakeups.run())
    await started(wakeups)
    cancelled_subscribed: list[bool] = []

    def cancel() -> None:
        cancelled_subscribed.append(subscribed(wakeups))
        running.cancel()

    after_steps(steps, cancel)
    return await ends_cancelled(running), cancelled_subscribed == [True]


async def wake_ups_cancelled_at_each_step(
    url: str, started: Any, subscribed: Any
) -> tuple[list[int], int]:
    """Cancel the wake-ups `steps` steps after `started` for steps = 0, 1, ... until the
    cancel came after the subscription a few tries running: the steps at which they ran
    on, and how many steps were tried."""
    ran_on: list[int] = []
    past = 0
    steps = 0
    while past < PAST_THE_SUBSCRIPTION:
        assert steps < MAX_STEPS, "the subscription never completed before the cancel"
        ended, after_subscription = await wake_ups_cancelled_after(url, started, subscribed, steps)
        if not ended:
            ran_on.append(steps)
        past = past + 1 if after_subscription else 0
        steps += 1
    return ran_on, steps


def test_the_redis_wake_ups_cancelled_while_subscribing_stop(redis_server: RedisServer) -> None:
    async def started(wakeups: RedisWakeups) -> None:
        pass

    def subscribed(wakeups: RedisWakeups) -> bool:
        # Every lane is woken as soon as the subscription is made.
        return all(event.is_set() for event in wakeups.events.values())

    ran_on, tried = asyncio.run(
        wake_ups_cancelled_at_each_step(redis_server.url, started, subscribed)
    )
    assert not ran_on, f"the Redis wake-ups ran on after a cancel {ran_on} steps into subscribing"
    assert tried > PAST_THE_SUBSCRIPTION


def test_the_redis_wake_ups_cancelled_while_resubscribing_stop(
    redis_server: RedisServer, caplog: Any
) -> None:
    """The connection is killed under the subscriber: redis-py reconnects and subscribes
    again, then the loop hears of the loss (and logs it) and goes to wait before its own
    reconnection, which subscribes as the first connection does."""

    def losses() -> int:
        return sum("wake-ups from" in r.getMessage() for r in caplog.records)

    async def started(wakeups: RedisWakeups) -> None:
        for event in wakeups.events.values():
            await asyncio.wait_for(event.wait(), ENDS_WITHIN)
            event.clear()
        caplog.clear()
        admin = redis_async.Redis.from_url(redis_server.url)
        try:
            assert await admin.client_kill_filter(_type="pubsub") == 1
        finally:
            await admin.aclose()

    def subscribed(wakeups: RedisWakeups) -> bool:
        return losses() > 0

    with caplog.at_level(logging.WARNING, logger="pgsched.hot_tier.wakeups"):
        ran_on, tried = asyncio.run(
            wake_ups_cancelled_at_each_step(redis_server.url, started, subscribed)
        )
    assert not ran_on, f"the Redis wake-ups ran on after a cancel {ran_on} steps into resubscribing"
    assert tried > PAST_THE_SUBSCRIPTION
