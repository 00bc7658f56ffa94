"""The `pgsched` command line. Every command takes --dsn (or PGSCHED_DSN); with neither it
uses the embedded local Postgres (`pgsched up`)."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import click
import psycopg

from pgsched.app import App
from pgsched.config import DSN_ENV, resolve_dsn
from pgsched.embedded import EmbeddedCluster, EmbeddedError
from pgsched.errors import PgschedError
from pgsched.migrations import MigrationError, migrate
from pgsched.queries import query

_RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_when(text: str | None, zone: str | None, dsn: str) -> datetime | None:
    """`now`, `+90s`/`+15m`/`+2h`/`+3d`, an ISO time with an offset, or a wall-clock time
    with --tz. A wall-clock time without --tz is refused: it names no instant."""
    if zone is not None:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(query("timezone_problem"), {"timezone": zone}).fetchone()
        if row and row[0]:
            raise click.BadParameter(row[0], param_hint="--tz")
    if text is None or text == "now":
        return None
    relative = _RELATIVE.match(text.strip())
    if relative:
        amount, unit = float(relative[1]), _UNITS[relative[2]]
        return datetime.now(UTC) + timedelta(**{unit: amount})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: use now, +15m, +2h, +3d, or ISO 8601 "
            "(2026-12-24T09:00:00+01:00, or a wall-clock time with --tz)",
            param_hint="--at",
        ) from None
    if moment.utcoffset() is None:
        if zone is None:
            raise click.BadParameter(
                f"{text!r} has no UTC offset; add one or give --tz ZONE", param_hint="--at"
            )
        moment = moment.replace(tzinfo=ZoneInfo(zone))
    return moment


def _fail(message: str) -> None:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)


@click.group()
@click.option(
    "--dsn",
    envvar=DSN_ENV,
    default=None,
    help=f"PostgreSQL conninfo (or ${DSN_ENV}); default: the embedded local Postgres.",
)
@click.pass_context
def main(ctx: click.Context, dsn: str | None) -> None:
    """pgsched: a job scheduler engine on PostgreSQL."""
    ctx.obj = {"dsn": dsn}


def _dsn(ctx: click.Context) -> str:
    try:
        return resolve_dsn(ctx.obj["dsn"])
    except EmbeddedError as exc:
        _fail(str(exc))
        raise  # unreachable; keeps mypy's flow analysis honest


@main.command("migrate")
@click.pass_context
def migrate_cmd(ctx: click.Context) -> None:
    """Apply pgsched's SQL migrations (safe to run twice, or from two processes)."""
    dsn = ctx.obj["dsn"] or resolve_dsn(None)
    try:
        result = migrate(dsn)
    except MigrationError as exc:
        _fail(str(exc))
        return
    if result.applied:
        applied = ", ".join(f"{v:04d}" for v in result.applied)
        click.echo(f"applied {applied}; schema version {result.current_version}")
    else:
        click.echo(f"up to date at schema version {result.current_version}")


@main.command()
def up() -> None:
    """Start the embedded local Postgres (under ./.pgsched), migrate it, print its DSN."""
    from pgsched.embedded import ensure_embedded

    try:
        dsn = ensure_embedded()
    except EmbeddedError as exc:
        _fail(str(exc))
        return
    click.echo(dsn)


@main.command()
def down() -> None:
    """Stop the embedded local Postgres."""
    stopped = EmbeddedCluster.default().stop()
    click.echo("stopped" if stopped else "not running")


@main.command()
@click.argument("task_type")
@click.option("--payload", default="{}", help="The task's payload, as JSON.")
@click.option("--at", "when", default=None, help="now, +15m, +2h, +3d, or an ISO 8601 time.")
@click.option("--tz", "zone", default=None, help="IANA zone for a wall-clock --at.")
@click.option("--tenant", default="default", show_default=True)
@click.option("--priority", type=int, default=5, show_default=True, help="0-10.")
@click.option("--key", "idempotency_key", default=None, help="Idempotency key (per tenant).")
@click.option("--lane", default=None, help="Force a lane (BATCH).")
@click.option("--max-attempts", type=int, default=3, show_default=True)
@click.option("--metadata", default="{}", help="Metadata, as a JSON object.")
@click.pass_context
def schedule(
    ctx: click.Context,
    task_type: str,
    payload: str,
    when: str | None,
    zone: str | None,
    tenant: str,
    priority: int,
    idempotency_key: str | None,
    lane: str | None,
    max_attempts: int,
    metadata: str,
) -> None:
    """Schedule a task; prints its id."""
    try:
        payload_value = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    try:
        metadata_value = json.loads(metadata)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    dsn = _dsn(ctx)
    run_at = parse_when(when, zone, dsn)
    try:
        task_id = App(dsn).schedule(
            task_type,
            payload_value,
            run_at=run_at,
            tenant_id=tenant,
            priority=priority,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            lane=lane,
            metadata=metadata_value,
        )
    except PgschedError as exc:
        _fail(str(exc))
        return
    click.echo(task_id)


@main.command()
@click.argument("task_id", type=int)
@click.option("--reason", default="cancelled by operator", show_default=True)
@click.pass_context
def cancel(ctx: click.Context, task_id: int, reason: str) -> None:
    """Cancel a task that has not started."""
    try:
        App(_dsn(ctx)).cancel(task_id, reason)
    except PgschedError as exc:
        _fail(str(exc))
        return
    click.echo(f"cancelled {task_id}")


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per lane: cold, queued, due now, processing, dead, oldest lateness."""
    rows = App(_dsn(ctx)).lane_summary()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    columns = ["lane", "cold", "queued", "due_now", "processing", "dead", "oldest_lateness_s"]
    click.echo(render_table(rows, columns))
