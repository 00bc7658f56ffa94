"""The hot path's other statements (claims by id, completions, lease renewals and rescue,
a lane's next due time, promotion) handle rows in proportion to the rows they act on,
even when the tiers' statistics are stale.

As in test_claim_stale_statistics.py: a tier is analyzed while empty, autovacuum kept off
it, then a burst arrives (20,000 tasks due now, or 50,000 scheduled 100 s ahead and a few
due now). Each call runs with auto_explain (analyze, nested statements); the rows every
plan node of every statement inside it produced or filtered out, all loops counted, must
stay within a small multiple of the rows the call acts on. Rows held by other workers
(in flight, PROCESSING) are there too: a statement that reads every leased row of the
tier to find its own grows with the whole fleet's work.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from tests.support.query_plans import heaviest_statement, logged_plans
from tests.support.stale_statistics import AHEAD, analyze_empty, schedule, stale_hot_tier

ACTED_ON = 300  # the rows one call claims, finishes, renews or rescues
IN_FLIGHT = 5_000  # rows other workers hold meanwhile
BOUND = 20 * ACTED_ON

SCENARIOS = ["due", "ahead"]


def _hold(
    conn: psycopg.Connection, worker: str, count: int, lease: str
) -> list[tuple[int, uuid.UUID]]:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, %s, %s::interval)",
        (count, worker, lease),
    ).fetchall()
    assert len(rows) == count
    return [(row[0], row[1]) for row in rows]


def _held_among_others(conn: psycopg.Connection, scenario: str) -> list[tuple[int, uuid.UUID]]:
    """The burst of `scenario` on a stale tier; IN_FLIGHT rows held by other workers (for
    10 minutes), then ACTED_ON rows held by this one (for 30 s): its ids and lease tokens."""
    stale_hot_tier(conn, scenario, IN_FLIGHT + ACTED_ON)
    _hold(conn, "others", IN_FLIGHT, "10 minutes")
    return _hold(conn, "w", ACTED_ON, "30 seconds")


def _assert_in_proportion(
    conn: psycopg.Connection, call: str, params: object, name: str
) -> list[tuple[Any, ...]]:
    rows, plans = logged_plans(conn, call, params)
    handled, statement = heaviest_statement(plans, leave_out=f"{name}(")
    assert handled <= BOUND, f"{handled:,} rows handled by: {statement}"
    return rows


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_claim_by_ids_handles_rows_in_proportion_to_the_ids(
    conn: psycopg.Connection, scenario: str
) -> None:
    # Claims by id run on lanes in plain order (fairness off); they filtered the lane's
    # claim index, every due row of the lane, for the ids given.
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', FALSE)")
    ids = stale_hot_tier(conn, scenario, ACTED_ON)
    rows = _assert_in_proportion(
        conn,
        "SELECT id FROM pgsched.task_claim_ids('NORMAL', %s, 'w')",
        (ids[::-1],),
        "task_claim_ids",
    )
    assert sorted(row[0] for row in rows) == sorted(ids)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_completion_handles_rows_in_proportion_to_the_reports(
    conn: psycopg.Connection, scenario: str
) -> None:
    held = _held_among_others(conn, scenario)
    outcomes = [("COMPLETED", "RETRY", "FAILED")[i % 3] for i in range(ACTED_ON)]
    # One report in ten lost its lease (a token no longer current): recorded as stale.
    tokens = [uuid.uuid4() if i % 10 == 0 else token for i, (_, token) in enumerate(held)]
    rows = _assert_in_proportion(
        conn,
        "SELECT task_id, applied FROM pgsched.task_finish_many(%s, %s, %s,"
        " array_fill('boom'::text, ARRAY[%s]), array_fill(interval '1 minute', ARRAY[%s]))",
        ([i for i, _ in held], tokens, outcomes, ACTED_ON, ACTED_ON),
        "task_finish_many",
    )
    assert sorted(rows) == sorted((i, n % 10 != 0) for n, (i, _) in enumerate(held))
    stale = conn.execute(
        "SELECT count(*) FROM pgsched.task_events"
        " WHERE task_id = ANY(%s) AND detail LIKE 'stale %% report ignored%%'",
        ([i for n, (i, _) in enumerate(held) if n % 10 == 0],),
    ).fetchone()
    assert stale == (ACTED_ON // 10,)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lease_renewal_handles_rows_in_proportion_to_the_leases(
    conn: psycopg.Connection, scenario: str
) -> None:
    held = _held_among_others(conn, scenario)
    rows = _assert_in_proportion(
        conn,
        "SELECT * FROM pgsched.task_heartbeat_many(%s, %s, interval '5 minutes')",
        ([i for i, _ in held], [token for _, token in held]),
        "task_heartbeat_many",
    )
    assert sorted(row[0] for row in rows) == sorted(i for i, _ in held)


@pytest.mark.parametrize("lane", ["NORMAL", None], ids=["one-lane", "every-lane"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lease_rescue_handles_rows_in_proportion_to_the_expired(
    conn: psycopg.Connection, scenario: str, lane: str | None
) -> None:
    _held_among_others(conn, scenario)
    rows = _assert_in_proportion(
        conn,
        "SELECT pgsched.lease_rescue_expired(%s, 1000, now() + interval '1 minute')",
        (lane,),
        "lease_rescue_expired",
    )
    assert rows == [(ACTED_ON,)]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lane_next_due_reads_one_row_a_priority(conn: psycopg.Connection, scenario: str) -> None:
    stale_hot_tier(conn, scenario, ACTED_ON)
    rows, plans = logged_plans(conn, "SELECT next_due FROM pgsched.lane_next_due('NORMAL')")
    assert rows[0][0] is not None
    # A SQL function, inlined: the call's own plan is the statement's.
    handled, statement = heaviest_statement(plans, leave_out="no statement is left out")
    assert handled <= 20, f"{handled:,} rows handled by: {statement}"


def test_promotion_reads_the_cold_tier_in_due_order(conn: psycopg.Connection) -> None:
    # Both tiers analyzed empty; then a burst due now, and more scheduled a month ahead
    # (the cold tier) than a promotion moves.
    analyze_empty(conn, "pgsched.tasks_hot", "pgsched.tasks_cold")
    schedule(conn, 20_000)
    schedule(conn, ACTED_ON, "25 hours")
    schedule(conn, AHEAD, "30 days")
    rows = _assert_in_proportion(
        conn,
        "SELECT pgsched.task_promote_due(10000, now() + interval '2 hours')",
        None,
        "task_promote_due",
    )
    assert rows == [(ACTED_ON,)]
