"""The chaos suite, long form: every scenario of benchmarks/chaos/scenarios.py, sized in
minutes rather than seconds, on a Postgres cluster of its own.

    python -m benchmarks.chaos                    # everything (about 25 minutes)
    python -m benchmarks.chaos --only xmin_held   # one scenario (repeatable)
    python -m benchmarks.chaos --out DIR          # where chaos.json goes

Prints one line per scenario as it ends, then a Markdown table (scenario, tasks scheduled,
completed, lost, run twice, recovery, notes: the table the README's reliability section
quotes), and writes DIR/chaos.json (default benchmarks/results/): every figure, the
sampled series (the xmin hold's windows), the machine and the commit. The workers' logs
stay in a temporary directory, named at the end. Exit status 1 if a scenario lost a task,
ran one twice, or failed to run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import measure
from benchmarks.chaos import scenarios
from tests.support.chaos_harness import Figures, Scenario, cluster

Run = Callable[[Scenario], Figures]

FAILOVER_NOTES = (
    "outage_s",
    "doctor_replication",
    "leader_back_s",
    "minutes",
    "schedule_fired",
    "schedule_run_twice",
)

# name, scenario, what the notes column shows
LONG_FORM: list[tuple[str, Run, tuple[str, ...]]] = [
    (
        "sigkill_workers",
        partial(scenarios.sigkill_workers, seconds=150, kills=10),
        ("killed", "orphaned"),
    ),
    (
        "postgres_restart_fast",
        partial(scenarios.postgres_restart, mode="fast", seconds=60),
        ("refused_while_down", "workers_alive"),
    ),
    (
        "postgres_restart_immediate",
        partial(scenarios.postgres_restart, mode="immediate", seconds=60),
        ("refused_while_down", "workers_alive"),
    ),
    (
        "listener_killed",
        partial(scenarios.listener_killed, rounds=10),
        ("worker_alive",),
    ),
    (
        "idle_session_timeout",
        partial(scenarios.idle_session_timeout, trickles=12),
        ("worker_alive",),
    ),
    (
        "database_read_only",
        partial(scenarios.database_read_only, seconds=20),
        ("refused_while_read_only", "workers_alive"),
    ),
    (
        "unstorable_error_text",
        partial(scenarios.unstorable_error_text, count=300),
        ("worker_alive",),
    ),
    (
        "base_exceptions",
        partial(scenarios.base_exceptions, count=300),
        ("worker_alive",),
    ),
    (
        "hung_low_handlers",
        partial(scenarios.hung_low_handlers, urgent=100),
        ("hung_low_failed", "worker_alive"),
    ),
    (
        "lanes_contained_hung",
        partial(scenarios.lanes_contained, bad="hung", seconds=30),
        ("high_control_p99_ms", "high_p50_ms", "high_p99_ms", "high_max_ms", "bad_final"),
    ),
    (
        "lanes_contained_block",
        partial(scenarios.lanes_contained, bad="block", seconds=30),
        ("high_control_p99_ms", "high_p50_ms", "high_p99_ms", "high_max_ms", "low_after_block"),
    ),
    (
        "handler_process_deaths",
        partial(scenarios.handler_process_deaths, count=100),
        ("killed_named", "segfault_named", "worker_alive"),
    ),
    (
        "terminated_backends",
        partial(scenarios.terminated_backends, seconds=90),
        ("kills", "writes_not_once", "sigterm_exit", "sigterm_s"),
    ),
    (
        "too_few_connection_slots",
        partial(scenarios.too_few_connection_slots, seconds=60),
        (
            "workers_alive",
            "worker_starts",
            "workers_that_ran",
            "workers_saying_short",
            "tracebacks",
        ),
    ),
    (
        "point_in_time_restore",
        partial(scenarios.point_in_time_restore, seconds=60),
        (
            "processing_at_restore",
            "completed_at_restore",
            "keyed_created_again",
            "cut_off",
        ),
    ),
    *[
        (
            f"failover_{'sync' if synchronous else 'async'}_{after}s",
            partial(scenarios.failover, synchronous=synchronous, promote_after=after, seconds=130),
            FAILOVER_NOTES,
        )
        for synchronous, after in ((True, 0), (True, 20), (True, 40), (False, 0), (False, 20))
    ],
    (
        "redis_faults",
        partial(scenarios.redis_faults, seconds=120),
        ("recovery_by_fault", "lateness_p99_ms", "lateness_max_ms", "claimed_by_id"),
    ),
    (
        "pgbouncer_restart",
        partial(scenarios.pgbouncer_restart, seconds=120, down_s=5),
        (
            "down_s",
            "lateness_p99_before_ms",
            "lateness_max_ms",
            "refused_while_down",
            "writes_not_once",
            "workers_alive",
        ),
    ),
    (
        "xmin_held",
        partial(scenarios.xmin_held, hold_s=300, before_s=30, after_s=120, rate=300, window_s=5),
        (
            "held_s",
            "claim_ms_before",
            "claim_ms_hold_end",
            "claim_ms_after",
            "claims_per_s_before",
            "claims_per_s_hold_end",
            "completed_pct_of_arrivals_hold",
            "dead_tuples_peak",
        ),
    ),
]

RECOVERY_MEANS = {
    "sigkill_workers": "kill to orphans re-run",
    "postgres_restart_fast": "server back to next run",
    "postgres_restart_immediate": "server back to next run",
    "listener_killed": "kill to next run (30 s poll)",
    "idle_session_timeout": "worst schedule-to-start",
    "database_read_only": "writable to next run",
    "hung_low_handlers": "HIGH's worst lateness",
    "lanes_contained_hung": "HIGH's p99 lateness beside hung LOW handlers",
    "lanes_contained_block": "HIGH's p99 lateness beside a blocked LOW loop",
    "terminated_backends": "kill to next run",
    "too_few_connection_slots": "start to first run",
    "xmin_held": "COMMIT to claims normal",
    "pgbouncer_restart": "kill to lateness normal",
    "redis_faults": "fault's end to the mirror rebuilt (claims never wait for it)",
}


def notes(name: str, figures: Figures, keys: tuple[str, ...]) -> str:
    shown = [f"{k}={figures.extra[k]}" for k in keys if k in figures.extra]
    if "unfinished" in figures.extra:
        shown.append(f"unfinished={figures.extra['unfinished']}")
    if figures.reruns:
        shown.append(f"retried={figures.reruns}")
    if name in RECOVERY_MEANS:
        shown.insert(0, f"recovery: {RECOVERY_MEANS[name]}")
    return "; ".join(shown)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | tasks scheduled | completed | lost | run twice | recovery | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        recovery = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f} s"
        lines.append(
            f"| {r['scenario']} | {r['scheduled']:,} | {r['completed']:,} | {r['lost']} "
            f"| {r['run_twice']} | {recovery} | {r['notes']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__)
    parser.add_argument(
        "--only",
        action="append",
        choices=[name for name, _, _ in LONG_FORM],
        help="run only this scenario (repeatable)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "results",
        help="directory for chaos.json (default: benchmarks/results)",
    )
    args = parser.parse_args(argv)
    chosen = [entry for entry in LONG_FORM if not args.only or entry[0] in args.only]
    workroot = Path(tempfile.mkdtemp(prefix="pgsched-chaos-long-"))
    started = datetime.now(UTC)
    began = time.monotonic()
    rows: list[dict[str, Any]] = []
    failed = False
    with cluster() as c:
        for name, run, keys in chosen:
            measure.step(f"chaos: {name}")
            workdir = workroot / name
            workdir.mkdir()
            t0 = time.monotonic()
            s = Scenario(c, name, workdir)
            try:
                figures = run(s)
                row = {**json.loads(figures.as_json()), "notes": notes(name, figures, keys)}
                failed |= bool(figures.lost or figures.run_twice)
            except Exception as exc:
                traceback.print_exc()
                failed = True
                row = {
                    "scenario": name,
                    "scheduled": 0,
                    "completed": 0,
                    "lost": 0,
                    "run_twice": 0,
                    "recovery_s": None,
                    "notes": f"scenario failed: {exc!r}"[:300],
                }
            finally:
                s.close(show_logs=False)
            row["scenario"] = name
            row["seconds"] = round(time.monotonic() - t0, 1)
            rows.append(row)
    total = round(time.monotonic() - began, 1)
    print()
    print(f"python -m benchmarks.chaos, {started:%Y-%m-%d %H:%M} UTC, {total / 60:.1f} minutes")
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "chaos.json"
    document = {
        "command": "python -m benchmarks.chaos" + "".join(f" --only {n}" for n in args.only or []),
        "started": started.isoformat(timespec="seconds"),
        "seconds": total,
        "machine": measure.machine_info(),
        "loadavg_end": measure.loadavg(),
        "scenarios": rows,
        "table": table(rows),
    }
    out.write_text(json.dumps(document, indent=2, default=str))
    print(f"\nwrote {out}; worker logs in {workroot}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
