"""The database: `migrate` any database; `up` / `down` the embedded one; `demo`, the main job.

Only `up` and `demo` start the embedded Postgres (pgsched.embedded); every other command
uses it only while it runs (pgsched.dsn).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import click

from pgsched.cli.messages import StyledBadInput
from pgsched.cli.options import render_table
from pgsched.cli.root import CliState, with_connect_timeout
from pgsched.dsn import check_conninfo
from pgsched.embedded import EmbeddedCluster, ensure_embedded
from pgsched.migrations import distribution_problem, migrate
from pgsched.startup import DISTRIBUTED_NOT_YET


@click.command("migrate")
@click.option(
    "--distributed",
    is_flag=True,
    help="Then distribute the tables over the Citus worker nodes, by tenant (on a Citus"
    " coordinator with its worker nodes registered; one way). See docs/scaling.md.",
)
@click.pass_obj
def migrate_cmd(state: CliState, distributed: bool) -> None:
    """Apply pgsched's SQL migrations (safe to run twice, or from two processes)."""
    dsn = state.database()
    if distributed:
        problem = distribution_problem(dsn)
        if problem:
            raise StyledBadInput(f"--distributed: {problem}. Nothing was changed.")
    result = migrate(dsn, distributed=distributed)
    if result.applied:
        applied = ", ".join(f"{v:04d}" for v in result.applied)
        click.echo(f"applied {applied}; schema version {result.current_version}")
    elif result.code_applied:
        # Only functions, views or triggers changed (files of sql/code/).
        code = ", ".join(result.code_applied)
        click.echo(f"applied sql/code/ {code}; schema version {result.current_version}")
    else:
        click.echo(f"up to date at schema version {result.current_version}")
    if result.distributed:
        click.echo(f"{result.distributed}: tables placed by tenant over the Citus worker nodes")
        click.echo(DISTRIBUTED_NOT_YET[0].upper() + DISTRIBUTED_NOT_YET[1:])


@click.command()
def up() -> None:
    """Start the embedded local Postgres ($PGSCHED_HOME, default ~/.local/share/pgsched),
    migrate it, print its DSN."""
    click.echo(ensure_embedded())


@click.command()
def down() -> None:
    """Stop the embedded local Postgres (nothing starts it again but `up` or `demo`)."""
    stopped = EmbeddedCluster.default().stop()
    click.echo("stopped" if stopped else "not running")


@click.command()
@click.pass_obj
def demo(state: CliState) -> None:
    """The main job: schedule a mix of work, run it, show what happened (on --dsn /
    PGSCHED_DSN, else on the embedded Postgres, started if needed)."""
    import logging

    from pgsched.demo import run_demo

    logging.basicConfig(level=logging.WARNING, format="  %(levelname)s %(name)s: %(message)s")
    if state.dsn:
        check_conninfo(state.dsn, state.dsn_source)
    given = state.dsn or ensure_embedded()
    click.echo(f"database: {given}")
    dsn = with_connect_timeout(given)
    figures = run_demo(dsn, echo=click.echo)
    click.echo("\nper lane (this run's tasks):")
    columns = ["lane", "completed", "dead", "hot_waiting", "cold_waiting"]
    click.echo(render_table(figures["per_lane"], columns))
    click.echo("\nlateness, start - scheduled time (ms):")
    click.echo(
        render_table(
            figures["lateness"], ["lane", "due", "runs", "p50_ms", "p95_ms", "p99_ms", "max_ms"]
        )
    )
    click.echo("\npgsched status:")
    from pgsched.app import App

    columns = ["lane", "cold", "queued", "due_now", "processing", "dead", "oldest_lateness_s"]
    click.echo(render_table(App(dsn).lane_summary(), columns))
    if not state.dsn:
        # The demo started it (or found it running) and leaves it so, for a look around.
        home = EmbeddedCluster.default().home
        click.echo("")
        click.echo(f"The embedded Postgres is still running (its folder: {home}).")
        click.echo(f"Stop it with: {this_command()} down")


def this_command() -> str:
    """How to run pgsched again the way it was run now: `pgsched` when that is what the PATH
    finds, else the script's path, or `python -m pgsched`."""
    script = sys.argv[0]
    if Path(script).name != "pgsched":
        return f"{shlex.quote(sys.executable)} -m pgsched"
    on_path = shutil.which("pgsched")
    if on_path and Path(on_path).resolve() == Path(script).resolve():
        return "pgsched"
    return shlex.quote(script)
