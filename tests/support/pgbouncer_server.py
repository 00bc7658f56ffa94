"""A real PgBouncer (Debian's `pgbouncer`) in front of a Postgres, for the tests and the
chaos suite.

    with running_pgbouncer(pg_host, pg_port, pool_mode="transaction") as bouncer:
        bouncer.dsn("mydb")       # a client conninfo through the pooler
        bouncer.clients("mydb")   # SHOW CLIENTS from its admin console
        bouncer.kill(); bouncer.start()   # SIGKILL, then again on the same port

It listens on 127.0.0.1 on a free port, routes every database name to the same name on the
server (`* =`), and lets the server's user in without a password (auth_type trust, that
user in the auth file; the server itself trusts local TCP). Its config, auth file, log and
pid file live in a temporary folder of its own. PgBouncer refuses to run as root: as root
it runs as the `postgres` user (the one the test server runs as).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from tests.support.redis_server import free_port

UNPRIVILEGED_USER = os.environ.get("PGSCHED_PG_USER", "postgres")


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(found).exists():
        raise RuntimeError("pgbouncer is not installed: run scripts/setup.sh (apt: pgbouncer)")
    return found


CONFIG = """\
[databases]
* = host={pg_host} port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
admin_users = {user}
pool_mode = {pool_mode}
max_client_conn = 500
default_pool_size = {pool_size}
ignore_startup_parameters = extra_float_digits
server_reset_query =
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
"""


class PgBouncer:
    """One pgbouncer process at a time, on a port and folder kept across restarts."""

    def __init__(
        self,
        pg_host: str,
        pg_port: int,
        user: str = "postgres",
        *,
        pool_mode: str = "transaction",
        pool_size: int = 20,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        self.user = user
        self.folder = Path(tempfile.mkdtemp(prefix="pgsched-pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None
        (self.folder / "userlist.txt").write_text(f'"{user}" ""\n')
        self.ini = self.folder / "pgbouncer.ini"
        self.ini.write_text(
            CONFIG.format(
                pg_host=pg_host,
                pg_port=pg_port,
                port=self.port,
                folder=self.folder,
                user=user,
                pool_mode=pool_mode,
                pool_size=pool_size,
            )
        )

    def dsn(self, dbname: str, **extra: Any) -> str:
        return make_conninfo(
            host=self.host, port=str(self.port), user=self.user, dbname=dbname, **extra
        )

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A SHOW command on the admin console (simple protocol: it knows no other)."""
        with (
            psycopg.connect(self.dsn("pgbouncer"), autocommit=True, connect_timeout=5) as conn,
            psycopg.ClientCursor(conn, row_factory=dict_row) as cur,
        ):
            cur.execute(command)
            return cur.fetchall()

    def clients(self, dbname: str) -> list[dict[str, Any]]:
        return [c for c in self.admin("SHOW CLIENTS") if c["database"] == dbname]

    def start(self) -> None:
        """Start (again, after `kill`) on the same port; returns once it answers."""
        # A SIGKILLed pgbouncer leaves its pid file behind.
        (self.folder / "pgbouncer.pid").unlink(missing_ok=True)
        command = [pgbouncer_binary(), str(self.ini)]
        if os.geteuid() == 0:
            owner = pwd.getpwnam(UNPRIVILEGED_USER)
            for path in (self.folder, *self.folder.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            command = ["runuser", "-u", UNPRIVILEGED_USER, "--", *command]
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        self.process = process
        deadline = time.monotonic() + 20
        while True:
            try:
                self.admin("SHOW VERSION")
                return
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    err = process.stderr.read().decode() if process.stderr else ""
                    raise RuntimeError(f"pgbouncer did not start: {err}\n{self.log()}") from None
                time.sleep(0.1)

    def _signal(self, sig: signal.Signals, timeout: float = 10) -> None:
        # Its own process group: pgbouncer itself, not only `runuser` in front of it.
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            os.killpg(process.pid, sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        if process.stderr is not None:
            process.stderr.close()
        self.process = None

    def kill(self) -> None:
        """SIGKILL: every client and server connection it held is cut."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then remove its folder."""
        self._signal(signal.SIGTERM)
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def running_pgbouncer(
    pg_host: str,
    pg_port: int,
    user: str = "postgres",
    *,
    pool_mode: str = "transaction",
    pool_size: int = 20,
) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(pg_host, pg_port, user, pool_mode=pool_mode, pool_size=pool_size)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()
