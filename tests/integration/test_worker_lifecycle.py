"""A real worker runs handlers through their lifecycle: the order of the steps, validate
refusing a task, timeouts, and transactional handlers whose writes commit with the
completion (or roll back with a failure)."""

from __future__ import annotations

import os

import psycopg

from tests.support.worker_helpers import (
    Workers,
    events,
    schedule,
    statuses,
    steps,
    task,
    transitions,
    wait_until,
)

FULL = ["validate", "before_execute", "execute", "after_execute"]


def wait_terminal(conn: psycopg.Connection, ids: list[int], timeout: float = 15) -> dict[int, str]:
    terminal = {"COMPLETED", "FAILED", "CANCELLED"}

    def finished() -> dict[int, str] | None:
        now = statuses(conn, ids)
        return now if set(now.values()) <= terminal else None

    return wait_until(finished, timeout, what=f"tasks {ids} to finish")


def test_lifecycle_order_async_and_sync(conn: psycopg.Connection, workers: Workers) -> None:
    cases = {
        ("lifecycle_async", "ok"): schedule(conn, "lifecycle_async"),
        ("lifecycle_sync", "ok"): schedule(conn, "lifecycle_sync"),
        ("lifecycle_async", "fail"): schedule(
            conn, "lifecycle_async", '{"fail_execute": true}', max_attempts=1
        ),
        ("lifecycle_sync", "fail"): schedule(
            conn, "lifecycle_sync", '{"fail_execute": true}', max_attempts=1
        ),
        ("lifecycle_async", "after"): schedule(conn, "lifecycle_async", '{"fail_after": true}'),
        ("lifecycle_sync", "after"): schedule(conn, "lifecycle_sync", '{"fail_after": true}'),
        ("fn_async", "ok"): schedule(conn, "fn_async"),
        ("fn_sync", "ok"): schedule(conn, "fn_sync"),
    }
    workers.start("W1").wait_running()
    final = wait_terminal(conn, list(cases.values()))

    for (task_type, case), task_id in cases.items():
        logged = steps(conn, task_id)
        names = [s["step"] for s in logged]
        where = f"{task_type}/{case} (task {task_id})"
        if task_type.startswith("fn_"):
            assert names == ["execute"], where
        elif case == "fail":
            # after_execute does not run when execute raised.
            assert names == FULL[:3], where
        else:
            assert names == FULL, where
        assert {s["attempt"] for s in logged} == {1}, where
        assert {s["worker"] for s in logged} == {"W1"}, where
        if "execute" in names and not task_type.startswith("fn_"):
            # ctx.state set by before_execute is what execute sees: one context per attempt.
            assert logged[names.index("execute")]["detail"] == "before_execute", where
        threads = {s["thread"] for s in logged}
        # Each lane's event loop runs in a thread of its own (lane_engine.py).
        lane_loop_thread = "pgsched-lane-normal"
        if task_type.endswith("_sync"):
            # Plain functions run in the lane's thread pool, never on its event loop.
            assert lane_loop_thread not in threads and "MainThread" not in threads, where
        else:
            assert threads == {lane_loop_thread}, where

        row = task(conn, task_id)
        if case == "fail":
            assert final[task_id] == "FAILED", where
            assert "RuntimeError: execute failed on purpose" in row["last_error"], where
            assert transitions(conn, task_id) == [
                ("QUEUED", "PROCESSING"),
                ("PROCESSING", "FAILED"),
            ], where
        else:
            assert final[task_id] == "COMPLETED", where
            assert row["attempts"] == 1, where
            assert transitions(conn, task_id) == [
                ("QUEUED", "PROCESSING"),
                ("PROCESSING", "COMPLETED"),
            ], where
        if case == "after":
            # The work is done; the after_execute error is kept on the record.
            done = events(conn, task_id)[-1]
            assert "after_execute failed" in done["detail"], where


def test_validate_refusal_is_dead_after_one_attempt(
    conn: psycopg.Connection, workers: Workers
) -> None:
    refused = schedule(conn, "refuses", '{"subject": "hello"}', max_attempts=5)
    accepted = schedule(conn, "refuses", '{"to": "a@example.com"}', max_attempts=5)
    workers.start("W1").wait_running()
    final = wait_terminal(conn, [refused, accepted])
    assert final == {refused: "FAILED", accepted: "COMPLETED"}

    dead = conn.execute(
        "SELECT id, attempts, last_error, status_reason FROM pgsched.lane_dead"
    ).fetchall()
    assert [r[0] for r in dead] == [refused]
    _, attempts, last_error, reason = dead[0]
    assert attempts == 1  # no retries, although max_attempts is 5
    assert last_error.startswith("validate refused: ValueError: payload has no 'to'")
    assert "payload has no 'to'" in reason
    assert transitions(conn, refused) == [("QUEUED", "PROCESSING"), ("PROCESSING", "FAILED")]
    assert "payload has no 'to'" in events(conn, refused)[-1]["detail"]
    # Nothing past validate ran.
    assert [s["step"] for s in steps(conn, refused)] == ["validate"]
    assert [s["step"] for s in steps(conn, accepted)] == [
        "validate",
        "before_execute",
        "execute",
    ]


def test_timeout_turns_a_hung_handler_into_failed_attempts(
    conn: psycopg.Connection, workers: Workers
) -> None:
    slow = schedule(conn, "slow_async", max_attempts=2)
    slow_sync = schedule(conn, "slow_sync", max_attempts=1)
    workers.start("W1").wait_running()
    final = wait_terminal(conn, [slow, slow_sync], timeout=10)
    assert final == {slow: "FAILED", slow_sync: "FAILED"}

    row = task(conn, slow)
    assert row["attempts"] == 2
    assert "timed out after 0.5s" in row["last_error"]
    assert transitions(conn, slow) == [
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "QUEUED"),
        ("QUEUED", "PROCESSING"),
        ("PROCESSING", "FAILED"),
    ]
    assert "timed out" in events(conn, slow)[1]["detail"]
    assert "timed out after 0.5s" in task(conn, slow_sync)["last_error"]

    # Each attempt ended at its timeout, not when the 5 s sleep would have.
    runs = conn.execute(
        "SELECT extract(epoch FROM finished_at - started_at) FROM pgsched.task_runs"
        " WHERE task_id = %s ORDER BY attempt",
        (slow,),
    ).fetchall()
    assert len(runs) == 2
    assert all(0.45 <= float(r[0]) < 1.5 for r in runs), runs
    # The async handler was cancelled: it never reached its end.
    assert [s["step"] for s in steps(conn, slow)] == ["start", "start"]


def test_handlers_own_timeout_error_is_reported_as_itself(
    conn: psycopg.Connection, workers: Workers
) -> None:
    """A TimeoutError the handler raises itself (a client library's) is an ordinary
    failure with its message and traceback, not "timed out after Nones"."""
    task_id = schedule(conn, "raises_timeout_error", max_attempts=1)
    workers.start("W1").wait_running()
    assert wait_terminal(conn, [task_id]) == {task_id: "FAILED"}
    last_error = task(conn, task_id)["last_error"]
    assert "the upstream API did not answer within 30s" in last_error, last_error
    assert "timed out after None" not in last_error


def test_transactional_write_commits_with_completion(
    conn: psycopg.Connection, workers: Workers
) -> None:
    ok_async = schedule(conn, "tx_async")
    ok_sync = schedule(conn, "tx_sync")
    bad_async = schedule(conn, "tx_async", '{"fail": true}', max_attempts=1)
    bad_sync = schedule(conn, "tx_sync", '{"fail": true}', max_attempts=1)
    workers.start("W1").wait_running()
    final = wait_terminal(conn, [ok_async, ok_sync, bad_async, bad_sync])
    assert final == {
        ok_async: "COMPLETED",
        ok_sync: "COMPLETED",
        bad_async: "FAILED",
        bad_sync: "FAILED",
    }
    written: dict[int, str] = dict(
        conn.execute("SELECT task_id, note FROM public.worker_test_tx").fetchall()
    )
    # The failed attempts' writes were rolled back; the completed ones' are there once.
    assert written == {ok_async: "async", ok_sync: "sync"}
    assert conn.execute("SELECT count(*) FROM public.worker_test_tx").fetchone() == (2,)
    for task_id in (bad_async, bad_sync):
        assert "RuntimeError: failed after writing" in task(conn, task_id)["last_error"]
    for task_id in (ok_async, ok_sync):
        # One transaction wrote both: the handler's row and the COMPLETED task row.
        same = conn.execute(
            "SELECT (SELECT xmin::text FROM public.worker_test_tx WHERE task_id = %(id)s)"
            "     = (SELECT xmin::text FROM pgsched.tasks WHERE id = %(id)s)",
            {"id": task_id},
        ).fetchone()
        assert same == (True,), f"task {task_id}: write and completion in different transactions"


def test_transactional_completion_is_stamped_when_the_work_ends(
    conn: psycopg.Connection, workers: Workers
) -> None:
    """The completion written in the handler's transaction carries the time the work
    ended, not the start of that transaction (the handler's first write)."""
    task_id = schedule(conn, "tx_async", '{"linger": 1.0}')
    workers.start("W1", lease=30).wait_running()
    assert wait_terminal(conn, [task_id]) == {task_id: "COMPLETED"}
    assert transitions(conn, task_id) == [("QUEUED", "PROCESSING"), ("PROCESSING", "COMPLETED")]
    # Logged after the write and the 1 s of work that followed it.
    [work_ended] = [s["at"] for s in steps(conn, task_id) if s["step"] == "end"]
    completed_at = events(conn, task_id)[-1]["occurred_at"]
    assert completed_at >= work_ended, (
        f"COMPLETED recorded {(work_ended - completed_at).total_seconds():.2f}s "
        "before the handler finished"
    )


def test_plain_handlers_run_as_many_at_once_as_concurrency(
    conn: psycopg.Connection, workers: Workers
) -> None:
    """Plain-def handlers are not capped by asyncio's default executor: --concurrency
    of them run at once (otherwise the rest sit leased, their timeouts running)."""
    # More than asyncio's default executor has threads (min(32, cpu_count + 4)).
    n = min(32, (os.cpu_count() or 1) + 4) + 4
    row = conn.execute(
        "SELECT array_agg(task_id ORDER BY ordinal) FROM pgsched.schedule_tasks("
        "  array_fill('sleepy_sync'::text, ARRAY[%(n)s]),"
        "  payloads => array_fill('{\"seconds\": 1.5}'::jsonb, ARRAY[%(n)s]))",
        {"n": n},
    ).fetchone()
    assert row is not None
    ids = list(row[0])
    workers.start("W1", extra=["--concurrency", str(n)]).wait_running()
    wait_terminal(conn, ids, timeout=30)
    spans = conn.execute(
        "SELECT s.at, e.at FROM public.worker_test_log AS s"
        " JOIN public.worker_test_log AS e ON e.task_id = s.task_id AND e.step = 'end'"
        " WHERE s.step = 'start'"
    ).fetchall()
    assert len(spans) == n
    # The most handlers running at one moment: at the latest start, how many had not ended.
    latest_start = max(start for start, _ in spans)
    overlapping = sum(1 for start, end in spans if start <= latest_start < end)
    assert overlapping == n, f"{overlapping} of {n} plain handlers ran at once"


def test_task_row_decodes_payload_and_metadata_when_first_read() -> None:
    from datetime import UTC, datetime

    from pgsched.handlers import TaskRow

    due = datetime.now(UTC)
    row = TaskRow(1, "t", "acme", '{"a": [1, 2]}', '{"m": 1}', 1, 3, due, "NORMAL", 5, None, None)
    # Nothing decoded until a handler asks (a no-op handler never does).
    assert "payload" not in vars(row) and "metadata" not in vars(row)
    assert row.payload == {"a": [1, 2]}
    assert row.payload is row.payload
    assert row.metadata == {"m": 1}
