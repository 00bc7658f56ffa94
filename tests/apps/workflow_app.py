"""The handlers the workflow tests run in real worker processes:

    pgsched worker --app tests.apps.workflow_app:app --lanes normal

An order pipeline (charge -> email, invoice -> archive) whose steps return results and read
their parents' (`ctx.parent_results`), a step run in a handler process, a step that fails
once, one that always fails, and one whose return value is not JSON.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pgsched import App, RetryPolicy, TaskContext

app = App()
QUICK = RetryPolicy(base_seconds=0.1, cap_seconds=0.2, jitter=0)


@app.handler("wf_charge", retry=QUICK)
def charge(ctx: TaskContext) -> dict[str, Any]:
    if ctx.payload.get("fail_once") and ctx.attempt == 1:
        raise RuntimeError("card declined (first attempt)")
    return {"order": ctx.payload["order"], "charged": ctx.payload["amount"]}


@app.handler("wf_email")
def email(ctx: TaskContext) -> dict[str, Any]:
    charged = _only(ctx.parent_results)
    return {"emailed": charged["order"], "amount": charged["charged"]}


@app.handler("wf_invoice")
async def invoice(ctx: TaskContext) -> dict[str, Any]:
    charged = _only(await ctx.aparent_results())
    return {"invoiced": charged["order"]}


@app.handler("wf_archive")
def archive(ctx: TaskContext) -> list[Any]:
    results = ctx.parent_results
    return sorted((results[k] for k in results if isinstance(k, int)), key=repr)


@app.handler("wf_in_process", timeout=30, isolation="process")
def in_process(ctx: TaskContext) -> dict[str, Any]:
    return {"pid": os.getpid(), "parents": {str(k): v for k, v in ctx.parent_results.items()}}


@app.handler("wf_dead")
def dead(ctx: TaskContext) -> None:
    raise RuntimeError("this step always fails")


@app.handler("wf_not_json", retry=QUICK)
def not_json(ctx: TaskContext) -> Any:
    return {"when": object()}


@app.handler("wf_nothing")
def nothing(ctx: TaskContext) -> None:
    return None


def _only(results: Mapping[int, Any]) -> Any:
    values = list(results.values())
    assert len(values) == 1, results
    return values[0]


@app.handler("wf_step_email")
def step_email(ctx: TaskContext) -> dict[str, Any]:
    # A workflow's steps are named: the parent's result by its step name.
    return {"emailed": ctx.parent_results["charge"]["order"]}


@app.handler("wf_member", retry=QUICK)
def member(ctx: TaskContext) -> int:
    if ctx.payload.get("fail"):
        raise RuntimeError("this member fails")
    return int(ctx.payload["n"])


@app.handler("wf_batch_done")
def batch_done(ctx: TaskContext) -> dict[str, Any]:
    batch = ctx.batch
    return {
        "total": batch.total,
        "completed": batch.completed,
        "dead": batch.dead,
        "members": len(batch.member_ids),
    }
