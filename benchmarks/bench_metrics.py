"""What the worker's metrics cost a task, in-process, no database.

The worker calls three hooks per task: `claimed` once per claim batch, `ran` when the
handler ends, `written` once per outcome flush. This runs them the way the worker does
(claims of 100, flushes of 500, 20 task types over 4 lanes) and prints microseconds per
task, next to what the worker already spends per task on the same path without metrics
(making its TaskRow and its Outcome), as a ratio measured in the same run.

    python -m benchmarks.bench_metrics [--tasks N] [--tenant-label]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import measure
from pgsched.handlers import TaskRow
from pgsched.observability.metrics import WorkerMetrics, new_registry
from pgsched.worker.outcomes import Outcome

LANES = ("HIGH", "NORMAL", "LOW", "BATCH")
CLAIM_BATCH = 100
FLUSH_BATCH = 500


def rows(n: int, first_id: int) -> list[tuple[Any, ...]]:
    due = datetime.now(UTC) - timedelta(milliseconds=5)
    return [
        (
            first_id + i,
            f"type_{i % 20}",
            f"tenant_{i % 50}",
            "{}",
            "{}",
            1 + i % 3,
            3,
            due,
            LANES[i % 4],
            5,
            None,
            None,
        )
        for i in range(n)
    ]


def baseline(n: int) -> float:
    """Seconds for the per-task work the worker does anyway on this path."""
    started = time.perf_counter()
    for start in range(0, n, CLAIM_BATCH):
        tasks = [TaskRow(*r) for r in rows(CLAIM_BATCH, start)]
        [Outcome(t.id, t.lease_token, "COMPLETED") for t in tasks]
    return time.perf_counter() - started


def with_metrics(n: int, tenant_label: bool) -> float:
    metrics = WorkerMetrics(new_registry(), LANES, tenant_label=tenant_label)
    started = time.perf_counter()
    pending: list[Outcome] = []
    for start in range(0, n, CLAIM_BATCH):
        tasks = [TaskRow(*r) for r in rows(CLAIM_BATCH, start)]
        metrics.claimed(tasks)
        for i, task in enumerate(tasks):
            metrics.ran(task, 0.002)
            status = "RETRY" if i % 10 == 0 else "COMPLETED"
            pending.append(Outcome(task.id, task.lease_token, status))
        if len(pending) >= FLUSH_BATCH:
            metrics.written(((o.task_id, o.outcome) for o in pending), {o.task_id for o in pending})
            pending.clear()
    metrics.written(((o.task_id, o.outcome) for o in pending), {o.task_id for o in pending})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tenant-label", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = args.tasks
    # Alternating rounds, the best of each: the machine is shared, noise only adds.
    base = min(baseline(n) for _ in range(args.rounds))
    full = min(with_metrics(n, args.tenant_label) for _ in range(args.rounds))
    metrics_us = (full - base) / n * 1e6
    result = {
        "command": " ".join(["python -m benchmarks.bench_metrics", *sys.argv[1:]]),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "tasks": n,
        "tenant_label": args.tenant_label,
        "baseline_us_per_task": round(base / n * 1e6, 3),
        "metrics_us_per_task": round(metrics_us, 3),
        "metrics_to_baseline_ratio": round(metrics_us / (base / n * 1e6), 2),
    }
    out = Path(args.out or measure.RESULTS / "metrics.json")
    measure.write_json(out, result)
    print(
        f"metrics: {result['metrics_us_per_task']} µs per task (claim, run, outcome hooks);"
        f" the TaskRow and Outcome the worker makes anyway: {result['baseline_us_per_task']} µs;"
        f" ratio {result['metrics_to_baseline_ratio']}"
    )


if __name__ == "__main__":
    main()
