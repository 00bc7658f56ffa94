"""What is scheduled, read back from the rows: `scheduled_tasks`, `assert_scheduled`,
`assert_not_scheduled`.

"Scheduled" is a task not started yet (PENDING or QUEUED); `statuses=` widens it (e.g.
("FAILED",) for the DEAD lane). A payload or metadata given matches by containment: the
task's may hold more keys. A `run_at` given matches within `within` (a second by default),
since a due time computed in the test and one computed in the code differ by microseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgsched.errors import ConfigError
from pgsched.queries import query

SCHEDULED = ("PENDING", "QUEUED")


@dataclass(frozen=True)
class FoundTask:
    """A task as `scheduled_tasks` reads it."""

    id: int
    task_type: str
    tenant_id: str
    payload: Any
    metadata: dict[str, Any]
    run_at: datetime
    lane: str
    priority: int
    status: str
    attempts: int
    max_attempts: int
    idempotency_key: str | None
    last_error: str | None


@contextmanager
def _connection(dsn: str | None, conn: psycopg.Connection[Any] | None) -> Iterator[Any]:
    if conn is not None:
        yield conn
        return
    if dsn is None:
        raise ConfigError("say which database: dsn= (or conn=)")
    with psycopg.connect(dsn, autocommit=True) as own:
        yield own


def _database(app: Any, dsn: str | None) -> str | None:
    if dsn is not None:
        return dsn
    return None if app is None else str(app.dsn)


def scheduled_tasks(
    task_type: str | None = None,
    *,
    payload: Any = None,
    tenant_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lane: str | None = None,
    run_at: datetime | None = None,
    within: timedelta = timedelta(seconds=1),
    statuses: Iterable[str] = SCHEDULED,
    app: Any = None,
    dsn: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> list[FoundTask]:
    """The tasks matching every filter given, earliest due first. The database: `conn`
    (read inside its transaction), `dsn`, or `app.dsn`."""
    if run_at is not None and run_at.tzinfo is None:
        raise ConfigError("run_at must carry a time zone (a naive datetime is ambiguous)")
    params = {
        "statuses": [s.upper() for s in statuses],
        "task_type": task_type,
        "tenant_id": tenant_id,
        "payload": None if payload is None else Jsonb(payload),
        "metadata": None if metadata is None else Jsonb(dict(metadata)),
        "lane": None if lane is None else lane.upper(),
        "run_from": None if run_at is None else run_at - within,
        "run_until": None if run_at is None else run_at + within,
    }
    with _connection(_database(app, dsn), conn) as c, c.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query("testing_scheduled_tasks"), params).fetchall()
    return [FoundTask(**row) for row in rows]


def _described(filters: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in filters.items() if v is not None) or "any task"


def assert_scheduled(
    task_type: str | None = None,
    *,
    payload: Any = None,
    tenant_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lane: str | None = None,
    run_at: datetime | None = None,
    within: timedelta = timedelta(seconds=1),
    count: int | None = None,
    statuses: Iterable[str] = SCHEDULED,
    app: Any = None,
    dsn: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> list[FoundTask]:
    """Fail (AssertionError) unless a task matching the filters is scheduled (exactly
    `count` of them, when given); returns them. The message lists what is scheduled."""
    statuses = tuple(statuses)
    filters = {
        "task_type": task_type,
        "payload": payload,
        "tenant_id": tenant_id,
        "metadata": metadata,
        "lane": lane,
        "run_at": run_at,
    }
    found = scheduled_tasks(
        **filters, within=within, statuses=statuses, app=app, dsn=dsn, conn=conn
    )
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    there = scheduled_tasks(statuses=statuses, app=app, dsn=dsn, conn=conn)
    wanted = f"{count} task(s)" if count is not None else "a task"
    raise AssertionError(
        f"expected {wanted} matching {_described(filters)} in {'/'.join(statuses)}, "
        f"found {len(found)}; there are:\n" + _listing(there)
    )


def assert_not_scheduled(
    task_type: str | None = None,
    *,
    payload: Any = None,
    tenant_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    lane: str | None = None,
    run_at: datetime | None = None,
    within: timedelta = timedelta(seconds=1),
    statuses: Iterable[str] = SCHEDULED,
    app: Any = None,
    dsn: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> None:
    """Fail (AssertionError) if any task matching the filters is scheduled."""
    statuses = tuple(statuses)
    filters = {
        "task_type": task_type,
        "payload": payload,
        "tenant_id": tenant_id,
        "metadata": metadata,
        "lane": lane,
        "run_at": run_at,
    }
    found = scheduled_tasks(
        **filters, within=within, statuses=statuses, app=app, dsn=dsn, conn=conn
    )
    if found:
        raise AssertionError(
            f"expected no task matching {_described(filters)} in {'/'.join(statuses)}, "
            f"found {len(found)}:\n" + _listing(found)
        )


def _listing(tasks: list[FoundTask], limit: int = 20) -> str:
    if not tasks:
        return "  (none)"
    lines = [
        f"  task {t.id}: {t.task_type} tenant={t.tenant_id} payload={t.payload!r} "
        f"run_at={t.run_at.isoformat()} {t.status}"
        for t in tasks[:limit]
    ]
    if len(tasks) > limit:
        lines.append(f"  ... and {len(tasks) - limit} more")
    return "\n".join(lines)
