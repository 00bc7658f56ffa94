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

# How many lease-expired tasks (or unarmed schedules) a report names.
NAMED_TASKS = 20
# What brings work a worker alone never runs: cold work promoted, schedules armed.
START_A_SWEEPER = "start `pgsched sweeper` (or run a worker with `pgsched worker --sweeps`)"


@dataclass
class Findings:
    leader: dict[str, Any] | None
    overdue_pending: int
    oldest_overdue_s: float | None
    lease_expired: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    # Read only while no sweeper leads (a leader promotes and arms them in its stride).
    pending_coming_due: int = 0
    first_coming_due_s: float | None = None
    unarmed: list[dict[str, Any]] = field(default_factory=list)
    # Deadlines that fell in the last 24 h and were missed (the newest NAMED_TASKS, and all).
    deadline_misses: list[dict[str, Any]] = field(default_factory=list)
    deadline_misses_total: int = 0

    def flags(self) -> list[str]:
        """One line per problem, for a person; empty when nothing is stuck."""
        lines: list[str] = []
        if self.overdue_pending and self.leader is None:
            lines.append(
                f"{self.overdue_pending} PENDING task(s) overdue (oldest"
                f" {self.oldest_overdue_s or 0:.0f} s) and no sweeper holds the leader lease:"
                f" nothing will promote them; {START_A_SWEEPER}"
            )
        if self.pending_coming_due and self.leader is None:
            lines.append(
                f"{self.pending_coming_due} PENDING task(s) come due within the hot window"
                f" (the first in {span(self.first_coming_due_s or 0)}) and no sweeper holds"
                f" the leader lease: nothing will promote them; {START_A_SWEEPER}"
            )
        for schedule in self.unarmed if self.leader is None else []:
            lines.append(
                f"schedule {schedule['id']} ({schedule['task_type']}, tenant"
                f" {schedule['tenant_id']}) has no armed occurrence and no sweeper holds the"
                f" leader lease: it will not fire; {START_A_SWEEPER}"
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

    def deadline_lines(self) -> list[str]:
        """The deadlines missed in the last 24 h, one line each (the newest first). Not
        flags: a late report is the application's news, not a stuck engine, so
        `status --check` does not fail on it."""
        lines: list[str] = []
        for miss in self.deadline_misses:
            lines.append(
                f"task {miss['task_id']} ({miss['task_type']}, tenant {miss['tenant_id']})"
                f" missed its deadline {miss['complete_by']:%Y-%m-%d %H:%M:%S %Z}: it is"
                f" {miss['status']}"
                + (f" (schedule {miss['schedule_id']})" if miss["schedule_id"] else "")
            )
        if self.deadline_misses_total > len(self.deadline_misses):
            lines.append(
                f"... {self.deadline_misses_total - len(self.deadline_misses)} more missed"
                " deadline(s) in the last 24 h: SELECT * FROM pgsched.deadline_misses"
            )
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "sweeper_leader": self.leader,
            "overdue_pending": self.overdue_pending,
            "oldest_overdue_s": self.oldest_overdue_s,
            "lease_expired": self.lease_expired,
            "quarantined_schedules": self.quarantined,
            "pending_coming_due": self.pending_coming_due,
            "first_coming_due_s": self.first_coming_due_s,
            "unarmed_schedules": self.unarmed,
            "deadline_misses_24h": self.deadline_misses_total,
            "deadline_misses": self.deadline_misses,
            "flags": self.flags(),
        }


def span(seconds: float) -> str:
    """A duration for a person: `40 s`, `12 min`, `2.5 h`."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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
    leader = sweep_leader(conn)
    with conn.cursor(row_factory=dict_row) as cur:
        overdue = cur.execute(query("overdue_pending")).fetchone() or {}
        expired = cur.execute(query("lease_expired"), {"max_rows": NAMED_TASKS}).fetchall()
        quarantined = cur.execute(query("schedule_quarantined")).fetchall()
        misses = cur.execute(
            query("deadline_misses_recent"), {"within": "24 hours", "max_rows": NAMED_TASKS}
        ).fetchall()
        coming: dict[str, Any] = {}
        unarmed: list[dict[str, Any]] = []
        if leader is None:
            coming = cur.execute(query("pending_coming_due")).fetchone() or {}
            unarmed = cur.execute(
                query("schedule_unarmed_list"), {"max_rows": NAMED_TASKS}
            ).fetchall()
    return Findings(
        leader=leader,
        overdue_pending=int(overdue.get("overdue") or 0),
        oldest_overdue_s=overdue.get("oldest_s"),
        lease_expired=expired,
        quarantined=quarantined,
        pending_coming_due=int(coming.get("coming_due") or 0),
        first_coming_due_s=coming.get("first_in_s"),
        unarmed=unarmed,
        deadline_misses=[{k: v for k, v in m.items() if k != "total"} for m in misses],
        deadline_misses_total=int(misses[0]["total"]) if misses else 0,
    )
