"""The hot path compiles nothing just in time, whatever the statistics price its plans at.

While a snapshot is held, `tasks_hot` and its indexes grow, and an ANALYZE can leave
statistics that price a claim's generic plans past `jit_above_cost`: every call then
JIT-compiled them (70 to 180 ms a claim whose statements ran in 10 ms, in
`bench_held_horizon`). Here `jit_above_cost = 0` prices every plan past it: a statement of
these functions that ran with JIT shows a "JIT:" section in its logged plan.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from tests.support.query_plans import log_every_plan
from tests.support.worker_helpers import db_now

OUTER = "/* outer */"


def test_no_hot_path_function_compiles_just_in_time(conn: psycopg.Connection) -> None:
    assert conn.execute("SELECT pg_jit_available()").fetchone() == (True,), (
        "this test needs a Postgres built with JIT (llvmjit)"
    )
    now = db_now(conn)
    conn.execute(
        "SELECT pgsched.schedule_tasks(ARRAY['job', 'job', 'job'],"
        " idempotency_keys => ARRAY['k1', NULL, NULL])"
    )
    conn.execute("SELECT pgsched.schedule_task('job', run_at => %s)", (now + timedelta(days=2),))
    conn.execute("SET jit = on")
    conn.execute("SET jit_above_cost = 0")
    plans = log_every_plan(conn)

    def call(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        return conn.execute(f"{OUTER} {statement}", params).fetchall()

    claimed = call(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 2, 'w', '1 minute',"
        " NULL, %s)",
        (now - timedelta(hours=1),),
    )
    assert len(claimed) == 2
    ids = [r[0] for r in claimed]
    tokens = [r[1] for r in claimed]
    call("SELECT * FROM pgsched.lane_next_due('NORMAL', NULL)")
    call("SELECT * FROM pgsched.task_heartbeat_many(%s, %s)", (ids, tokens))
    call(
        "SELECT pgsched.task_progress_set_many(%s::bigint[], %s::real[], %s::text[])",
        (ids, [0.5, 0.5], [None, None]),
    )
    call("SELECT * FROM pgsched.work_record_done_many(%s, %s)", (ids, tokens))
    call(
        "SELECT * FROM pgsched.task_finish_many(%s, %s, %s)",
        (ids, tokens, ["COMPLETED", "FAILED"]),
    )
    left = call("SELECT id FROM pgsched.tasks_hot WHERE status = 'QUEUED' LIMIT 1")
    call("SELECT * FROM pgsched.hot_tier_due_by_ids(%s)", ([left[0][0]],))
    call("SELECT id FROM pgsched.task_claim_ids('NORMAL', %s, 'w', '1 second')", ([left[0][0]],))
    call("SELECT pgsched.lease_rescue_expired('NORMAL', 1000, NULL, NULL)")
    call("SELECT * FROM pgsched.task_wake_overdue()")
    call("SELECT pgsched.task_promote_due(1000, NULL, '3 days')")
    conn.execute("RESET client_min_messages")

    inner = [p for p in plans if OUTER not in p]
    for name in ("tasks_hot", "task_dependencies", "task_events"):
        assert any(name in p for p in inner), f"no statement on {name} was logged"
    compiled = [p for p in inner if "JIT:" in p]
    assert not compiled, "\n\n".join(compiled)
