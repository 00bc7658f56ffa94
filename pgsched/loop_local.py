"""One value per event loop, for state that async handlers share.

Each lane of a worker runs its async handlers on an event loop of its own, and asyncio
objects belong to the loop they were made on: a lock, a queue, an async connection or an
HTTP client made on one lane's loop fails on another's ("... is bound to a different event
loop"). `LoopLocal` makes one per loop, on first use there:

    http = LoopLocal(httpx.AsyncClient)                      # a plain factory
    db = LoopLocal(lambda: psycopg.AsyncConnection.connect(DSN))  # an async one

    @app.handler("fetch")
    async def fetch(ctx):
        client = http.get()            # this lane's client
        conn = await db.get()          # this lane's connection (made once, then kept)
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> Any:
        """The value of the running loop, made by the factory on its first use there. An
        async factory's value is a future to await (awaited by every caller alike)."""
        loop = asyncio.get_running_loop()
        try:
            return self._by_loop[loop]
        except KeyError:
            pass
        value: Any = self._factory()
        if inspect.isawaitable(value):
            value = asyncio.ensure_future(value)
        self._by_loop[loop] = value
        return value

    def forget(self) -> None:
        """Drop the running loop's value (a connection that closed, say): the next `get`
        makes a new one."""
        self._by_loop.pop(asyncio.get_running_loop(), None)
