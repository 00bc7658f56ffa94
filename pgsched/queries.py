"""Named SQL statements, loaded from `sql/queries.sql` (and `sql/queries/*.sql`).

Python never writes SQL of its own: it runs a statement by name, `QUERIES["task_cancel"]`.
"""

from __future__ import annotations

import re
from functools import cache

from psycopg import sql

from pgsched.sql_files import sql_dir

_NAME_LINE = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)


@cache
def load_queries() -> dict[str, sql.SQL]:
    found: dict[str, sql.SQL] = {}
    for path in sorted(sql_dir().glob("queries*.sql")):
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
        raise KeyError(f"no named query {name!r} in sql/queries*.sql") from None
