"""Unique windows and debounce: from plain SQL, in bulk, from App and the CLI, and under
concurrent producers (8 connections x 1,000 calls, counted exactly)."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgsched import App, InvalidTaskError

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
T0 = "2030-01-01 12:00:00+00"


def one(conn: psycopg.Connection, sql: str, *params: Any) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row


def count(conn: psycopg.Connection, sql: str, *params: Any) -> int:
    return int(one(conn, sql, *params)[0])


def schedule_ex(conn: psycopg.Connection, args: str, *params: Any) -> tuple[int, bool]:
    row = one(conn, f"SELECT task_id, created FROM pgsched.schedule_task_ex({args})", *params)
    return int(row[0]), bool(row[1])


def test_unique_for_returns_the_windows_task_until_it_ends(conn: psycopg.Connection) -> None:
    args = (
        "'report', %s, tenant_id => %s, idempotency_key => 'daily', unique_for => '5 minutes',"
        " as_of => %s"
    )
    first = schedule_ex(conn, args, Jsonb({"n": 1}), "acme", T0)
    assert first[1] is True
    # Inside the window: the same task, unchanged.
    inside = schedule_ex(conn, args, Jsonb({"n": 2}), "acme", "2030-01-01 12:04:59+00")
    assert inside == (first[0], False)
    assert one(conn, "SELECT payload FROM pgsched.tasks WHERE id = %s", first[0])[0] == {"n": 1}
    # Another tenant's key is its own.
    other = schedule_ex(conn, args, Jsonb({"n": 3}), "globex", "2030-01-01 12:01:00+00")
    assert other[1] is True and other[0] != first[0]
    # After the window: a new task, and the window starts again from it.
    after = schedule_ex(conn, args, Jsonb({"n": 4}), "acme", "2030-01-01 12:05:00+00")
    assert after[1] is True and after[0] != first[0]
    again = schedule_ex(conn, args, Jsonb({"n": 5}), "acme", "2030-01-01 12:09:00+00")
    assert again == (after[0], False)
    assert count(conn, "SELECT count(*) FROM pgsched.tasks") == 3
    # A windowed key is no forever key: the completed-work ledger never sees it.
    assert count(conn, "SELECT count(*) FROM pgsched.tasks WHERE idempotency_key IS NOT NULL") == 0
    assert count(conn, "SELECT count(*) FROM pgsched.idempotency_keys") == 0


def test_debounce_keeps_one_task_with_the_last_payload(conn: psycopg.Connection) -> None:
    args = "'reindex', %s, idempotency_key => 'doc:7', debounce => '30 seconds', as_of => %s"
    first = schedule_ex(conn, args, Jsonb({"v": 1}), T0)
    assert first[1] is True
    second = schedule_ex(conn, args, Jsonb({"v": 2}), "2030-01-01 12:00:10+00")
    third = schedule_ex(conn, args, Jsonb({"v": 3}), "2030-01-01 12:00:20+00")
    assert second == third == (first[0], False)
    row = one(conn, "SELECT payload, next_run_at FROM pgsched.tasks WHERE id = %s", first[0])
    assert row[0] == {"v": 3}
    assert row[1] == one(conn, "SELECT '2030-01-01 12:00:50+00'::timestamptz")[0]
    # Each replacement is an event on the task's record.
    details = [
        r[0]
        for r in conn.execute(
            "SELECT detail FROM pgsched.task_events WHERE task_id = %s ORDER BY id", (first[0],)
        )
    ]
    assert len(details) == 2
    assert all(d.startswith("debounced: replaced by a later call") for d in details)


def test_debounce_makes_a_new_task_once_the_last_one_started(conn: psycopg.Connection) -> None:
    args = "'reindex', %s, idempotency_key => 'doc:8', debounce => '1 second'"
    first = schedule_ex(conn, args, Jsonb({"v": 1}))
    conn.execute("SELECT pg_sleep(1.1)")
    claimed = conn.execute("SELECT id FROM pgsched.task_claim_many('NORMAL', 10, 'w1')").fetchall()
    assert claimed == [(first[0],)]
    later = schedule_ex(conn, args, Jsonb({"v": 2}))
    assert later[1] is True and later[0] != first[0]
    # The running task kept its payload.
    assert one(conn, "SELECT payload FROM pgsched.tasks WHERE id = %s", first[0])[0] == {"v": 1}


def test_debounce_of_a_cold_task_moves_it_to_the_hot_tier_when_due_sooner(
    conn: psycopg.Connection,
) -> None:
    conn.execute("UPDATE pgsched.settings SET hot_window = '1 hour'")
    args = "'digest', %s, idempotency_key => 'd', debounce => '2 hours', as_of => %s"
    first = schedule_ex(conn, args, Jsonb({}), T0)
    assert one(conn, "SELECT status FROM pgsched.tasks WHERE id = %s", first[0])[0] == "PENDING"
    # The hot window grew meanwhile: the replacement routes the task by its new due time.
    conn.execute("UPDATE pgsched.settings SET hot_window = '3 hours'")
    assert schedule_ex(conn, args, Jsonb({"x": 1}), "2030-01-01 12:00:01+00") == (first[0], False)
    assert one(conn, "SELECT status FROM pgsched.tasks WHERE id = %s", first[0])[0] == "QUEUED"
    events = conn.execute(
        "SELECT from_status, to_status FROM pgsched.task_events WHERE task_id = %s", (first[0],)
    ).fetchall()
    assert events == [("PENDING", "QUEUED")]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ("unique_for => '5 minutes'", "unique_for needs an idempotency_key"),
        ("debounce => '5 minutes'", "debounce needs an idempotency_key"),
        (
            "idempotency_key => 'k', unique_for => '1 minute', debounce => '1 minute'",
            "unique_for and debounce cannot be combined",
        ),
        (
            "idempotency_key => 'k', unique_for => '-1 second'",
            "unique_for -00:00:01 is out of range",
        ),
        ("idempotency_key => 'k', debounce => '400 days'", "debounce 400 days is out of range"),
        (
            "idempotency_key => 'k', debounce => '1 minute', run_at => now()",
            "debounce sets the due time",
        ),
    ],
)
def test_bad_windows_are_refused_and_change_nothing(
    conn: psycopg.Connection, args: str, words: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        conn.execute(f"SELECT pgsched.schedule_task('a', {args})")
    assert words in str(refused.value)
    assert count(conn, "SELECT count(*) FROM pgsched.tasks") == 0
    assert count(conn, "SELECT count(*) FROM pgsched.task_windows") == 0


def test_bulk_windows_see_earlier_rows_of_the_batch(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT ordinal, task_id, created FROM pgsched.schedule_tasks("
        " ARRAY['a', 'a', 'a', 'b', 'b'],"
        " payloads => ARRAY['{\"n\": 1}', '{\"n\": 2}', '{}', '{\"n\": 1}', '{\"n\": 2}']::jsonb[],"
        " idempotency_keys => ARRAY['u', 'u', NULL, 'd', 'd'],"
        " unique_fors => ARRAY['1 hour', '1 hour', NULL, NULL, NULL]::interval[],"
        " debounces => ARRAY[NULL, NULL, NULL, '1 hour', '1 hour']::interval[]) ORDER BY ordinal"
    ).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    assert [r[2] for r in rows] == [True, False, True, True, False]
    assert rows[0][1] == rows[1][1] and rows[3][1] == rows[4][1]
    assert one(conn, "SELECT payload FROM pgsched.tasks WHERE id = %s", rows[3][1])[0] == {"n": 2}
    refused = "row 2 of the batch: unique_for"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=refused):
        conn.execute(
            "SELECT * FROM pgsched.schedule_tasks(ARRAY['a', 'a'],"
            " idempotency_keys => ARRAY['x', NULL],"
            " unique_fors => ARRAY['1 hour', '1 hour']::interval[])"
        )


def test_app_and_cli_schedule_with_windows(
    db_dsn: str, db_env: dict[str, str], conn: psycopg.Connection
) -> None:
    app = App(db_dsn)
    first = app.schedule("digest", {"n": 1}, idempotency_key="u1", unique_for=300)
    again = app.schedule("digest", {"n": 2}, idempotency_key="u1", unique_for=timedelta(minutes=5))
    assert first.created and not again.created and again == first
    d1 = app.schedule("digest", {"n": 1}, idempotency_key="d1", debounce=60)
    d2 = app.schedule("digest", {"n": 2}, idempotency_key="d1", debounce=60)
    assert d1.created and not d2.created and d1 == d2
    many = app.schedule_many(
        [
            {"task_type": "digest", "idempotency_key": "d2", "debounce": 60, "payload": {"n": 1}},
            {"task_type": "digest", "idempotency_key": "d2", "debounce": 60, "payload": {"n": 2}},
        ]
    )
    assert [s.created for s in many] == [True, False]
    with pytest.raises(InvalidTaskError, match="unique_for needs an idempotency_key"):
        app.schedule("digest", unique_for=60)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [PGSCHED, "schedule", "digest", *args]
        return subprocess.run(argv, env=db_env, capture_output=True, text=True, timeout=60)

    made = cli("--key", "c1", "--debounce", "5m", "--payload", '{"n": 1}')
    assert made.returncode == 0 and made.stdout.startswith("created task"), made
    replaced = cli("--key", "c1", "--debounce", "5m", "--payload", '{"n": 2}')
    assert replaced.returncode == 0 and "debounced for key c1" in replaced.stdout, replaced
    held = cli("--key", "c2", "--unique-for", "1h")
    inside = cli("--key", "c2", "--unique-for", "1h")
    assert held.returncode == 0 and "within its unique window" in inside.stdout, inside
    before = count(conn, "SELECT count(*) FROM pgsched.tasks")
    for bad, words in (
        (["--key", "c3", "--unique-for", "soon"], "is not a duration"),
        (["--debounce", "5m"], "debounce needs an idempotency_key"),
        (["--key", "c4", "--debounce", "5m", "--at", "+1h"], "debounce sets the due time"),
    ):
        refused = cli(*bad)
        assert refused.returncode == 2, refused
        assert words in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert count(conn, "SELECT count(*) FROM pgsched.tasks") == before


PRODUCERS = 8
CALLS = 1000
KEYS = 20


def _burst(db_dsn: str, window: str, failures: list[BaseException]) -> list[list[tuple[int, bool]]]:
    """8 producers, each on its own connection, 1,000 calls each over 20 keys."""
    results: list[list[tuple[int, bool]]] = [[] for _ in range(PRODUCERS)]
    start = threading.Barrier(PRODUCERS)

    def produce(p: int) -> None:
        try:
            with psycopg.connect(db_dsn, autocommit=True) as c:
                start.wait()
                for i in range(CALLS):
                    row = c.execute(
                        "SELECT task_id, created FROM pgsched.schedule_task_ex('burst', %s,"
                        f" idempotency_key => %s, {window})",
                        (Jsonb({"producer": p, "n": i}), f"key-{i % KEYS}"),
                    ).fetchone()
                    assert row is not None
                    results[p].append((int(row[0]), bool(row[1])))
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures
    return results


def test_unique_for_under_concurrent_producers(db_dsn: str, conn: psycopg.Connection) -> None:
    results = _burst(db_dsn, "unique_for => '1 hour'", [])
    calls = [r for producer in results for r in producer]
    assert len(calls) == PRODUCERS * CALLS
    assert sum(created for _, created in calls) == KEYS
    assert count(conn, "SELECT count(*) FROM pgsched.tasks") == KEYS
    # Every call with a key got that key's one task.
    by_key: dict[int, set[int]] = {}
    for producer in results:
        for i, (task_id, _) in enumerate(producer):
            by_key.setdefault(i % KEYS, set()).add(task_id)
    assert all(len(ids) == 1 for ids in by_key.values())
    assert count(conn, "SELECT count(*) FROM pgsched.task_events") == 0


def test_debounce_under_concurrent_producers(db_dsn: str, conn: psycopg.Connection) -> None:
    results = _burst(db_dsn, "debounce => '1 hour'", [])
    calls = [r for producer in results for r in producer]
    assert sum(created for _, created in calls) == KEYS
    assert count(conn, "SELECT count(*) FROM pgsched.tasks") == KEYS
    # One event per replacement, exactly.
    assert (
        count(conn, "SELECT count(*) FROM pgsched.task_events WHERE detail LIKE 'debounced: %%'")
        == PRODUCERS * CALLS - KEYS
    )
    assert count(conn, "SELECT count(*) FROM pgsched.task_events") == PRODUCERS * CALLS - KEYS
    # Each task holds the last call made for its key: a producer's last call for that key
    # (each producer calls in order, so the last call overall is one of those).
    last_calls = {(p, i) for p in range(PRODUCERS) for i in range(CALLS - KEYS, CALLS)}
    for (payload,) in conn.execute("SELECT payload FROM pgsched.tasks"):
        assert (payload["producer"], payload["n"]) in last_calls
