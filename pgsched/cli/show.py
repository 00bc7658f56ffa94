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
        graph = cur.execute(query("task_graph"), {"task_id": task_id}).fetchall()
    if as_json:
        print_json({"task": task, "graph": graph, "timeline": timeline})
        return
    click.echo(render_task(task))
    click.echo("")
    if graph:
        click.echo(render_graph(graph))
        click.echo("")
    click.echo(
        fit_table(
            timeline,
            ["occurred_at", "what", "attempt", "worker", "detail"],
            WIDTH,
            {"worker": 8, "detail": 20},
        )
    )


def render_graph(graph: list[dict[str, Any]]) -> str:
    """The tasks this one waits for (parents) and that wait for it (children), each with
    its status and whether that edge is met."""
    lines = []
    for relation in ("parent", "child"):
        rows = [r for r in graph if r["relation"] == relation]
        if not rows:
            continue
        heading = "waits for (parents):" if relation == "parent" else "waited for by (children):"
        lines.append(heading)
        for r in rows:
            step = f" [{r['step']}]" if r["step"] else ""
            met = "met" if r["met"] else "waiting"
            lines.append(f"  task {r['id']}  {r['task_type']}{step}  {r['status']}  ({met})")
    return "\n".join(lines)


def render_task(task: dict[str, Any]) -> str:
    width = max(len(k) for k in task)
    lines = []
    for key, value in task.items():
        if key in ("payload", "metadata") or (key == "result" and value is not None):
            text = json.dumps(value, sort_keys=True)
        elif key == "progress" and value is not None:
            text = f"{value:.0%}"  # the fraction as a percentage; its note and time follow
        else:
            text = "-" if value is None else str(value)
        lines.append(f"{key.ljust(width)}  {text}")
    return "\n".join(lines)
