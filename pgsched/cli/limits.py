"""Limits per task type and per tenant, enforced by every worker's claim; fair claims."""

from __future__ import annotations

import re

import click

from pgsched.app import App
from pgsched.cli.options import json_output, print_json, render_table
from pgsched.cli.root import CliState
from pgsched.errors import InvalidLimitError

SCOPES = {"type": "task_type", "tenant": "tenant"}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute)\s*$")


def parse_rate(text: str) -> tuple[int, str]:
    """'10/s' or '600/min' -> (10, 'second') / (600, 'minute')."""
    found = _RATE.match(text)
    if found is None:
        raise InvalidLimitError(f"--rate must look like 10/s or 600/min, got {text!r}")
    return int(found.group(1)), "second" if found.group(2).startswith("s") else "minute"


def _scope_and_key(task_type: str | None, tenant: str | None) -> tuple[str, str]:
    if (task_type is None) == (tenant is None):
        raise InvalidLimitError("give exactly one of --type and --tenant")
    return ("task_type", task_type) if task_type is not None else ("tenant", tenant or "")


@click.group()
def limits() -> None:
    """Limits per task type or tenant (across all workers), and fair claims per lane."""


@limits.command("set")
@click.option("--type", "task_type", help="The task type to limit.")
@click.option("--tenant", help="The tenant to limit.")
@click.option("--max-processing", type=int, help="At most this many PROCESSING at once (0 pauses).")
@click.option("--rate", help="At most this many claims per second or minute: 10/s, 600/min.")
@click.pass_obj
def limits_set(
    state: CliState,
    task_type: str | None,
    tenant: str | None,
    max_processing: int | None,
    rate: str | None,
) -> None:
    """Set (replace) the limits of a task type or a tenant; applies to the next claim."""
    scope, key = _scope_and_key(task_type, tenant)
    count, per = parse_rate(rate) if rate is not None else (None, "second")
    row = App(state.database()).limit_set(
        scope, key, max_processing=max_processing, rate=count, per=per
    )
    parts = []
    if row["max_processing"] is not None:
        parts.append(f"at most {row['max_processing']} processing")
    if row["rate"] is not None:
        parts.append(f"at most {row['rate']} per {per}")
    click.echo(f"{scope} {key}: {', '.join(parts)}")


@limits.command("clear")
@click.option("--type", "task_type", help="The task type.")
@click.option("--tenant", help="The tenant.")
@click.pass_obj
def limits_clear(state: CliState, task_type: str | None, tenant: str | None) -> None:
    """Remove the limits of a task type or a tenant."""
    scope, key = _scope_and_key(task_type, tenant)
    if App(state.database()).limit_clear(scope, key):
        click.echo(f"{scope} {key}: no limit")
    else:
        click.echo(f"{scope} {key} had no limit")


@limits.command("list")
@json_output("limits (a list) and fair_lanes (lane: true when its claims are fair)")
@click.pass_obj
def limits_list(state: CliState, as_json: bool) -> None:
    """Every limit, with what is PROCESSING under it now; and which lanes claim fairly."""
    app = App(state.database())
    rows = app.limits()
    fairness = app.lane_fairness()
    if as_json:
        print_json({"limits": rows, "fair_lanes": fairness})
        return
    columns = ["scope", "key", "max_processing", "rate", "per", "processing"]
    click.echo(render_table(rows, columns) if rows else "no limits")
    fair = ", ".join(f"{lane} {'on' if on else 'off'}" for lane, on in fairness.items())
    click.echo(f"fair claims: {fair}")


@limits.command("fairness")
@click.argument("lane")
@click.argument("setting", type=click.Choice(["on", "off"]))
@click.pass_obj
def limits_fairness(state: CliState, lane: str, setting: str) -> None:
    """Fair claims across tenants in LANE: on (the default) or off (the lane's plain order)."""
    App(state.database()).lane_set_fairness(lane, setting == "on")
    click.echo(f"fair claims in {lane.upper()}: {setting}")
