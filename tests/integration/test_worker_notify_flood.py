"""NOTIFY is a hint: a flood of notifications on a lane's channel (100,000 of them, as any
producer with a login could send) costs the worker a bounded number of claim queries, at
most one per lane per --wakeup-debounce interval, not one per notification or per loop turn.

Claims are counted by Postgres itself: `track_functions` on the test database makes
pg_stat_user_functions count calls of pgsched.task_claim_many (a PL/pgSQL function)."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable

import psycopg

from tests.support.worker_helpers import (
    Workers,
    count_function_calls,
    function_calls,
    listener_backends,
    schedule,
    statuses,
    wait_until,
)

DEBOUNCE = 0.1
FLOOD = 100_000
BURST = 25_000
STREAM_SIZE = 100


def worker_sessions(conn: psycopg.Connection) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND backend_type = 'client backend'"
    ).fetchall()
    return [int(r[0]) for r in rows]


def test_a_notify_flood_costs_at_most_one_claim_per_debounce_interval(
    conn: psycopg.Connection, workers: Workers, connect: Callable[..., psycopg.Connection]
) -> None:
    count_function_calls(conn)
    # The backup poll is far away: every claim in the window is a wake-up's (or startup's).
    w = workers.start("W1", poll=60, extra=["--wakeup-debounce", str(DEBOUNCE)])
    w.wait_running()
    wait_until(lambda: listener_backends(conn), 10, what="the worker's listener")

    producer = connect(autocommit=False)
    flood_started = time.monotonic()
    # A burst (a few large transactions), then a steady stream of small ones: the burst
    # is read in one go, the stream keeps waking the lane for as long as it lasts.
    first = 1
    for size in [BURST // 4] * 4 + [STREAM_SIZE] * ((FLOOD - BURST) // STREAM_SIZE):
        # Distinct payloads: Postgres folds identical notifications of one transaction.
        producer.execute(
            "SELECT pg_notify('pgsched_normal', g::text)"
            " FROM generate_series(%s::integer, %s::integer) AS g",
            (first, first + size - 1),
        )
        producer.commit()
        first += size
    assert first - 1 == FLOOD
    # Notifications of one channel arrive in order: once the task scheduled after the
    # flood has run, the worker has read every notification of the flood.
    sentinel = schedule(conn, "quick")
    wait_until(
        lambda: statuses(conn, [sentinel])[sentinel] == "COMPLETED",
        120,
        what="the task scheduled after the flood",
        interval=0.01,
    )
    # Stop the worker: it claims nothing after the signal, and its backends flush their
    # statistics as they exit. The window of claims ends here (a claim triggered by an
    # earlier notification can run the sentinel before the last of the flood is read).
    window = time.monotonic() - flood_started
    w.send(signal.SIGTERM)
    assert w.wait_exit(60) == 0
    ours = {conn.info.backend_pid, producer.info.backend_pid}
    wait_until(lambda: set(worker_sessions(conn)) <= ours, 20, what="the worker's sessions to end")
    time.sleep(1)
    claims = function_calls(conn, "task_claim_many")
    # Startup claims before the flood (at most a few), then at most one per debounce
    # interval while notifications keep coming, and the sentinel's own.
    bound = math.ceil(window / DEBOUNCE) + 4
    print(f"{FLOOD} notifications: {claims} claim queries in {window:.2f}s (bound {bound})")
    assert claims >= 2  # the counting works: at least startup's claim and the sentinel's
    assert claims <= bound, f"{claims} claims for {FLOOD} notifications in {window:.2f}s"
