"""The worker process: lane loops, wake-ups, heartbeats, the outcome buffer, shutdown.

Shutdown (SIGTERM or SIGINT): stop claiming at once; let running tasks finish within the
grace period; release the ones that did not (back to QUEUED, attempt given back, recorded);
write every outcome; exit 0. A second signal exits at once with status 1, and the leases
of whatever was running expire and are rescued as usual.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgsched.handlers import HandlerRegistry, TaskRow
from pgsched.lanes import Lane
from pgsched.queries import query
from pgsched.recurring import arm_after_task
from pgsched.sweeps import Sweeper
from pgsched.worker.claim_loop import LaneLoop
from pgsched.worker.config import WorkerConfig
from pgsched.worker.leases import LeaseKeeper
from pgsched.worker.ledger import LedgerWriter
from pgsched.worker.outcomes import Outcome, OutcomeBuffer
from pgsched.worker.runner import ConnectionSource, TaskRunner
from pgsched.worker.wakeup import Wakeups

log = logging.getLogger("pgsched.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(self, dsn: str, registry: HandlerRegistry, config: WorkerConfig) -> None:
        self.dsn = dsn
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

    # -- wiring -------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        if self._stop_requested is not None:
            self._stop_requested.set()

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once; leases will expire")
            os._exit(1)
        log.info("signal received: no new claims; finishing running tasks")
        self.request_stop()

    def _sync_pool_factory(self) -> ConnectionPool:
        if self._sync_pool is None:
            self._sync_pool = ConnectionPool(
                self.dsn, min_size=1, max_size=self.config.concurrency, open=True
            )
        return self._sync_pool

    async def run(self, install_signal_handlers: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        # Hundreds of tasks in flight allocate fast; the default collector thresholds then
        # rescan the same long-lived objects (app, modules, pools) over and over. Freeze
        # what startup made and collect the young generation less often: ~9 % less worker
        # CPU per no-op task (benchmarks/bench_throughput.py).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 100)
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
        lanes = self.config.lanes
        concurrency = sum(self.config.lane_settings(lane).concurrency for lane in lanes)
        # Claims, next-due queries, outcome flushes and ledger writes are short: a few
        # connections serve them. Only transactional handlers hold one for their whole run.
        transactional = any(r.transactional for r in self.registry.registrations())
        pool = AsyncConnectionPool(
            self.dsn,
            min_size=len(lanes) + 2,
            max_size=2 * len(lanes) + 4 + (concurrency if transactional else 0),
            # Every hot-path call is one statement: autocommit spares a BEGIN and a COMMIT.
            kwargs={"autocommit": True},
            open=False,
        )
        await pool.open(wait=True)
        keeper = LeaseKeeper(self.dsn, self.config.lease_seconds)
        keeper.start()
        buffer = OutcomeBuffer(
            pool,
            self.config.flush_size,
            self.config.flush_interval,
            on_flushed=lambda batch, applied: self._after_flush(keeper, batch, applied),
        )
        ledger = LedgerWriter(pool)
        # Plain-function handlers run here: as many threads as tasks may run at once.
        executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="pgsched-task")
        runner = TaskRunner(
            self.worker_id,
            self.registry.get,
            record=buffer.add,
            written=lambda task_id: self._after_flush(
                keeper, [Outcome(task_id, None, "COMPLETED")], {task_id}
            ),
            connections=ConnectionSource(pool, self._sync_pool_factory),
            record_done=ledger.record_done,
            dsn=self.dsn,
            executor=executor,
        )
        wakeups = Wakeups(self.dsn, lanes)

        async def claim(lane: Lane, n: int) -> list[TaskRow]:
            async with pool.connection() as conn:
                cur = await conn.execute(
                    query("task_claim_many"),
                    {
                        "lane": lane.value,
                        "max_tasks": n,
                        "worker": self.worker_id,
                        "lease": self._lease,
                    },
                )
                rows = await cur.fetchall()
            tasks = [TaskRow(*row) for row in rows]
            for task in tasks:
                keeper.hold(task.id, task.lease_token)
            return tasks

        async def next_due(lane: Lane) -> tuple[datetime | None, datetime]:
            async with pool.connection() as conn:
                cur = await conn.execute(query("lane_next_due"), {"lane": lane.value})
                row = await cur.fetchone()
            assert row is not None
            return row[0], row[1]

        def start(task: TaskRow, done: Any) -> None:
            if task.schedule_id is not None:
                self._recurring.add(task.id)
            handle = asyncio.create_task(runner.run(task))
            self._running[task.id] = (handle, task)

            def finished(_: asyncio.Task[None]) -> None:
                self._running.pop(task.id, None)
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
            )
            for lane in lanes
        ]
        background = [
            asyncio.create_task(wakeups.run(), name="pgsched-listen"),
            asyncio.create_task(buffer.run(), name="pgsched-outcomes"),
            asyncio.create_task(ledger.run(), name="pgsched-ledger"),
            asyncio.create_task(self._rescue_loop(pool), name="pgsched-rescue"),
        ]
        claimers = [asyncio.create_task(lp.run(), name=f"pgsched-{lp.lane}") for lp in loops]
        for task in (*background, *claimers):
            task.add_done_callback(self._on_loop_exit)
        scheduler = Sweeper(self.dsn) if self.config.run_sweeps else None
        if scheduler is not None:
            threading.Thread(target=scheduler.run, name="pgsched-sweeps", daemon=True).start()
        log.info("worker %s running lanes %s", self.worker_id, ",".join(lanes))
        try:
            await self._stop_requested.wait()
        finally:
            for task in claimers:
                task.cancel()
            await asyncio.gather(*claimers, return_exceptions=True)
            if scheduler is not None:
                scheduler.stop()
            await self._drain(buffer)
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await buffer.flush()
            keeper.stop()
            # Threads of abandoned plain handlers are not waited for: their tasks were
            # released above, and their late reports will be refused as stale.
            executor.shutdown(wait=False, cancel_futures=True)
            self.abandoned_threads = self._running_threads(executor)
            await pool.close()
            if self._sync_pool is not None:
                self._sync_pool.close()
            self.completed = buffer.flushed
            log.info("worker %s stopped", self.worker_id)

    async def _drain(self, buffer: OutcomeBuffer) -> None:
        """Let running tasks finish within the grace period; release the rest."""
        if self._running:
            handles = [handle for handle, _ in self._running.values()]
            await asyncio.wait(handles, timeout=self.config.grace_seconds)
        unfinished = list(self._running.values())
        for handle, _ in unfinished:
            handle.cancel()
        await asyncio.gather(*(h for h, _ in unfinished), return_exceptions=True)
        for _, task in unfinished:
            buffer.add(
                Outcome(
                    task.id,
                    task.lease_token,
                    "RELEASED",
                    f"released unfinished at shutdown of worker {self.worker_id}",
                )
            )
        await buffer.flush()

    def _on_loop_exit(self, task: asyncio.Task[None]) -> None:
        """A loop of the worker must never end on its own: if one dies, say why loudly
        and stop (a supervisor restarts the process; leases keep the tasks safe)."""
        if task.cancelled():
            return
        exc = task.exception()
        log.critical("worker loop %s died: %r; stopping", task.get_name(), exc, exc_info=exc)
        self.request_stop()

    @staticmethod
    def _running_threads(executor: ThreadPoolExecutor) -> int:
        return sum(1 for thread in getattr(executor, "_threads", ()) if thread.is_alive())

    def _after_flush(self, keeper: LeaseKeeper, batch: list[Outcome], applied: set[int]) -> None:
        """Outcomes are written: drop their leases; advance the recurring ones that finished
        (a stale report, refused by the database, advances nothing)."""
        advance: list[int] = []
        for outcome in batch:
            keeper.drop(outcome.task_id)
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
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for task_id in task_ids:
                    arm_after_task(conn, task_id)
        except psycopg.Error as exc:
            log.warning("arming the next occurrence failed (%s); the sweep will", exc)

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
