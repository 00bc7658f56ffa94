"""The `pgsched` group: its global options and the one error boundary of the command line.

Every command raises; only `PgschedGroup.invoke` turns an error into a message and an exit
code: 2 for usage and bad input (click's own usage errors too), 1 for runtime faults (an
unreachable database, a refused state change). A traceback appears only with --debug; an
error that is none of these is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any

import click
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgsched.dsn import DSN_ENV, NoDatabaseError, resolve_dsn
from pgsched.embedded import EmbeddedError
from pgsched.errors import (
    ConfigError,
    InvalidLimitError,
    InvalidTaskError,
    PgschedError,
    SchemaMismatchError,
    TaskNotFoundError,
)
from pgsched.migrations import MigrationError

USAGE = 2
RUNTIME = 1

# A one-shot command against an unreachable server fails after this many seconds, not after
# libpq's default of minutes; a DSN's own connect_timeout (or $PGCONNECT_TIMEOUT) wins.
CONNECT_TIMEOUT_S = 10

# SchemaMismatchError: the database needs `pgsched migrate` (or pgsched an upgrade) first.
_BAD_INPUT = (
    InvalidTaskError,
    InvalidLimitError,
    ConfigError,
    TaskNotFoundError,
    NoDatabaseError,
    SchemaMismatchError,
)


@dataclass
class CliState:
    """What the global options say, handed to every command (`@click.pass_obj`)."""

    dsn: str | None
    debug: bool
    log_format: str = "text"

    def database(self) -> str:
        """The conninfo to use (pgsched.dsn.resolve_dsn), with a connect timeout."""
        return with_connect_timeout(resolve_dsn(self.dsn))


def with_connect_timeout(dsn: str) -> str:
    if "connect_timeout" in conninfo_to_dict(dsn) or os.environ.get("PGCONNECT_TIMEOUT"):
        return dsn
    return make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code of an error the user should see as a message; None for a bug."""
    if isinstance(exc, _BAD_INPUT):
        return USAGE
    if isinstance(exc, PgschedError | EmbeddedError | MigrationError | psycopg.Error):
        return RUNTIME
    return None


def message_for(exc: BaseException) -> str:
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        # libpq's connection failures run over several lines; the first says it all.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"cannot reach the database: {first}"
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    return str(exc).strip() or type(exc).__name__


class PgschedGroup(click.Group):
    """A click group whose `invoke` is the command line's one error boundary."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            code = exit_code_for(exc)
            if code is None:
                raise
            state = ctx.obj if isinstance(ctx.obj, CliState) else None
            if state is not None and state.debug:
                traceback.print_exc()
            click.secho(f"error: {message_for(exc)}", fg="red", err=True)
            ctx.exit(code)


@click.group(cls=PgschedGroup)
@click.option(
    "--dsn",
    envvar=DSN_ENV,
    default=None,
    help=f"PostgreSQL conninfo (or ${DSN_ENV}); else the embedded Postgres, if `pgsched up`"
    " started it.",
)
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    envvar="PGSCHED_LOG_FORMAT",
    help="Log lines as text or one JSON object per line.",
)
@click.version_option(package_name="pgsched", message="pgsched %(version)s")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, debug: bool, log_format: str) -> None:
    """pgsched: a job scheduler engine on PostgreSQL."""
    ctx.obj = CliState(dsn=dsn, debug=debug, log_format=log_format)
