"""Tasks: schedule (one task, or with --cron a recurring schedule), cancel, status, history."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click
import psycopg
from psycopg.rows import class_row

from pgsched.app import App
from pgsched.cli.options import (
    JSON_OBJECT,
    JSON_VALUE,
    check_zone,
    first_line,
    render_table,
)
from pgsched.cli.root import CliState
from pgsched.cli.times import parse_time
from pgsched.queries import query


@dataclass
class ZoneCheck:
    problem: str | None


def _zone_problem(dsn: str, zone: str) -> str | None:
    """The database's judgement of a zone name (unknown, ambiguous), as the SQL API gives it."""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=class_row(ZoneCheck)) as cur:
        row = cur.execute(query("timezone_problem"), {"timezone": zone}).fetchone()
    return row.problem if row else None


@click.command()
@click.argument("task_type")
@click.option("--payload", type=JSON_VALUE, default="{}", help="The task's payload, as JSON.")
@click.option("--at", "when", default=None, help="When to run: now, +15m, +2h, +3d, or ISO 8601.")
@click.option(
    "--tz",
    "zone",
    default=None,
    callback=check_zone,
    help="IANA zone: of a wall-clock --at, or of a --cron schedule (default UTC).",
)
@click.option("--tenant", default="default", show_default=True, help="The tenant it runs for.")
@click.option("--priority", type=int, default=5, show_default=True, help="0 (lowest) to 10.")
@click.option("--key", "idempotency_key", default=None, help="Idempotency key (per tenant).")
@click.option("--lane", default=None, help="Force a lane (BATCH); else chosen by priority.")
@click.option(
    "--max-attempts", type=int, default=3, show_default=True, help="Attempts before DEAD."
)
@click.option("--metadata", type=JSON_OBJECT, default="{}", help="Metadata, as a JSON object.")
@click.option(
    "--cron", "cron_expression", default=None, help="Recurring: a 5-field cron expression."
)
@click.option(
    "--scope",
    type=click.Choice(["tenant", "product", "global"]),
    default="tenant",
    show_default=True,
    help="One tenant, every active tenant of --product, or every active tenant.",
)
@click.option("--product", default=None, help="The product, with --scope product.")
@click.option(
    "--misfire",
    type=click.Choice(["run_once", "skip", "catch_up"]),
    default="run_once",
    show_default=True,
    help="Recurring: what to do with fire times missed during downtime.",
)
@click.pass_obj
def schedule(
    state: CliState,
    task_type: str,
    payload: Any,
    when: str | None,
    zone: str | None,
    tenant: str,
    priority: int,
    idempotency_key: str | None,
    lane: str | None,
    max_attempts: int,
    metadata: dict[str, Any],
    cron_expression: str | None,
    scope: str,
    product: str | None,
    misfire: str,
) -> None:
    """Schedule a task (prints "created task N", or "task N already exists ..." for an
    idempotent duplicate), or with --cron a recurring schedule (prints
    "schedule N"; --tz is its IANA zone, default UTC)."""
    if cron_expression is not None and when is not None:
        raise click.UsageError("--at and --cron exclude each other")
    dsn = state.database()
    if cron_expression is not None:
        schedule_id = App(dsn).schedule_recurring(
            task_type,
            cron_expression,
            timezone=zone or "UTC",
            payload=payload,
            tenant_id=tenant,
            priority=priority,
            idempotency_key=idempotency_key,
            misfire_policy=misfire,
            max_attempts=max_attempts,
            lane=lane,
            metadata=metadata,
            scope=scope,
            product=product,
        )
        click.echo(f"schedule {schedule_id}")
        return
    if zone is not None:
        problem = _zone_problem(dsn, zone)
        if problem:
            raise click.BadParameter(problem, param_hint="--tz")
    run_at = None
    if when is not None:
        parsed = parse_time(when, zone, option="--at")
        if parsed.note:
            click.echo(f"note: {parsed.note}", err=True)
        run_at = parsed.moment
    task_id = App(dsn).schedule(
        task_type,
        payload,
        run_at=run_at,
        tenant_id=tenant,
        priority=priority,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
        lane=lane,
        metadata=metadata,
        scope=scope,
        product=product,
    )
    if task_id.created:
        click.echo(f"created task {task_id}")
    else:
        owner = tenant if scope == "tenant" else "_all"
        click.echo(
            f"task {task_id} already exists for key {idempotency_key} (tenant {owner});"
            " nothing changed"
        )


@click.command()
@click.argument("task_id", type=int)
@click.option(
    "--reason", default="cancelled by operator", show_default=True, help="Recorded with it."
)
@click.pass_obj
def cancel(state: CliState, task_id: int, reason: str) -> None:
    """Cancel a task that has not started."""
    App(state.database()).cancel(task_id, reason)
    click.echo(f"cancelled {task_id}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(state: CliState, as_json: bool) -> None:
    """Per lane: cold, queued, due now, processing, dead, oldest lateness."""
    rows = App(state.database()).lane_summary()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    columns = ["lane", "cold", "queued", "due_now", "processing", "dead", "oldest_lateness_s"]
    click.echo(render_table(rows, columns))


HISTORY_COLUMNS = [
    "task_id",
    "tenant_id",
    "task_type",
    "attempt",
    "scheduled_for",
    "started_at",
    "finished_at",
    "lateness_ms",
    "worker",
    "outcome",
    "detail",
]


@click.command()
@click.option("--type", "task_type", default=None, help="Only runs of this task type.")
@click.option("--tenant", default=None, help="Only runs for this tenant.")
@click.option("--task", "task_id", type=int, default=None, help="Only runs of this task id.")
@click.option("--since", default=None, help="From: ISO 8601 with offset, now, or -7d, -2h ...")
@click.option("--until", default=None, help="Until: the same forms as --since.")
@click.option("--status", "outcome", default=None, help="COMPLETED, FAILED, QUEUED, RUNNING, ...")
@click.option("--limit", "max_rows", type=int, default=100, show_default=True, help="Max rows.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def history(
    state: CliState,
    task_type: str | None,
    tenant: str | None,
    task_id: int | None,
    since: str | None,
    until: str | None,
    outcome: str | None,
    max_rows: int,
    as_json: bool,
) -> None:
    """Did it run? Each run: scheduled, started, finished, lateness, worker, outcome."""
    bounds: dict[str, datetime] = {}
    for option, text in (("--since", since), ("--until", until)):
        if text is not None:
            bounds[option] = parse_time(text, None, option=option).moment or datetime.now(UTC)
    rows = App(state.database()).history(
        task_type=task_type,
        tenant_id=tenant,
        task_id=task_id,
        since=bounds.get("--since"),
        until=bounds.get("--until"),
        outcome=outcome.upper() if outcome else None,
        max_rows=max_rows,
    )
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        row["detail"] = first_line(row["detail"], 60)
    click.echo(render_table(rows, HISTORY_COLUMNS))
