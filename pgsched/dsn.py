"""Where the database is: --dsn, then PGSCHED_DSN, then the embedded Postgres if it is running.

Nothing here starts a server: only `pgsched up` and `pgsched demo` do (pgsched.embedded).
A process given no database must fail, not run against a new empty one.
"""

from __future__ import annotations

import os
import sys

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgsched.errors import PgschedError

DSN_ENV = "PGSCHED_DSN"
DSN_FORMS = "a URI such as postgresql://user@host:5432/dbname, or 'host=... dbname=...' pairs"


class NoDatabaseError(PgschedError):
    """No database was named and the embedded one is not running."""


class BadDsnError(PgschedError, ValueError):
    """A DSN that is no PostgreSQL connection string (the message names where it came from)."""


def check_conninfo(dsn: str, source: str) -> dict[str, str]:
    """The DSN's parts, or BadDsnError naming `source` (--dsn, PGSCHED_DSN ...) and why.

    libpq parses the syntax; the port is checked here as well, since libpq only finds a bad
    one when it connects, and then reports it as an unreachable server."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        raise BadDsnError(
            f"{source}: not a PostgreSQL connection string ({reason}): give {DSN_FORMS}"
        ) from None
    for port in str(parts.get("port") or "").split(","):
        if port and not (port.strip().isdigit() and 0 < int(port) < 65536):
            raise BadDsnError(
                f"{source}: not a PostgreSQL connection string (port {port!r} is not a number"
                f" from 1 to 65535): give {DSN_FORMS}"
            )
    return {key: str(value) for key, value in parts.items()}


def resolve_dsn(dsn: str | None = None) -> str:
    """The conninfo to use: `dsn`, else $PGSCHED_DSN, else the embedded Postgres when it is
    already running (said on stderr, one line). Otherwise NoDatabaseError."""
    if dsn:
        return dsn
    from_env = os.environ.get(DSN_ENV)
    if from_env:
        return from_env
    from pgsched.embedded import EmbeddedCluster

    cluster = EmbeddedCluster.default()
    if cluster.is_running():
        found = cluster.dsn()
        print(
            f"pgsched: no --dsn or {DSN_ENV}: using the embedded Postgres ({cluster.home})",
            file=sys.stderr,
        )
        return found
    raise NoDatabaseError(
        f"no database: give --dsn, set {DSN_ENV}, or start the embedded Postgres with "
        f"`pgsched up` (its folder {cluster.home} holds no running server)"
    )
