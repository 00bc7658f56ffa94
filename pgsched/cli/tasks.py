"""Tasks: schedule (one task, or with --cron a recurring schedule), cancel, status, history."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click
import psycopg
from psycopg.rows import class_row, dict_row
from pydantic import ValidationError

from pgsched.app import App
from pgsched.cli.findings import describe_leader, read_findings
from pgsched.cli.messages import validation_message
from pgsched.cli.options import (
    JSON_OBJECT,
    JSON_VALUE,
    Page,
    check_zone,
    first_line,
    fit_table,
    json_output,
    paged,
    print_json,
    render_table,
)
from pgsched.cli.root import CliState
from pgsched.cli.times import parse_duration, parse_time
from pgsched.errors import InvalidTaskError
from pgsched.queries import query
from pgsched.tasks import TaskSpec

# The task model's fields as `schedule` takes them.
TASK_OPTIONS = {
    "task_type": "TASK_TYPE",
    "payload": "--payload",
    "run_at": "--at",
    "tenant_id": "--tenant",
    "priority": "--priority",
    "idempotency_key": "--key",
    "max_attempts": "--max-attempts",
    "lane": "--lane",
    "metadata": "--metadata",
}


def check_task(**fields: Any) -> None:
    """Refuse what the task model refuses before anything is sent, in the words of the
    options (App would say `priority: Input should be less than or equal to 10`)."""
    try:
        TaskSpec.model_validate(fields)
    except ValidationError as exc:
        raise InvalidTaskError(validation_message(exc, TaskSpec, TASK_OPTIONS)) from None


@dataclass
class ZoneCheck:
    problem: str | None


def _zone_problem(dsn: str, zone: str) -> str | None:
    """The database's judgement of a zone name (unknown, ambiguous), as the SQL API gives it."""
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=class_row(ZoneCheck)) as cur:
        row = cur.execute(query("timezone_problem"), {"timezone": zone}).fetchone()
    return row.problem if row else None


def _same_schedule(dsn: str, **params: Any) -> int | None:
    """A schedule the new one would duplicate (see the schedule_same statement)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query("schedule_same"), params).fetchone()
    return int(row[0]) if row else None


@click.command()
@click.argument("task_type")
@click.option(
    "--payload",
    type=JSON_VALUE,
    default="{}",
    help="The task's payload, as JSON, or @FILE to read it from a file (@- for stdin).",
)
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
@click.option(
    "--metadata",
    type=JSON_OBJECT,
    default="{}",
    help="Metadata, as a JSON object, or @FILE to read it from a file (@- for stdin).",
)
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
@click.option(
    "--allow-duplicate",
    is_flag=True,
    help="Recurring: create it even if a schedule of the same work on the same clock exists.",
)
@click.option(
    "--unique-for",
    default=None,
    help="With --key: the key names its task only this long (90s, 15m, 2h, 3d).",
)
@click.option(
    "--debounce",
    default=None,
    help="With --key: one task for a burst of calls, due this long after the last (30s, 5m).",
)
@click.option(
    "--traceparent", default=None, help="The W3C trace context of the request scheduling it."
)
@click.option(
    "--retry-delays",
    default=None,
    help="Waits after failed attempts 1, 2, ... (the last repeats): 1,10s,1m,10m.",
)
@click.option(
    "--after",
    "after",
    type=int,
    multiple=True,
    help="Run only after task ID finished (repeat for several parents); waits in the cold tier.",
)
@click.option(
    "--on-parent-failure",
    type=click.Choice(["hold", "cancel", "run"]),
    default=None,
    help="With --after: what a parent going DEAD or CANCELLED does to it (default hold).",
)
@click.option(
    "--complete-by",
    default=None,
    help="One task's deadline (+2h, ISO 8601; --tz for a wall clock): a miss is reported.",
)
@click.option(
    "--complete-within",
    default=None,
    help="With --cron: each occurrence's deadline after its fire time (30m, 2h).",
)
@click.option(
    "--deadline-callback",
    default=None,
    help="With a deadline: a task type scheduled when it is missed.",
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
    allow_duplicate: bool,
    unique_for: str | None,
    debounce: str | None,
    traceparent: str | None,
    retry_delays: str | None,
    after: tuple[int, ...],
    on_parent_failure: str | None,
    complete_by: str | None,
    complete_within: str | None,
    deadline_callback: str | None,
) -> None:
    """Schedule a task (prints "created task N", or "task N already exists ..." for an
    idempotent duplicate), or with --cron a recurring schedule (prints
    "schedule N"; --tz is its IANA zone, default UTC)."""
    if cron_expression is not None and when is not None:
        raise click.UsageError("--at and --cron exclude each other")
    options = {
        "--unique-for": unique_for,
        "--debounce": debounce,
        "--traceparent": traceparent,
        "--retry-delays": retry_delays,
        "--complete-by": complete_by,
    }
    given = [name for name, value in options.items() if value is not None]
    if cron_expression is not None and given:
        raise click.UsageError(f"{given[0]} is for one task, not a --cron schedule")
    window = None if unique_for is None else parse_duration(unique_for, option="--unique-for")
    wait = None if debounce is None else parse_duration(debounce, option="--debounce")
    delays = None
    if retry_delays is not None:
        delays = [parse_duration(part, option="--retry-delays") for part in retry_delays.split(",")]
    if cron_expression is not None and after:
        raise click.UsageError("--after and --cron exclude each other")
    if on_parent_failure is not None and not after:
        raise click.UsageError("--on-parent-failure needs --after")
    if complete_within is not None and cron_expression is None:
        raise click.UsageError(
            "--complete-within is for a --cron schedule; one task takes --complete-by"
        )
    within = (
        None
        if complete_within is None
        else parse_duration(complete_within, option="--complete-within")
    )
    task = {
        "task_type": task_type,
        "payload": payload,
        "tenant_id": tenant,
        "priority": priority,
        "idempotency_key": idempotency_key,
        "max_attempts": max_attempts,
        "lane": lane,
        "metadata": metadata,
    }
    check_task(**task)
    dsn = state.database()
    if cron_expression is not None:
        owner = tenant if scope == "tenant" else "_all"
        same = _same_schedule(
            dsn,
            owner=owner,
            idempotency_key=idempotency_key,
            task_type=task_type,
            cron_expression=cron_expression,
            timezone=zone or "UTC",
            payload=json.dumps(payload),
            scope=scope,
            product=product,
        )
        if same is not None and idempotency_key is not None:
            click.echo(
                f"schedule {same} already exists for key {idempotency_key} (tenant {owner});"
                " nothing changed"
            )
            return
        if same is not None and not allow_duplicate:
            raise click.UsageError(
                f"schedule {same} already runs {task_type} on {cron_expression.strip()!r}"
                f" ({zone or 'UTC'}) for tenant {owner} with this payload; nothing created."
                " Give --key to name a schedule, or --allow-duplicate to run it twice"
            )
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
            complete_within=within,
            deadline_callback=deadline_callback,
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
        check_task(**task, run_at=run_at)
    deadline = None
    if complete_by is not None:
        deadline = parse_time(complete_by, zone, option="--complete-by").moment
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
        traceparent=traceparent,
        retry_delays=delays,
        unique_for=window,
        debounce=wait,
        depends_on=list(after) if after else None,
        on_parent_failure=on_parent_failure,
        complete_by=deadline,
        deadline_callback=deadline_callback,
    )
    owner = tenant if scope == "tenant" else "_all"
    if task_id.created:
        click.echo(f"created task {task_id}")
    elif debounce is not None:
        click.echo(
            f"task {task_id} debounced for key {idempotency_key} (tenant {owner}): it takes "
            "this payload and is due the debounce after now"
        )
    elif unique_for is not None:
        click.echo(
            f"task {task_id} already exists for key {idempotency_key} (tenant {owner}) within "
            "its unique window; nothing changed"
        )
    else:
        click.echo(
            f"task {task_id} already exists for key {idempotency_key} (tenant {owner});"
            " nothing changed"
        )


@click.command()
@click.argument("task_id", type=int, required=False)
@click.option(
    "--reason", default="cancelled by operator", show_default=True, help="Recorded with it."
)
@click.option("--type", "task_type", default=None, help="Filter: every task of this type.")
@click.option("--tenant", default=None, help="Filter: every task of this tenant.")
@click.option("--key", "idempotency_key", default=None, help="Filter: this idempotency key.")
@click.option("--due-from", default=None, help="Filter: due at or after (now, -2h, ISO 8601).")
@click.option("--due-until", default=None, help="Filter: due before (now, +1d, ISO 8601).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (filters).")
@click.pass_obj
def cancel(
    state: CliState,
    task_id: int | None,
    reason: str,
    task_type: str | None,
    tenant: str | None,
    idempotency_key: str | None,
    due_from: str | None,
    due_until: str | None,
    yes: bool,
) -> None:
    """Cancel task ID, or every unfinished task matching the filters (after showing how
    many and asking). A task not started is cancelled at once; a running one is stopped by
    its worker (an async handler gets CancelledError, a plain one sees ctx.cancelled)."""
    filters = {"--type": task_type, "--tenant": tenant, "--key": idempotency_key}
    filters |= {"--due-from": due_from, "--due-until": due_until}
    given = [name for name, value in filters.items() if value is not None]
    if task_id is not None and given:
        raise click.UsageError(f"give a task ID or filters ({', '.join(given)}), not both")
    if task_id is None and not given:
        raise click.UsageError(
            "give a task ID, or at least one filter: --type, --tenant, --key, --due-from, "
            "--due-until"
        )
    app = App(state.database())
    if task_id is not None:
        result = app.cancel(task_id, reason)
        if result.outcome == "CANCELLED":
            click.echo(f"cancelled {task_id}")
        elif result.outcome == "CANCEL_REQUESTED":
            click.echo(f"task {task_id} is running: {result.detail}")
        else:
            click.echo(f"task {task_id}: {result.detail}")
        return
    times = {
        option: parse_time(text, None, option=option).moment or datetime.now(UTC)
        for option, text in (("--due-from", due_from), ("--due-until", due_until))
        if text is not None
    }
    where: dict[str, Any] = {
        "task_type": task_type,
        "tenant_id": tenant,
        "idempotency_key": idempotency_key,
        "due_from": times.get("--due-from"),
        "due_until": times.get("--due-until"),
        "reason": reason,
    }
    # Counted first (nothing changes; bad filters are refused here, exit 2).
    counted = app.cancel_where(**where, dry_run=True)
    if counted.total == 0:
        click.echo("no unfinished task matches; nothing cancelled")
        return
    click.echo(
        f"{counted.total} unfinished task(s) match: {counted.cancelled} not started "
        f"(cancelled at once), {counted.cancel_requested} running (their workers stop them)"
    )
    if not yes:
        click.confirm(f"cancel these {counted.total} task(s)?", abort=True)
    done = app.cancel_where(**where)
    click.echo(
        f"cancelled {done.cancelled}; asked the workers of {done.cancel_requested} running "
        "task(s) to stop them"
    )


@click.command()
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 when anything is flagged (a `!` line): for a health check or a deploy gate.",
)
@json_output("lanes and flags")
@click.pass_obj
def status(state: CliState, check: bool, as_json: bool) -> None:
    """Per lane: cold, queued, due now, processing, dead, oldest lateness; then what is
    stuck: cold work due or coming due and schedules never armed with no sweeper leading,
    expired leases, quarantined schedules; and the deadlines missed in the last 24 h."""
    dsn = state.database()
    rows = App(dsn).lane_summary()
    with psycopg.connect(dsn, autocommit=True) as conn:
        findings = read_findings(conn)
    flags = findings.flags()
    if as_json:
        print_json({"lanes": rows, **findings.as_json()})
    else:
        columns = ["lane", "cold", "queued", "due_now", "processing", "dead", "oldest_lateness_s"]
        click.echo(render_table(rows, columns))
        leader = findings.leader
        click.echo("")
        click.echo(f"sweeper leader: {describe_leader(leader) if leader else 'none'}")
        for line in flags:
            click.echo(f"! {line}")
        for line in findings.deadline_lines():
            click.echo(f"deadline missed: {line}")
    if check and flags:
        click.get_current_context().exit(1)


# The 100-column table: short headers, and the outcome cut last.
HISTORY_COLUMNS = ["id", "tenant", "type", "try", "started", "late", "outcome"]
HISTORY_SHRINK = {"tenant": 8, "type": 10, "outcome": 40}
WIDE_COLUMNS = [
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
WIDTH = 100


def what_happened(row: dict[str, Any]) -> str:
    """The OUTCOME cell: what the attempt ended in, and what came next. A run that ended with
    the task queued again is a retry (or a lost lease, or a release), never "QUEUED"."""
    outcome = row["outcome"]
    detail = first_line(row["detail"], 200)
    if outcome in ("QUEUED", "PENDING"):
        due = _moment(row["then_due"])
        if (row["then_attempt"] or 0) < row["attempt"]:
            return f"released → due {due}"
        if detail.startswith("worker lost"):
            return f"lease lost → retry at {due}"
        return f"failed → retry at {due}: {detail}"
    if outcome == "FAILED":
        return f"failed → DEAD: {detail}"
    if outcome == "COMPLETED":
        return "completed"
    if outcome == "CANCELLED":
        return f"cancelled: {detail}"
    return str(outcome).lower()


def _moment(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%m-%d %H:%M:%S") if value else "-"


def _seconds(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.1f}s" if abs(ms) < 600_000 else f"{ms / 60_000:.0f}m"


@click.command()
@click.option("--type", "task_type", default=None, help="Only runs of this task type.")
@click.option("--tenant", default=None, help="Only runs for this tenant.")
@click.option("--task", "task_id", type=int, default=None, help="Only runs of this task id.")
@click.option("--since", default=None, help="From: ISO 8601 with offset, now, or -7d, -2h ...")
@click.option("--until", default=None, help="Until: the same forms as --since.")
@click.option("--status", "outcome", default=None, help="COMPLETED, FAILED, QUEUED, RUNNING, ...")
@paged(100, offsets=False, what="runs")
@click.option("--wide", is_flag=True, help="Every column, full times, no width limit.")
@json_output("a list of runs")
@click.pass_obj
def history(
    state: CliState,
    task_type: str | None,
    tenant: str | None,
    task_id: int | None,
    since: str | None,
    until: str | None,
    outcome: str | None,
    page: Page,
    wide: bool,
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
        max_rows=page.limit,
    )
    if as_json:
        print_json(rows)
        return
    if wide:
        for row in rows:
            row["detail"] = first_line(row["detail"], 60)
        click.echo(render_table(rows, WIDE_COLUMNS))
        return
    for row in rows:
        row.update(id=row["task_id"], tenant=row["tenant_id"], type=row["task_type"])
        row["try"] = row["attempt"]
        row["started"] = _moment(row["started_at"])
        row["late"] = _seconds(row["lateness_ms"])
        row["outcome"] = what_happened(row)
    click.echo(fit_table(rows, HISTORY_COLUMNS, WIDTH, HISTORY_SHRINK))
    if task_id is not None:
        # One task's history: the workflow around it too (what it waits for, what waits).
        from pgsched.cli.show import render_graph

        with psycopg.connect(state.database()) as conn, conn.cursor(row_factory=dict_row) as cur:
            graph = cur.execute(query("task_graph"), {"task_id": task_id}).fetchall()
        if graph:
            click.echo("")
            click.echo(render_graph(graph))
