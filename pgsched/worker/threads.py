"""Each lane's own bounded thread pool for plain-function (`def`) handlers, and the count
of threads that timed-out handlers still hold.

Python cannot stop a thread. When a plain handler overruns its timeout, its attempt fails
at once, but its thread runs on until the function returns; that thread is *stuck*. A
pool per lane keeps LOW's stuck threads from taking HIGH's; a lane whose threads are stuck
claims fewer tasks (it has fewer threads to run them), and past `--max-stuck-threads` in
the whole process the worker drains and exits non-zero so its supervisor starts a clean one.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from pgsched.tasks import TaskRow

log = logging.getLogger("pgsched.worker.threads")

# The task whose handler the current coroutine runs: set by the runner, read here when a
# step is handed to a thread, so a stuck thread can be named by its task.
running_task: contextvars.ContextVar[TaskRow | None] = contextvars.ContextVar(
    "pgsched_running_task", default=None
)


class RaisedInThread(Exception):
    """A plain handler raised a BaseException that is not an Exception (SystemExit,
    KeyboardInterrupt, GeneratorExit). Carried to the awaiting coroutine as an Exception:
    asyncio throws a future's exception into the awaiting coroutine, and a GeneratorExit
    thrown there would close the whole chain of coroutines instead of failing one step."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(original)
        self.original = original

    def __repr__(self) -> str:
        return repr(self.original)


class _StepFuture(Future[Any]):
    """A step's future that notices being given up on while its thread still runs it."""

    def __init__(self, pool: LaneThreadPool, task: TaskRow | None) -> None:
        super().__init__()
        self.pool = pool
        self.task = task
        self.thread_name: str | None = None
        self.stuck = False

    def cancel(self) -> bool:
        # asyncio cancels the concurrent future when the awaiting coroutine is cancelled
        # (a timeout, a shutdown). Pending: it never runs. Running: its thread is stuck.
        if self.running() and not self.stuck:
            self.stuck = True
            self.pool._stuck(self)
        return super().cancel()


class LaneThreadPool(Executor):
    def __init__(
        self,
        lane: str,
        size: int,
        on_stuck: Callable[[LaneThreadPool, TaskRow | None, str | None], None],
        on_returned: Callable[[LaneThreadPool, TaskRow | None], object],
    ) -> None:
        self.lane = lane
        self.size = size
        self._pool = ThreadPoolExecutor(
            max_workers=size, thread_name_prefix=f"pgsched-{lane.lower()}"
        )
        self._on_stuck = on_stuck
        self._on_returned = on_returned
        self._lock = threading.Lock()
        self.stuck = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = _StepFuture(self, running_task.get())

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            future.thread_name = threading.current_thread().name
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if not future.cancelled():
                    future.set_exception(exc)
            except BaseException as exc:  # raised by the handler: a fault of its attempt
                if not future.cancelled():
                    future.set_exception(RaisedInThread(exc))
            else:
                if not future.cancelled():
                    future.set_result(result)
            finally:
                if future.stuck:
                    self._returned(future)

        self._pool.submit(work)
        return future

    def _stuck(self, future: _StepFuture) -> None:
        with self._lock:
            self.stuck += 1
        self._on_stuck(self, future.task, future.thread_name)

    def _returned(self, future: _StepFuture) -> None:
        with self._lock:
            self.stuck -= 1
        self._on_returned(self, future.task)

    def stuck_count(self) -> int:
        return self.stuck

    def alive_threads(self) -> int:
        return sum(1 for thread in getattr(self._pool, "_threads", ()) if thread.is_alive())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
