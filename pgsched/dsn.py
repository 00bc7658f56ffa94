"""Where the database is: --dsn, then PGSCHED_DSN, then the embedded default."""

from __future__ import annotations

import os

DSN_ENV = "PGSCHED_DSN"


def resolve_dsn(dsn: str | None = None) -> str:
    """The conninfo to use. With none given anywhere, start (and migrate) the embedded one."""
    if dsn:
        return dsn
    from_env = os.environ.get(DSN_ENV)
    if from_env:
        return from_env
    from pgsched.embedded import ensure_embedded

    return ensure_embedded()
