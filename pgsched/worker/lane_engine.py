"""One lane of a worker, on an event loop and thread of its own.

Lanes share nothing a handler can block: each has its own event loop in its own thread,
with its own claim loop, wake-ups (a LISTEN connection), connection pool, outcome buffer,
ledger writer, lease rescue, stall watchdog, thread pool for plain handlers and handler
processes. An `async def` handler that blocks (a `time.sleep`, a synchronous HTTP client)
stalls only its lane's loop: the other lanes claim, run and write their outcomes on, and
the heartbeat thread (shared, `LeaseKeeper`) keeps every running task's lease, the
blocked lane's included. A plain handler that overruns its timeout runs in a handler
process and is killed (handler_processes.py).

Nothing is handed between lanes per task, so a lane costs what a whole worker cost before
it: what it adds is a thread and a few connections per lane.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from psycopg_pool import ConnectionPool

from pgsched.claims import claim_many, lane_next_due
from pgsched.handlers import HandlerRegistry
from pgsched.hot_tier.worker_side import open_hot_tier
from pgsched.lanes import Lane
from pgsched.observability.logs import Reachability, task_fields
from pgsched.observability.metrics import WorkerMetrics
from pgsched.pools import PromptAsyncPool, PromptPool
from pgsched.queries import query
from pgsched.tasks import TaskRow, UndecodableRow, describe_task
from pgsched.worker.cancels import CancelRequests
from pgsched.worker.claim_floor import ClaimFloor
from pgsched.worker.claim_loop import LaneLoop
from pgsched.worker.config import WorkerConfig
from pgsched.worker.connections import async_pool, open_async_pool
from pgsched.worker.handler_processes import HandlerProcessPool
from pgsched.worker.leases import LeaseKeeper
from pgsched.worker.ledger import LedgerWriter
from pgsched.worker.outcomes import Outcome, OutcomeBuffer
from pgsched.worker.rescue_floor import RescueFloor
from pgsched.worker.runner import NEVER_CONNECTED_WAIT_SECONDS, ConnectionSource, TaskRunner
from pgsched.worker.services import LoopService, LoopServices, Periodic
from pgsched.worker.stall import LoopStallWatchdog
from pgsched.worker.tenant_rotation import TenantRotation
from pgsched.worker.threads import LaneThreadPool
from pgsched.worker.wakeup import Wakeups

log = logging.getLogger("pgsched.worker")

# Connections a lane opens for transactional handlers, at most: the most the old default
# concurrency (16 per lane) could hold.
MAX_TRANSACTION_CONNECTIONS = 48

# How long the shutdown tries to write the outcomes, at the least, while the database does
# not answer (the grace period if longer): a worker asked to stop must exit, and what it
# could not write is not lost (see Worker._give_up_unwritten).
FINAL_FLUSH_MIN_SECONDS = 5.0

# How long the shutdown waits, at the least, for a claim its cancel cut short to end (a
# claim takes milliseconds; its rows are released once it ends).
CLAIM_END_WAIT_SECONDS = 5.0

# The most expired leases one rescue of a lane moves (the rest go at its next run).
RESCUE_CHUNK = 1_000


class LaneEngine:
    """Everything one lane runs. Started by the worker in a thread of its own; every
    method whose name does not start with `_` may be called from any thread."""

    def __init__(
        self,
        lane: Lane,
        dsn: str,
        worker_id: str,
        registry: HandlerRegistry,
        config: WorkerConfig,
        keeper: LeaseKeeper,
        metrics: WorkerMetrics | None,
        *,
        plain_pool: ConnectionPool[Any] | None,
        open_plain_pool: bool,
        on_thread_stuck: Callable[[LaneThreadPool, TaskRow | None, str | None], None],
        arm_next: Callable[[list[int]], None],
        stop_worker: Callable[[], None],
        distributed: bool = False,
    ) -> None:
        self.lane = lane
        # A distributed database (docs/scaling.md): claims go tenant by tenant.
        self.distributed = distributed
        self.name = f"lane.{lane.value.lower()}"
        self.dsn = dsn
        self.worker_id = worker_id
        self.registry = registry
        self.config = config
        self.settings = config.lane_settings(lane)
        self._keeper = keeper
        self._rescue_floor = RescueFloor()
        self.metrics = metrics
        self._plain_pool = plain_pool
        self._open_plain_pool = open_plain_pool
        self._on_thread_stuck = on_thread_stuck
        self._arm_next = arm_next
        self._stop_worker = stop_worker
        self._lease = timedelta(seconds=config.lease_seconds)
        self._running: dict[int, tuple[asyncio.Task[None], TaskRow]] = {}
        self._started_at: dict[int, float] = {}
        self._recurring: set[int] = set()
        self._background: set[asyncio.Future[Any]] = set()
        self._cancels = CancelRequests(config.cancel_grace_seconds)
        # Claims whose claim loop was cancelled (shutdown) before it could start their tasks.
        self._claims_cut_short: set[asyncio.Future[list[TaskRow]]] = set()
        self.thread_pool = LaneThreadPool(
            lane.value,
            self.settings.concurrency,
            on_stuck=on_thread_stuck,
            on_returned=self._thread_returned,
        )
        self.processes = HandlerProcessPool(lane.value)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        # Set by stop() from any thread: a stop asked before the lane's loop exists holds.
        self._stopping = threading.Event()
        self._lane_loop: LaneLoop | None = None
        self.watchdog: LoopStallWatchdog | None = None
        # Done when the lane runs (its pool has a connection), or with the error that
        # stopped it first; None as the result: stopped before it ran.
        self.started: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.completed = 0
        self.unwritten: list[int] = []
        self._thread = threading.Thread(
            target=self._main, name=f"pgsched-lane-{lane.value.lower()}", daemon=True
        )

    # -- from any thread ---------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop claiming; finish or release what runs; write every outcome; end."""
        self._stopping.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stop.set)

    def lease_lost(self, task_id: int) -> None:
        self._call(self._on_lease_lost, task_id)

    def cancel_requested(self, task_id: int) -> None:
        self._call(self._on_cancel_requested, task_id)

    def in_flight(self) -> int:
        return 0 if self._lane_loop is None else self._lane_loop.in_flight

    def _call(self, fn: Callable[[int], None], task_id: int) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn, task_id)

    # -- the lane's own thread ---------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            if not self.started.done():
                self.started.set_exception(exc)
            self.finished.set_exception(exc)
            return
        if not self.started.done():
            self.started.set_result(False)
        self.finished.set_result(None)

    def _reconnect_now(self) -> None:
        """The database answers again (the listener, the lane's probe, got in): the pools
        reconnect now rather than when their own retry delay ends (a failover's promoted
        standby is found by the multi-host DSN on the first attempt)."""
        for pool in self._pools:
            pool.reconnect_now()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        loop = self._loop = asyncio.get_running_loop()
        if self._stopping.is_set():
            self._stop.set()  # asked before this loop existed
        lane = self.lane
        config = self.config
        # A Redis that may evict is refused here, before anything else starts (ConfigError).
        hot_tier = await asyncio.to_thread(open_hot_tier, config.hot_tier)
        self._pools: list[PromptAsyncPool | PromptPool] = []
        listen_target = config.listen_target(self.dsn)
        # Claims start at a floor only where NOTIFYs say what was queued behind it (not
        # without LISTEN) and the claim is task_claim_many's (not the Redis hot tier's,
        # nor distributed mode's tenant by tenant).
        floor = (
            ClaimFloor()
            if listen_target is not None and hot_tier is None and not self.distributed
            else None
        )
        wakeups = Wakeups(
            listen_target,
            (lane,),
            on_cancel=self._on_cancel_requested,
            on_queued=None if floor is None else (lambda _lane, due: floor.queued(due)),
            reachability=Reachability(
                f"worker {self.worker_id} lane {lane.value}", log, on_back=self._reconnect_now
            ),
        )
        # The lane's loops are services (pgsched/worker/services.py): listen starts first,
        # so that no notification sent once the pool runs is missed.
        services = LoopServices(on_died=self._stop_worker)
        tag = self.name
        listen = LoopService(f"{tag}.listen", wakeups.run)
        services.start(listen)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wakeups.connected.wait(), 2.0)
        transactional = [r for r in self.registry.registrations() if r.transactional]
        held = min(self.settings.concurrency, MAX_TRANSACTION_CONNECTIONS)
        pool = async_pool(
            self.dsn,
            # Claims, next-due queries, outcome flushes and ledger writes are short: a few
            # connections serve them. Only transactional handlers hold one for their run.
            min_size=2,
            max_size=4 + (held if transactional else 0),
            # Every hot-path call is one statement: autocommit spares a BEGIN and a COMMIT.
            kwargs={"autocommit": True, **config.connect_kwargs},
            name=f"pgsched-{lane.value.lower()}",
        )
        plain_pool = self._plain_pool if self._open_plain_pool else None
        self._pools = [pool]
        if isinstance(self._plain_pool, PromptPool):  # shared by the lanes: any may tell it
            self._pools.append(self._plain_pool)
        if not await open_async_pool(pool, self._stop, plain_pool=plain_pool):
            await services.stop(listen)
            await pool.close()
            if hot_tier is not None:
                await hot_tier.close()
            return
        if hot_tier is not None:
            async with pool.connection() as conn:
                await hot_tier.source.open(conn)
        distributed = self.distributed
        claim_from: Callable[..., Awaitable[tuple[list[TaskRow], list[UndecodableRow]]]]
        if distributed:
            claim_from = TenantRotation().claim  # pgsched/worker/tenant_rotation.py
        elif hot_tier is not None:
            claim_from = hot_tier.source.claim
        else:
            claim_from = claim_many
        feed = None if hot_tier is None else hot_tier.outcome_feed(pool)

        def flushed(batch: list[Outcome], applied: set[int]) -> None:
            self._after_flush(batch, applied)
            if feed is not None:
                # After the outcomes' commit: retried and released tasks go back to Redis
                # (best effort, in the background; awaited at shutdown before the pool closes).
                pushing = feed.after_outcomes(((o.task_id, o.outcome) for o in batch), applied)
                if pushing is not None:
                    self._background.add(pushing)
                    pushing.add_done_callback(self._background.discard)

        buffer = OutcomeBuffer(pool, config.flush_size, config.flush_interval, on_flushed=flushed)
        if distributed:
            buffer.tenants = {}  # written tenant by tenant (pgsched/worker/outcomes.py)
        ledger = LedgerWriter(pool)
        runner = TaskRunner(
            self.worker_id,
            self.registry.get,
            record=buffer.add,
            written=lambda task_id: self._after_flush(
                [Outcome(task_id, None, "COMPLETED")], {task_id}
            ),
            connections=ConnectionSource(pool, self._plain_pool),
            record_done=ledger.record_done,
            dsn=self.dsn,
            executor=self.thread_pool,
            released_for_slots=self._hold_claims,
            processes=self.processes,
        )

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
                if floor is None:
                    tasks, undecodable = await claim_from(
                        conn, lane.value, n, self.worker_id, self._lease
                    )
                else:
                    bound = floor.bound()
                    tasks, undecodable = await claim_many(
                        conn, lane.value, n, self.worker_id, self._lease, bound
                    )
                    due = [t.scheduled_for for t in tasks]
                    # A row it could not decode: its due time unknown, the claim counted full.
                    floor.claimed(bound, len(due) if undecodable else n, due)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "lane %s: claimed %d, reading from %s",
                    lane,
                    len(tasks),
                    "the start" if floor is None or floor.last_bound is None else floor.last_bound,
                    extra={"lane": lane.value, "count": len(tasks)},
                )
            if buffer.tenants is not None:
                buffer.tenants.update((task.id, task.tenant_id) for task in tasks)
                self._keeper.tenants_of(tasks)
            self._keeper.hold_many((task.id, task.lease_token) for task in tasks)
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
                # From the floor of the claim that got nothing, as that claim read.
                return await lane_next_due(
                    conn,
                    lane.value,
                    None if floor is None else floor.last_bound,
                    distributed=distributed,
                )

        async def probe_floor() -> None:
            # Queued rows no NOTIFY announced, behind the floor (pgsched/worker/claim_floor.py).
            assert floor is not None
            async with pool.connection() as conn:
                due, _ = await lane_next_due(conn, lane.value, None)
            if due is not None and floor.hides(due):
                log.debug(
                    "lane %s: a queued row due %s was behind the claim floor; claiming from it",
                    lane,
                    due,
                    extra={"lane": lane.value},
                )
                floor.queued(due)
                wakeups.events[lane].set()

        def start(task: TaskRow, done: Any) -> None:
            if task.schedule_id is not None:
                self._recurring.add(task.id)
            cancel = self._cancels.track(task.id)
            # The loop's own create_task: asyncio.create_task looks the loop up and names
            # the task again, for every task.
            handle = loop.create_task(runner.run(task, cancel))
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

        lane_loop = self._lane_loop = LaneLoop(
            lane,
            self.settings,
            config.batch_size,
            config.poll_interval,
            wakeups.events[lane],
            claim,
            next_due,
            start,
            room=buffer.room,
            stuck_threads=self.thread_pool.stuck_count,
            debounce=config.wakeup_debounce,
            claim_interval=config.claim_interval,
        )
        watchdog = self.watchdog = LoopStallWatchdog(
            loop, config.stall_threshold, self._blocking_task, name=f"lane {lane.value}"
        )
        background = [
            LoopService(f"{tag}.outcomes", buffer.run),
            LoopService(f"{tag}.ledger", ledger.run),
            Periodic(f"{tag}.lease_rescue", config.rescue_interval, lambda: self._rescue(pool)),
            Periodic(f"{tag}.stall_stamp", watchdog.tick, watchdog.stamp),
        ]
        if floor is not None:
            probe_every = config.floor_probe_interval
            background.append(Periodic(f"{tag}.claim_floor_probe", probe_every, probe_floor))
        if hot_tier is not None:
            redis_wakeups = functools.partial(hot_tier.wakeups, wakeups.events)
            background.append(LoopService(f"{tag}.redis_wakeups", redis_wakeups))
        claims = LoopService(f"{tag}.claims", lane_loop.run)
        services.start(*background)
        watchdog.start()
        services.start(claims)
        self.started.set_result(True)
        try:
            await self._stop.wait()
        finally:
            # Stop claiming; release what the claims in flight got; finish or release what
            # runs; write every outcome; then stop the other loops, the watchdog last.
            await services.stop(claims)
            await self._release_claims_cut_short(buffer)
            await self._drain(buffer)
            # The database may be unreachable: writing the outcomes gets the grace period,
            # then the lane ends anyway rather than never.
            give_up_at = loop.time() + self.final_flush_seconds
            await buffer.flush(give_up_at)
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            await services.stop(listen, *background)
            await buffer.flush(give_up_at)
            self.unwritten = buffer.unwritten_task_ids()
            watchdog.stop()
            # Threads of abandoned plain handlers are not waited for: their tasks were
            # released above, and their late reports will be refused as stale.
            self.thread_pool.shutdown(wait=False, cancel_futures=True)
            await self.processes.close()
            await pool.close()
            if hot_tier is not None:
                await hot_tier.close()
            self.completed = buffer.flushed
            log.info(
                "lane %s: %d claim queries, %d tasks claimed, %d wake-ups by notification",
                lane_loop.lane,
                lane_loop.claims,
                lane_loop.claimed,
                lane_loop.notified,
            )

    @property
    def final_flush_seconds(self) -> float:
        return max(self.config.grace_seconds, FINAL_FLUSH_MIN_SECONDS)

    async def _release_claims_cut_short(self, buffer: OutcomeBuffer) -> None:
        """Release (back to QUEUED, the attempt given back) what the claims in flight at
        shutdown claimed: their tasks never started. A claim still running after the wait
        is given up: whatever it claims stays PROCESSING until its lease expires."""
        claims = self._claims_cut_short
        if not claims:
            return
        wait = max(self.config.grace_seconds, CLAIM_END_WAIT_SECONDS)
        await asyncio.wait(claims, timeout=wait)
        for claiming in claims:
            if not claiming.done():
                claiming.cancel()
                log.warning(
                    "a claim in flight at shutdown did not end within %.0fs; what it claimed "
                    "stays PROCESSING until its lease expires",
                    wait,
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

    def _duration_ms(self, task_id: int) -> float | None:
        started = self._started_at.get(task_id)
        return None if started is None else round((time.monotonic() - started) * 1000, 1)

    def _hold_claims(self) -> None:
        """A task was given back for want of a connection slot: let the other workers,
        woken by its release, take it before this one claims again."""
        if self._lane_loop is not None:
            self._lane_loop.hold_claims(NEVER_CONNECTED_WAIT_SECONDS)

    def _thread_returned(self, pool: LaneThreadPool, task: TaskRow | None) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_thread_returned, pool, task)

    def _on_thread_returned(self, pool: LaneThreadPool, task: TaskRow | None) -> None:
        log.info(
            "%s: its timed-out handler returned at last; stuck threads: %d in lane %s",
            describe_task(task),
            pool.stuck,
            pool.lane,
        )
        if self._lane_loop is not None:
            self._lane_loop.capacity_changed()

    def _on_lease_lost(self, task_id: int) -> None:
        """The heartbeat found the task's lease gone (rescued, or taken by another
        worker). Its result could no longer be recorded: cancel the handler."""
        running = self._running.get(task_id)
        if running is None:
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

    def owns(self, task_id: int) -> bool:
        return task_id in self._running

    def _on_cancel_requested(self, task_id: int) -> None:
        """The task was asked to stop (a notification, or the heartbeat's check); if it
        runs in this lane, stop it (pgsched/worker/cancels.py)."""
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

    def _after_flush(self, batch: list[Outcome], applied: set[int]) -> None:
        """Outcomes are written: drop their leases; advance the recurring ones that finished
        (a stale report, refused by the database, advances nothing)."""
        if self.metrics is not None:
            self.metrics.written(((o.task_id, o.outcome) for o in batch), applied)
        self._keeper.drop_many(outcome.task_id for outcome in batch)
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
            arming = asyncio.get_running_loop().run_in_executor(None, self._arm_next, advance)
            self._background.add(arming)
            arming.add_done_callback(self._background.discard)

    async def _rescue(self, pool: Any) -> None:
        """Expired leases of this lane go back to be claimed (or to DEAD), read from the
        lane's rescue floor (pgsched/worker/rescue_floor.py)."""
        lane = self.lane
        floor = self._rescue_floor
        bound = floor.bound()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(
                    query("lease_rescue_expired"),
                    {"lane": lane.value, "max_tasks": RESCUE_CHUNK, "not_before": bound},
                )
                row = await cur.fetchone()
        except BaseException:
            floor.drop()
            raise
        if row is None:
            floor.drop()
            return
        rescued, swept_at = int(row[0]), row[1]
        floor.swept(bound, rescued, RESCUE_CHUNK, swept_at)
        if rescued:
            log.warning("lane %s: rescued %s tasks whose worker was lost", lane, rescued)
