"""`pgsched show ID`: one task's row and its timeline, from scheduling to now."""

from __future__ import annotations

import json
from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.cli.options import fit_table, json_output, print_json
from pgsched.cli.root import CliState
from pgsched.errors import TaskNotFoundError
from pgsched.queries import query

WIDTH = 100


@click.command()
@click.argument("task_id", type=int)
@json_output("task and timeline")
@click.pass_obj
def show(state: CliState, task_id: int, as_json: bool) -> None:
    """One task: its row (status, due time, attempts, lease, last error) and its timeline."""
    with psycopg.connect(state.database()) as conn, conn.cursor(row_factory=dict_row) as cur:
        task = cur.execute(query("task_show"), {"task_id": task_id}).fetchone()
        if task is None:
            raise TaskNotFoundError(f"no task with id {task_id}")
        timeline = cur.execute(query("task_timeline"), {"task_id": task_id}).fetchall()
    if as_json:
        print_json({"task": task, "timeline": timeline})
        return
    click.echo(render_task(task))
    click.echo("")
    click.echo(
        fit_table(
            timeline,
            ["occurred_at", "what", "attempt", "worker", "detail"],
            WIDTH,
            {"worker": 8, "detail": 20},
        )
    )


def render_task(task: dict[str, Any]) -> str:
    width = max(len(k) for k in task)
    lines = []
    for key, value in task.items():
        if key in ("payload", "metadata"):
            text = json.dumps(value, sort_keys=True)
        else:
            text = "-" if value is None else str(value)
        lines.append(f"{key.ljust(width)}  {text}")
    return "\n".join(lines)
