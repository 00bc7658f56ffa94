"""A real, throwaway `redis-server` for the hot tier's tests (Debian's package; scripts/setup.sh
installs it when run as root): `benchmarks.redisserver.RedisServer`.

``redis_server`` (function fixture)
    A RedisServer on a free port of 127.0.0.1, no persistence, `noeviction`: ``url``,
    ``client()``, ``flushall()``, ``kill()`` (SIGKILL), ``start()`` (again, empty, on the
    same port), ``run_id()``. Killed after the test.

Import the fixture into a test module:
``from redis_server import redis_server_fixture  # noqa: F401``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.redisserver import RedisServer, free_port

__all__ = ["RedisServer", "free_port", "redis_server_fixture"]


@pytest.fixture(name="redis_server")
def redis_server_fixture(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()
