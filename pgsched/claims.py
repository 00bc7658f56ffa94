"""Claimed rows into `TaskRow`s: bound by column name, decoded one row at a time.

The claim query's columns are matched to `TaskRow`'s fields by name once per statement
(not per row), so reordering or adding a column in `task_claim_many` cannot shift a value
into the wrong field; a missing one is an error naming it.

A claimed row is already PROCESSING under this worker's lease when Python decodes it. A
value Postgres accepts but Python cannot represent (a time before year 1 or after 9999)
would make the driver fail the whole fetch, stranding the batch until its leases expire.
When that happens, the result (already received) is decoded again with the time columns
through a guard that turns such a value into an `Undecodable` marker, and the row into an
`UndecodableRow`: that task fails alone with its reason, its batch-mates run. The usual
claim pays nothing for the guard.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.adapt import Buffer, Loader, Transformer
from psycopg.pq import Format

from pgsched import tracing
from pgsched.queries import query
from pgsched.tasks import TaskRow, UndecodableRow

TASK_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRow))
_new_row = object.__new__


def task_row(values: Sequence[Any]) -> TaskRow:
    """A TaskRow from a claimed row whose columns are its fields, in order. Its frozen
    __init__ sets each of the 15 fields through object.__setattr__, a third of a no-op
    task's decoding; this fills the instance's dict at once. Same object, still frozen
    (assignment raises) and equal to one made by TaskRow(*values)."""
    row = _new_row(TaskRow)
    row.__dict__.update(zip(TASK_FIELDS, values, strict=True))
    return row


_GUARDED_TYPES = ("timestamptz", "timestamp", "date")


@dataclass(frozen=True)
class Undecodable:
    """A value the driver could not turn into a Python object."""

    text: str
    error: str


@functools.cache
def _guarded(inner_cls: type[Any]) -> type[Loader]:
    class GuardedLoader(Loader):
        format = inner_cls.format

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._inner = inner_cls(oid, context)

        def load(self, data: Buffer) -> Any:
            try:
                return self._inner.load(data)
            except (psycopg.DataError, ValueError, OverflowError) as exc:
                if self.format == Format.TEXT:
                    text = bytes(data).decode(errors="replace")
                else:
                    text = bytes(data).hex()
                return Undecodable(text, str(exc))

    return GuardedLoader


def guard_times(cursor: psycopg.AsyncCursor[Any] | psycopg.Cursor[Any]) -> None:
    """Decode the time columns of what `cursor` fetches through the guard."""
    adapters = cursor.adapters
    for name in _GUARDED_TYPES:
        info = adapters.types[name]
        for fmt in (Format.TEXT, Format.BINARY):
            inner = adapters.get_loader(info.oid, fmt)
            if inner is not None:
                adapters.register_loader(info.oid, _guarded(inner))


def _layout(cursor: Any) -> tuple[list[str], list[int]]:
    """The claim's column names, and where each TaskRow field is among them."""
    names = [column.name for column in cursor.description or []]
    missing = [name for name in TASK_FIELDS if name not in names]
    if missing:
        raise LookupError(f"the claim returned no column {', '.join(missing)}")
    return names, [names.index(name) for name in TASK_FIELDS]


def task_rows(cursor: Any) -> Callable[[Sequence[Any]], TaskRow]:
    """A psycopg row factory: each claimed row as a TaskRow, its columns bound by name."""
    names, order = _layout(cursor)
    if order == list(range(len(names))):
        # The usual case: the columns are the fields, in order. Checked once per claim.
        return task_row

    def reordered(values: Sequence[Any]) -> TaskRow:
        return TaskRow(*[values[n] for n in order])

    return reordered


def guarded_task_rows(cursor: Any) -> Callable[[Sequence[Any]], TaskRow | UndecodableRow]:
    """Like `task_rows`, for a result decoded through `guard_times`: a row holding an
    `Undecodable` value becomes an UndecodableRow."""
    names, _ = _layout(cursor)
    make = task_rows(cursor)
    id_at, token_at = names.index("id"), names.index("lease_token")

    def guarded(values: Sequence[Any]) -> TaskRow | UndecodableRow:
        for n, value in enumerate(values):
            if type(value) is Undecodable:
                reason = f"undecodable row: {names[n]} = {value.text!r} ({value.error})"
                return UndecodableRow(values[id_at], values[token_at], reason)
        return make(values)

    return guarded


async def claim_many(
    conn: psycopg.AsyncConnection[Any],
    lane: str,
    max_tasks: int,
    worker: str,
    lease: Any,
    not_before: datetime | None = None,
) -> tuple[list[TaskRow], list[UndecodableRow]]:
    """Claim up to `max_tasks` due tasks of `lane`: the rows to run, and the ones that
    cannot be decoded (claimed too: the caller records their failure). `not_before`: the
    lane's claim floor (pgsched/worker/claim_floor.py), None for none."""
    started = time.time_ns()
    cur = await conn.execute(
        query("task_claim_many"),
        {
            "lane": lane,
            "max_tasks": max_tasks,
            "worker": worker,
            "lease": lease,
            "as_of": None,
            "not_before": not_before,
        },
    )
    claimed = await _claimed_rows(conn, cur)
    tracing.claimed(lane, claimed[0], started)
    return claimed


async def claim_tenant(
    conn: psycopg.AsyncConnection[Any],
    tenant: str,
    lane: str,
    max_tasks: int,
    worker: str,
    lease: Any,
) -> tuple[list[TaskRow], list[UndecodableRow]]:
    """Distributed mode's claim: up to `max_tasks` due tasks of one tenant's `lane`, on its
    shard (pgsched/worker/tenant_rotation.py). Returns what `claim_many` returns."""
    started = time.time_ns()
    cur = await conn.execute(
        query("task_claim_tenant"),
        {"tenant": tenant, "lane": lane, "max_tasks": max_tasks, "worker": worker, "lease": lease},
    )
    claimed = await _claimed_rows(conn, cur)
    tracing.claimed(lane, claimed[0], started)
    return claimed


async def lane_due_tenants(
    conn: psycopg.AsyncConnection[Any], lane: str, max_tenants: int, *, by_shard: bool = False
) -> list[str]:
    """The tenants with due QUEUED tasks in `lane` (at most `max_tenants`, by name), read
    without locks; `by_shard`: shard by shard, those of the shards that answer (for when a
    worker node does not)."""
    name = "lane_due_tenants_by_shard" if by_shard else "lane_due_tenants"
    cur = await conn.execute(query(name), {"lane": lane, "max_tenants": max_tenants})
    return [str(row[0]) for row in await cur.fetchall()]


async def lane_next_due(
    conn: psycopg.AsyncConnection[Any],
    lane: str,
    not_before: datetime | None = None,
    *,
    distributed: bool = False,
) -> tuple[datetime | None, datetime]:
    """When `lane`'s next QUEUED task is due (None: nothing queued; looked for from
    `not_before` on, the claim's floor), and the database's clock now: a claim that got
    nothing sleeps until then by that clock. `distributed`: read across the shards of a
    distributed database (the single-node function's plan cannot run there)."""
    name = "lane_next_due" if not distributed else "lane_next_due_distributed"
    cur = await conn.execute(query(name), {"lane": lane, "not_before": not_before})
    row = await cur.fetchone()
    assert row is not None
    return row[0], row[1]


async def claim_ids(
    conn: psycopg.AsyncConnection[Any], lane: str, ids: list[int], worker: str, lease: Any
) -> tuple[list[TaskRow], list[UndecodableRow]]:
    """Claim exactly these tasks of `lane` (ids from the Redis hot tier), those still QUEUED
    and due; the others are skipped. Returns what `claim_many` returns."""
    started = time.time_ns()
    cur = await conn.execute(
        query("task_claim_ids"),
        {"lane": lane, "ids": ids, "worker": worker, "lease": lease},
    )
    claimed = await _claimed_rows(conn, cur)
    tracing.claimed(lane, claimed[0], started)
    return claimed


async def _claimed_rows(
    conn: psycopg.AsyncConnection[Any], cur: psycopg.AsyncCursor[Any]
) -> tuple[list[TaskRow], list[UndecodableRow]]:
    try:
        rows = await cur.fetchall()
    except psycopg.DataError:
        return _decode_guarded(conn, cur)
    # Bound by name, checked once per claim: the usual result's columns are TaskRow's
    # fields in order, and its rows go to TaskRow as they are (the cost of positional).
    # Read off the result's field names: cursor.description makes a Column object per
    # column, every claim.
    result = cur.pgresult
    if result is not None and _field_names(result) == _TASK_FIELDS_BYTES:
        return [task_row(row) for row in rows], []
    names, order = _layout(cur)
    if order == list(range(len(names))):
        return [task_row(row) for row in rows], []
    return [TaskRow(*[row[n] for n in order]) for row in rows], []


_TASK_FIELDS_BYTES = tuple(name.encode() for name in TASK_FIELDS)


def _field_names(result: Any) -> tuple[bytes | None, ...]:
    fname = result.fname
    return tuple(fname(i) for i in range(result.nfields))


def _decode_guarded(
    conn: psycopg.AsyncConnection[Any], cur: psycopg.AsyncCursor[Any]
) -> tuple[list[TaskRow], list[UndecodableRow]]:
    # Rare: decode the result (already received, already committed) again, time columns
    # through the guard. The usual path above pays nothing for this.
    result = cur.pgresult
    assert result is not None
    context = conn.cursor()
    guard_times(context)
    transformer = Transformer(context)
    transformer.set_pgresult(result)
    rows = transformer.load_rows(0, result.ntuples, guarded_task_rows(cur))
    tasks = [row for row in rows if type(row) is TaskRow]
    return tasks, [row for row in rows if type(row) is UndecodableRow]
