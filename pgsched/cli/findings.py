"""What is stuck, read from the database: the facts `status` flags and `doctor` judges.

The sweep leader holds a lease row (pgsched.sweep_leader, see pgsched.leadership); a sweeper
leads while its lease runs, so a leader that died is gone once its lease expires (within
one lease period).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgsched.queries import query

# How many lease-expired tasks a report names; the count is complete either way.
NAMED_TASKS = 20


@dataclass
class Findings:
    leader: dict[str, Any] | None
    overdue_pending: int
    oldest_overdue_s: float | None
    lease_expired: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)

    def flags(self) -> list[str]:
        """One line per problem, for a person; empty when nothing is stuck."""
        lines: list[str] = []
        if self.overdue_pending and self.leader is None:
            lines.append(
                f"{self.overdue_pending} PENDING task(s) overdue (oldest"
                f" {self.oldest_overdue_s or 0:.0f} s) and no sweeper holds the leader lease:"
                " nothing will promote them; start `pgsched sweeper`"
            )
        for task in self.lease_expired:
            lines.append(
                f"task {task['id']} ({task['task_type']}, tenant {task['tenant_id']}) is"
                f" PROCESSING on {task['locked_by']} but its lease expired"
                f" {task['expired_s']:.0f} s ago"
            )
        for schedule in self.quarantined:
            lines.append(
                f"schedule {schedule['id']} ({schedule['task_type']}, tenant"
                f" {schedule['tenant_id']}) is quarantined: {schedule['quarantine_reason']}"
            )
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "sweeper_leader": self.leader,
            "overdue_pending": self.overdue_pending,
            "oldest_overdue_s": self.oldest_overdue_s,
            "lease_expired": self.lease_expired,
            "quarantined_schedules": self.quarantined,
            "flags": self.flags(),
        }


def describe_leader(leader: dict[str, Any]) -> str:
    """`host:pid:abc123 (lease generation 7, 12 s left)`: who leads, for a person."""
    return (
        f"{leader['holder']} (lease generation {leader['generation']},"
        f" {leader['expires_in_s']:.0f} s left)"
    )


def sweep_leader(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("sweep_leader_held")).fetchone()


def read_findings(conn: psycopg.Connection[Any]) -> Findings:
    with conn.cursor(row_factory=dict_row) as cur:
        overdue = cur.execute(query("overdue_pending")).fetchone() or {}
        expired = cur.execute(query("lease_expired"), {"max_rows": NAMED_TASKS}).fetchall()
        quarantined = cur.execute(query("schedule_quarantined")).fetchall()
    return Findings(
        leader=sweep_leader(conn),
        overdue_pending=int(overdue.get("overdue") or 0),
        oldest_overdue_s=overdue.get("oldest_s"),
        lease_expired=expired,
        quarantined=quarantined,
    )
