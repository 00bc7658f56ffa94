"""Plans in tests: a database seeded once for a module, EXPLAIN of a statement, the plans
of every statement a call ran (auto_explain), and the nodes of a plan (what it scans,
through which index, how many rows it went through), so a test can say "this statement
never reads the big tiers" or "this call's work follows the rows it handles" without
timing anything."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from tests.conftest import PgServer


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


def logged_plans(
    conn: psycopg.Connection, statement: str, params: Any = None
) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """Run `statement` with auto_explain (analyze, in this session only) logging the plan of
    every statement it runs, those inside functions and triggers included: its result rows,
    and the plans, each with its "Query Text" (the outer statement's plan comes last)."""
    notices: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            notices.append(diag.message_primary)

    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET auto_explain.log_buffers = on",
        "SET auto_explain.log_format = 'json'",
        "SET auto_explain.log_level = 'notice'",
        "SET client_min_messages = 'notice'",
    ):
        conn.execute(setting)
    conn.add_notice_handler(keep)
    try:
        cur = conn.execute(statement, params)
        rows = cur.fetchall() if cur.description is not None else []
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SET auto_explain.log_min_duration = -1")
    return rows, [json.loads(text.split("plan:", 1)[1]) for text in notices]


def rows_handled(plan: dict[str, Any]) -> int:
    """Rows every node of a logged plan produced or filtered out, over all its loops: the
    work of a statement in rows, whatever the clock says."""
    total = 0
    for node in plan_nodes(plan["Plan"]):
        loops = int(node.get("Actual Loops", 1))
        produced = int(node.get("Actual Rows", 0))
        removed = int(node.get("Rows Removed by Filter", 0)) + int(
            node.get("Rows Removed by Join Filter", 0)
        )
        total += (produced + removed) * loops
    return total


def heaviest_statement(plans: list[dict[str, Any]], leave_out: str) -> tuple[int, str]:
    """Of the logged plans whose text does not contain `leave_out` (the call itself, whose
    one node counts the rows returned), the most rows one handled, and its text's start."""
    handled = [
        (rows_handled(p), " ".join(str(p.get("Query Text", "")).split())[:100]) for p in plans
    ]
    inside = [(rows, text) for rows, text in handled if leave_out not in text]
    assert inside, "auto_explain logged no statement inside the call"
    return max(inside)


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


def log_every_plan(conn: psycopg.Connection) -> list[str]:
    """From now on, the plan of every statement this session runs, nested ones included."""
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET client_min_messages = log")
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    return plans
