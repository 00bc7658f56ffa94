"""Handlers: the engine's only contact with business logic.

A handler is registered per task type, either as a `TaskHandler` subclass:

    class SendReport(TaskHandler):
        async def validate(self, ctx): ...        # raise: the task can never succeed -> DEAD
        async def before_execute(self, ctx): ...  # raise: a failed attempt (retried)
        async def execute(self, ctx): ...         # the work; raise: a failed attempt
        async def after_execute(self, ctx): ...   # only after execute succeeded

or as a plain function for `execute` alone with `@app.handler("task_type")`. Each method
may be `async def` or plain `def`; plain ones run in a thread pool so they cannot stall
the worker's event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

from pgsched.errors import InvalidTaskError, TaskCancelledError
from pgsched.retry import RetryDecision, RetryPolicy, RetrySchedule
from pgsched.tasks import TaskRow as TaskRow  # re-exported: handlers receive it

MAX_PROGRESS_NOTE_CHARS = 1000

# (task_id, fraction, note): where a context's progress reports go.
ProgressSink = Callable[[int, float, "str | None"], None]


def progress_checked(fraction: object, note: object) -> tuple[float, str | None]:
    """A progress report as it is stored, or ValueError/TypeError naming what is wrong."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress takes a fraction from 0 to 1, got {fraction!r}")
    value = float(fraction)
    # Written so that NaN fails the check too.
    if not 0 <= value <= 1:
        raise ValueError(f"progress {fraction!r} is out of range (a fraction from 0 to 1)")
    if note is not None:
        if not isinstance(note, str):
            raise TypeError(f"a progress note is text, got {type(note).__name__}")
        if len(note) > MAX_PROGRESS_NOTE_CHARS:
            raise ValueError(
                f"a progress note holds at most {MAX_PROGRESS_NOTE_CHARS} characters, "
                f"got {len(note)}"
            )
    return value, note


MAX_SNOOZE_SECONDS = 30 * 24 * 3600  # the longest snooze: 30 days, as a retry's wait
DEFAULT_MAX_SNOOZES = 100  # a handler's cap on snoozes per task (`max_snoozes=`)


class Snooze(Exception):
    """Raised by a handler (or by `ctx.snooze`): "not yet, try again in `delay`". The task
    goes back to be due after `delay` (seconds or a timedelta, 0 to 30 days) without
    spending an attempt; `reason` is kept on its record. Past its handler's `max_snoozes`
    a snooze counts as a failed attempt instead."""

    def __init__(self, delay: float | timedelta, reason: str | None = None) -> None:
        if isinstance(delay, timedelta):
            seconds = delay.total_seconds()
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            seconds = float(delay)
        else:
            raise TypeError(f"snooze takes seconds or a timedelta, got {delay!r}")
        # Written so that NaN fails the check too.
        if not 0 <= seconds <= MAX_SNOOZE_SECONDS:
            raise ValueError(f"snooze {delay!r} is out of range (0 to 30 days)")
        self.delay = timedelta(seconds=seconds)
        self.reason = reason
        super().__init__(self.describe())

    def describe(self) -> str:
        """What the task's record says: "snoozed for 600s: waiting for the export"."""
        said = f"snoozed for {self.delay.total_seconds():g}s"
        return f"{said}: {self.reason}" if self.reason else said


class CancelFlag:
    """Whether the running task was asked to stop (`pgsched cancel`), read by its handler
    as `ctx.cancelled` from any thread. The worker sets it; `in_thread` says whether the
    handler's current step runs in a thread (plain `def`) or on the event loop, and
    `ending` how the attempt was stopped, for the record."""

    def __init__(self) -> None:
        # Most tasks are never asked to stop, and none of their handlers wait on the flag:
        # the Event (a Condition and two locks to make) is made only when one does.
        self._set = False
        self._event: threading.Event | None = None
        self.in_thread = False
        # execute returned: the work is done, and a late request no longer stops it.
        self.work_done = False
        # The worker cancelled the task's asyncio task (an async step was running).
        self.task_cancelled = False
        # The runner began: until then a request is only noted, and the runner ends the
        # task CANCELLED without calling its handler.
        self.started = False
        self.ending = "the handler stopped"
        # The current step runs in a handler process (pgsched/worker/handler_processes.py),
        # which `on_set` tells of the request.
        self.in_process = False
        self.on_set: Callable[[], object] | None = None

    def set(self) -> None:
        with _CANCEL_EVENT_LOCK:
            self._set = True
            event = self._event
        if event is not None:
            event.set()
        if self.on_set is not None:
            self.on_set()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        with _CANCEL_EVENT_LOCK:
            event = self._event
            if event is None:
                event = self._event = threading.Event()
                if self._set:
                    event.set()
        return event.wait(timeout)


# Guards the making of a CancelFlag's Event against a set() from another thread.
_CANCEL_EVENT_LOCK = threading.Lock()


class TaskContext:
    """What a handler gets: the task, a logger bound to it, `cancelled` (the task was asked
    to stop), and, for a handler registered with `transactional=True`, `connection`: a
    connection in an open transaction in which the task's completion is written too, so
    the handler's writes and the completion commit together or not at all."""

    def __init__(
        self,
        task: TaskRow,
        worker_id: str,
        connection: Any = None,
        dsn: str | None = None,
        cancel: CancelFlag | None = None,
        progress: ProgressSink | None = None,
    ) -> None:
        self.task = task
        self.worker_id = worker_id
        self.dsn = dsn
        self.cancel_flag = cancel if cancel is not None else CancelFlag()
        self._connection = connection
        self._progress = progress
        self.state: dict[str, Any] = {}
        # The latest ctx.progress of this run: (fraction, note).
        self.last_progress: tuple[float, str | None] | None = None

    # Made on first use: most handlers never log, and a logger lookup and an adapter per
    # task are a good part of a no-op task's cost.
    @functools.cached_property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose records carry the task's id, tenant and attempt."""
        task = self.task
        return logging.LoggerAdapter(
            logging.getLogger(f"pgsched.task.{task.task_type}"),
            {"task_id": task.id, "tenant_id": task.tenant_id, "attempt": task.attempt},
        )

    @property
    def tenant_id(self) -> str:
        return self.task.tenant_id

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1 (`ctx.task.attempt`)."""
        return self.task.attempt

    @property
    def max_attempts(self) -> int:
        """Attempts the task may take in all (`ctx.task.max_attempts`)."""
        return self.task.max_attempts

    @property
    def task_id(self) -> int:
        return self.task.id

    @property
    def cancelled(self) -> bool:
        """True once the task was asked to stop. A plain (`def`) handler checks it between
        units of work and stops by raising (`raise_if_cancelled`); returning normally says
        the work is done, and the task completes. An async handler is stopped for it by
        `asyncio.CancelledError`."""
        return self.cancel_flag.is_set()

    def progress(self, fraction: float, note: str | None = None) -> None:
        """Report how far the task got: a fraction from 0 to 1 and an optional note (at
        most 1000 characters). Call it as often as you like: only the latest value is
        kept, and the worker writes it at most once a second (`pgsched show`, the
        dashboard, `pgsched.task_progress(id)`). Never blocks on the database."""
        value, text = progress_checked(fraction, note)
        self.last_progress = (value, text)
        if self._progress is not None:
            self._progress(self.task.id, value, text)

    def snooze(self, delay: float | timedelta, reason: str | None = None) -> NoReturn:
        """Put the task back to be due after `delay` (seconds or a timedelta, 0 to 30 days)
        without spending an attempt, and end this run now (raises `Snooze`). `reason` goes
        on the task's record. Past the handler's `max_snoozes` it counts as a failed
        attempt. A transactional handler's writes are rolled back."""
        raise Snooze(delay, reason)

    def raise_if_cancelled(self) -> None:
        """Raise `TaskCancelledError` if the task was asked to stop: it ends CANCELLED."""
        if self.cancel_flag.is_set():
            raise TaskCancelledError(f"task {self.task.id} was asked to stop")

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, waking at once if the task is asked to stop;
        returns `cancelled`. For plain handlers that wait between units of work."""
        return self.cancel_flag.wait(timeout)

    @property
    def payload(self) -> Any:
        return self.task.payload

    @property
    def traceparent(self) -> str | None:
        """The W3C trace context of the request that scheduled the task, or None."""
        return self.task.traceparent

    @property
    def connection(self) -> Any:
        """A sync handler gets a `psycopg.Connection`, an async one an `AsyncConnection`.

        Its session setting `pgsched.tenant_id` is the task's tenant (for the transaction),
        so row-level-security policies on your own tables can use
        `current_setting('pgsched.tenant_id')`.
        """
        if self._connection is None:
            raise RuntimeError(
                f"no connection for task type {self.task.task_type!r}: register its handler "
                "with transactional=True to get one that commits with the completion"
            )
        return self._connection

    def once(self, key: str) -> bool:
        """True the first time this (tenant, task type, key) is asked for, ever; False
        after. Guard a side effect that must not happen twice (a duplicate is worse than a
        miss). Blocking: from an async handler use `await ctx.aonce(key)`."""
        return bool(self._once(key))

    async def aonce(self, key: str) -> bool:
        return bool(await self._aonce(key))

    def _once(self, key: str) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        from pgsched.queries import query

        with (
            psycopg.connect(self._dsn(), autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            row = cur.execute(query("work_once"), self._once_params(key)).fetchone()
        return row is not None and row["first_time"]

    async def _aonce(self, key: str) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        from pgsched.queries import query

        async with (
            await psycopg.AsyncConnection.connect(self._dsn(), autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(query("work_once"), self._once_params(key))
            row = await cur.fetchone()
        return row is not None and row["first_time"]

    @functools.cached_property
    def parent_results(self) -> ParentResults:
        """The results of the tasks this one waited for (`depends_on`), by task id:
        `ctx.parent_results[41]`; a workflow's named steps by name too:
        `ctx.parent_results["charge"]` (iterating gives each parent once, by id). A parent
        that did not complete (a child that runs anyway) maps to None. Read once,
        on first use (blocking: from an async handler use `await ctx.aparent_results()`)."""
        import psycopg
        from psycopg.rows import dict_row

        from pgsched.queries import query

        with (
            psycopg.connect(self._dsn(), autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            rows = cur.execute(query("task_parent_results"), {"task_id": self.task.id}).fetchall()
        return _parent_results(rows)

    async def aparent_results(self) -> ParentResults:
        """`parent_results`, read without blocking the event loop."""
        if "parent_results" in self.__dict__:
            return self.__dict__["parent_results"]  # type: ignore[no-any-return]
        import psycopg
        from psycopg.rows import dict_row

        from pgsched.queries import query

        async with (
            await psycopg.AsyncConnection.connect(self._dsn(), autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(query("task_parent_results"), {"task_id": self.task.id})
            rows = await cur.fetchall()
        self.__dict__["parent_results"] = found = _parent_results(rows)
        return found

    @functools.cached_property
    def batch(self) -> BatchStatus:
        """In a batch's callback (`App.batch`): how many members there were, how many
        COMPLETED, DEAD and CANCELLED, and their ids. Read once, on first use (blocking).
        For any task, its parents counted the same way."""
        import psycopg
        from psycopg.rows import dict_row

        from pgsched.queries import query

        with (
            psycopg.connect(self._dsn(), autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            row = cur.execute(query("batch_status"), {"task_id": self.task.id}).fetchone()
        assert row is not None
        return BatchStatus(
            row["total"],
            row["completed"],
            row["dead"],
            row["cancelled"],
            row["unfinished"],
            list(row["member_ids"]),
        )

    def _once_params(self, key: str) -> dict[str, Any]:
        if not key:
            raise ValueError("ctx.once needs a non-empty key")
        return {
            "tenant_id": self.task.tenant_id,
            "task_type": self.task.task_type,
            "key": key,
            "task_id": self.task.id,
        }

    def _dsn(self) -> str:
        if self.dsn is None:
            raise RuntimeError("this context has no database to read or record in")
        return self.dsn


@dataclass(frozen=True)
class BatchStatus:
    """A batch's members by outcome, as its callback sees them (`ctx.batch`)."""

    total: int
    completed: int
    dead: int
    cancelled: int
    unfinished: int
    member_ids: list[int]


class ParentResults(Mapping[int, Any]):
    """A task's parents' results by task id (each parent once); a workflow step's name is
    a key too (`results["charge"]`), without being counted or iterated twice."""

    def __init__(self, by_id: dict[int, Any], names: dict[str, int]) -> None:
        self._by_id = by_id
        self._names = names

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._by_id[self._names[key]]
        return self._by_id[key]

    def __contains__(self, key: object) -> bool:
        return key in self._by_id or key in self._names

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def by_step(self) -> dict[str, Any]:
        """The named parents' results by step name."""
        return {name: self._by_id[i] for name, i in self._names.items()}

    def __repr__(self) -> str:
        return f"ParentResults({self._by_id!r}, steps={self._names!r})"


def _parent_results(rows: list[dict[str, Any]]) -> ParentResults:
    by_id: dict[int, Any] = {}
    names: dict[str, int] = {}
    for row in rows:
        by_id[int(row["parent_id"])] = row["result"]
        if row["step"] is not None:
            names[row["step"]] = int(row["parent_id"])
    return ParentResults(by_id, names)


class TaskHandler:
    """Subclass and implement `execute`; the other steps are optional."""

    def validate(self, ctx: TaskContext) -> Any:
        return None

    def before_execute(self, ctx: TaskContext) -> Any:
        return None

    def execute(self, ctx: TaskContext) -> Any:
        raise NotImplementedError("a TaskHandler must implement execute(ctx)")

    def after_execute(self, ctx: TaskContext) -> Any:
        return None


class FunctionHandler(TaskHandler):
    """A plain function (sync or async) registered as `execute` alone."""

    def __init__(self, fn: Callable[[TaskContext], Any]) -> None:
        self.fn = fn
        self.execute = fn  # type: ignore[method-assign,assignment]


STEPS = ("validate", "before_execute", "execute", "after_execute")
MAX_TIMEOUT_SECONDS = 24 * 3600  # a handler's timeout: more than 0, at most a day

# Where a handler's plain steps run (`isolation=`):
#   "process"  a handler process of its lane, killed when the attempt must end (timeout,
#              cancel, lost lease, shutdown); the default for a plain handler with a timeout
#   "thread"   a thread of its lane's pool, which nothing can stop; the default otherwise
# Async steps always run on their lane's event loop.
ISOLATIONS = ("process", "thread")


@dataclass
class Registration:
    """A handler with its per-type settings."""

    task_type: str
    handler: TaskHandler
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float | None = None
    transactional: bool = False
    # None: "process" for a plain handler with a timeout, else "thread" (see ISOLATIONS).
    isolation: str | None = None
    # Snoozes a task of this type may take; the next one counts as a failed attempt.
    max_snoozes: int = DEFAULT_MAX_SNOOZES
    # What follows a failed attempt (`retry_delays=`, else `retry`): see RetrySchedule.
    schedule: RetrySchedule | None = None
    is_async: bool = field(init=False)
    # Each step's callable (None: not overridden, skipped) and whether it is async, looked
    # up once here rather than for every task.
    steps: dict[str, Callable[[TaskContext], Any] | None] = field(init=False, repr=False)
    async_steps: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.schedule is None:
            self.schedule = RetrySchedule(self.retry)
        if (
            not isinstance(self.max_snoozes, int)
            or isinstance(self.max_snoozes, bool)
            or not 0 <= self.max_snoozes <= 1_000_000
        ):
            raise InvalidTaskError(
                f"max_snoozes {self.max_snoozes!r} for task type {self.task_type!r} is out of "
                "range (0 to 1000000)"
            )
        if self.timeout is not None and not 0 < self.timeout <= MAX_TIMEOUT_SECONDS:
            raise InvalidTaskError(
                f"timeout {self.timeout} is out of range (more than 0, at most "
                f"{MAX_TIMEOUT_SECONDS} seconds)"
            )
        # A handler is async when its execute is: ctx.connection then is async too.
        self.is_async = inspect.iscoroutinefunction(self.handler.execute)
        self.steps = {name: self._lookup(name) for name in STEPS}
        self.async_steps = frozenset(
            name for name, fn in self.steps.items() if inspect.iscoroutinefunction(fn)
        )
        self.isolation = self._isolation(self.isolation)

    def _isolation(self, asked: str | None) -> str:
        if asked is not None and asked not in ISOLATIONS:
            raise InvalidTaskError(
                f"isolation {asked!r} for task type {self.task_type!r}: choose 'process' or "
                "'thread'"
            )
        plain_only = not self.async_steps
        if asked is None:
            # A transactional handler's connection belongs to the worker's pool, which a
            # handler process cannot share: it keeps its thread.
            wanted = self.timeout is not None and plain_only and not self.transactional
            return "process" if wanted else "thread"
        if asked == "process" and not plain_only:
            raise InvalidTaskError(
                f"isolation='process' for task type {self.task_type!r}: a handler process "
                "runs plain (def) steps, and this handler has async ones (async steps run on "
                "their lane's event loop; make every step plain, or drop isolation)"
            )
        if asked == "process" and self.transactional:
            raise InvalidTaskError(
                f"isolation='process' for task type {self.task_type!r}: a transactional "
                "handler uses a connection of the worker's pool, which a handler process "
                "cannot share; use isolation='thread'"
            )
        return asked

    @property
    def in_process(self) -> bool:
        return self.isolation == "process"

    def _lookup(self, name: str) -> Callable[[TaskContext], Any] | None:
        method = getattr(self.handler, name)
        # Skip optional steps the handler did not override: no thread hop for nothing.
        if name != "execute" and getattr(type(self.handler), name) is getattr(TaskHandler, name):
            return None
        return method  # type: ignore[no-any-return]

    def step(self, name: str) -> Callable[[TaskContext], Any] | None:
        return self.steps[name]


class HandlerRegistry:
    def __init__(self) -> None:
        self._by_type: dict[str, Registration] = {}

    def register(
        self,
        task_type: str,
        handler: TaskHandler | Callable[[TaskContext], Any],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        transactional: bool = False,
        isolation: str | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        retry_delays: Sequence[float | timedelta] | RetryDecision | None = None,
    ) -> Registration:
        if task_type in self._by_type:
            raise ValueError(f"a handler for task type {task_type!r} is already registered")
        if not isinstance(handler, TaskHandler):
            if not callable(handler):
                raise TypeError("a handler is a TaskHandler or a callable taking ctx")
            handler = FunctionHandler(handler)
        schedule = RetrySchedule.of(retry, retry_delays, f"task type {task_type!r}")
        registration = Registration(
            task_type,
            handler,
            schedule.policy,
            timeout,
            transactional,
            isolation,
            max_snoozes,
            schedule,
        )
        self._by_type[task_type] = registration
        return registration

    def get(self, task_type: str) -> Registration | None:
        return self._by_type.get(task_type)

    def task_types(self) -> list[str]:
        return sorted(self._by_type)

    def registrations(self) -> list[Registration]:
        return list(self._by_type.values())


async def call_step(
    fn: Callable[[TaskContext], Any], ctx: TaskContext, executor: Executor | None = None
) -> Any:
    """Await an async step; run a plain one in `executor` (the worker's own thread pool,
    sized to its concurrency; the loop's default one holds only a handful of threads)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(ctx)
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, ctx)
    result = await loop.run_in_executor(executor, call)
    if inspect.isawaitable(result):
        return await result
    return result
