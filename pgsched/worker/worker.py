"""The worker process: lane loops, wake-ups, heartbeats, the outcome buffer, shutdown.

Shutdown (SIGTERM or SIGINT): stop claiming at once; let running tasks finish within the
grace period; release the ones that did not (back to QUEUED, attempt given back, recorded);
write every outcome; exit 0. Should the database stay unreachable, writing the outcomes is
given up after another grace period (5 s at the least) and the worker exits with status 4:
the tasks stay PROCESSING, and their leases expire and are rescued. A second signal exits
at once with status 1, and the leases of whatever was running expire and are rescued as
usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgsched.handlers import HandlerRegistry, TaskRow
from pgsched.hot_tier.worker_side import open_hot_tier
from pgsched.lanes import Lane
from pgsched.observability.logs import Reachability, task_fields
from pgsched.observability.metrics import SweeperMetrics, WorkerMetrics
from pgsched.queries import query
from pgsched.recurring import arm_after_task
from pgsched.startup import wait_for_current_schema
from pgsched.sweeps import Sweeper, default_sweeps
from pgsched.worker.cancels import CancelRequests
from pgsched.worker.claim_loop import LaneLoop
from pgsched.worker.claims import claim_many, lane_next_due
from pgsched.worker.config import WorkerConfig
from pgsched.worker.connections import async_pool, open_async_pool, sync_pool
from pgsched.worker.gc_tuning import tune_gc_for_throughput
from pgsched.worker.leases import LeaseKeeper
from pgsched.worker.ledger import LedgerWriter
from pgsched.worker.outcomes import Outcome, OutcomeBuffer
from pgsched.worker.runner import NEVER_CONNECTED_WAIT_SECONDS, ConnectionSource, TaskRunner
from pgsched.worker.stall import LoopStallWatchdog
from pgsched.worker.swallowed_cancels import raise_if_cancel_swallowed
from pgsched.worker.threads import LaneThreadPool, describe_task
from pgsched.worker.wakeup import Wakeups

log = logging.getLogger("pgsched.worker")

# The exit status of a worker that stopped itself because too many handler threads are
# stuck: not 0 (a supervisor must restart it), not 1 (a crash), not 2 (a usage error).
EXIT_STUCK_THREADS = 3

# The exit status of a worker that stopped without writing every outcome (the database
# unreachable through its final flush): a fault to see, though nothing is lost.
EXIT_OUTCOMES_UNWRITTEN = 4

# Connections the worker opens for transactional handlers, at most (per pool): the most the
# old default concurrency (16 per lane, three lanes) could hold.
MAX_TRANSACTION_CONNECTIONS = 48

# How long the shutdown waits, at the least, for a claim its cancel cut short to end (a
# claim takes milliseconds; its rows are released once it ends).
CLAIM_END_WAIT_SECONDS = 5.0

# How long the shutdown tries to write the outcomes, at the least, while the database does
# not answer (the grace period if longer): a worker asked to stop must exit, and what it
# could not write is not lost (see Worker._give_up_unwritten).
FINAL_FLUSH_MIN_SECONDS = 5.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        dsn: str,
        registry: HandlerRegistry,
        config: WorkerConfig,
        metrics: WorkerMetrics | None = None,
        sweeper_metrics: SweeperMetrics | None = None,
    ) -> None:
        self.dsn = dsn
        self.metrics = metrics
        self.sweeper_metrics = sweeper_metrics
        self.registry = registry
        self.config = config
        self.worker_id = config.worker_id or default_worker_id()
        self._lease = timedelta(seconds=config.lease_seconds)
        self._running: dict[int, tuple[asyncio.Task[None], TaskRow]] = {}
        self._stop_requested: asyncio.Event | None = None
        self._signals = 0
        self._sync_pool: ConnectionPool | None = None
        self._recurring: set[int] = set()
        self._background: set[asyncio.Future[None]] = set()
        self.completed = 0
        self.abandoned_threads = 0
        self.exit_status = 0
        self._thread_pools: dict[Lane, LaneThreadPool] = {}
        self._lane_loops: dict[str, LaneLoop] = {}
        # When each running task started (time.monotonic()): its duration on log lines.
        self._started_at: dict[int, float] = {}
        self._watchdog: LoopStallWatchdog | None = None
        self._cancels = CancelRequests(config.cancel_grace_seconds)
        # Claims whose claim loop was cancelled (shutdown) before it could start their tasks.
        self._claims_cut_short: set[asyncio.Future[list[TaskRow]]] = set()

    # -- wiring -------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        if self._stop_requested is not None:
            self._stop_requested.set()

    def liveness_problem(self) -> str | None:
        """/healthz: None while the event loop runs, else how long it has been blocked."""
        watchdog = self._watchdog
        if watchdog is None:
            return None
        blocked = watchdog.blocked_for()
        if blocked > self.config.stall_threshold:
            return (
                f"event loop blocked for {blocked:.1f}s "
                f"(--stall-threshold {self.config.stall_threshold:g}s)"
            )
        return None

    def readiness_problem(self) -> str | None:
        """/readyz, besides the database: a draining worker takes no new work."""
        if self._stop_requested is not None and self._stop_requested.is_set():
            return "shutting down"
        return None

    def _duration_ms(self, task_id: int) -> float | None:
        started = self._started_at.get(task_id)
        return None if started is None else round((time.monotonic() - started) * 1000, 1)

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once; leases will expire")
            os._exit(1)
        log.info("signal received: no new claims; finishing running tasks")
        self.request_stop()

    async def run(self, install_signal_handlers: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        stopped = self._stop_requested.is_set
        tune_gc_for_throughput()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
        # Wait for the database, refuse a schema this pgsched does not match (raises).
        if not await asyncio.to_thread(wait_for_current_schema, self.dsn, "worker", stopped):
            return
        lanes = self.config.lanes
        # A Redis that may evict is refused here, before anything else starts (ConfigError).
        hot_tier = await asyncio.to_thread(open_hot_tier, self.config.hot_tier)
        concurrency = sum(self.config.lane_settings(lane).concurrency for lane in lanes)
        # Claims, next-due queries, outcome flushes and ledger writes are short: a few
        # connections serve them. Only transactional handlers hold one for their whole run.
        transactional = [r for r in self.registry.registrations() if r.transactional]
        # The heartbeat's own connection first, then the listener's: with few server slots
        # the pool runs short, never the lease renewals.
        keeper = LeaseKeeper(
            self.dsn,
            self.config.lease_seconds,
            on_lost=lambda task_id: loop.call_soon_threadsafe(self._on_lease_lost, task_id),
            on_cancel=lambda task_id: loop.call_soon_threadsafe(self._on_cancel_requested, task_id),
            **self.config.connect_kwargs,
        )
        await asyncio.to_thread(keeper.connect)
        keeper.start()
        wakeups = Wakeups(
            self.config.listen_target(self.dsn),
            lanes,
            on_cancel=self._on_cancel_requested,
            reachability=Reachability(f"worker {self.worker_id}", log),
        )
        listen = asyncio.create_task(wakeups.run(), name="pgsched-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wakeups.connected.wait(), 2.0)
        # Each running transactional handler holds a connection: at most this many at once
        # (more wait in the pool), so a high --concurrency does not open hundreds.
        held = min(concurrency, MAX_TRANSACTION_CONNECTIONS)
        pool = async_pool(
            self.dsn,
            min_size=len(lanes) + 2,
            max_size=2 * len(lanes) + 4 + (held if transactional else 0),
            # Every hot-path call is one statement: autocommit spares a BEGIN and a COMMIT.
            kwargs={"autocommit": True, **self.config.connect_kwargs},
        )
        if any(not r.is_async for r in transactional):
            # Made once, here: plain transactional handlers share it from many threads. Its
            # kept connection comes before the async pool grows (few slots: both get one).
            self._sync_pool = sync_pool(
                self.dsn,
                min(self.config.concurrency, MAX_TRANSACTION_CONNECTIONS),
                kwargs=self.config.connect_kwargs,
            )
        if not await open_async_pool(pool, self._stop_requested, plain_pool=self._sync_pool):
            listen.cancel()
            keeper.stop()
            await pool.close()
            if hot_tier is not None:
                await hot_tier.close()
            if self._sync_pool is not None:
                self._sync_pool.close()
            log.info("worker %s stopped before it could start", self.worker_id)
            return
        if hot_tier is not None:
            async with pool.connection() as conn:
                await hot_tier.source.open(conn)
        claim_from = claim_many if hot_tier is None else hot_tier.source.claim
        feed = None if hot_tier is None else hot_tier.outcome_feed(pool)

        def flushed(batch: list[Outcome], applied: set[int]) -> None:
            self._after_flush(keeper, batch, applied)
            if feed is not None:
                # After the outcomes' commit: retried and released tasks go back to Redis
                # (best effort, in the background; awaited at shutdown before the pool closes).
                pushing = feed.after_outcomes(batch, applied)
                if pushing is not None:
                    self._background.add(pushing)
                    pushing.add_done_callback(self._background.discard)

        buffer = OutcomeBuffer(
            pool, self.config.flush_size, self.config.flush_interval, on_flushed=flushed
        )
        ledger = LedgerWriter(pool)
        # Plain-function handlers run in their lane's own pool, as many threads as the lane
        # runs tasks at once: a lane whose handlers hang cannot take another lane's threads.
        self._thread_pools = {
            lane: LaneThreadPool(
                lane.value,
                self.config.lane_settings(lane).concurrency,
                on_stuck=self._on_thread_stuck,
                on_returned=lambda p, task: loop.call_soon_threadsafe(
                    self._on_thread_returned, p, task
                ),
            )
            for lane in lanes
        }
        connections = ConnectionSource(pool, self._sync_pool)
        runners = {
            lane.value: TaskRunner(
                self.worker_id,
                self.registry.get,
                record=buffer.add,
                written=lambda task_id: self._after_flush(
                    keeper, [Outcome(task_id, None, "COMPLETED")], {task_id}
                ),
                connections=connections,
                record_done=ledger.record_done,
                dsn=self.dsn,
                executor=self._thread_pools[lane],
                released_for_slots=partial(self._hold_lane_claims, lane),
            )
            for lane in lanes
        }

        async def claim(lane: Lane, n: int) -> list[TaskRow]:
            claiming = asyncio.ensure_future(claim_rows(lane, n))
            try:
                return await asyncio.shield(claiming)
            except asyncio.CancelledError:
                # The shutdown's cancel, in the middle of a claim: its rows may be committed
                # PROCESSING (psycopg lets a statement it cancels run to its end, and a
                # cancel landing as the claim returns drops its rows). The claim runs on;
                # the shutdown releases what it got.
                self._claims_cut_short.add(claiming)
                raise

        async def claim_rows(lane: Lane, n: int) -> list[TaskRow]:
            async with pool.connection() as conn:
                tasks, undecodable = await claim_from(
                    conn, lane.value, n, self.worker_id, self._lease
                )
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "lane %s: claimed %d",
                    lane,
                    len(tasks),
                    extra={"lane": lane.value, "count": len(tasks)},
                )
            keeper.hold_many((task.id, task.lease_token) for task in tasks)
            if self.metrics is not None:
                self.metrics.claimed(tasks)
            for row in undecodable:
                # Claimed, never runnable: it fails alone; its batch-mates run.
                log.error(
                    "task %s: %s; failing it",
                    row.id,
                    row.reason,
                    extra={"task_id": row.id, "lane": lane.value, "outcome": "failed"},
                )
                buffer.add(Outcome(row.id, row.lease_token, "FAILED", row.reason))
            return tasks

        async def next_due(lane: Lane) -> tuple[datetime | None, datetime]:
            async with pool.connection() as conn:
                return await lane_next_due(conn, lane.value)

        def start(task: TaskRow, done: Any) -> None:
            if task.schedule_id is not None:
                self._recurring.add(task.id)
            cancel = self._cancels.track(task.id)
            # The loop's own create_task: asyncio.create_task looks the loop up and names
            # the task again, for every task.
            handle = loop.create_task(runners[task.lane].run(task, cancel))
            self._running[task.id] = (handle, task)
            started = self._started_at[task.id] = time.monotonic()

            def finished(_: asyncio.Task[None]) -> None:
                self._running.pop(task.id, None)
                self._started_at.pop(task.id, None)
                if self.metrics is not None:
                    self.metrics.ran(task, time.monotonic() - started)
                self._cancels.forget(task.id)
                done()

            handle.add_done_callback(finished)

        loops = [
            LaneLoop(
                lane,
                self.config.lane_settings(lane),
                self.config.batch_size,
                self.config.poll_interval,
                wakeups.events[lane],
                claim,
                next_due,
                start,
                room=buffer.room,
                stuck_threads=self._thread_pools[lane].stuck_count,
                debounce=self.config.wakeup_debounce,
                claim_interval=self.config.claim_interval,
            )
            for lane in lanes
        ]
        self._lane_loops = {lp.lane.value: lp for lp in loops}
        if self.metrics is not None:
            for lp in loops:
                self.metrics.watch_in_flight(lp.lane.value, partial(getattr, lp, "in_flight"))
        watchdog = LoopStallWatchdog(loop, self.config.stall_threshold, self._blocking_task)
        self._watchdog = watchdog
        background = [
            listen,
            asyncio.create_task(buffer.run(), name="pgsched-outcomes"),
            asyncio.create_task(ledger.run(), name="pgsched-ledger"),
            asyncio.create_task(self._rescue_loop(pool), name="pgsched-rescue"),
            asyncio.create_task(watchdog.stamp(), name="pgsched-stall-stamp"),
        ]
        if hot_tier is not None:
            background.append(
                asyncio.create_task(hot_tier.wakeups(wakeups.events), name="pgsched-redis-wake")
            )
        watchdog.start()
        claimers = [asyncio.create_task(lp.run(), name=f"pgsched-{lp.lane}") for lp in loops]
        for task in (*background, *claimers):
            task.add_done_callback(self._on_loop_exit)
        scheduler = None
        if self.config.run_sweeps:
            sweeps = default_sweeps()
            if self.sweeper_metrics is not None:
                sweeps.append(self.sweeper_metrics.sweep)
            if hot_tier is not None:
                sweeps.append(hot_tier.mirror())
            scheduler = Sweeper(
                self.dsn,
                sweeps,
                listen_dsn=self.config.listen_dsn,
                prepare_threshold=self.config.prepare_threshold,
            )
            if self.sweeper_metrics is not None:
                self.sweeper_metrics.follow(lambda: scheduler is not None and scheduler.is_leader)
        if scheduler is not None:
            threading.Thread(target=scheduler.run, name="pgsched-sweeps", daemon=True).start()
        log.info(
            "worker %s running lanes %s",
            self.worker_id,
            ",".join(lanes),
            extra={"worker_id": self.worker_id},
        )
        try:
            await self._stop_requested.wait()
        finally:
            for task in claimers:
                task.cancel()
            await asyncio.gather(*claimers, return_exceptions=True)
            if scheduler is not None:
                scheduler.stop()
            await self._release_claims_cut_short(buffer)
            await self._drain(buffer)
            # The database may be unreachable: writing the outcomes gets the grace period,
            # then the worker exits anyway rather than never.
            give_up_at = loop.time() + self._final_flush_seconds
            await buffer.flush(give_up_at)
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await buffer.flush(give_up_at)
            self._give_up_unwritten(buffer)
            keeper.stop()
            watchdog.stop()
            # Threads of abandoned plain handlers are not waited for: their tasks were
            # released above, and their late reports will be refused as stale.
            for thread_pool in self._thread_pools.values():
                thread_pool.shutdown(wait=False, cancel_futures=True)
            self.abandoned_threads = sum(p.alive_threads() for p in self._thread_pools.values())
            await pool.close()
            if hot_tier is not None:
                await hot_tier.close()
            if self._sync_pool is not None:
                self._sync_pool.close()
            self.completed = buffer.flushed
            for lp in loops:
                log.info(
                    "lane %s: %d claim queries, %d tasks claimed, %d wake-ups by notification",
                    lp.lane,
                    lp.claims,
                    lp.claimed,
                    lp.notified,
                )
            log.info("worker %s stopped", self.worker_id)

    async def _release_claims_cut_short(self, buffer: OutcomeBuffer) -> None:
        """Release (back to QUEUED, the attempt given back) what the claims in flight at
        shutdown claimed: their tasks never started. A claim still running after the wait
        is given up: whatever it claims stays PROCESSING until its lease expires."""
        claims = self._claims_cut_short
        if not claims:
            return
        await asyncio.wait(claims, timeout=max(self.config.grace_seconds, CLAIM_END_WAIT_SECONDS))
        for claiming in claims:
            if not claiming.done():
                claiming.cancel()
                log.warning(
                    "a claim in flight at shutdown did not end within %.0fs; what it claimed "
                    "stays PROCESSING until its lease expires",
                    max(self.config.grace_seconds, CLAIM_END_WAIT_SECONDS),
                )
                continue
            if claiming.cancelled() or claiming.exception() is not None:
                continue  # it claimed nothing (a failed claim commits no row)
            tasks = claiming.result()
            if tasks:
                log.info(
                    "released %d tasks claimed as the worker stopped, never started: %s",
                    len(tasks),
                    ",".join(str(task.id) for task in tasks),
                    extra={"outcome": "released"},
                )
            for task in tasks:
                buffer.add(
                    Outcome(
                        task.id,
                        task.lease_token,
                        "RELEASED",
                        f"claimed as worker {self.worker_id} stopped; released unstarted",
                    )
                )
        claims.clear()

    async def _drain(self, buffer: OutcomeBuffer) -> None:
        """Let running tasks finish within the grace period; release the rest."""
        if self._running:
            handles = [handle for handle, _ in self._running.values()]
            await asyncio.wait(handles, timeout=self.config.grace_seconds)
        unfinished = list(self._running.values())
        # Read before cancelling: a cancelled task's start time goes with it.
        durations = {task.id: self._duration_ms(task.id) for _, task in unfinished}
        for handle, _ in unfinished:
            handle.cancel()
        await asyncio.gather(*(h for h, _ in unfinished), return_exceptions=True)
        for _, task in unfinished:
            log.warning(
                "%s: released unfinished at shutdown",
                describe_task(task),
                extra=task_fields(task, outcome="released", duration_ms=durations.get(task.id)),
            )
            buffer.add(
                Outcome(
                    task.id,
                    task.lease_token,
                    "RELEASED",
                    f"released unfinished at shutdown of worker {self.worker_id}",
                )
            )

    @property
    def _final_flush_seconds(self) -> float:
        return max(self.config.grace_seconds, FINAL_FLUSH_MIN_SECONDS)

    def _give_up_unwritten(self, buffer: OutcomeBuffer) -> None:
        """Exit non-zero, naming the tasks whose outcomes the final flush could not write.
        Nothing is lost: they stay PROCESSING, and once their leases expire the lease
        rescue queues them again (or fails them, out of attempts)."""
        unwritten = buffer.unwritten_task_ids()
        if not unwritten:
            return
        log.error(
            "outcomes of %d tasks not written within %gs (the database unreachable); they "
            "stay PROCESSING until their leases expire and the lease rescue takes them "
            "again: tasks %s",
            len(unwritten),
            self._final_flush_seconds,
            ",".join(str(task_id) for task_id in unwritten),
            extra={"worker_id": self.worker_id, "outcome": "unwritten"},
        )
        if not self.exit_status:
            self.exit_status = EXIT_OUTCOMES_UNWRITTEN

    def _on_loop_exit(self, task: asyncio.Task[None]) -> None:
        """A loop of the worker must never end on its own: if one dies, say why loudly
        and stop (a supervisor restarts the process; leases keep the tasks safe)."""
        if task.cancelled():
            return
        exc = task.exception()
        log.critical("worker loop %s died: %r; stopping", task.get_name(), exc, exc_info=exc)
        self.request_stop()

    @property
    def stuck_threads(self) -> int:
        """Threads still running a plain handler whose attempt already timed out."""
        return sum(p.stuck for p in self._thread_pools.values())

    def _on_thread_stuck(
        self, pool: LaneThreadPool, task: TaskRow | None, thread: str | None
    ) -> None:
        """On the loop: a timed-out plain handler keeps its thread. Count it; past the
        limit, drain and exit non-zero so the supervisor starts a clean process."""
        if self._stop_requested is not None and self._stop_requested.is_set():
            return  # shutdown gave up on it: counted among the abandoned threads instead
        stuck = self.stuck_threads
        limit = self.config.max_stuck_threads
        log.warning(
            "%s: its attempt is over, but thread %s still runs its handler (Python cannot "
            "stop a thread); "
            "stuck threads: %d in lane %s, %d in this worker (limit %d)",
            describe_task(task),
            thread,
            pool.stuck,
            pool.lane,
            stuck,
            limit,
        )
        if stuck > limit and not self.exit_status:
            self.exit_status = EXIT_STUCK_THREADS
            log.critical(
                "%d handler threads are stuck in timed-out handlers, more than "
                "--max-stuck-threads %d: draining and exiting with status %d so that a "
                "supervisor restarts this worker",
                stuck,
                limit,
                EXIT_STUCK_THREADS,
            )
            self.request_stop()

    def _hold_lane_claims(self, lane: Lane) -> None:
        """A task of `lane` was given back for want of a connection slot: let the other
        workers, woken by its release, take it before this one claims again."""
        lane_loop = self._lane_loops.get(lane.value)
        if lane_loop is not None:
            lane_loop.hold_claims(NEVER_CONNECTED_WAIT_SECONDS)

    def _on_thread_returned(self, pool: LaneThreadPool, task: TaskRow | None) -> None:
        log.info(
            "%s: its timed-out handler returned at last; stuck threads: %d in this worker",
            describe_task(task),
            self.stuck_threads,
        )
        lane_loop = self._lane_loops.get(pool.lane)
        if lane_loop is not None:
            lane_loop.capacity_changed()

    def _on_lease_lost(self, task_id: int) -> None:
        """On the loop: the heartbeat found the task's lease gone (rescued, or taken by
        another worker). Its result could no longer be recorded: cancel the handler."""
        running = self._running.get(task_id)
        if running is None:
            log.warning("task %s: lease lost; no longer renewed", task_id)
            return
        handle, task = running
        log.warning(
            "%s: lease lost (another worker or the rescue owns the task now); no longer "
            "renewed, handler cancelled",
            describe_task(task),
            extra=task_fields(task, outcome="lease_lost", duration_ms=self._duration_ms(task_id)),
        )
        if self.metrics is not None:
            self.metrics.lease_lost(task)
        self._recurring.discard(task_id)
        handle.cancel()

    def _on_cancel_requested(self, task_id: int) -> None:
        """On the loop: the task was asked to stop (a notification, or the heartbeat's
        check); if it runs here, stop it (pgsched/worker/cancels.py)."""
        running = self._running.get(task_id)
        if running is not None:
            handle, task = running
            self._cancels.request(task, handle)

    def _blocking_task(self, loop: asyncio.AbstractEventLoop) -> str:
        """From the watchdog's thread: the task whose coroutine holds the loop. Reads
        asyncio's record of each loop's current task (a dict read; the loop is stuck)."""
        current = asyncio.current_task(loop)
        running = list(self._running.values())
        for handle, task in running:
            if handle is current:
                return describe_task(task)
        ids = ", ".join(str(task.id) for _, task in running[:10])
        where = current.get_name() if current is not None else "a callback"
        return f"{where} (no handler task identified; tasks in flight: {ids or 'none'})"

    def _after_flush(self, keeper: LeaseKeeper, batch: list[Outcome], applied: set[int]) -> None:
        """Outcomes are written: drop their leases; advance the recurring ones that finished
        (a stale report, refused by the database, advances nothing)."""
        if self.metrics is not None:
            self.metrics.written(((o.task_id, o.outcome) for o in batch), applied)
        keeper.drop_many(outcome.task_id for outcome in batch)
        advance: list[int] = []
        if self._recurring:
            for outcome in batch:
                if outcome.task_id in self._recurring:
                    self._recurring.discard(outcome.task_id)
                    if outcome.outcome == "COMPLETED" and outcome.task_id in applied:
                        advance.append(outcome.task_id)
        if advance:
            # The schedule advances only once the work finished. Should this process die
            # first, the recurring sweep arms the next occurrence within its interval.
            task = asyncio.get_running_loop().run_in_executor(None, self._arm_next, advance)
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _arm_next(self, task_ids: list[int]) -> None:
        """Arm the next occurrence of each schedule whose task completed. What could not be
        armed is logged with its task ids; the recurring sweep arms it within its interval."""
        armed = 0
        try:
            with psycopg.connect(self.dsn, autocommit=True, **self.config.connect_kwargs) as conn:
                for task_id in task_ids:
                    arm_after_task(conn, task_id)
                    armed += 1
        except Exception as exc:
            # Run in an executor whose future nobody reads: an exception not caught here
            # would be dropped without a word.
            left = task_ids[armed:]
            log.warning(
                "tasks %s: arming their schedules' next occurrences failed (%s); the"
                " recurring sweep will",
                ",".join(str(task_id) for task_id in left),
                str(exc).strip() or type(exc).__name__,
                extra={"task_id": left[0]},
            )

    async def _rescue_loop(self, pool: AsyncConnectionPool) -> None:
        """Expired leases of this worker's lanes go back to be claimed (or to DEAD)."""
        while True:
            await asyncio.sleep(self.config.rescue_interval)
            for lane in self.config.lanes:
                try:
                    async with pool.connection() as conn:
                        cur = await conn.execute(
                            query("lease_rescue_expired"), {"lane": lane.value}
                        )
                        row = await cur.fetchone()
                    if row and row[0]:
                        log.warning("lane %s: rescued %s tasks whose worker was lost", lane, row[0])
                except Exception as exc:
                    log.warning("lease rescue failed (%s)", exc)
                # A cancel landing as the pool handed over the connection is swallowed.
                raise_if_cancel_swallowed()
