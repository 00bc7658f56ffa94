"""The outcome buffer: completions and failures written in batches, one statement a flush.

A flush happens when `flush_size` outcomes wait or `flush_interval` has passed since the
first one arrived, and what finishes while a flush is written waits for the next one. The
interval stretches with the database's load (`pace`): to twice the last flush's round
trip, at most four times `flush_interval`; while it is stretched, half of `flush_size`
waiting is enough to flush. A completion statement costs Postgres about 0.7 ms of CPU
whatever its rows (the function's settings, its statements' executor start, the transition
triggers' setup, a commit and its WAL flush), against some 17 µs a row. Flushes written
back to back on a busy database each carried what finished during the last one, and their
fixed cost took the CPU the due tasks were waiting for; paced, each carries more. On a
quiet database a flush takes well under the interval and nothing changes. Only the writing
waits, never a task's start (benchmarks/RESULTS.md, "Flushes paced by their round trip").

The lanes stop claiming while `flush_size` outcomes wait (`room`): a worker never holds
leases on far more tasks than it has running, and a slow flush slows the claims instead of
growing the next flush. Flushing at half of it while paced keeps a flush under way long
before the lanes must stop.

If the database is unreachable, or refuses every write for now (a read-only database or a
hot standby: SQLSTATE 25006), the outcomes stay buffered and are retried; should the
leases expire meanwhile, the tasks run again (at least once) and the late reports are
recorded as stale, never applied. A flush given a time to give up by (the worker's final
flush at shutdown) stops retrying then, and leaves what it could not write buffered.

If the database refuses a flush for what it holds (not for a lost connection), the batch is
written again one outcome at a time, so one bad row never blocks the others: the row it
still refuses is recorded as FAILED with a safe reason (its SQLSTATE), and logged. Should
not even that be stored, the task's lease is let go (no longer renewed): it expires and
the rescue queues the task again, rather than the task staying PROCESSING for good.
Error text is made storable before it is sent: Postgres text holds no NUL and only valid
UTF-8.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NamedTuple

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgsched.queries import query
from pgsched.worker.swallowed_cancels import raise_if_cancel_swallowed

log = logging.getLogger("pgsched.worker.outcomes")

# The first outcome after a flush waits at least PACE_FACTOR times that flush's round trip,
# at most PACE_MAX_FACTOR times `flush_interval` (the bound on how long it waits).
PACE_FACTOR = 2.0
PACE_MAX_FACTOR = 4.0


def pace(interval: float, round_trip: float) -> float:
    """How long outcomes wait for others: `interval`, stretched to PACE_FACTOR times the
    last flush's `round_trip`, at most PACE_MAX_FACTOR times `interval`."""
    return max(interval, min(interval * PACE_MAX_FACTOR, round_trip * PACE_FACTOR))


class Outcome(NamedTuple):
    """One task's outcome, as written. A tuple: made for every task, and a batch of them
    turns into the statement's columns in one zip."""

    task_id: int
    lease_token: Any
    outcome: str  # COMPLETED | RETRY | FAILED | RELEASED | CANCELLED | SNOOZED
    error: str | None = None
    retry_delay: timedelta | None = None
    # A completed handler's return value as JSON text (None: it returned nothing).
    result: str | None = None


def storable_text(text: str) -> str:
    """`text` as Postgres can store it: NUL written as the text \\x00, and
    what is not valid UTF-8 (lone surrogates from undecodable bytes) replaced."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode(errors="replace").decode()
    return text


def finish_params(outcomes: list[Outcome], tenant: str | None = None) -> dict[str, Any]:
    """task_finish_many's parameters for a batch; `tenant`: the batch's one tenant (on a
    distributed database the statement then runs on that tenant's shard alone)."""
    columns = zip(*outcomes, strict=True) if outcomes else ((),) * len(Outcome._fields)
    task_ids, lease_tokens, kinds, errors, retry_delays, results = (list(c) for c in columns)
    if any(e is not None for e in errors):
        errors = [None if e is None else storable_text(e) for e in errors]
    return {
        "task_ids": task_ids,
        "lease_tokens": lease_tokens,
        "outcomes": kinds,
        "errors": errors,
        "retry_delays": retry_delays,
        # Most handlers return nothing: no results column to send then.
        "results": results if any(r is not None for r in results) else None,
        "tenant": tenant,
    }


class _Unwritten(Exception):
    """Outcomes a by-tenant flush could not write, and the connection trouble why."""

    def __init__(self, outcomes: list[Outcome], cause: Exception) -> None:
        super().__init__(str(cause))
        self.outcomes = outcomes
        self.cause = cause


def is_connection_trouble(exc: BaseException) -> bool:
    """True when a statement failed for the connection or the database's state (retry it
    later), False when the database refused what the statement carried (retrying it as is
    cannot help). A read-only database refuses every write alike, whatever it carries:
    that passes once it is writable again."""
    return isinstance(
        exc,
        psycopg.OperationalError | psycopg.InterfaceError | psycopg.errors.ReadOnlySqlTransaction,
    )


def refused_outcome(outcome: Outcome, exc: BaseException) -> Outcome:
    """What is recorded instead of an outcome the database refused."""
    code = getattr(getattr(exc, "diag", None), "sqlstate", None) or type(exc).__name__
    return Outcome(
        outcome.task_id, outcome.lease_token, "FAILED", f"outcome could not be stored: {code}"
    )


class OutcomeBuffer:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        flush_size: int,
        flush_interval: float,
        on_flushed: Callable[[list[Outcome], set[int]], None],
    ) -> None:
        self._pool = pool
        self._flush_size = flush_size
        self._flush_interval = flush_interval
        # flush_interval stretched by the last flush's round trip (pace).
        self._interval = flush_interval
        self._on_flushed = on_flushed
        self._items: list[Outcome] = []
        # Distributed mode (docs/scaling.md): each task's tenant, set as it is claimed, so
        # that a flush writes each tenant's outcomes on its shard alone and a worker node
        # that is down holds back only the outcomes of its own tenants. None: one statement
        # a batch.
        self.tenants: dict[int, str] | None = None
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._roomy = asyncio.Event()
        self._roomy.set()
        self.flushed = 0
        self.stale = 0

    def add(self, outcome: Outcome) -> None:
        self._items.append(outcome)
        self._arrived.set()
        if self._flush_now():
            self._full.set()
        if len(self._items) >= self._flush_size:
            self._roomy.clear()

    def _flush_now(self) -> bool:
        """Enough waits to write without waiting out the interval: `flush_size`, or half of
        it while the interval is stretched (a busy database), so that a flush is under way
        long before the lanes must stop claiming for want of room."""
        waiting = len(self._items)
        if self._interval > self._flush_interval:
            return waiting >= max(1, self._flush_size // 2)
        return waiting >= self._flush_size

    def __len__(self) -> int:
        return len(self._items)

    async def room(self) -> None:
        """Return once fewer than `flush_size` outcomes wait to be written."""
        while len(self._items) >= self._flush_size:
            self._roomy.clear()
            await self._roomy.wait()

    async def run(self) -> None:
        while True:
            if not self._items:
                self._arrived.clear()
                await self._arrived.wait()
            # A flush of one batch can leave a full one behind (the lanes wait for it).
            if not self._flush_now():
                # Not asyncio.wait_for, which on Python 3.11 can swallow the shutdown's
                # cancel (see LaneLoop._sleep_until_work).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._full.wait()
            # One batch: what finishes while it is written waits out the next interval.
            await self.flush(one_batch=True)
            # A cancel landing as the pool handed the flush its connection is swallowed.
            raise_if_cancel_swallowed()

    async def flush(self, give_up_at: float | None = None, *, one_batch: bool = False) -> None:
        """Write every buffered outcome, retrying while the database is unreachable; with
        `give_up_at` (event loop time), only until then: what is still unwritten stays
        buffered (`unwritten_task_ids`). With `one_batch`, return once a batch is written
        (at most `flush_size`): what arrived meanwhile is left for the next flush."""
        backoff = 0.05
        while self._items:
            # At most flush_size per statement: a backlog is written in bounded steps.
            batch = self._items[: self._flush_size]
            del self._items[: self._flush_size]
            self._arrived.clear()
            self._full.clear()
            # The bound holds for a write waiting on the pool (which waits for a connection
            # far longer) as much as for the retries.
            deadline = asyncio.timeout_at(give_up_at)
            sent = asyncio.get_running_loop().time()
            try:
                async with deadline:
                    if self.tenants is not None:
                        # Written tenant by tenant; what is left raises the first trouble.
                        batch = await self._write_by_tenant(batch)
                        if one_batch:
                            return
                        continue
                    rows = await self._write(batch)
                    # The wait for a connection counts: a busy pool is a busy database.
                    self._interval = pace(
                        self._flush_interval, asyncio.get_running_loop().time() - sent
                    )
            except asyncio.CancelledError:
                # Stopping mid-flush: the batch goes back for the final flush (refused as
                # stale if this write did land), never lost with the cancelled task.
                self._items[:0] = batch
                raise
            except Exception as exc:
                if isinstance(exc, _Unwritten):
                    # Some tenants written (_write_by_tenant); these are retried.
                    batch, exc = exc.outcomes, exc.cause
                if deadline.expired():
                    self._items[:0] = batch
                    return
                if not is_connection_trouble(exc):
                    # Refused for what it carries: write the rows one at a time.
                    unwritten = await self._write_one_by_one(batch, exc)
                    if not unwritten:
                        continue
                    batch = unwritten
                log.warning(
                    "writing %d outcomes failed (%s); retrying (tasks %s)",
                    len(batch),
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    ",".join(str(o.task_id) for o in batch[:20]),
                )
                self._items[:0] = batch
                if give_up_at is not None:
                    left = give_up_at - asyncio.get_running_loop().time()
                    if left <= 0:
                        return
                    backoff = min(backoff, left)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            self._written(batch, rows)
            if one_batch:
                return

    def unwritten_task_ids(self) -> list[int]:
        return [outcome.task_id for outcome in self._items]

    async def _write(
        self, batch: list[Outcome], tenant: str | None = None
    ) -> list[tuple[int, bool]]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("task_finish_many"), finish_params(batch, tenant))
            return await cur.fetchall()

    async def _write_by_tenant(self, batch: list[Outcome]) -> list[Outcome]:
        """Distributed mode: one statement per tenant of the batch. The outcomes of the
        tenants whose write failed for the connection (their worker node down, say) are
        raised (`_Unwritten`) for flush's retry; the others are written. Cancelled midway,
        flush puts the whole batch back: what was written is refused as stale next time."""
        assert self.tenants is not None
        groups: dict[str | None, list[Outcome]] = {}
        for outcome in batch:
            groups.setdefault(self.tenants.get(outcome.task_id), []).append(outcome)
        failed: list[Outcome] = []
        trouble: Exception | None = None
        for tenant, group in groups.items():
            try:
                rows = await self._write(group, tenant)
            except Exception as exc:
                if not is_connection_trouble(exc):
                    unwritten = await self._write_one_by_one(group, exc)
                    if unwritten:
                        failed += unwritten
                        trouble = trouble or psycopg.OperationalError(
                            "the connection failed while writing outcomes one by one"
                        )
                    continue
                failed += group
                trouble = trouble or exc
                continue
            self._written(group, rows)
        if failed:
            assert trouble is not None
            raise _Unwritten(failed, trouble)
        return []

    def _written(self, batch: list[Outcome], rows: list[tuple[int, bool]]) -> None:
        if self.tenants is not None:
            for outcome in batch:
                self.tenants.pop(outcome.task_id, None)
        if len(self._items) < self._flush_size:
            self._roomy.set()
        self.flushed += len(batch)
        applied = {task_id for task_id, ok in rows if ok}
        self.stale += len(batch) - len(applied)
        self._on_flushed(batch, applied)

    async def _write_one_by_one(self, batch: list[Outcome], cause: BaseException) -> list[Outcome]:
        """Write a refused batch row by row; returns the rows left unwritten when the
        connection failed meanwhile (to be retried with the rest)."""
        log.warning(
            "the database refused %d outcomes (%s); writing them one by one", len(batch), cause
        )
        for n, outcome in enumerate(batch):
            try:
                self._written([outcome], await self._write([outcome]))
                continue
            except asyncio.CancelledError:
                self._items[:0] = batch[n:]
                raise
            except Exception as exc:
                if is_connection_trouble(exc):
                    return batch[n:]
                refusal = exc
            safe = refused_outcome(outcome, refusal)
            log.error(
                "task %s: outcome refused by the database (%s: %s); recording %s instead",
                outcome.task_id,
                outcome.outcome,
                str(refusal).strip(),
                safe.error,
            )
            try:
                self._written([safe], await self._write([safe]))
            except asyncio.CancelledError:
                self._items[:0] = [safe, *batch[n + 1 :]]
                raise
            except Exception as exc:
                if is_connection_trouble(exc):
                    return [safe, *batch[n + 1 :]]
                # Not even the safe reason: let the lease go (told as a stale report, so it
                # is no longer renewed); it expires and the rescue takes the task.
                log.error(
                    "task %s: no outcome could be stored (%s); its lease is left to expire",
                    outcome.task_id,
                    exc,
                )
                self._on_flushed([outcome], set())
        return []
