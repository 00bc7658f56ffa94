"""The benchmarks' workers (`pgsched worker --app benchmarks.noop_app:app`) start no
process of their own beside them. A handler registered to run in a handler process made
each worker start a fork server that imported the app as the drain began: 0.3 s of CPU
a worker, outside the processes the benchmarks measure, in drains of two seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import measure

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_benchmark_workers_start_no_fork_server(db_dsn: str) -> None:
    workers = measure.pgsched_workers(db_dsn, "bench-noop-app", 1, 100, 100).start()
    try:
        workers.wait_listening(db_dsn)
        [pid] = workers.pids
        assert children(pid) == [], workers.log_text()
    finally:
        assert workers.stop(dsn=db_dsn) == [0], workers.log_text()
        workers.cleanup()
