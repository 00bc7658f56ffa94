"""task_claim_many under contention: 20 sessions claiming at once never get more rows than
they asked for, never the same row twice, and between them claim every due row. A worker
whose outcomes cannot be written stops claiming instead of taking leases it cannot finish."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.support.worker_helpers import create_test_tables, running_workers, wait_until

ROWS = 10_000
CLAIMERS = 20
ASK = 37


@pytest.mark.slow
def test_concurrent_claims_are_bounded_and_disjoint(
    conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    # Priorities 4..7 (all of the NORMAL lane): each claim reads one range per priority.
    created = conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        "  task_types => array_fill('claim_me'::text, ARRAY[%(n)s]),"
        "  priorities => ARRAY(SELECT 4 + i %% 4 FROM generate_series(1, %(n)s) AS i))",
        {"n": ROWS},
    ).fetchone()
    assert created == (ROWS,)
    assert conn.execute(
        "SELECT count(*) FROM pgsched.tasks WHERE status = 'QUEUED' AND lane = 'NORMAL'"
        " AND next_run_at <= now()"
    ).fetchone() == (ROWS,)

    sessions = [connect(autocommit=True) for _ in range(CLAIMERS)]
    barrier = threading.Barrier(CLAIMERS)
    sizes: list[list[int]] = [[] for _ in range(CLAIMERS)]
    claimed: list[list[tuple[int, str]]] = [[] for _ in range(CLAIMERS)]
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            empty_in_a_row = 0
            while empty_in_a_row < 3:
                rows = (
                    sessions[n]
                    .execute(
                        "SELECT id, locked_by FROM pgsched.task_claim_many('NORMAL', %s, %s)",
                        (ASK, f"w{n}"),
                    )
                    .fetchall()
                )
                sizes[n].append(len(rows))
                claimed[n].extend(rows)
                empty_in_a_row = 0 if rows else empty_in_a_row + 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(CLAIMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []

    calls = [size for per in sizes for size in per]
    assert max(calls) <= ASK, f"a claim returned {max(calls)} rows; asked for {ASK}"
    # Contention was real: several sessions got work, and many claims came back full.
    assert sum(1 for per in sizes if sum(per) > 0) >= 5
    assert sum(1 for size in calls if size == ASK) >= ROWS // ASK // 2

    ids = Counter(task_id for per in claimed for task_id, _ in per)
    assert [i for i, c in ids.items() if c > 1] == []
    assert len(ids) == ROWS
    # Each row is locked by the session whose claim returned it.
    for n, per in enumerate(claimed):
        assert all(worker == f"w{n}" for _, worker in per)
    in_db: dict[int, str] = dict(
        conn.execute(
            "SELECT id, locked_by FROM pgsched.tasks WHERE task_type = 'claim_me'"
            " AND status = 'PROCESSING' AND attempts = 1"
        ).fetchall()
    )
    assert len(in_db) == ROWS
    assert in_db == {task_id: worker for per in claimed for task_id, worker in per}
    # One claim event per row.
    assert conn.execute(
        "SELECT count(*), count(DISTINCT task_id) FROM pgsched.task_events"
        " WHERE to_status = 'PROCESSING'"
    ).fetchone() == (ROWS, ROWS)


def test_claims_pause_while_outcomes_cannot_be_written(
    conn: psycopg.Connection,
    connect: Callable[..., psycopg.Connection],
    db_env: dict[str, str],
    tmp_path: Path,
) -> None:
    create_test_tables(conn)
    tasks, concurrency, flush = 200, 20, 5  # flush: the --flush-size below
    conn.execute(
        "SELECT pgsched.schedule_tasks(task_types => array_fill('fn_async'::text, ARRAY[%s]))",
        (tasks,),
    )
    # Completions move rows into tasks_done; a SHARE lock there blocks them (and only them:
    # claims stay inside tasks_hot).
    blocker = connect(autocommit=False)
    blocker.execute("LOCK TABLE pgsched.tasks_done IN SHARE MODE")

    def processing() -> int:
        row = conn.execute(
            "SELECT count(*) FROM pgsched.tasks WHERE status = 'PROCESSING'"
        ).fetchone()
        return row[0] if row else 0

    with running_workers(db_env, tmp_path) as workers:
        workers.start(
            "w-pressure",
            lease=60,
            extra=["--concurrency", str(concurrency), "--batch-size", "20", "--flush-size", "5"],
        )
        wait_until(lambda: processing() >= concurrency, 20, what="the first claims")
        time.sleep(2.0)
        held = processing()
        # Held: the running ones, one flush statement (at most `flush`, blocked) and fewer
        # than `flush` waiting. Without the pause the lane claims again as each handler
        # returns: all 200.
        assert held <= concurrency + 2 * flush, f"{held} tasks PROCESSING with the flush blocked"
        blocker.rollback()
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) = %s FROM pgsched.tasks WHERE status = 'COMPLETED'", (tasks,)
                ).fetchone()
                == (True,)
            ),
            30,
            what="every task to complete once outcomes can be written",
        )
