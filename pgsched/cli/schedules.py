"""Recurring schedules: list, show, pause, resume, delete."""

from __future__ import annotations

from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.cli.options import fit_table, json_output, print_json
from pgsched.cli.root import CliState
from pgsched.cli.show import render_task
from pgsched.errors import TaskNotFoundError, translate
from pgsched.queries import query

WIDTH = 100
LIST_COLUMNS = [
    "id",
    "tenant_id",
    "task_type",
    "cron_expression",
    "timezone",
    "state",
    "next_fire_at",
]


@click.group()
def schedules() -> None:
    """Recurring schedules: list, show, pause, resume, delete."""


def _state(row: dict[str, Any]) -> str:
    if row["enabled"]:
        return "active"
    return "quarantined" if row["quarantine_reason"] else "paused"


@schedules.command("list")
@click.option("--tenant", default=None, help="Only this tenant's schedules.")
@click.option("--type", "task_type", default=None, help="Only schedules of this task type.")
@json_output("a list of schedules")
@click.pass_obj
def schedules_list(
    state: CliState, tenant: str | None, task_type: str | None, as_json: bool
) -> None:
    """Every schedule: cron, zone, active / paused / quarantined, next fire time (UTC)."""
    with psycopg.connect(state.database()) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            query("schedule_list"), {"tenant_id": tenant, "task_type": task_type}
        ).fetchall()
    for row in rows:
        row["state"] = _state(row)
    if as_json:
        print_json(rows)
        return
    for row in rows:
        if not row["armed_live"]:
            # An active one waits for the sweeper's recurring sweep to arm it (see the `!`
            # lines of `status`); a paused one's cancelled occurrence will not fire.
            row["next_fire_at"] = "not armed" if row["state"] == "active" else None
        elif row["next_fire_at"] is not None:
            row["next_fire_at"] = row["next_fire_at"].strftime("%Y-%m-%d %H:%M:%S")
    click.echo(
        fit_table(rows, LIST_COLUMNS, WIDTH, {"tenant_id": 8, "task_type": 10, "timezone": 8})
    )


@schedules.command("show")
@click.argument("schedule_id", type=int)
@click.option(
    "--events",
    "max_events",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="How many of its latest events to show.",
)
@json_output("schedule and events")
@click.pass_obj
def schedules_show(state: CliState, schedule_id: int, max_events: int, as_json: bool) -> None:
    """One schedule and its latest events (armed, missed, paused, quarantined ...)."""
    with psycopg.connect(state.database()) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query("schedule_show"), {"schedule_id": schedule_id}).fetchone()
        if row is None:
            raise TaskNotFoundError(f"no schedule with id {schedule_id}")
        events = cur.execute(
            query("schedule_event_list"), {"schedule_id": schedule_id, "max_rows": max_events}
        ).fetchall()
    row["state"] = _state(row)
    if as_json:
        print_json({"schedule": row, "events": events})
        return
    click.echo(render_task(row))
    click.echo("")
    click.echo(
        fit_table(events, ["occurred_at", "what", "fire_at", "detail"], WIDTH, {"detail": 20})
    )


def _control(state: CliState, name: str, params: dict[str, Any]) -> None:
    try:
        with psycopg.connect(state.database()) as conn:
            conn.execute(query(name), params)
    except psycopg.Error as exc:
        raise translate(exc) from exc


@schedules.command("pause")
@click.argument("schedule_id", type=int)
@click.option("--reason", default="paused by operator", show_default=True, help="Recorded.")
@click.pass_obj
def schedules_pause(state: CliState, schedule_id: int, reason: str) -> None:
    """Stop a schedule firing; its armed occurrence is cancelled if it has not started."""
    _control(state, "schedule_pause", {"schedule_id": schedule_id, "reason": reason})
    click.echo(f"paused schedule {schedule_id}")


@schedules.command("resume")
@click.argument("schedule_id", type=int)
@click.pass_obj
def schedules_resume(state: CliState, schedule_id: int) -> None:
    """Let a paused or quarantined schedule fire again (the sweeper arms its next run)."""
    _control(state, "schedule_resume", {"schedule_id": schedule_id})
    click.echo(f"resumed schedule {schedule_id}")


@schedules.command("delete")
@click.argument("schedule_id", type=int)
@click.option("--reason", default="deleted by operator", show_default=True, help="Recorded.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def schedules_delete(state: CliState, schedule_id: int, reason: str, yes: bool) -> None:
    """Remove a schedule; its armed occurrence is cancelled if it has not started, and its
    events and past runs stay."""
    if not yes:
        click.confirm(f"delete schedule {schedule_id}?", abort=True)
    _control(state, "schedule_delete", {"schedule_id": schedule_id, "reason": reason})
    click.echo(f"deleted schedule {schedule_id}")
