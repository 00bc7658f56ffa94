"""The DEAD lane: tasks that failed for good, waiting for a person."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.app import App
from pgsched.cli.options import Page, first_line, json_output, paged, print_json, render_table
from pgsched.cli.root import CliState
from pgsched.cli.times import parse_time
from pgsched.errors import TaskNotFoundError, TaskStateError
from pgsched.queries import query


@click.group()
def dead() -> None:
    """The DEAD lane: tasks that failed for good, waiting for a person."""


@dead.command("list")
@click.option("--type", "task_type", default=None, help="Only DEAD tasks of this type.")
@click.option("--tenant", default=None, help="Only this tenant's DEAD tasks.")
@click.option("--since", default=None, help="Failed at or after: ISO 8601 with offset, -7d ...")
@paged(50)
@json_output("total and tasks")
@click.pass_obj
def dead_list(
    state: CliState,
    task_type: str | None,
    tenant: str | None,
    since: str | None,
    page: Page,
    as_json: bool,
) -> None:
    """Show DEAD tasks, newest failure first, with how many match in all (on stderr)."""
    params = {
        "task_type": task_type,
        "tenant_id": tenant,
        "since": (parse_time(since, None, option="--since").moment or datetime.now(UTC))
        if since is not None
        else None,
        "max_rows": page.limit,
        "skip_rows": page.offset,
    }
    with psycopg.connect(state.database()) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query("dead_page"), params).fetchall()
        # Past the last page the window count has no row to ride on: count apart.
        total = rows[0]["total"] if rows else cur.execute(query("dead_count"), params).fetchone()
    if isinstance(total, dict):
        total = total["total"]
    for row in rows:
        del row["total"]
    if as_json:
        print_json({"total": total, "offset": page.offset, "limit": page.limit, "tasks": rows})
        return
    for row in rows:
        row["last_error"] = first_line(row["last_error"], 80)
    columns = [
        "id",
        "tenant_id",
        "task_type",
        "attempts",
        "failed_at",
        "holding_back",
        "last_error",
    ]
    click.echo(render_table(rows, columns))
    shown = f"{page.offset + 1}-{page.offset + len(rows)}" if rows else "none"
    click.echo(f"{total} DEAD task(s) match; showing {shown}", err=True)


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
    dsn = state.database()
    try:
        ids = App(dsn).dead_retry(task_id, task_type=task_type, all_tasks=all_tasks)
    except TaskStateError:
        if task_id is not None:
            require_task(dsn, task_id)
        raise
    click.echo(f"retrying {len(ids)} task(s): {' '.join(map(str, ids))}".rstrip(": "))


@dead.command("discard")
@click.argument("task_id", type=int)
@click.option(
    "--reason", default="discarded from the DEAD lane", show_default=True, help="Recorded."
)
@click.pass_obj
def dead_discard(state: CliState, task_id: int, reason: str) -> None:
    """Give up on a DEAD task for good (CANCELLED, with the reason)."""
    dsn = state.database()
    try:
        App(dsn).dead_discard(task_id, reason)
    except TaskStateError:
        require_task(dsn, task_id)
        raise
    click.echo(f"discarded {task_id}")


def require_task(dsn: str, task_id: int) -> None:
    """The database refuses an id outside the DEAD lane in one breath, whether or not the
    task exists; an id that names no task is the user's mistake (exit 2), not a task in the
    wrong state (exit 1)."""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query("task_exists"), {"task_id": task_id}).fetchone()
    if not (row and row["found"]):
        raise TaskNotFoundError(f"no task with id {task_id}")
