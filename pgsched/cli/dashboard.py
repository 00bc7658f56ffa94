"""`pgsched dashboard`: serve the web UI (the `dashboard` extra)."""

from __future__ import annotations

import sys

import click

from pgsched.cli.root import CliState
from pgsched.errors import ConfigError

DEFAULT_PORT = 8471


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="Port."
)
@click.option(
    "--read-dsn",
    default=None,
    envvar="PGSCHED_READ_DSN",
    help="Database for the pages' reads, e.g. as a read-only role [env PGSCHED_READ_DSN].",
)
@click.option("--read-only", is_flag=True, help="No write buttons; every POST is refused.")
@click.option(
    "--hash-token",
    is_flag=True,
    help="Read a token on stdin, print the PGSCHED_DASHBOARD_TOKEN_HASH value for it, exit.",
)
@click.pass_obj
def dashboard(
    state: CliState, host: str, port: int, read_dsn: str | None, read_only: bool, hash_token: bool
) -> None:
    """Serve the web dashboard (binds 127.0.0.1 unless told otherwise).

    Listening on any other address needs authentication: PGSCHED_DASHBOARD_TOKEN_HASH (from
    --hash-token) or PGSCHED_DASHBOARD_TOKEN; browsers then log in with any user name (it is
    recorded as the actor) and the token as the password.
    """
    try:
        import uvicorn

        from pgsched.dashboard.app import DashboardConfig, create_app
        from pgsched.dashboard.security import TokenAuth, check_bind
        from pgsched.dashboard.security import hash_token as make_hash
    except ImportError as exc:
        raise ConfigError(
            f"the dashboard needs its extra: pip install 'pgsched[dashboard]' ({exc.name} missing)"
        ) from None
    if hash_token:
        token = sys.stdin.readline().rstrip("\n")
        click.echo(make_hash(token))
        return
    auth = TokenAuth.from_env()
    check_bind(host, auth)
    config = DashboardConfig(
        dsn=state.database(), read_dsn=read_dsn, read_only=read_only, auth=auth
    )
    click.echo(
        f"pgsched dashboard on http://{host}:{port}/"
        f"{' (read-only)' if read_only else ''}{' (token required)' if auth else ''}",
        err=True,
    )
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")
