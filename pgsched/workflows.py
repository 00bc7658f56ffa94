"""Workflows and batches: several tasks scheduled in one call, waiting for one another.

    wf = app.workflow(key="order-17", tenant_id="acme")
    wf.step("charge", "charge_card", {"order": 17})
    wf.step("email", "send_receipt", after=["charge"])
    wf.step("invoice", "make_invoice", after=["charge"])
    wf.step("archive", "archive_order", after=["email", "invoice"])
    ids = wf.schedule()            # {"charge": ScheduledTask(…), …}, one transaction

    batch = app.batch([TaskSpec(task_type="resize", payload=p) for p in photos],
                      on_complete={"task_type": "album_ready"})

A step is a task whose parents are the steps it names in `after`
(`pgsched.schedule_workflow`); a batch's callback waits for every member whatever its
outcome (`pgsched.schedule_batch`) and reads the counts with `ctx.batch`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from pgsched.errors import InvalidTaskError
from pgsched.producer import task_spec
from pgsched.tasks import ScheduledTask, TaskSpec


@dataclass
class Workflow:
    """Named steps to schedule together (`App.workflow`); `schedule` writes them all in one
    transaction. Under a `key`, scheduling it again returns the same ids (created False)."""

    key: str | None = None
    tenant_id: str = "default"
    steps: list[dict[str, Any]] = field(default_factory=list)
    # Set by App.workflow: runs the statement on a connection.
    _run: Any = field(default=None, repr=False)

    def step(
        self,
        name: str,
        task_type: str,
        payload: Any = None,
        *,
        after: Sequence[str] = (),
        run_at: datetime | None = None,
        priority: int = 5,
        max_attempts: int = 3,
        lane: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_parent_failure: str | None = None,
    ) -> Workflow:
        """Add a step; it runs once every step named in `after` has completed
        (`on_parent_failure`: hold, cancel or run when one goes DEAD or is cancelled).
        Returns the workflow, so steps chain."""
        if isinstance(after, str):
            raise InvalidTaskError(f"steps[{len(self.steps)}] ({name}): after is a list of names")
        spec = task_spec(
            {
                "task_type": task_type,
                "payload": {} if payload is None else payload,
                "run_at": run_at,
                "tenant_id": self.tenant_id,
                "priority": priority,
                "max_attempts": max_attempts,
                "lane": lane,
                "metadata": {} if metadata is None else dict(metadata),
            },
            len(self.steps),
        )
        step: dict[str, Any] = {
            "name": name,
            "task_type": spec.task_type,
            "payload": spec.payload,
            "priority": spec.priority,
            "max_attempts": spec.max_attempts,
            "metadata": spec.metadata,
            "after": list(after),
        }
        if spec.run_at is not None:
            step["run_at"] = spec.run_at.isoformat()
        if spec.lane is not None:
            step["lane"] = spec.lane
        if on_parent_failure is not None:
            step["on_parent_failure"] = on_parent_failure
        self.steps.append(step)
        return self

    def params(self) -> dict[str, Any]:
        return {"steps": Jsonb(self.steps), "workflow_key": self.key, "tenant_id": self.tenant_id}

    def schedule(self, conn: Any = None) -> dict[str, ScheduledTask]:
        """Write every step in one transaction; returns each step's task by name."""
        if self._run is None:
            raise RuntimeError("a Workflow is scheduled through the App that made it")
        rows = self._run(self, conn)
        return {row["step"]: ScheduledTask(row["task_id"], row["created"]) for row in rows}


@dataclass(frozen=True)
class Batch:
    """A scheduled batch: its callback task's id and its members' ids, in input order."""

    callback_id: int
    member_ids: list[int]


def batch_params(
    specs: Iterable[TaskSpec], on_complete: TaskSpec, tenant_id: str
) -> dict[str, Any]:
    members = list(specs)
    if not members:
        raise InvalidTaskError("a batch needs at least one member")
    for index, spec in enumerate(members):
        if spec.tenant_id != tenant_id:
            raise InvalidTaskError(
                f"tasks[{index}]: tenant_id {spec.tenant_id!r}: a batch belongs to one tenant "
                f"({tenant_id!r})"
            )
    return {
        "task_types": [s.task_type for s in members],
        "payloads": [Jsonb(s.payload) for s in members],
        "on_complete_type": on_complete.task_type,
        "on_complete_payload": Jsonb(on_complete.payload),
        "tenant_id": tenant_id,
        "priorities": [s.priority for s in members],
        "max_attempts": [s.max_attempts for s in members],
        "lanes": [s.lane for s in members],
        "metadatas": [Jsonb(s.metadata) for s in members],
        "on_complete_priority": on_complete.priority,
        "on_complete_max_attempts": on_complete.max_attempts,
        "on_complete_lane": on_complete.lane,
    }
