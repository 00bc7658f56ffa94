"""Ending a worker loop whose cancel a library swallowed.

On Python 3.11, asyncio.wait_for returns the awaited result, and drops a cancel, when the
cancel lands just as the awaited thing completes. Libraries the worker's loops await use
it: redis-py sends each command under it; psycopg_pool waits for a connection under it, so
a cancel landing as the pool hands a connection over is lost. The shutdown cancels the
worker's loops and waits for them to end: a loop that ran on would hang it for good. Each
loop checks, after such an await, whether its task is being cancelled, and ends if so.
"""

from __future__ import annotations

import asyncio


def raise_if_cancel_swallowed() -> None:
    """Raise CancelledError if the current task was cancelled and is still running."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
