"""Plans in tests: a database seeded once for a module, EXPLAIN of a statement, and the
nodes of a plan (what it scans, through which index), so a test can say "this statement
never reads the big tiers" without timing anything."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from conftest import PgServer


@contextmanager
def seeded_database(
    pg_server: PgServer, name: str, seed: Callable[[psycopg.Connection], None]
) -> Iterator[psycopg.Connection]:
    """A migrated database `name`, made afresh, seeded by `seed`, dropped after."""
    pg_server.drop_database(name)
    pg_server.create_database(name, template=pg_server.template_dbname)
    try:
        with pg_server.connect(name) as conn:
            seed(conn)
            yield conn
    finally:
        pg_server.drop_database(name)


def explain(
    conn: psycopg.Connection,
    statement: str | sql.Composable,
    params: Any = None,
    *,
    analyze: bool = False,
) -> list[dict[str, Any]]:
    """EXPLAIN (FORMAT JSON) of `statement`: the plan document, one entry per statement.
    With `analyze`, the statement runs and each node carries its rows and buffers."""
    text = sql.SQL(statement) if isinstance(statement, str) else statement
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    row = conn.execute(sql.SQL(f"EXPLAIN ({options}) ") + text, params).fetchone()
    assert row is not None
    plan = row[0]
    return json.loads(plan) if isinstance(plan, str) else plan


def plan_nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every node of a plan (a JSON plan document, or any part of one), depth first."""
    if isinstance(plan, dict):
        if "Node Type" in plan:
            yield plan
        for value in plan.values():
            yield from plan_nodes(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from plan_nodes(item)


def node_values(plan: Any, key: str) -> list[Any]:
    """The `key` of every node that has one ("Relation Name", "Index Name" ...)."""
    return [node[key] for node in plan_nodes(plan) if key in node]
