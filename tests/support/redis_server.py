"""A throwaway redis-server (Debian's package), as pgserver.py is a throwaway Postgres: a
free 127.0.0.1 port, no persistence, `noeviction` unless told otherwise (the hot tier
refuses anything else). Used by bench_hot_tier, the chaos suite and the tests.

    with RedisServer() as server:          # started, killed and removed at the end
        run_benchmark(server.url)

    server = RedisServer(workdir, policy="allkeys-lru")
    server.start(); server.flushall(); server.kill(); server.start()   # empty again
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, workdir: Path | None = None, policy: str = "noeviction") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: apt-get install redis-server "
                "(scripts/setup.sh does when run as root)"
            )
        self.binary = binary
        self.policy = policy
        self.port = free_port()
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="pgsched-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=5)

    def start(self) -> None:
        """Start (again) on the same port, empty: no snapshot is read or written."""
        self.starts += 1
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.workdir)]
        argv += ["--maxmemory-policy", self.policy]
        log = self.workdir / f"redis-{self.port}-{self.starts}.log"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
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
        """SIGKILL: whatever it held is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def flushall(self) -> None:
        with self.client() as c:
            c.flushall()

    def run_id(self) -> str:
        with self.client() as c:
            return str(c.info("server")["run_id"])

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
