"""Where the database is: --dsn, then PGSCHED_DSN, then the embedded Postgres if it is running.

Nothing here starts a server: only `pgsched up` and `pgsched demo` do (pgsched.embedded).
A process given no database must fail, not run against a new empty one.
"""

from __future__ import annotations

import os
import sys

from pgsched.errors import PgschedError

DSN_ENV = "PGSCHED_DSN"


class NoDatabaseError(PgschedError):
    """No database was named and the embedded one is not running."""


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
