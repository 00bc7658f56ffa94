"""A throwaway PostgreSQL cluster for one benchmark run.

    with PgServer() as server:
        run_benchmark(server.dsn)

`start()` initdb's a cluster in a fresh temp dir and starts it on a free 127.0.0.1 port
(no Unix socket, trust auth: nothing outside this machine can reach it). `stop()` stops it
and deletes the directory. Postgres refuses to run as root, so when we are root every server
command runs as the `postgres` user through `runuser`, and the temp dir is handed to it.

The server binaries are the highest version under /usr/lib/postgresql/*/bin.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psycopg

from pgsched.embedded import find_bindir

DBNAME = "bench"


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    why: str


# Durable (a committed task survives a power cut, as in production) and sized for the
# benchmark box: 2 cores, 24 GiB of memory, one local disk.
DEFAULT_SETTINGS: tuple[Setting, ...] = (
    Setting("fsync", "on", "durable: the figures are for a server that survives a crash"),
    Setting(
        "synchronous_commit", "on", "durable: every commit waits for its WAL flush, as in prod"
    ),
    Setting("full_page_writes", "on", "durable: torn pages after a crash stay recoverable"),
    Setting("shared_buffers", "2GB", "about 1/12 of 24 GiB; the OS cache holds the rest"),
    Setting("effective_cache_size", "16GB", "planner hint: most of the 24 GiB caches data"),
    Setting("max_wal_size", "8GB", "a bulk load of millions of rows does not force checkpoints"),
    Setting(
        "min_wal_size",
        "4GB",
        "up to 4 GB of used WAL segments are kept and reused, not made anew (recycle_wal)",
    ),
    Setting("checkpoint_timeout", "30min", "fewer checkpoints, so fewer full-page images"),
    Setting("wal_compression", "on", "full-page images are compressed: less WAL to write"),
    Setting("wal_buffers", "64MB", "large multi-row inserts do not stall on a full WAL buffer"),
    Setting("maintenance_work_mem", "512MB", "VACUUM and index builds work in memory"),
    Setting("work_mem", "64MB", "per-chunk sorts and hashes of 50k rows stay in memory"),
    Setting(
        "max_connections",
        "200",
        "two worker processes, the peers' pools (procrastinate: concurrency + 2 per worker), "
        "probes and samplers",
    ),
    Setting("log_checkpoints", "on", "the server log shows whether checkpoints hit the run"),
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PgServer:
    """One throwaway cluster; use as a context manager or call start()/stop()."""

    settings: tuple[Setting, ...] = DEFAULT_SETTINGS
    user: str = "postgres"
    verbose: bool = True
    bindir: Path = field(default_factory=find_bindir)
    base: Path | None = None
    port: int | None = None

    @property
    def datadir(self) -> Path:
        assert self.base is not None
        return self.base / "data"

    @property
    def logfile(self) -> Path:
        assert self.base is not None
        return self.base / "server.log"

    @property
    def role(self) -> str:
        return self.user if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name

    @property
    def dsn(self) -> str:
        assert self.port is not None, "server not started"
        return f"postgresql://{self.role}@127.0.0.1:{self.port}/{DBNAME}"

    def _argv(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", self.user, "--", *argv]
        return argv

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._argv(argv), capture_output=True, text=True, check=False)

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bindir / "postgres"), "--version"], capture_output=True, text=True
        )
        return out.stdout.strip()

    def start(self) -> str:
        """initdb, configure, start, create the database; returns the DSN."""
        self.base = Path(tempfile.mkdtemp(prefix="pgsched-bench-"))
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.user)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        init = self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ]
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip() or init.stdout}")
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\n# pgsched benchmark settings\n")
            for s in self.settings:
                conf.write(f"{s.name} = '{s.value}'\n")
        if self.verbose:
            print(f"postgres: {self.version()} from {self.bindir}")
            for s in self.settings:
                print(f"  setting {s.name} = {s.value}  -- {s.why}")
        self.port = _free_port()
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        started = self._run(
            [
                str(self.bindir / "pg_ctl"),
                "start",
                "-w",
                "-t",
                "120",
                "-D",
                str(self.datadir),
                "-l",
                str(self.logfile),
                "-o",
                options,
            ]
        )
        if started.returncode != 0:
            tail = self.logfile.read_text()[-2000:] if self.logfile.exists() else ""
            raise RuntimeError(f"postgres did not start: {started.stderr.strip()}\n{tail}")
        admin = f"postgresql://{self.role}@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DBNAME}"')
        if self.verbose:
            print(f"postgres: started in {self.base} on 127.0.0.1:{self.port}")
        return self.dsn

    def recycle_wal(self, mb: int) -> int:
        """Fill about `mb` MB of WAL and checkpoint, so the run after writes into recycled
        segments; returns the segments now in pg_wal.

        A fresh cluster has no segment to reuse: every 16 MB a run writes, one backend
        creates the next segment (writes 16 MB of zeros and syncs them) while holding the
        WAL write lock, and every commit waits meanwhile. A server that has carried such a
        load before renames old segments instead (kept at each checkpoint, up to
        min_wal_size). Measured in the burst (benchmarks/RESULTS.md): the fresh cluster's
        segment creation was most of HIGH's lateness p99 while the million drained."""
        assert self.base is not None and self.port is not None, "server not started"
        admin = f"postgresql://{self.role}@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "SELECT count(pg_logical_emit_message(false, 'pgsched-bench',"
                " repeat('x', 1 << 20))) FROM generate_series(1, %s)",
                (mb,),
            )
            # The first checkpoint's redo point is before the filler; after a switch the
            # second one's is past it, so every filled segment is old and recycled.
            conn.execute("CHECKPOINT")
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            row = conn.execute("SELECT count(*) FROM pg_ls_waldir()").fetchone()
        segments = int(row[0]) if row else 0
        if self.verbose:
            print(f"postgres: {mb:,} MB of WAL written and recycled: {segments} segments ready")
        return segments

    def stop(self) -> None:
        """Stop the server (if running) and delete its directory."""
        if self.base is None:
            return
        try:
            if (self.datadir / "postmaster.pid").exists():
                self._run(
                    [
                        str(self.bindir / "pg_ctl"),
                        "stop",
                        "-w",
                        "-m",
                        "fast",
                        "-D",
                        str(self.datadir),
                    ]
                )
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            if self.verbose:
                print(f"postgres: stopped and removed {self.base}")
            self.base = None
            self.port = None

    def __enter__(self) -> PgServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
