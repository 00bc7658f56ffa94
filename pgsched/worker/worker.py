"""The worker process: one lane engine per lane, the heartbeat thread, the sweeps (with
`--sweeps`), signals and shutdown.

Each lane runs on an event loop and thread of its own (lane_engine.py): a handler that
blocks its lane's loop cannot delay another lane's claims, heartbeats or outcome writes.
Plain handlers with a timeout run in handler processes that are killed when they overrun
(handler_processes.py).

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
import functools
import logging
import os
import signal
import socket
import threading
import uuid

import psycopg
from psycopg_pool import ConnectionPool

from pgsched.handlers import HandlerRegistry
from pgsched.hot_tier.worker_side import open_mirror
from pgsched.lanes import Lane
from pgsched.observability.metrics import SweeperMetrics, WorkerMetrics
from pgsched.recurring import arm_after_task
from pgsched.startup import (
    HOT_TIER_NOT_DISTRIBUTED,
    wait_for_current_schema,
)
from pgsched.sweeps import Sweeper, default_sweeps
from pgsched.tasks import TaskRow, describe_task
from pgsched.worker.config import WorkerConfig
from pgsched.worker.connections import sync_pool
from pgsched.worker.gc_tuning import tune_gc_for_throughput
from pgsched.worker.handler_processes import (
    check_importable,
    preload,
    refuse_starting_in_a_child,
    start_fork_server,
)
from pgsched.worker.lane_engine import (
    FINAL_FLUSH_MIN_SECONDS,
    MAX_TRANSACTION_CONNECTIONS,
    LaneEngine,
)
from pgsched.worker.leases import LeaseKeeper
from pgsched.worker.services import Service
from pgsched.worker.thread_switching import shorten_thread_switch_interval
from pgsched.worker.threads import LaneThreadPool

log = logging.getLogger("pgsched.worker")

# The exit status of a worker that stopped itself because too many handler threads are
# stuck: not 0 (a supervisor must restart it), not 1 (a crash), not 2 (a usage error).
EXIT_STUCK_THREADS = 3

# The exit status of a worker that stopped without writing every outcome (the database
# unreachable through its final flush): a fault to see, though nothing is lost.
EXIT_OUTCOMES_UNWRITTEN = 4


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
        self._stop_requested: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signals = 0
        self._distributed = False
        self._engines: dict[Lane, LaneEngine] = {}
        self._stuck_lock = threading.Lock()
        self.completed = 0
        self.abandoned_threads = 0
        self.exit_status = 0

    # -- wiring -------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does). From any thread."""
        loop, stop = self._loop, self._stop_requested
        if loop is None or stop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(stop.set)

    def liveness_problem(self) -> str | None:
        """/healthz: None while every lane's event loop runs, else which is blocked."""
        for engine in self._engines.values():
            watchdog = engine.watchdog
            if watchdog is None:
                continue
            blocked = watchdog.blocked_for()
            if blocked > self.config.stall_threshold:
                return (
                    f"event loop blocked for {blocked:.1f}s in lane {engine.lane.value} "
                    f"(--stall-threshold {self.config.stall_threshold:g}s)"
                )
        return None

    def readiness_problem(self) -> str | None:
        """/readyz, besides the database: a draining worker takes no new work."""
        if self._stop_requested is not None and self._stop_requested.is_set():
            return "shutting down"
        return None

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once; leases will expire")
            os._exit(1)
        log.info("signal received: no new claims; finishing running tasks")
        self.request_stop()

    async def run(self, install_signal_handlers: bool = True) -> None:
        """The worker's services (pgsched/worker/services.py), started in this order and
        stopped in the order of the `finally` block."""
        if not await self._prepare(install_signal_handlers):
            return
        heartbeat = await self._heartbeat()
        plain_pool = self._plain_pool()
        lanes = self._lanes(heartbeat, plain_pool)
        sweeps: list[Service] = []
        try:
            for lane in lanes:
                lane.start()
            if await self._all_started(lanes):
                sweeps = self._sweeps()
                for service in sweeps:
                    service.start()
                self._log_running()
                await self._stop_requested_event().wait()
        finally:
            claiming: list[Service] = [*lanes, *sweeps]
            for service in claiming:
                service.stop()  # no new claims, no new sweeps
            # Each lane drains and writes its outcomes on its own loop, all at once, while
            # the heartbeat keeps the leases of what still runs.
            await self._ended(lanes)
            heartbeat.stop()
            if plain_pool is not None:
                plain_pool.close()
            self._account(lanes)

    # -- the steps of run ---------------------------------------------------------------

    def _stop_requested_event(self) -> asyncio.Event:
        assert self._stop_requested is not None
        return self._stop_requested

    async def _prepare(self, install_signal_handlers: bool) -> bool:
        """Signals, the handlers' checks, the database and its schema, the fork server.
        False: asked to stop while waiting for the database."""
        loop = self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        tune_gc_for_throughput()
        shorten_thread_switch_interval()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
        # Handlers that run in handler processes must be importable by name (ConfigError).
        in_process = [r for r in self.registry.registrations() if r.in_process]
        if in_process:
            refuse_starting_in_a_child()
        for registration in in_process:
            check_importable(registration)
        # Wait for the database, refuse a schema this pgsched does not match (raises).
        stopped = self._stop_requested.is_set
        refusal = HOT_TIER_NOT_DISTRIBUTED if self.config.hot_tier is not None else None
        reached = await asyncio.to_thread(
            functools.partial(wait_for_current_schema, distributed_refusal=refusal),
            self.dsn,
            "worker",
            stopped,
        )
        if reached is None:
            return False
        # Distributed mode: the lanes claim tenant by tenant (tenant_rotation.py).
        self._distributed = reached.distributed
        if self._distributed:
            log.info("distributed database: claims go tenant by tenant")
        if in_process:
            # The fork server imports the handlers' modules once; every handler process is
            # forked from it (handler_processes.py).
            preload(in_process)
            await asyncio.to_thread(start_fork_server)
        return True

    async def _heartbeat(self) -> LeaseKeeper:
        """The heartbeat's own connection first, then the lanes': with few server slots the
        pools run short, never the lease renewals."""
        keeper = LeaseKeeper(
            self.dsn,
            self.config.lease_seconds,
            on_lost=self._on_lease_lost,
            on_cancel=self._on_cancel_requested,
            **self.config.connect_kwargs,
        )
        await asyncio.to_thread(keeper.connect)
        keeper.start()
        return keeper

    def _plain_pool(self) -> ConnectionPool | None:
        """Made once, here: plain transactional handlers of every lane share it from many
        threads. The first lane opens it after its own first connection."""
        if not any(not r.is_async and r.transactional for r in self.registry.registrations()):
            return None
        return sync_pool(
            self.dsn,
            min(self.config.concurrency, MAX_TRANSACTION_CONNECTIONS),
            kwargs=self.config.connect_kwargs,
        )

    def _lanes(self, keeper: LeaseKeeper, plain_pool: ConnectionPool | None) -> list[LaneEngine]:
        self._engines = {
            lane: LaneEngine(
                lane,
                self.dsn,
                self.worker_id,
                self.registry,
                self.config,
                keeper,
                self.metrics,
                plain_pool=plain_pool,
                open_plain_pool=i == 0,
                on_thread_stuck=self._on_thread_stuck,
                arm_next=self._arm_next,
                stop_worker=self.request_stop,
                distributed=self._distributed,
            )
            for i, lane in enumerate(self.config.lanes)
        }
        return list(self._engines.values())

    async def _all_started(self, engines: list[LaneEngine]) -> bool:
        """True once every lane runs; False if a stop was asked first. A lane that could
        not start (a Redis that may evict, say) raises its error: the worker cannot run."""
        stop_wait = asyncio.ensure_future(self._stop_requested_event().wait())
        starting = [asyncio.wrap_future(engine.started) for engine in engines]
        all_started = asyncio.ensure_future(asyncio.gather(*starting))
        try:
            await asyncio.wait({stop_wait, all_started}, return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
        finally:
            stop_wait.cancel()
        if all_started.done() and all_started.exception() is not None:
            raise all_started.exception()  # type: ignore[misc]
        if self._stop_requested_event().is_set():
            return False
        if self.metrics is not None:
            for engine in engines:
                self.metrics.watch_in_flight(engine.lane.value, engine.in_flight)
        return True

    def _sweeps(self) -> list[Service]:
        """With --sweeps: the sweeper, in a thread of its own (one leader among all)."""
        if not self.config.run_sweeps:
            return []
        sweeps = default_sweeps()
        if self.sweeper_metrics is not None:
            self.sweeper_metrics.watch(sweeps)
            sweeps.append(self.sweeper_metrics.sweep)
        if self.config.hot_tier is not None:
            sweeps.append(open_mirror(self.config.hot_tier))
        sweeper = Sweeper(
            self.dsn,
            sweeps,
            listen_dsn=self.config.listen_dsn,
            prepare_threshold=self.config.prepare_threshold,
        )
        if self.sweeper_metrics is not None:
            self.sweeper_metrics.follow(lambda: sweeper.is_leader)
        return [sweeper]

    def _log_running(self) -> None:
        log.info(
            "worker %s running lanes %s",
            self.worker_id,
            ",".join(self.config.lanes),
            extra={"worker_id": self.worker_id},
        )

    async def _ended(self, engines: list[LaneEngine]) -> None:
        ended = await asyncio.gather(
            *(asyncio.wrap_future(engine.finished) for engine in engines),
            return_exceptions=True,
        )
        for engine, result in zip(engines, ended, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("lane %s ended with an error: %r", engine.lane, result)

    def _account(self, engines: list[LaneEngine]) -> None:
        """What the lanes did, and what they could not: the exit status, the last line."""
        self._give_up_unwritten([i for engine in engines for i in engine.unwritten])
        self.abandoned_threads = sum(e.thread_pool.alive_threads() for e in engines)
        self.completed = sum(engine.completed for engine in engines)
        ran = any(
            e.started.done() and e.started.exception() is None and e.started.result()
            for e in engines
        )
        if ran:
            log.info("worker %s stopped", self.worker_id)
        else:
            log.info("worker %s stopped before it could start", self.worker_id)

    @property
    def _final_flush_seconds(self) -> float:
        return max(self.config.grace_seconds, FINAL_FLUSH_MIN_SECONDS)

    def _give_up_unwritten(self, unwritten: list[int]) -> None:
        """Exit non-zero, naming the tasks whose outcomes the final flush could not write.
        Nothing is lost: they stay PROCESSING, and once their leases expire the lease
        rescue queues them again (or fails them, out of attempts)."""
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

    @property
    def stuck_threads(self) -> int:
        """Threads still running a plain handler whose attempt already timed out."""
        return sum(engine.thread_pool.stuck for engine in self._engines.values())

    def _on_thread_stuck(
        self, pool: LaneThreadPool, task: TaskRow | None, thread: str | None
    ) -> None:
        """On a lane's loop: a timed-out plain handler (isolation='thread') keeps its
        thread. Count it; past the limit, drain and exit non-zero so the supervisor starts
        a clean process."""
        if self._stop_requested is not None and self._stop_requested.is_set():
            return  # shutdown gave up on it: counted among the abandoned threads instead
        with self._stuck_lock:
            stuck = self.stuck_threads
            limit = self.config.max_stuck_threads
            log.warning(
                "%s: its attempt is over, but thread %s still runs its handler (Python cannot "
                "stop a thread; isolation='process' can stop it); "
                "stuck threads: %d in lane %s, %d in this worker (limit %d)",
                describe_task(task),
                thread,
                pool.stuck,
                pool.lane,
                stuck,
                limit,
            )
            if stuck <= limit or self.exit_status:
                return
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

    def _on_lease_lost(self, task_id: int) -> None:
        """From the heartbeat thread: the task's lease is gone; its lane stops it."""
        for engine in self._engines.values():
            if engine.owns(task_id):
                engine.lease_lost(task_id)
                return
        log.warning("task %s: lease lost; no longer renewed", task_id)

    def _on_cancel_requested(self, task_id: int) -> None:
        """From the heartbeat thread: the task was asked to stop; its lane stops it."""
        for engine in self._engines.values():
            if engine.owns(task_id):
                engine.cancel_requested(task_id)
                return

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
