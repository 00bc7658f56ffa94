"""The tenant registry: who product and global tasks run for."""

from __future__ import annotations

from typing import Any

import click

from pgsched.app import App
from pgsched.cli.options import JSON_OBJECT, json_output, print_json, render_table
from pgsched.cli.root import CliState


@click.group()
def tenants() -> None:
    """The tenant registry: who product and global tasks run for."""


@tenants.command("add")
@click.argument("tenant_id")
@click.option("--product", required=True, help="The product the tenant uses.")
@click.option(
    "--metadata",
    type=JSON_OBJECT,
    default="{}",
    help="A JSON object, or @FILE to read it from a file (@- for stdin).",
)
@click.pass_obj
def tenants_add(state: CliState, tenant_id: str, product: str, metadata: dict[str, Any]) -> None:
    """Register a tenant (or update and re-activate it)."""
    App(state.database()).tenant_add(tenant_id, product, metadata)
    click.echo(f"tenant {tenant_id} ({product}) active")


@tenants.command("disable")
@click.argument("tenant_id")
@click.pass_obj
def tenants_disable(state: CliState, tenant_id: str) -> None:
    """Stop running product/global tasks for a tenant (its own tasks are unaffected)."""
    App(state.database()).tenant_set_active(tenant_id, False)
    click.echo(f"tenant {tenant_id} disabled")


@tenants.command("list")
@json_output("a list of tenants")
@click.pass_obj
def tenants_list(state: CliState, as_json: bool) -> None:
    """Every tenant, by product."""
    rows = App(state.database()).tenants()
    if as_json:
        print_json(rows)
        return
    click.echo(render_table(rows, ["tenant_id", "product", "active", "created_at"]))
