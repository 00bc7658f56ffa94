"""Render docs/reference/sql.md, the SQL API reference, from the database's own comments.

    .venv/bin/python scripts/docs_sql_reference.py                 # start a temporary Postgres
    .venv/bin/python scripts/docs_sql_reference.py --dsn DSN       # or use this server
    .venv/bin/python scripts/docs_sql_reference.py --check [...]   # exit 1 if out of date

A throwaway database is created and migrated on the server; every function of the pgsched
schema is rendered with its signature, its result, the roles that may call it and its
`COMMENT ON` text (next to each function and view in its file of sql/code/, next to each
table in the numbered migrations), and so is every table, view and fixed partition.
The page is committed: tests/integration/test_docs_sql_reference.py renders a freshly
migrated database and fails when the page differs, so a migration that changes a function
or a comment must regenerate it. Nothing is read from the migration files themselves: what
the page says is what the database says (`\\df+` and `\\d+` in psql show the same text).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGE = REPO_ROOT / "docs" / "reference" / "sql.md"
REGENERATE = "python scripts/docs_sql_reference.py"

# The roles (made by sql/0033_baseline.sql), least privileged first: a function is listed
# under the first that may call it.
ROLES = ("pgsched_producer", "pgsched_worker", "pgsched_admin")
SECTIONS = {
    "pgsched_producer": (
        "Applications (pgsched_producer)",
        "What an application that schedules work may call, and so may workers and admins.",
    ),
    "pgsched_worker": (
        "Workers and sweepers (pgsched_worker)",
        "Called by `pgsched worker` and `pgsched sweeper`; admins may call them too.",
    ),
    "pgsched_admin": (
        "Operators (pgsched_admin)",
        "The DEAD lane, schedule controls, tenants, limits, and the engine's own helpers.",
    ),
    None: ("Internal", "Callable by no pgsched role: the bodies other functions share."),
}
# Partitions whose name carries a date come and go with the days (retention makes and drops
# them): listing them would make the page depend on the day it was rendered.
DATED_PARTITION = re.compile(r"_p\d{8}(\d{2})?$")

FUNCTIONS = """
SELECT p.proname AS name,
       pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result,
       obj_description(p.oid, 'pg_proc') AS comment,
       ARRAY(SELECT r FROM unnest(%(roles)s::text[]) AS r
              WHERE has_function_privilege(r, p.oid, 'EXECUTE')) AS roles
  FROM pg_proc AS p
  JOIN pg_namespace AS n ON n.oid = p.pronamespace
 WHERE n.nspname = 'pgsched'
 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""

RELATIONS = """
SELECT c.relname AS name,
       c.relkind AS kind,
       c.relispartition AS is_partition,
       obj_description(c.oid, 'pg_class') AS comment,
       ARRAY(SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
               FROM pg_attribute AS a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum) AS columns
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgsched' AND c.relkind IN ('r', 'p', 'v', 'm')
 ORDER BY c.relname
"""


def read(dsn: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        functions = cur.execute(FUNCTIONS, {"roles": list(ROLES)}).fetchall()
        relations = cur.execute(RELATIONS).fetchall()
    relations = [r for r in relations if not DATED_PARTITION.search(r["name"])]
    return functions, relations


def _arguments(arguments: str) -> list[str]:
    """Split pg_get_function_arguments' text at its top-level commas (a default may hold a
    comma inside quotes or brackets)."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(arguments):
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            parts.append(arguments[start:i].strip())
            start = i + 1
    tail = arguments[start:].strip()
    return [*parts, tail] if tail else parts


def _signature(name: str, arguments: str, result: str) -> list[str]:
    args = _arguments(arguments)
    one_line = f"pgsched.{name}({', '.join(args)})"
    if len(one_line) <= 88:
        return [one_line, f"RETURNS {result}"]
    return [
        f"pgsched.{name}(",
        *(f"    {a}," for a in args[:-1]),
        f"    {args[-1]}",
        f") RETURNS {result}",
    ]


def _text(comment: str | None) -> str:
    return comment if comment else "*No comment in the database.*"


def render(dsn: str) -> str:
    """The page for the (migrated) database at `dsn`."""
    functions, relations = read(dsn)
    out = [
        "# The SQL API",
        "",
        f"<!-- Generated by {REGENERATE} from a freshly migrated database; do not edit. -->",
        "",
        "Every function, table and view of the `pgsched` schema, as the database describes "
        "it: the signatures are Postgres's own, the text is each object's `COMMENT ON` "
        "(psql's `\\df+ pgsched.*` and `\\d+ pgsched.*` show the same). Call functions with "
        "named arguments (`task_type => 'x'`); an argument with a default may be left out. "
        "Bad input is refused with SQLSTATE 22023 naming the argument.",
        "",
        "Which role may call a function is part of the schema: grant `pgsched_producer`, "
        "`pgsched_worker` or `pgsched_admin` to your logins "
        "([roles](../operations/deploy.md#roles)).",
        "",
    ]
    for role, (title, intro) in SECTIONS.items():
        chosen = [f for f in functions if (f["roles"][0] if f["roles"] else None) == role]
        if not chosen:
            continue
        out += [f"## {title}", "", intro, ""]
        for f in chosen:
            callers = ", ".join(f"`{r}`" for r in f["roles"]) or "no pgsched role"
            out += [
                f"### {f['name']}",
                "",
                "```sql",
                *_signature(f["name"], f["arguments"], f["result"]),
                "```",
                "",
                _text(f["comment"]),
                "",
                f"Callable by: {callers}.",
                "",
            ]
    kinds = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view"}
    for title, wanted in (("Tables", ("r", "p")), ("Views", ("v", "m"))):
        chosen = [r for r in relations if r["kind"] in wanted]
        out += [f"## {title}", ""]
        for r in chosen:
            kind = kinds[r["kind"]] + (", a partition" if r["is_partition"] else "")
            out += [
                f"### {r['name']}",
                "",
                f"*{kind}*",
                "",
                _text(r["comment"]),
                "",
                "Columns: " + ", ".join(f"`{c}`" for c in r["columns"]) + ".",
                "",
            ]
    while out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def fresh_page(server_dsn: str) -> str:
    """Migrate a throwaway database on the server at `server_dsn` and render it."""
    from pgsched.migrations import migrate

    name = "pgsched_docs_sql_reference"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        dsn = make_conninfo(server_dsn, dbname=name)
        migrate(dsn)
        return render(dsn)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(drop)


def diff(expected: str, actual: str) -> str:
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            "docs/reference/sql.md (committed)",
            "fresh migrate",
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        help="a server where a throwaway database may be created (default: start a temporary"
        " local Postgres from the installed server binaries)",
    )
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if args.dsn:
        page = fresh_page(args.dsn)
    else:
        from pgsched.embedded import EmbeddedCluster

        with tempfile.TemporaryDirectory(prefix="pgsched-docs-") as home:
            # Traversable, so a server running as another user keeps its data inside it.
            Path(home).chmod(0o755)
            cluster = EmbeddedCluster(Path(home))
            port = cluster.start()
            try:
                page = fresh_page(cluster.dsn(port).rsplit("/", 1)[0] + "/postgres")
            finally:
                cluster.stop()
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else ""
        if current != page:
            sys.stdout.write(diff(current, page))
            print(f"{PAGE} is out of date: regenerate with `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
