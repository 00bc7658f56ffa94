"""The `pgsched` command line. Every command takes --dsn (or PGSCHED_DSN); with neither it
uses the embedded local Postgres (`pgsched up`)."""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import click
import psycopg

from pgsched.app import App
from pgsched.dsn import DSN_ENV, resolve_dsn
from pgsched.embedded import EmbeddedCluster, EmbeddedError
from pgsched.errors import PgschedError
from pgsched.lanes import Lane
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
@click.option("--product", default=None, help="With --scope product.")
@click.option(
    "--misfire",
    type=click.Choice(["run_once", "skip", "catch_up"]),
    default="run_once",
    show_default=True,
    help="Recurring: what to do with fire times missed during downtime.",
)
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
    cron_expression: str | None,
    scope: str,
    product: str | None,
    misfire: str,
) -> None:
    """Schedule a task (prints its id), or with --cron a recurring schedule (prints
    "schedule N"; --tz is its IANA zone, default UTC)."""
    try:
        payload_value = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    try:
        metadata_value = json.loads(metadata)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    dsn = _dsn(ctx)
    if cron_expression is not None:
        if when is not None:
            raise click.UsageError("--at and --cron exclude each other")
        try:
            schedule_id = App(dsn).schedule_recurring(
                task_type,
                cron_expression,
                timezone=zone or "UTC",
                payload=payload_value,
                tenant_id=tenant,
                priority=priority,
                idempotency_key=idempotency_key,
                misfire_policy=misfire,
                max_attempts=max_attempts,
                lane=lane,
                metadata=metadata_value,
                scope=scope,
                product=product,
            )
        except PgschedError as exc:
            _fail(str(exc))
            return
        click.echo(f"schedule {schedule_id}")
        return
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
            scope=scope,
            product=product,
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
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
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


def load_app(spec: str) -> App:
    """`module:attribute` -> the App it names."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{spec!r} is not module:attribute", param_hint="--app")
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--app"
        ) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a pgsched.App", param_hint="--app")
    return app


def parse_lanes(text: str) -> tuple[Lane, ...]:
    try:
        lanes = tuple(dict.fromkeys(Lane.parse(name) for name in text.split(",") if name.strip()))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lanes") from None
    if Lane.DEAD in lanes:
        raise click.BadParameter(
            "DEAD holds terminal failures; no worker runs it", param_hint="--lanes"
        )
    if not lanes:
        raise click.BadParameter("name at least one lane", param_hint="--lanes")
    return lanes


@main.command()
@click.option("--app", "app_spec", required=True, help="Your handlers: module:app (an App).")
@click.option("--lanes", default="high,normal,low", show_default=True)
@click.option(
    "--concurrency", type=int, default=16, show_default=True, help="Tasks at once, per lane."
)
@click.option("--batch-size", type=int, default=100, show_default=True, help="Max rows per claim.")
@click.option(
    "--flush-size",
    type=int,
    default=500,
    show_default=True,
    help="Max outcomes per completion statement; claims pause while this many wait.",
)
@click.option("--lease", "lease_seconds", type=float, default=30.0, show_default=True)
@click.option(
    "--poll-interval", type=float, default=2.0, show_default=True, help="Backup poll (s)."
)
@click.option("--grace", "grace_seconds", type=float, default=30.0, show_default=True)
@click.option("--batch-concurrency", type=int, default=4, show_default=True)
@click.option("--batch-rate", type=float, default=200.0, show_default=True, help="BATCH starts/s.")
@click.option("--worker-id", default=None)
@click.option("--sweeps", is_flag=True, help="Also run the sweeps (one leader is elected).")
@click.option(
    "--max-stuck-threads",
    type=int,
    default=10,
    show_default=True,
    help="Timed-out plain handlers still holding a thread; past this, drain and exit 3.",
)
@click.option(
    "--stall-threshold",
    type=float,
    default=1.0,
    show_default=True,
    help="Log the task that blocks the event loop longer than this (s).",
)
@click.option(
    "--wakeup-debounce",
    type=float,
    default=0.02,
    show_default=True,
    help="At most one NOTIFY-triggered claim per lane per this interval (s).",
)
@click.option("--log-level", default="INFO", show_default=True)
@click.pass_context
def worker(
    ctx: click.Context,
    app_spec: str,
    lanes: str,
    concurrency: int,
    batch_size: int,
    flush_size: int,
    lease_seconds: float,
    poll_interval: float,
    grace_seconds: float,
    batch_concurrency: int,
    batch_rate: float,
    worker_id: str | None,
    sweeps: bool,
    max_stuck_threads: int,
    stall_threshold: float,
    wakeup_debounce: float,
    log_level: str,
) -> None:
    """Run tasks of the given lanes until SIGTERM / SIGINT."""
    import asyncio
    import logging

    from pgsched.worker import Worker, WorkerConfig

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = load_app(app_spec)
    dsn = ctx.obj["dsn"] or app._dsn or resolve_dsn(None)
    try:
        config = WorkerConfig(
            lanes=parse_lanes(lanes),
            concurrency=concurrency,
            batch_size=batch_size,
            flush_size=flush_size,
            lease_seconds=lease_seconds,
            poll_interval=poll_interval,
            grace_seconds=grace_seconds,
            batch_concurrency=batch_concurrency,
            # 0 lifts the limit; a negative rate is refused by the configuration.
            batch_rate=batch_rate if batch_rate != 0 else None,
            worker_id=worker_id,
            run_sweeps=sweeps,
            max_stuck_threads=max_stuck_threads,
            stall_threshold=stall_threshold,
            wakeup_debounce=wakeup_debounce,
        )
    except ValueError as exc:
        _fail(str(exc))
        return
    runner = Worker(dsn, app.registry, config)
    asyncio.run(runner.run())
    if runner.abandoned_threads or runner.exit_status:
        # A plain handler still running past the grace period would hold the interpreter
        # open (its thread cannot be interrupted); its task was released, so leave now.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(runner.exit_status)


@main.group()
def dead() -> None:
    """The DEAD lane: tasks that failed for good, waiting for a person."""


@dead.command("list")
@click.option("--limit", "max_rows", type=int, default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead_list(ctx: click.Context, max_rows: int, as_json: bool) -> None:
    """Show DEAD tasks, newest failure first."""
    rows = App(_dsn(ctx.find_root())).dead_list(max_rows)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        row["last_error"] = (
            (row["last_error"] or "").splitlines()[0][:80] if row["last_error"] else "-"
        )
    columns = ["id", "tenant_id", "task_type", "attempts", "failed_at", "last_error"]
    click.echo(render_table(rows, columns))


@dead.command("retry")
@click.argument("task_id", type=int, required=False)
@click.option("--type", "task_type", default=None, help="Every DEAD task of this type.")
@click.option("--all", "all_tasks", is_flag=True, help="Every DEAD task.")
@click.pass_context
def dead_retry(
    ctx: click.Context, task_id: int | None, task_type: str | None, all_tasks: bool
) -> None:
    """Bring DEAD tasks back to be run again (attempts start over)."""
    if sum([task_id is not None, task_type is not None, all_tasks]) != 1:
        raise click.UsageError("give exactly one of TASK_ID, --type T or --all")
    root = ctx.find_root()
    try:
        ids = App(_dsn(root)).dead_retry(task_id, task_type=task_type, all_tasks=all_tasks)
    except PgschedError as exc:
        _fail(str(exc))
        return
    click.echo(f"retrying {len(ids)} task(s): {' '.join(map(str, ids))}".rstrip(": "))


@dead.command("discard")
@click.argument("task_id", type=int)
@click.option("--reason", default="discarded from the DEAD lane", show_default=True)
@click.pass_context
def dead_discard(ctx: click.Context, task_id: int, reason: str) -> None:
    """Give up on a DEAD task for good (CANCELLED, with the reason)."""
    try:
        App(_dsn(ctx.find_root())).dead_discard(task_id, reason)
    except PgschedError as exc:
        _fail(str(exc))
        return
    click.echo(f"discarded {task_id}")


@main.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """The main job: schedule a mix of work, run it, show what happened."""
    import logging

    from pgsched.demo import run_demo

    logging.basicConfig(level=logging.WARNING, format="  %(levelname)s %(name)s: %(message)s")
    dsn = _dsn(ctx)
    click.echo(f"database: {dsn}")
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
    ctx.invoke(status, as_json=False)


@main.command()
@click.option("--once", is_flag=True, help="Run every sweep once (if elected) and exit.")
@click.option("--promotion-interval", type=float, default=3600.0, show_default=True)
@click.option("--recurring-interval", type=float, default=60.0, show_default=True)
@click.option("--rescue-interval", type=float, default=60.0, show_default=True)
@click.option("--retention-interval", type=float, default=3600.0, show_default=True)
@click.option("--retention-days", type=float, default=30.0, show_default=True)
@click.option("--leader-retry", type=float, default=5.0, show_default=True)
@click.option("--log-level", default="INFO", show_default=True)
@click.pass_context
def scheduler(
    ctx: click.Context,
    once: bool,
    promotion_interval: float,
    recurring_interval: float,
    rescue_interval: float,
    retention_interval: float,
    retention_days: float,
    leader_retry: float,
    log_level: str,
) -> None:
    """Run the sweeps (promotion, recurring, rescue, retention) while elected leader."""
    import logging
    import signal
    from datetime import timedelta

    from pgsched.sweeps import (
        PromotionSweep,
        RecurringSweep,
        RescueSweep,
        RetentionSweep,
        Sweep,
        Sweeper,
    )

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    dsn = _dsn(ctx)
    sweeps: list[Sweep] = [
        PromotionSweep(interval=promotion_interval),
        RecurringSweep(interval=recurring_interval),
        RescueSweep(interval=rescue_interval),
        RetentionSweep(interval=retention_interval, keep=timedelta(days=retention_days)),
    ]
    if once:
        from pgsched.sweeps import run_all_once

        for name, counts in run_all_once(dsn, sweeps).items():
            click.echo(f"{name}: {json.dumps(counts)}")
        return
    runner = Sweeper(dsn, sweeps, leader_retry=leader_retry)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    signal.signal(signal.SIGINT, lambda *_: runner.stop())
    runner.run()


@main.command()
@click.option("--type", "task_type", default=None)
@click.option("--tenant", default=None)
@click.option("--task", "task_id", type=int, default=None)
@click.option("--since", default=None, help="ISO time (with offset) or +/-duration like -7d.")
@click.option("--until", default=None)
@click.option("--status", "outcome", default=None, help="COMPLETED, FAILED, QUEUED, RUNNING, ...")
@click.option("--limit", "max_rows", type=int, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(
    ctx: click.Context,
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
    dsn = _dsn(ctx)
    rows = App(dsn).history(
        task_type=task_type,
        tenant_id=tenant,
        task_id=task_id,
        since=_history_time(since, "--since"),
        until=_history_time(until, "--until"),
        outcome=outcome.upper() if outcome else None,
        max_rows=max_rows,
    )
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        row["detail"] = (row["detail"] or "").splitlines()[0][:60] if row["detail"] else "-"
    columns = [
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
    click.echo(render_table(rows, columns))


def _history_time(text: str | None, hint: str) -> datetime | None:
    if text is None:
        return None
    match = re.match(r"^([+-])(\d+(?:\.\d+)?)\s*(s|m|h|d)$", text.strip())
    if match:
        amount = float(match[2]) * (-1 if match[1] == "-" else 1)
        return datetime.now(UTC) + timedelta(**{_UNITS[match[3]]: amount})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a time", param_hint=hint) from None
    if moment.utcoffset() is None:
        raise click.BadParameter(f"{text!r} has no UTC offset", param_hint=hint)
    return moment


@main.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """The benchmark suite: `pgsched bench --quick` (minutes), `pgsched bench` (10M tasks).

    Same as `python -m benchmarks`; every option (see `pgsched bench --help`) passes through.
    The suite lives in the source tree, beside the peers it compares against
    (`pip install -e '.[bench]'`)."""
    try:
        from benchmarks.__main__ import main as run_suite
    except ImportError:
        _fail(
            "the benchmark suite is part of the source tree (benchmarks/), not of the package:"
            " run it from a checkout installed with pip install -e '.[bench]'"
        )
        return
    sys.exit(run_suite(list(args)))


@main.group()
def tenants() -> None:
    """The tenant registry: who product and global tasks run for."""


@tenants.command("add")
@click.argument("tenant_id")
@click.option("--product", required=True)
@click.option("--metadata", default="{}", help="A JSON object.")
@click.pass_context
def tenants_add(ctx: click.Context, tenant_id: str, product: str, metadata: str) -> None:
    """Register a tenant (or update and re-activate it)."""
    try:
        metadata_value = json.loads(metadata)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    try:
        App(_dsn(ctx.find_root())).tenant_add(tenant_id, product, metadata_value)
    except PgschedError as exc:
        _fail(str(exc))
        return
    click.echo(f"tenant {tenant_id} ({product}) active")


@tenants.command("disable")
@click.argument("tenant_id")
@click.pass_context
def tenants_disable(ctx: click.Context, tenant_id: str) -> None:
    """Stop running product/global tasks for a tenant (its own tasks are unaffected)."""
    try:
        App(_dsn(ctx.find_root())).tenant_set_active(tenant_id, False)
    except PgschedError as exc:
        _fail(str(exc))
        return
    click.echo(f"tenant {tenant_id} disabled")


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def tenants_list(ctx: click.Context, as_json: bool) -> None:
    """Every tenant, by product."""
    rows = App(_dsn(ctx.find_root())).tenants()
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    click.echo(render_table(rows, ["tenant_id", "product", "active", "created_at"]))
