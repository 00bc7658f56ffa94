"""Plain handlers that can be stopped for real: each lane's handler processes.

Python cannot stop a thread: a plain (`def`) handler that overruns its timeout in a thread
runs on until it returns, holding its thread. A plain handler registered with a timeout
(or with `isolation="process"`) therefore runs in a child process instead. When its
attempt must end (the timeout, a cancel past its grace, a lost lease, shutdown) the child
is killed with SIGKILL and a fresh one is started for the lane's next task; a child that
dies on its own (a segfault in a C extension, the kernel's OOM killer) fails only the
attempt it was running. The worker itself never exits because of a handler.

Children are forked from multiprocessing's fork server, which imports the handlers'
modules once: a child starts in milliseconds and holds none of the worker's threads, locks
or connections (a fork of the worker itself would copy its connections' sockets and a
lock any other thread held). The handler travels to the child by pickle, so it must be
importable by name: a module-level function or `TaskHandler` class (checked when the
worker starts).

A child runs one task at a time, every plain step of it in order (so `ctx.state` carries
from `before_execute` to `execute`), then waits for the lane's next one. A step is one
message each way (the task's first step carries the task); a cancel is a message of its
own, read by a thread of the child while the step runs. A lane holds at
most its concurrency of children, started as tasks need them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import sys
import threading
import traceback
from typing import Any

from pgsched.errors import ConfigError
from pgsched.handlers import CancelFlag, ProgressSink, Registration, Snooze, TaskContext
from pgsched.tasks import TaskRow
from pgsched.worker.progress import ChildProgress

log = logging.getLogger("pgsched.worker.handler_processes")

MAX_ERROR_CHARS = 4000

# One fork server for the whole worker process, shared by every lane's pool.
_FORKSERVER = multiprocessing.get_context("forkserver")


class HandlerRaised(Exception):
    """A step raised in its handler process: what it raised, as the child described it
    (a traceback does not cross processes; its text does)."""

    def __init__(self, error_class: str, description: str, shown: str) -> None:
        super().__init__(description)
        self.error_class = error_class
        self.description = description
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


class HandlerProcessDied(Exception):
    """The handler process ended while it ran a step: a segfault, the OOM killer, an
    `os._exit` in the handler. Only this attempt fails."""

    error_class = "handler_process_died"


def check_importable(registration: Registration) -> None:
    """Refuse at start a handler that cannot reach a handler process, naming the fix."""
    try:
        pickle.dumps(registration.handler)
    except Exception as exc:
        raise ConfigError(
            f"the handler of task type {registration.task_type!r} runs in a handler process "
            "(a plain handler with a timeout, stopped by killing its process when it "
            "overruns), so it must be importable by name, but it cannot be sent there: "
            f"{exc}. Define it at module level (a function or a TaskHandler class), or "
            "register it with isolation='thread' (its timeout then fails the attempt but "
            "cannot stop the thread)"
        ) from exc


def preload(registrations: list[Registration]) -> None:
    """Have the fork server import the handlers' modules once, before any child forks."""
    modules = sorted(
        {
            module
            for registration in registrations
            if (module := _module_of(registration.handler)) is not None
        }
    )
    # The worker's own modules too, and what its main module imports when that is the
    # `pgsched` command: each child runs the parent's main script again as it starts
    # (multiprocessing prepares a child's __main__ so), and with pgsched.cli imported here
    # that is a few lookups instead of 30 ms of imports. (The fork server's own "__main__"
    # preload never receives the script's path on Python 3.11: its data key is
    # 'init_main_from_path', the server reads 'main_path'.) A script of the user's is run
    # again in each child as multiprocessing does: it must start its worker under
    # `if __name__ == "__main__":`, or each child would start one too.
    main = ["runpy", "pkgutil", "pgsched.cli"] if _main_is_pgsched() else ["runpy", "pkgutil"]
    _FORKSERVER.set_forkserver_preload([*main, "pgsched.worker.handler_processes", *modules])


def _main_is_pgsched() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return str(spec.name).startswith("pgsched")
    return os.path.basename(getattr(main, "__file__", "") or "") == "pgsched"


def refuse_starting_in_a_child() -> None:
    """A worker started while a handler process imports the user's main module: the
    script starts its worker without the `__main__` guard. Say so, instead of a second
    worker in every handler process."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(
            "a worker was started while a handler process imported your main module: start "
            'it under `if __name__ == "__main__":` (handler processes import the module that '
            "defines their handlers)"
        )


def _module_of(handler: Any) -> str | None:
    fn = getattr(handler, "fn", None)
    target = fn if fn is not None else type(handler)
    module = getattr(target, "__module__", None)
    if module is None or module == "__main__":
        return None
    return str(module)


def _log_settings() -> tuple[str, str]:
    """The level and format the worker logs with, for its children to log the same way."""
    from pgsched.observability.logs import JsonFormatter

    root = logging.getLogger()
    log_format = "text"
    for handler in root.handlers:
        if isinstance(handler.formatter, JsonFormatter):
            log_format = "json"
    return logging.getLevelName(root.getEffectiveLevel()), log_format


def _describe(exc: BaseException) -> str:
    frames = traceback.format_tb(exc.__traceback__, limit=-3)
    return (f"{type(exc).__name__}: {exc}\n" + "".join(frames))[:MAX_ERROR_CHARS]


def _child_main(conn: multiprocessing.connection.Connection, level: str, log_format: str) -> None:
    """A handler process: run the steps it is sent, one task at a time, until the worker
    closes its end of the pipe (or dies: the pipe closes then too)."""
    from pgsched.observability.logs import start_logging

    start_logging(level, log_format)
    # Ctrl-C reaches the whole process group: the worker decides what its children do.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox: queue.SimpleQueue[tuple[tuple[Any, ...], CancelFlag]] = queue.SimpleQueue()
    current: dict[str, Any] = {"task_id": None, "flag": CancelFlag()}

    def read() -> None:
        # A thread of its own, so that a cancel reaches the flag while a step runs. It also
        # makes each task's flag as the task arrives: a cancel read right after a task's
        # first step, before that step starts, is then not lost.
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                # The worker is gone: whatever the handler is doing, end now.
                os._exit(0)
            if message[0] == "cancel":
                if message[1] == current["task_id"]:
                    current["flag"].set()
                continue
            # ("step", name, opening, cancelled): a task's first step carries the task (the
            # handler, the row, the worker id, the DSN): one message a step.
            opening = message[2]
            if opening is not None:
                flag = CancelFlag()
                flag.in_thread = True
                current["flag"], current["task_id"] = flag, opening[1].id
            if message[3]:
                current["flag"].set()
            inbox.put((message, current["flag"]))

    threading.Thread(target=read, name="pgsched-handler-inbox", daemon=True).start()
    handler: Any = None
    ctx: TaskContext | None = None
    # ctx.progress reaches the worker over the pipe, throttled (pgsched/worker/progress.py).
    progress = ChildProgress(conn.send)
    while True:
        (_, name, opening, _), flag = inbox.get()
        if opening is not None:
            handler, task, worker_id, dsn = opening
            ctx = TaskContext(task, worker_id, dsn=dsn, cancel=flag, progress=progress.report)
        assert ctx is not None
        reply: tuple[Any, ...]
        try:
            returned = getattr(handler, name)(ctx)
        except Snooze as snooze:  # not a fault: the task is due again later
            reply = ("snooze", snooze.delay.total_seconds(), snooze.reason)
        except BaseException as exc:  # the handler's fault: its attempt's outcome
            reply = ("raised", type(exc).__name__, _describe(exc), repr(exc))
        else:
            reply = ("ok", _encoded(returned) if name == "execute" else None)
        progress.flush()
        conn.send(reply)


def _encoded(value: Any) -> Any:
    """execute's return value as JSON text for the worker to store (any value crosses
    the pipe this way); what is not JSON goes as the error the worker reports."""
    if value is None:
        return None
    try:
        return JsonText(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        return exc


class JsonText(str):
    """A return value encoded as JSON already (by a handler process)."""

    __slots__ = ()


class HandlerProcess:
    """One child and the worker's end of its pipe."""

    def __init__(self, lane: str) -> None:
        self.lane = lane
        ours, theirs = _FORKSERVER.Pipe(duplex=True)
        self.process = _FORKSERVER.Process(
            target=_child_main,
            args=(theirs, *_log_settings()),
            name=f"pgsched-{lane.lower()}-handler",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self.conn = ours
        self.pid = self.process.pid

    def send(self, message: tuple[Any, ...]) -> None:
        self.conn.send(message)

    async def receive(self) -> tuple[Any, ...]:
        """The child's next reply; EOFError when it died."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = self.conn.fileno()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
        reply: tuple[Any, ...] = self.conn.recv()
        return reply

    def kill(self) -> None:
        if self.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid or 0, signal.SIGKILL)
        self.conn.close()

    def death(self) -> str:
        """How the child ended, for last_error and the log."""
        self.process.join(1.0)
        code = self.process.exitcode
        if code is None:
            return f"handler process {self.pid} stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""
            return f"handler process {self.pid} was killed by {name}{hint}"
        return f"handler process {self.pid} exited with status {code}"


class HandlerProcessPool:
    """A lane's handler processes: idle ones wait for the next task; one that was killed
    or died is replaced by a new one when a task needs it."""

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self._idle: list[HandlerProcess] = []
        self._reaping: set[asyncio.Future[Any]] = set()

    async def acquire(self) -> HandlerProcess:
        while self._idle:
            child = self._idle.pop()
            if child.process.exitcode is None:
                return child
        # Starting one asks the fork server over a socket: a few milliseconds, off the loop.
        return await asyncio.to_thread(HandlerProcess, self.lane)

    def release(self, child: HandlerProcess) -> None:
        self._idle.append(child)

    def discard(self, child: HandlerProcess) -> None:
        """Kill it (if it still runs) and reap it in the background."""
        child.kill()
        reaping = asyncio.ensure_future(asyncio.to_thread(child.process.join, 5.0))
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)

    async def close(self) -> None:
        for child in self._idle:
            child.conn.close()  # it exits when it reads the end of the pipe
        for child in self._idle:
            await asyncio.to_thread(child.process.join, 2.0)
            if child.process.exitcode is None:
                child.kill()
        self._idle.clear()
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)


class ProcessRun:
    """One task's steps in one handler process."""

    def __init__(
        self,
        pool: HandlerProcessPool,
        child: HandlerProcess,
        task: TaskRow,
        opening: tuple[Any, ...],
        cancel: CancelFlag,
        progress: ProgressSink | None = None,
    ) -> None:
        self._pool = pool
        self._progress = progress
        self._child = child
        self._task = task
        # Sent with the first step: the process learns of the task and runs it in one go.
        self._opening: tuple[Any, ...] | None = opening
        self._cancel = cancel
        self.killed = False

    @classmethod
    async def start(
        cls,
        pool: HandlerProcessPool,
        registration: Registration,
        task: TaskRow,
        worker_id: str,
        dsn: str | None,
        cancel: CancelFlag,
        progress: ProgressSink | None = None,
    ) -> ProcessRun:
        child = await pool.acquire()
        opening = (registration.handler, task, worker_id, dsn)
        run = cls(pool, child, task, opening, cancel, progress)
        cancel.in_process = True
        # A cancel request reaches the handler as ctx.cancelled in its process.
        cancel.on_set = run._forward_cancel
        return run

    def _forward_cancel(self) -> None:
        # Before the first step the process has not heard of the task: that step carries
        # the request (ProcessRun.step).
        if not self.killed and self._opening is None:
            with contextlib.suppress(OSError):
                self._child.send(("cancel", self._task.id))

    async def step(self, name: str) -> Any:
        child = self._child
        try:
            child.send(("step", name, self._opening, self._cancel.is_set()))
            self._opening = None
            reply = await child.receive()
            while reply[0] == "progress":
                # ctx.progress in the process, on its way to the lane's writer.
                if self._progress is not None:
                    self._progress(reply[1], reply[2], reply[3])
                reply = await child.receive()
        except asyncio.CancelledError:
            # The timeout, a cancel past its grace, a lost lease, shutdown: stop it for real.
            self.kill()
            raise
        except (EOFError, OSError) as exc:
            self.killed = True
            self._pool.discard(child)
            death = child.death()
            log.warning("%s while running %s of task %s", death, name, self._task.id)
            raise HandlerProcessDied(f"{death} while running {name}") from exc
        if reply[0] == "raised":
            raise HandlerRaised(reply[1], reply[2], reply[3])
        if reply[0] == "snooze":
            raise Snooze(reply[1], reply[2])
        returned = reply[1] if len(reply) > 1 else None
        if isinstance(returned, Exception):
            kind = type(returned).__name__
            error = f"execute returned a value that is not JSON: {kind}: {returned}"
            raise HandlerRaised("result_not_json", error, repr(returned))
        return returned

    def kill(self) -> None:
        if not self.killed:
            self.killed = True
            self._pool.discard(self._child)

    def end(self) -> None:
        """The task is done with its process: back to the lane's idle ones (the next
        task's first step replaces its context there)."""
        if not self.killed:
            self._pool.release(self._child)


def start_fork_server() -> None:
    """Start the fork server now (it imports the handlers' modules): the first task that
    needs a handler process should not wait for it."""
    from multiprocessing import forkserver

    forkserver.ensure_running()
