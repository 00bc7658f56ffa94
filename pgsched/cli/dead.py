"""The DEAD lane: tasks that failed for good, waiting for a person."""

from __future__ import annotations

import json

import click

from pgsched.app import App
from pgsched.cli.options import first_line, render_table
from pgsched.cli.root import CliState


@click.group()
def dead() -> None:
    """The DEAD lane: tasks that failed for good, waiting for a person."""


@dead.command("list")
@click.option("--limit", "max_rows", type=int, default=50, show_default=True, help="Max rows.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def dead_list(state: CliState, max_rows: int, as_json: bool) -> None:
    """Show DEAD tasks, newest failure first."""
    rows = App(state.database()).dead_list(max_rows)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        row["last_error"] = first_line(row["last_error"], 80)
    columns = ["id", "tenant_id", "task_type", "attempts", "failed_at", "last_error"]
    click.echo(render_table(rows, columns))


@dead.command("retry")
@click.argument("task_id", type=int, required=False)
@click.option("--type", "task_type", default=None, help="Every DEAD task of this type.")
@click.option("--all", "all_tasks", is_flag=True, help="Every DEAD task.")
@click.pass_obj
def dead_retry(
    state: CliState, task_id: int | None, task_type: str | None, all_tasks: bool
) -> None:
    """Bring DEAD tasks back to be run again (attempts start over)."""
    if sum([task_id is not None, task_type is not None, all_tasks]) != 1:
        raise click.UsageError("give exactly one of TASK_ID, --type T or --all")
    ids = App(state.database()).dead_retry(task_id, task_type=task_type, all_tasks=all_tasks)
    click.echo(f"retrying {len(ids)} task(s): {' '.join(map(str, ids))}".rstrip(": "))


@dead.command("discard")
@click.argument("task_id", type=int)
@click.option(
    "--reason", default="discarded from the DEAD lane", show_default=True, help="Recorded."
)
@click.pass_obj
def dead_discard(state: CliState, task_id: int, reason: str) -> None:
    """Give up on a DEAD task for good (CANCELLED, with the reason)."""
    App(state.database()).dead_discard(task_id, reason)
    click.echo(f"discarded {task_id}")
