"""A real, throwaway `redis-server` for the hot tier's tests (Debian's package; scripts/setup.sh
installs it when run as root).

``redis_server`` (function fixture)
    A :class:`RedisServer` on a free port of 127.0.0.1, no persistence, `noeviction`:
    ``url``, ``client()``, ``flushall()``, ``kill()`` (SIGKILL), ``start()`` (again, empty,
    on the same port), ``run_id()``. Stopped after the test.

Import the fixture into a test module:
``from redis_server import redis_server_fixture  # noqa: F401``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, workdir: Path, policy: str = "noeviction") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: the hot tier's tests need it "
                "(apt-get install redis-server, or run scripts/setup.sh as root)"
            )
        self.binary = binary
        self.workdir = workdir
        self.policy = policy
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=5)

    def start(self) -> None:
        """Start (again) on the same port, empty: no snapshot is read or written."""
        self.starts += 1
        log = (self.workdir / f"redis-{self.port}-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--maxmemory-policy",
                self.policy,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as c:
                    c.ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def flushall(self) -> None:
        with self.client() as c:
            c.flushall()

    def run_id(self) -> str:
        with self.client() as c:
            return str(c.info("server")["run_id"])


@pytest.fixture(name="redis_server")
def redis_server_fixture(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()
