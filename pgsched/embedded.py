"""The embedded Postgres: a local server for trying pgsched out, in one place per user.

Its folder is `$PGSCHED_HOME`, else `$XDG_DATA_HOME/pgsched`, else
`~/.local/share/pgsched`: never the current directory, so every command finds the same one.
Only `pgsched up` and `pgsched demo` (the main job) start it: `up` initialises the cluster
there, starts it on a free port on 127.0.0.1 from the installed server binaries, and
migrates it; `pgsched down` stops it. Other commands given no database use it only while it
runs (pgsched.dsn), and never start it.

Postgres refuses to run as root, so when we are root the server runs as the `postgres`
user (or `$PGSCHED_PG_USER`). If that user cannot reach the folder (under /root it cannot),
the data directory lives in /var/tmp (one per folder path) and `<folder>/data` points at it.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DBNAME = "pgsched"


class EmbeddedError(RuntimeError):
    """The embedded Postgres could not be set up; the message says what to do."""


def find_bindir() -> Path:
    """The directory of the newest installed Postgres server binaries."""
    explicit = os.environ.get("PGSCHED_PG_BINDIR")
    candidates = [Path(explicit)] if explicit else []
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    raise EmbeddedError(
        "no PostgreSQL server binaries found (initdb, pg_ctl). Install them with "
        "`apt-get install -y postgresql` (Debian/Ubuntu), or set PGSCHED_PG_BINDIR, "
        "or give --dsn / PGSCHED_DSN for a server you already run."
    )


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("PGSCHED_PG_USER", "postgres")
    try:
        return pwd.getpwnam(name)
    except KeyError as exc:
        raise EmbeddedError(
            f"running as root, and Postgres refuses to run as root; no user {name!r} exists "
            "to run it as. Install the postgresql package (it creates `postgres`) or set "
            "PGSCHED_PG_USER to an unprivileged user."
        ) from exc


def _as_server_user(argv: list[str]) -> list[str]:
    user = _server_user()
    if user is None:
        return argv
    return ["runuser", "-u", user.pw_name, "--", *argv]


def _reachable_by(user: pwd.struct_passwd, path: Path) -> bool:
    probe = subprocess.run(
        ["runuser", "-u", user.pw_name, "--", "test", "-x", str(path)],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def default_home() -> Path:
    """$PGSCHED_HOME, else $XDG_DATA_HOME/pgsched, else ~/.local/share/pgsched."""
    explicit = os.environ.get("PGSCHED_HOME")
    if explicit:
        return Path(explicit).expanduser().absolute()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser().absolute() / "pgsched"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class EmbeddedCluster:
    """The files of one embedded cluster."""

    home: Path

    @classmethod
    def default(cls) -> EmbeddedCluster:
        return cls(default_home())

    @property
    def datadir(self) -> Path:
        return self.home / "data"

    @property
    def port_file(self) -> Path:
        return self.home / "port"

    @property
    def logfile(self) -> Path:
        return self.datadir / "server.log"

    def dsn(self, port: int | None = None) -> str:
        port = port if port is not None else int(self.port_file.read_text())
        user = _server_user()
        role = user.pw_name if user else pwd.getpwuid(os.geteuid()).pw_name
        return f"postgresql://{role}@127.0.0.1:{port}/{DEFAULT_DBNAME}"

    def is_initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def is_running(self) -> bool:
        if not self.is_initialised():
            return False
        status = subprocess.run(
            _as_server_user(
                [str(find_bindir() / "pg_ctl"), "status", "-D", str(self.datadir.resolve())]
            ),
            capture_output=True,
            check=False,
        )
        return status.returncode == 0

    def _prepare_datadir(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        user = _server_user()
        if user is None:
            return
        if not _reachable_by(user, self.home):
            # The server user cannot traverse to the project folder: keep the data in
            # /var/tmp (one folder per project path) and point .pgsched/data at it.
            digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
            outside = Path("/var/tmp") / f"pgsched-{digest}"
            outside.mkdir(mode=0o700, exist_ok=True)
            os.chown(outside, user.pw_uid, user.pw_gid)
            if not self.datadir.is_symlink():
                self.datadir.symlink_to(outside / "data")
            return
        self.datadir.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.datadir, user.pw_uid, user.pw_gid)

    def init(self) -> None:
        bindir = find_bindir()
        self._prepare_datadir()
        target = self.datadir.resolve()
        subprocess.run(
            _as_server_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(target),
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-instructions",
                ]
            ),
            check=True,
            capture_output=True,
        )

    def start(self) -> int:
        """Start the server (initialising it first if needed); returns its port."""
        if not self.is_initialised():
            self.init()
        if self.is_running():
            return int(self.port_file.read_text())
        port = _free_port()
        options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        result = subprocess.run(
            _as_server_user(
                [
                    str(find_bindir() / "pg_ctl"),
                    "start",
                    "-w",
                    "-t",
                    "60",
                    "-D",
                    str(self.datadir.resolve()),
                    "-l",
                    str(self.logfile.resolve()),
                    "-o",
                    options,
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise EmbeddedError(
                f"the embedded Postgres did not start: {result.stderr.strip() or result.stdout}"
                f" (log: {self.logfile})"
            )
        self.port_file.write_text(str(port))
        self._ensure_database(port)
        return port

    def _ensure_database(self, port: int) -> None:
        import psycopg

        admin = self.dsn(port).rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DEFAULT_DBNAME,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DEFAULT_DBNAME}"')

    def stop(self) -> bool:
        """Stop the server; False when it was not running."""
        if not self.is_running():
            return False
        subprocess.run(
            _as_server_user(
                [
                    str(find_bindir() / "pg_ctl"),
                    "stop",
                    "-w",
                    "-m",
                    "fast",
                    "-D",
                    str(self.datadir.resolve()),
                ]
            ),
            check=True,
            capture_output=True,
        )
        return True


def ensure_embedded() -> str:
    """Start (and migrate) the embedded Postgres if needed; return its DSN. Only for
    `pgsched up` and the demo: everything else uses pgsched.dsn.resolve_dsn."""
    from pgsched.migrations import migrate

    cluster = EmbeddedCluster.default()
    port = cluster.start()
    dsn = cluster.dsn(port)
    migrate(dsn)
    return dsn
