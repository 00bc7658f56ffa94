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
outcome (`pgsched.schedule_batch`) and reads the counts with `ctx.batch`. `AsyncApp.workflow`
builds an `AsyncWorkflow`: the same steps, `await wf.schedule()`. What a workflow or a batch
binds to its statement is `pgsched.producer`'s (`workflow_call`, `batch_call`), for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from psycopg.types.json import Jsonb

from pgsched.errors import InvalidTaskError
from pgsched.producer import task_spec
from pgsched.tasks import Batch, ScheduledTask

__all__ = ["AsyncWorkflow", "Batch", "Workflow", "WorkflowSteps"]


@dataclass
class WorkflowSteps:
    """Named steps to schedule together: what `Workflow` (App) and `AsyncWorkflow`
    (AsyncApp) share. Under a `key`, scheduling them again returns the same ids (created
    False)."""

    key: str | None = None
    tenant_id: str = "default"
    steps: list[dict[str, Any]] = field(default_factory=list)

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
    ) -> Self:
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


@dataclass
class Workflow(WorkflowSteps):
    """`App.workflow`'s steps; `schedule` writes them all in one transaction."""

    # Set by App.workflow: runs the statement on a connection, returns its rows.
    _run: Callable[[WorkflowSteps, Any], list[dict[str, Any]]] | None = field(
        default=None, repr=False
    )

    def schedule(self, conn: Any = None) -> dict[str, ScheduledTask]:
        """Write every step in one transaction; returns each step's task by name."""
        if self._run is None:
            raise RuntimeError("a Workflow is scheduled through the App that made it")
        return workflow_tasks(self._run(self, conn))


@dataclass
class AsyncWorkflow(WorkflowSteps):
    """`AsyncApp.workflow`'s steps; `await schedule()` writes them all in one transaction."""

    # Set by AsyncApp.workflow: runs the statement on an async connection.
    _run: Callable[[WorkflowSteps, Any], Awaitable[list[dict[str, Any]]]] | None = field(
        default=None, repr=False
    )

    async def schedule(self, conn: Any = None) -> dict[str, ScheduledTask]:
        """Write every step in one transaction (`conn`: a caller's AsyncConnection);
        returns each step's task by name."""
        if self._run is None:
            raise RuntimeError("an AsyncWorkflow is scheduled through the AsyncApp that made it")
        return workflow_tasks(await self._run(self, conn))


def workflow_tasks(rows: Sequence[Mapping[str, Any]]) -> dict[str, ScheduledTask]:
    """Each step's task by name, from the rows of `task_schedule_workflow`."""
    return {row["step"]: ScheduledTask(row["task_id"], row["created"]) for row in rows}
