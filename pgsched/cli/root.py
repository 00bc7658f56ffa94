"""The `pgsched` group: its global options and the one error boundary of the command line.

Every command raises; only `PgschedGroup` turns an error into a message and an exit code,
one line on stderr, `error: ...` (pgsched.cli.messages), whoever refused:

    2  bad input: click's usage errors, a value the task model or the database refused, a
       malformed DSN, an id that names nothing, no database named, a database that needs
       `pgsched migrate` (or pgsched an upgrade)
    1  a runtime failure: the database unreachable, a task no longer in a state that allows
       the change, anything else the database raised; `status --check` and `doctor` when
       they find a problem
    0  done

A traceback appears only with --debug; an error that is none of these is a bug and keeps
its traceback.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any

import click
import psycopg
from click.core import ParameterSource
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import ValidationError

from pgsched.cli.messages import StyledError, click_message, engine_words, styled
from pgsched.dsn import DSN_ENV, BadDsnError, NoDatabaseError, check_conninfo, resolve_dsn
from pgsched.embedded import EmbeddedError
from pgsched.errors import (
    ConfigError,
    InvalidLimitError,
    InvalidTaskError,
    PgschedError,
    SchemaMismatchError,
    TaskNotFoundError,
)
from pgsched.migrations import MigrationError, require_current_schema

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
    BadDsnError,
    ValidationError,
)

# What Postgres says when a statement names a table, schema, function or type that is not
# there: on a database pgsched never migrated (or an older pgsched migrated), every command
# meets one of these first.
_MISSING_OBJECT = {"42P01", "3F000", "42883", "42704"}


@dataclass
class CliState:
    """What the global options say, handed to every command (`@click.pass_obj`)."""

    dsn: str | None
    debug: bool
    log_format: str = "text"
    # Where `dsn` came from, as a refusal names it: --dsn or PGSCHED_DSN.
    dsn_source: str = "--dsn"

    def database(self, fallback: str | None = None, fallback_source: str = "dsn") -> str:
        """The conninfo to use (pgsched.dsn.resolve_dsn: --dsn, PGSCHED_DSN, `fallback`,
        then the running embedded Postgres), with a connect timeout. A malformed one is
        refused here, where every command asks for its database, naming where it came from."""
        if self.dsn:
            check_conninfo(self.dsn, self.dsn_source)
        elif fallback:
            check_conninfo(fallback, fallback_source)
        return with_connect_timeout(resolve_dsn(self.dsn or fallback))


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
        return engine_words(exc.diag.message_primary)
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "input"
        return f"{where}: {error['msg']}"
    return engine_words(str(exc).strip()) or type(exc).__name__


def schema_problem(state: CliState | None, exc: BaseException) -> SchemaMismatchError | None:
    """When a statement met a missing table or function, whether the database needs
    `pgsched migrate` (or pgsched an upgrade): the error that says so, else None."""
    if state is None or not isinstance(exc, psycopg.Error) or exc.sqlstate not in _MISSING_OBJECT:
        return None
    try:
        with psycopg.connect(state.database(), autocommit=True) as conn:
            require_current_schema(conn)
    except SchemaMismatchError as mismatch:
        return mismatch
    except (PgschedError, psycopg.Error):
        return None
    return None


class PgschedGroup(click.Group):
    """A click group that is the command line's one error boundary: `invoke` for what a
    command raises, `make_context` for what click refuses before any command runs."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.ClickException as exc:
            if isinstance(exc, StyledError):
                raise
            raise styled(click_message(exc), exc.exit_code) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (StyledError, click.exceptions.Exit, click.exceptions.NoArgsIsHelpError):
            raise
        except click.ClickException as exc:
            raise styled(click_message(exc), exc.exit_code) from exc
        except click.Abort:
            click.echo(err=True)  # after a prompt the answer was never typed: a new line
            raise styled("aborted", RUNTIME) from None
        except Exception as exc:
            state = ctx.obj if isinstance(ctx.obj, CliState) else None
            refused: BaseException = schema_problem(state, exc) or exc
            code = exit_code_for(refused)
            if code is None:
                raise
            if state is not None and state.debug:
                traceback.print_exc()
            raise styled(message_for(refused), code) from None


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
    from_env = ctx.get_parameter_source("dsn") is ParameterSource.ENVIRONMENT
    ctx.obj = CliState(
        dsn=dsn, debug=debug, log_format=log_format, dsn_source=DSN_ENV if from_env else "--dsn"
    )
