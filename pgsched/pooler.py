"""Running behind a connection pooler in transaction mode (PgBouncer `pool_mode =
transaction`), where a server session belongs to a client for one transaction only.

Two settings of the long-running processes depend on it:

    prepare threshold  psycopg prepares a statement on the server after it ran this many
                       times on one connection (5, psycopg's default). A transaction pooler
                       cannot keep a prepared statement for its client (the next transaction
                       may run on another server session): `None` turns preparing off.
    listen DSN         where LISTEN runs. A notification reaches only the server session
                       that listens, which a transaction pooler does not keep for its
                       client: LISTEN needs a direct connection to Postgres, or none at all
                       (`none`: lanes poll at their idle interval instead).

Everything else pgsched does is already per transaction: leadership is a lease row
(`pgsched.leadership`), the tenant of a transactional handler is bound with
`set_config(..., true)` inside its transaction. `pgsched migrate` takes a session advisory
lock: run it on a direct connection.
"""

from __future__ import annotations

from pgsched.errors import ConfigError

# psycopg's own default: a statement is prepared on its sixth run on one connection.
DEFAULT_PREPARE_THRESHOLD: int | None = 5

# What `--prepare-threshold` and `--listen-dsn` take for "never" and "nowhere".
OFF_WORDS = ("none", "off")


def parse_prepare_threshold(
    text: str | int | None, option: str = "--prepare-threshold"
) -> int | None:
    """`5` -> 5, `0` -> 0 (prepare at once), `none` / `off` -> None (never prepare)."""
    if text is None or isinstance(text, int):
        value = text
    elif text.strip().lower() in OFF_WORDS:
        return None
    else:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(
                f"{option} must be a whole number of runs or 'none' (never prepare, for a"
                f" transaction pooler), not {text!r}"
            ) from None
    if value is not None and value < 0:
        raise ConfigError(f"{option} must be 0 or more, or 'none', not {value}")
    return value


def listen_target(dsn: str, listen_dsn: str | None) -> str | None:
    """Where LISTEN runs: `listen_dsn` when given, nowhere when it is `none` / `off`, else
    the database's own DSN (a direct connection, as without a pooler)."""
    if listen_dsn is None:
        return dsn
    if listen_dsn.strip().lower() in OFF_WORDS:
        return None
    if not listen_dsn.strip():
        raise ConfigError("--listen-dsn must name a database (a DSN) or be 'none'")
    return listen_dsn
