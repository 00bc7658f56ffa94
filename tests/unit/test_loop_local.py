"""LoopLocal: one value per event loop, as each lane of a worker has its own loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pgsched import LoopLocal


def test_each_loop_gets_its_own_value_made_once_there() -> None:
    made: list[int] = []

    def factory() -> asyncio.Lock:
        made.append(1)
        return asyncio.Lock()

    shared: LoopLocal[asyncio.Lock] = LoopLocal(factory)
    seen: list[Any] = []

    async def use() -> None:
        lock = shared.get()
        assert shared.get() is lock
        async with lock:  # bound to this loop: a lock of another loop would raise here
            seen.append(lock)

    def in_a_thread() -> None:
        asyncio.run(use())

    threads = [threading.Thread(target=in_a_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 2 and seen[0] is not seen[1]


def test_an_async_factory_is_awaited_once_per_loop_and_forget_makes_anew() -> None:
    calls: list[int] = []

    async def connect() -> int:
        calls.append(1)
        await asyncio.sleep(0)
        return len(calls)

    shared: LoopLocal[Any] = LoopLocal(connect)

    async def use() -> tuple[int, int, int]:
        first, again = await asyncio.gather(shared.get(), shared.get())
        shared.forget()
        return first, again, await shared.get()

    assert asyncio.run(use()) == (1, 1, 2)
