"""Named SQL statements, loaded from `sql/queries.sql` (the product's) and
`sql/*_queries.sql` (a part's own, e.g. the demo's `demo_queries.sql`).

Python never writes SQL of its own: it runs a statement by name, `query("task_cancel")`.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from pgsched.sql_files import sql_dir

_NAME_LINE = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)


@cache
def load_queries() -> dict[str, sql.SQL]:
    found: dict[str, sql.SQL] = {}
    for path in sorted({*sql_dir().glob("queries*.sql"), *sql_dir().glob("*_queries.sql")}):
        parts = _NAME_LINE.split(path.read_text())
        # parts = [preamble, name1, body1, name2, body2, ...]
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is defined twice in {path}")
            found[name] = sql.SQL(body.strip().rstrip(";"))
    return found


def query(name: str) -> sql.SQL:
    try:
        return load_queries()[name]
    except KeyError:
        raise KeyError(f"no named query {name!r} in sql/queries.sql or sql/*_queries.sql") from None


def column_index(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], name: str) -> int:
    """Where column `name` is in the cursor's rows: for reading one column by name from
    many rows without building an object per row."""
    for index, column in enumerate(cursor.description or ()):
        if column.name == name:
            return index
    raise KeyError(f"the statement returned no column {name!r}")
