"""Every index and every tuple against the statement that needs it.

    python -m benchmarks.bench_index_use                       # CI size: 20,000 finished
    python -m benchmarks.bench_index_use --finished 2000000 --drain 20000
    python -m benchmarks.bench_index_use --dsn postgresql://... # an existing, empty database

One database is seeded to a size (--finished COMPLETED tasks over the last 10 hours, a
twentieth of them keyed, with their two events each; a hundredth of that DEAD in
tasks_done; a quarter of it PENDING in tasks_cold; 2,000 keyed QUEUED in tasks_hot due now
and a tenth of --finished due over the next 23 hours), then ANALYZEd. In a database
migrated today, today's finished tasks and events are in the archive partitions (the
periods start tomorrow); a period's indexes are the archive's, partitions of the same
parent indexes. Then two measurements:

uses     every named statement of sql/queries.sql and sql/dashboard_queries.sql is run
         once with representative parameters (a few with several sets: a task search by
         each filter) in a transaction that is rolled back, with auto_explain logging the
         plan of every statement it executes (log_nested_statements: the statements of
         the SQL functions it calls and of the triggers they fire, as
         tests/integration/test_claim_path_explain.py reads them; log_analyze off, so a
         plan is what the planner chose, as EXPLAIN (FORMAT JSON) shows it). An index is
         used by a statement when a plan node scans it or an INSERT ... ON CONFLICT
         arbitrates on it. A statement that needs leased tasks (the completion, heartbeat,
         ledger) gets them from a claim run first in the same transaction, whose plans are
         not counted for it. A unique index also does its work on every insert into its
         table (it is what refuses a duplicate); the table marks it `unique`.

cost     --drain tasks due now are scheduled (task_schedule_many's function, 20,000 per
         statement) and drained by --processes `pgsched worker` processes with their
         default flags, first unkeyed, then keyed (the worker then writes the ledger too).
         Around each phase: pg_stat_all_tables (n_tup_ins / upd / hot_upd / del: heap
         tuples written per task per table), pg_statio_all_indexes (buffers each index
         touched per task) and the WAL between the two LSNs (pg_walinspect): each leaf
         insertion into an index is one btree INSERT_LEAF / INSERT_POST record or one
         leaf-level split, so index insertions per task are counted, not estimated from
         the table's counters (a partial index takes only the rows its predicate admits);
         WAL bytes per task per relation come with it. The worker processes are stopped
         before the counters are read: a backend's statistics are flushed when it exits.

Partitioned indexes are reported once, by their root (tasks_finished_type_idx for every
period's and the archive's), with the sizes of all their partitions summed; the JSON keeps
each partition apart. Without --dsn a throwaway, durable cluster is started
(benchmarks/pgserver.py); --dsn must be a superuser's (auto_explain, pg_walinspect).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks import measure
from pgsched.queries import load_queries
from pgsched.sql_files import sql_dir

OUT = measure.RESULTS / "index_use.json"

# The relations measured: every tier of tasks, the events, the ledger, the keys.
TABLES = (
    "tasks_hot",
    "tasks_cold",
    "tasks_finished",
    "tasks_done",
    "task_events",
    "completed_work",
    "idempotency_keys",
)
LEASE = timedelta(seconds=30)
CLAIMER = "bench-index-use"


# --------------------------------------------------------------------------------------
# seeding


def seed(dsn: str, finished: int) -> dict[str, int]:
    """The database at a size: see the module's docstring. Set-based, as an import or a
    long-running installation would have written it (the finished rows' events too)."""
    dead = max(finished // 100, 50)
    cold = max(finished // 4, 1000)
    keyed = finished // 20
    # Hot: what a day's window holds, a tenth of the finished (2,000 at least).
    hot_due, hot_later = 2_000, max(2_000, finished // 10)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        # Finished: within the last ~10 hours, so some land in today's period and the
        # rest in the archive (a database migrated today has no earlier periods).
        conn.execute(
            "INSERT INTO pgsched.tasks (task_type, tenant_id, next_run_at, priority, lane,"
            " status, attempts, last_run_at, updated_at, created_at, idempotency_key)"
            " SELECT 'type_' || (g %% 20), 'tenant_' || (g %% 50), t - interval '1 s', 5,"
            "        'NORMAL', 'COMPLETED', 1, t, t, t - interval '1 s',"
            "        CASE WHEN g %% 20 = 0 THEN 'key-' || g END"
            " FROM generate_series(1, %(n)s) AS g,"
            "      LATERAL (SELECT now() - (g::float8 / %(n)s) * interval '10 hours' AS t) AS x",
            {"n": finished},
        )
        conn.execute(
            "INSERT INTO pgsched.idempotency_keys (tenant_id, idempotency_key, task_id,"
            " created_at) SELECT tenant_id, idempotency_key, id, created_at"
            " FROM pgsched.tasks_finished WHERE idempotency_key IS NOT NULL"
        )
        conn.execute(
            "INSERT INTO pgsched.completed_work (tenant_id, task_type, idempotency_key,"
            " task_id, completed_at) SELECT tenant_id, task_type, idempotency_key, id,"
            " updated_at FROM pgsched.tasks_finished WHERE idempotency_key IS NOT NULL"
        )
        conn.execute(
            "INSERT INTO pgsched.task_events (id, task_id, tenant_id, task_type,"
            " from_status, to_status, occurred_at, scheduled_for, attempt, worker)"
            " SELECT nextval('pgsched.task_events_id_seq'), id, tenant_id, task_type,"
            "        s.f::pgsched.task_status, s.t::pgsched.task_status,"
            "        CASE WHEN s.t = 'PROCESSING' THEN last_run_at - interval '1 ms'"
            "             ELSE updated_at END, next_run_at, 1, 'seed'"
            " FROM pgsched.tasks_finished,"
            "      (VALUES ('QUEUED', 'PROCESSING'), ('PROCESSING', 'COMPLETED')) AS s (f, t)"
        )
        conn.execute(
            "INSERT INTO pgsched.tasks (task_type, tenant_id, next_run_at, priority, lane,"
            " status, attempts, last_run_at, updated_at, last_error)"
            " SELECT 'type_' || (g %% 20), 'tenant_' || (g %% 50), t, 5, 'NORMAL', 'FAILED', 3,"
            "        t, t, 'ValueError: seed ' || (g %% 7)"
            " FROM generate_series(1, %(n)s) AS g,"
            "      LATERAL (SELECT now() - (g::float8 / %(n)s) * interval '10 hours' AS t) AS x",
            {"n": dead},
        )
        conn.execute(
            "INSERT INTO pgsched.tasks (task_type, tenant_id, next_run_at, priority, lane,"
            " status) SELECT 'type_' || (g %% 20), 'tenant_' || (g %% 50),"
            " now() + interval '2 days' + g * interval '1 s', 5, 'NORMAL', 'PENDING'"
            " FROM generate_series(1, %s) AS g",
            (cold,),
        )
        # Hot: through the API (routing, keys), due now and later today.
        conn.execute(
            "SELECT count(*) FROM pgsched.schedule_tasks("
            " task_types => ARRAY(SELECT 'type_' || (g %% 20) FROM generate_series(1, %(n)s) g),"
            " tenant_ids => ARRAY(SELECT 'tenant_' || (g %% 50) FROM generate_series(1, %(n)s) g),"
            " idempotency_keys => ARRAY(SELECT 'hot-' || g FROM generate_series(1, %(n)s) g),"
            " run_ats => ARRAY(SELECT now() - interval '1 minute' FROM generate_series(1, %(n)s)"
            " g))",
            {"n": hot_due},
        )
        conn.execute(
            "SELECT count(*) FROM pgsched.schedule_tasks("
            " task_types => array_fill('later'::text, ARRAY[%(n)s]),"
            " run_ats => ARRAY(SELECT now() + g * (interval '23 hours' / %(n)s)"
            " FROM generate_series(1, %(n)s) g))",
            {"n": hot_later},
        )
        conn.execute("SELECT pgsched.tenant_add('tenant_7', 'shop', '{}'::jsonb)")
        conn.execute(
            "SELECT pgsched.schedule_recurring(task_type => 'nightly',"
            " cron_expression => '0 3 * * *', timezone => 'UTC')"
        )
        conn.execute("VACUUM ANALYZE")
    return {
        "finished": finished,
        "finished_keyed": keyed,
        "dead": dead,
        "cold": cold,
        "hot_due": hot_due,
        "hot_later": hot_later,
    }


# --------------------------------------------------------------------------------------
# the indexes


def index_catalog(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    """Every index of the measured tables and their partitions: its table, its tier (the
    nearest measured table at or above its table: tasks_finished for a period), its root
    (the tier's index it is a partition of, or itself), definition, size, uniqueness."""
    rows = conn.execute(
        """
        SELECT i.relname, t.relname, tier.relname, coalesce(root.relname, i.relname),
               pg_get_indexdef(i.oid), pg_relation_size(i.oid),
               x.indisunique OR x.indisprimary, i.relkind::text
          FROM pg_index AS x
          JOIN pg_class AS i ON i.oid = x.indexrelid
          JOIN pg_class AS t ON t.oid = x.indrelid
          JOIN pg_namespace AS n ON n.oid = i.relnamespace
          CROSS JOIN LATERAL (
                -- A plain table has no ancestors, not even itself: it comes last.
                SELECT c.oid, c.relname
                  FROM unnest(ARRAY(SELECT relid FROM pg_partition_ancestors(t.oid))
                              || t.oid::regclass) WITH ORDINALITY AS a (relid, ord)
                  JOIN pg_class AS c ON c.oid = a.relid
                 WHERE c.relname = ANY(%s) ORDER BY a.ord LIMIT 1) AS tier
          LEFT JOIN LATERAL (
                SELECT c.relname FROM pg_partition_ancestors(i.oid) AS a
                  JOIN pg_index AS ax ON ax.indexrelid = a.relid
                  JOIN pg_class AS c ON c.oid = a.relid
                 WHERE ax.indrelid = tier.oid LIMIT 1) AS root ON true
         WHERE n.nspname = 'pgsched'
        """,
        (list(TABLES),),
    ).fetchall()
    return {
        name: {
            "table": table,
            "table_root": tier,
            "root": root,
            "definition": definition,
            "bytes": int(size),
            "unique": bool(unique),
            "partitioned": kind == "I",
        }
        for name, table, tier, root, definition, size, unique, kind in rows
    }


# --------------------------------------------------------------------------------------
# uses: the plans of every named statement


def representative(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Parameter values by name, from rows the seed wrote."""

    def first(sql: str) -> Any:
        return measure.one(conn, sql)

    finished_id = first(
        "SELECT id FROM pgsched.tasks_finished ORDER BY id OFFSET"
        " (SELECT count(*) / 2 FROM pgsched.tasks_finished) LIMIT 1"
    )
    dead_id = first("SELECT max(id) FROM pgsched.tasks_done")
    schedule_id = first("SELECT max(id) FROM pgsched.schedules")
    # The sweep leader reads the events since its last read: the newest hundred here.
    recent_event = first("SELECT last_value - 100 FROM pgsched.task_events_id_seq")
    return {
        "task_type": "type_3",
        "tenant_id": "tenant_7",
        "task_id": finished_id,
        "max_rows": 50,
        "idempotency_key": None,
        "due_until": None,
        "due_from": None,
        "schedule_id": schedule_id,
        "after_due": None,
        "reason": "index-use benchmark",
        "status": None,
        "now": None,
        "lane": "NORMAL",
        "since": None,
        "error_class": None,
        "before_id": None,
        "after_id": None,
        "after": recent_event,
        "task_ids": [finished_id],
        "scope": "tenant",
        "lease": LEASE,
        "product": None,
        "max_tasks": 100,
        "holder": CLAIMER,
        "cap": 100_001,
        "timezone": "UTC",
        "payload": Jsonb({}),
        "metadata": Jsonb({}),
        "key": "key-20",
        "keep": timedelta(days=30),
        "generation": 1,
        "actor": CLAIMER,
        "worker": CLAIMER,
        "until": None,
        "skip_rows": 0,
        "priority": 5,
        "outcome": None,
        "max_attempts": 3,
        "lock_wait": timedelta(seconds=1),
        "lease_tokens": [uuid.uuid4()],
        "ids": [finished_id],
        "cron_expression": "*/5 * * * *",
        "ahead": 3,
        "within": None,
        "unique_for": None,
        "traceparent": None,
        "schedule_ids": [schedule_id],
        "run_at": None,
        "retry_delays": [None],
        "rate": None,
        "per": None,
        "owner": CLAIMER,
        "older_than": timedelta(minutes=1),
        "name": "bench-index-use",
        "missed": [],
        "misfire_policy": "skip",
        "max_processing": None,
        "lease_token": None,
        "first_fire_at": None,
        "fire_at": None,
        "fair": True,
        "failed_until": None,
        "expected_task_id": None,
        "dry_run": True,
        "detail": None,
        "debounce": None,
        "catch_up_limit": None,
        "all_tasks": False,
        "active": True,
        "outcomes": ["COMPLETED"],
        "errors": [None],
        "dead_id": dead_id,
        # task_schedule_many: one task, due in an hour (binary arrays, typed).
        "task_types": ["type_3"],
        "payloads": [Jsonb({})],
        "run_ats": [None],
        "tenant_ids": ["tenant_7"],
        "priorities": [5],
        "idempotency_keys": [None],
        "lanes": [None],
        "metadatas": [Jsonb({})],
        "unique_fors": [None],
        "debounces": [None],
        "traceparents": [None],
    }


# Statements run more than once: the filters a user picks one at a time.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "history": [{}, {"task_id": "@task_id", "max_rows": 50}, {"task_type": "type_3"}],
    "dashboard_task_search": [
        {"task_type": None, "tenant_id": None},
        {"task_id": "@task_id", "task_type": None, "tenant_id": None},
        {"task_type": "type_3", "tenant_id": None},
        {"task_type": None, "tenant_id": "tenant_7"},
        {"task_type": None, "tenant_id": None, "status": "COMPLETED"},
        {"task_type": None, "tenant_id": None, "status": "FAILED"},
        {"task_type": None, "tenant_id": None, "idempotency_key": "key-20"},
        {
            "task_type": None,
            "tenant_id": None,
            "due_from": "@five_hours_ago",
            "due_until": "@four_hours_ago",
        },
        {"task_type": None, "tenant_id": None, "due_until": "@five_hours_ago"},
    ],
    "dashboard_task_count": [
        {"task_type": "type_3", "tenant_id": None},
        {"task_type": None, "tenant_id": None, "status": "COMPLETED"},
        {
            "task_type": None,
            "tenant_id": None,
            "due_from": "@five_hours_ago",
            "due_until": "@four_hours_ago",
        },
    ],
    "dead_page": [{}, {"task_type": None, "tenant_id": None}],
    "dead_retry": [{"task_id": "@dead_id", "task_type": None}],
    "dead_discard": [{"task_id": "@dead_id"}],
    "dashboard_dead_retry": [{"task_ids": "@dead_ids"}],
    "dashboard_dead_discard": [{"task_ids": "@dead_ids"}],
    "dashboard_task_cancel": [{"task_id": "@hot_id"}],
    "task_cancel": [{"task_id": "@hot_id"}],
    "task_promote_due": [{"max_tasks": 10_000, "now": "@in_two_days"}],
    "retention_prune": [{"max_rows": 10_000}],
    "lease_rescue_all": [{"max_tasks": 1000, "now": "@in_an_hour"}],
}
# Parameters of one statement that differ from the same name's elsewhere.
FIXED: dict[str, dict[str, Any]] = {
    # A search by a filter is not a search by id too (only the variant naming an id is).
    "dashboard_task_search": {"task_id": None},
    "dashboard_task_count": {"task_id": None},
    "task_schedule_many": {"max_attempts": [3]},
    "task_schedule_one": {"retry_delays": None},
    "schedule_recurring": {"catch_up_limit": 1},
    "schedule_arm": {"fire_at": "@in_an_hour"},
    "tenant_add": {"tenant_id": "tenant_new", "product": "shop"},
    "limit_set": {"max_processing": 10},
    "task_schedule_workflow": {
        "steps": Jsonb(
            [
                {"name": "a", "task_type": "type_3", "payload": {}, "after": []},
                {"name": "b", "task_type": "type_4", "payload": {}, "after": ["a"]},
            ]
        )
    },
    "task_schedule_batch": {
        "task_types": ["type_3", "type_3"],
        "payloads": [Jsonb({}), Jsonb({})],
        "on_complete_type": "type_4",
        "on_complete_payload": Jsonb({}),
        "priorities": [5, 5],
        "max_attempts": [3, 3],
        "lanes": [None, None],
        "metadatas": [Jsonb({}), Jsonb({})],
    },
}
# Statements that act on leased tasks: a claim runs first, in the same transaction.
NEEDS_LEASES = {
    "task_finish_many",
    "task_heartbeat_many",
    "work_record_done_many",
    "task_cancel_requested",
    "task_fan_out",
    "task_progress_set_many",
}
# Not plannable alone (LISTEN), or refused unless the caller leads the sweeps (the fence
# reads one row of sweep_leader, no table measured here).
SKIP = {"listen_recurring", "sweep_leader_fence"}
SHIPPED_FILES = ("queries.sql", "dashboard_queries.sql")
# A sequential scan of a relation holding more rows than this is listed in the report.
BIG_SCAN_ROWS = 10_000


def shipped_statement_names() -> set[str]:
    """The named statements of sql/queries.sql and sql/dashboard_queries.sql (the demo's
    and pgsched.testing's are not the engine's)."""
    names: set[str] = set()
    for file in SHIPPED_FILES:
        names.update(
            re.findall(r"^-- name: ([a-z0-9_]+)\s*$", (sql_dir() / file).read_text(), re.M)
        )
    return names


_PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]")


def _resolve(value: Any, extra: dict[str, Any]) -> Any:
    if isinstance(value, str) and value.startswith("@"):
        return extra[value[1:]]
    return value


def _plans_of(
    conn: psycopg.Connection[Any], statement: Any, params: dict[str, Any]
) -> list[dict[str, Any]]:
    notices: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            notices.append(diag.message_primary)

    # Inside the caller's transaction: its rollback puts the setting back.
    conn.execute("SET LOCAL auto_explain.log_min_duration = 0")
    conn.add_notice_handler(keep)
    try:
        cur = conn.execute(statement, params)
        if cur.description is not None:
            cur.fetchall()
        # A statement with parameters runs in a portal that ends (and auto_explain logs
        # its plan) only when the next statement comes: this one.
        conn.execute("SET LOCAL auto_explain.log_min_duration = -1")
    finally:
        conn.remove_notice_handler(keep)
    return [json.loads(text.split("plan:", 1)[1]) for text in notices]


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        if "Node Type" in plan:
            yield plan
        for value in plan.values():
            yield from _nodes(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from _nodes(item)


def indexes_in(plans: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Index name -> how the plans use it (scan node types, or 'conflict arbiter')."""
    used: dict[str, set[str]] = defaultdict(set)
    for plan in plans:
        for node in _nodes(plan.get("Plan", plan)):
            if "Index Name" in node:
                used[node["Index Name"]].add(node["Node Type"])
            for arbiter in node.get("Conflict Arbiter Indexes", []) or []:
                used[arbiter].add("conflict arbiter")
    return used


def statement_uses(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Run every named statement (and its variants) rolled back; the indexes its plans use."""
    base = representative(conn)
    ids = conn.execute("SELECT id FROM pgsched.tasks_done ORDER BY id DESC LIMIT 5").fetchall()
    hot_id = measure.one(conn, "SELECT max(id) FROM pgsched.tasks_hot WHERE task_type = 'later'")
    extra = {
        **base,
        "dead_ids": [r[0] for r in ids],
        "hot_id": hot_id,
        "in_two_days": measure.one(conn, "SELECT now() + interval '2 days 1 hour'"),
        "in_an_hour": measure.one(conn, "SELECT now() + interval '1 hour'"),
        # Inside the finished tasks' ten hours: a search by due time.
        "five_hours_ago": measure.one(conn, "SELECT now() - interval '5 hours'"),
        "four_hours_ago": measure.one(conn, "SELECT now() - interval '4 hours'"),
    }
    conn.execute("LOAD 'auto_explain'")
    for setting in (
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_analyze = off",
        "auto_explain.log_format = 'json'",
        "auto_explain.log_level = 'notice'",
        "client_min_messages = 'notice'",
    ):
        conn.execute(f"SET {setting}")
    results = []
    shipped = shipped_statement_names()
    for name, statement in load_queries().items():
        if name in SKIP or name not in shipped or statement.as_string().startswith("LISTEN"):
            continue
        for overrides in VARIANTS.get(name, [{}]):
            # A parameter this table has no value for (a statement added since) is NULL.
            params = {
                **dict.fromkeys(_PLACEHOLDER.findall(statement.as_string()), None),
                **base,
                **{k: _resolve(v, extra) for k, v in FIXED.get(name, {}).items()},
                **{k: _resolve(v, extra) for k, v in overrides.items()},
            }
            label = name + (
                " (" + ", ".join(f"{k}={_short(params[k])}" for k in overrides) + ")"
                if overrides and name not in ("retention_prune",)
                else ""
            )
            entry: dict[str, Any] = {"statement": label, "name": name}
            try:
                with conn.transaction(force_rollback=True):
                    if name in NEEDS_LEASES:
                        claimed = conn.execute(
                            "SELECT id, lease_token FROM pgsched.task_claim_many("
                            "'NORMAL', 20, %s, %s)",
                            (CLAIMER, LEASE),
                        ).fetchall()
                        params["task_ids"] = [r[0] for r in claimed]
                        params["lease_tokens"] = [r[1] for r in claimed]
                        params["outcomes"] = ["COMPLETED"] * len(claimed)
                        params["errors"] = [None] * len(claimed)
                        params["retry_delays"] = [None] * len(claimed)
                        params["results"] = [None] * len(claimed)
                        params["fractions"] = [0.5] * len(claimed)
                        params["notes"] = ["half way"] * len(claimed)
                        params["task_id"] = claimed[0][0]
                        params["lease_token"] = claimed[0][1]
                    plans = _plans_of(conn, statement, params)
                entry["indexes"] = {k: sorted(v) for k, v in indexes_in(plans).items()}
                entry["seq_scans"] = sorted(
                    {
                        n["Relation Name"]
                        for p in plans
                        for n in _nodes(p.get("Plan", p))
                        if n["Node Type"] == "Seq Scan" and "Relation Name" in n
                    }
                )
                entry["plans"] = len(plans)
            except psycopg.Error as exc:
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            results.append(entry)
    # What a sequential scan costs: the relation's rows (an empty period costs nothing).
    rows = dict(
        conn.execute(
            "SELECT c.relname, c.reltuples::bigint FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = 'pgsched'"
        ).fetchall()
    )
    for entry in results:
        entry["big_seq_scans"] = {
            rel: int(rows[rel])
            for rel in entry.get("seq_scans", [])
            if rows.get(rel, 0) > BIG_SCAN_ROWS
        }
    return results


def _short(value: Any) -> str:
    if isinstance(value, list):
        return f"[{len(value)}]"
    return str(value)[:20]


# --------------------------------------------------------------------------------------
# cost: tuples, buffers and index insertions per task on the drain path

_BLKREF = re.compile(r"rel (\d+)/(\d+)/(\d+)")
_LEAF_SPLIT = re.compile(r"level:? 0\b")


def _counters(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    tables = {
        r[0]: {"ins": r[1], "upd": r[2], "hot_upd": r[3], "del": r[4]}
        for r in conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del"
            " FROM pg_stat_all_tables WHERE schemaname = 'pgsched'"
        )
    }
    indexes = {
        r[0]: {"blks": int(r[1] or 0) + int(r[2] or 0), "scans": int(r[3] or 0)}
        for r in conn.execute(
            "SELECT s.indexrelname, s.idx_blks_hit, s.idx_blks_read, u.idx_scan"
            " FROM pg_statio_all_indexes AS s"
            " JOIN pg_stat_all_indexes AS u USING (indexrelid) WHERE s.schemaname = 'pgsched'"
        )
    }
    # The insert position: with synchronous_commit off the flush position can stand still
    # through a whole phase. The WAL is flushed before it is read back (wal_of_phases).
    lsn = measure.one(conn, "SELECT pg_current_wal_insert_lsn()::text")
    return {"tables": tables, "indexes": indexes, "lsn": lsn}


def wal_of_phases(
    conn: psycopg.Connection[Any], bounds: list[tuple[str, str]]
) -> list[dict[str, dict[str, Any]]]:
    """wal_by_relation of each (start, end), after flushing the WAL: pg_walinspect reads
    only flushed WAL, and with synchronous_commit off the flush lags the insert position.
    A commit made with synchronous_commit on flushes everything before it, if it wrote
    WAL itself (an xid alone is not enough): a transactional logical message is the
    smallest such write. Not a CHECKPOINT: that removes the segments a long phase started
    in ("requested WAL segment ... has already been removed"); holding_wal keeps it
    from the other checkpoints."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = on")
        conn.execute("SELECT pg_logical_emit_message(true, 'pgsched-bench', 'flush')")
    return [wal_by_relation(conn, start, end) for start, end in bounds]


def wal_by_relation(
    conn: psycopg.Connection[Any], start: str, end: str
) -> dict[str, dict[str, Any]]:
    """The WAL between two LSNs, by the relation of each record's first block: records by
    type, bytes, and leaf insertions (btree INSERT_LEAF, INSERT_POST, leaf splits)."""
    names = {
        int(r[0]): r[1]
        for r in conn.execute(
            "SELECT c.relfilenode, c.relname FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'pgsched' AND c.relfilenode <> 0"
        )
    }
    out: dict[str, dict[str, Any]] = {}
    if measure.one(conn, "SELECT %s::pg_lsn >= %s::pg_lsn", (start, end)):
        return out
    cur = conn.execute(
        "SELECT resource_manager, record_type, record_length, description, block_ref"
        " FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)"
        " WHERE block_ref IS NOT NULL",
        (start, end),
    )
    for rmgr, rtype, length, description, block_ref in cur:
        m = _BLKREF.search(block_ref or "")
        if not m:
            continue
        rel = names.get(int(m[3]))
        if rel is None:
            continue
        entry = out.setdefault(rel, {"bytes": 0, "records": defaultdict(int), "insertions": 0})
        entry["bytes"] += int(length)
        key = f"{rmgr}/{rtype}"
        entry["records"][key] += 1
        if rmgr == "Btree" and (
            rtype in ("INSERT_LEAF", "INSERT_POST")
            or (rtype.startswith("SPLIT") and _LEAF_SPLIT.search(description or ""))
        ):
            entry["insertions"] += 1
    return out


@contextmanager
def holding_wal(dsn: str) -> Iterator[None]:
    """Keeps the WAL written from now until the block ends: a temporary physical
    replication slot, reserved at once. Without it any checkpoint of the phase (a
    CHECKPOINT, a database dropped by someone else) may remove the segment the phase began
    in before it is read back."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_create_physical_replication_slot("
            " 'pgsched_bench_' || pg_backend_pid(), true, true)"
        )
        yield


def drain_phase(dsn: str, n: int, processes: int, keyed: bool) -> dict[str, Any]:
    """n tasks due now scheduled, then drained; counters around each step."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute("CHECKPOINT")
    with holding_wal(dsn):
        return _drain_phase(dsn, n, processes, keyed)


def _drain_phase(dsn: str, n: int, processes: int, keyed: bool) -> dict[str, Any]:
    tag = "keyed" if keyed else "plain"
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = _counters(conn)
    schedule_s = measure.schedule_due_now(dsn, n, "noop", keyed=keyed)
    # schedule_due_now's keys are bench-<i>: a second keyed phase would find them taken.
    with psycopg.connect(dsn, autocommit=True) as conn:
        scheduled = _counters(conn)
        queued = measure.one(
            conn, "SELECT count(*) FROM pgsched.tasks_hot WHERE task_type = 'noop'"
        )
    progress = psycopg.connect(dsn, autocommit=True)
    check = measure.Drained(progress, n)
    workers = measure.pgsched_workers(dsn, f"bench-idx-{tag}", processes, 100, 100)
    started = time.monotonic()
    workers.start()
    try:
        finished, _ = measure.wait_until(check, 600.0, workers, idle_timeout=60.0)
    finally:
        codes = workers.stop(dsn=dsn)
        progress.close()
        workers.cleanup()
    drain_s = time.monotonic() - started
    time.sleep(1.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = _counters(conn)
        done = measure.one(
            conn,
            "SELECT count(*) FROM pgsched.tasks_finished WHERE task_type = 'noop'"
            " AND updated_at > now() - interval '1 hour'",
        )
        wal_schedule, wal_drain = wal_of_phases(
            conn, [(before["lsn"], scheduled["lsn"]), (scheduled["lsn"], after["lsn"])]
        )
        totals = conn.execute(
            "SELECT %s::pg_lsn - %s::pg_lsn, %s::pg_lsn - %s::pg_lsn",
            (scheduled["lsn"], before["lsn"], after["lsn"], scheduled["lsn"]),
        ).fetchone()
    assert totals is not None
    return {
        "keyed": keyed,
        "tasks": n,
        "queued": queued,
        "completed": done,
        "finished": finished,
        "worker_exit_codes": codes,
        "schedule_s": round(schedule_s, 2),
        "drain_s": round(drain_s, 2),
        "schedule": _deltas(before, scheduled, wal_schedule, n, int(totals[0])),
        "drain": _deltas(scheduled, after, wal_drain, n, int(totals[1])),
    }


def _deltas(
    a: dict[str, Any], b: dict[str, Any], wal: dict[str, dict[str, Any]], n: int, wal_total: int
) -> dict[str, Any]:
    tables = {}
    for name, now in b["tables"].items():
        then = a["tables"].get(name, {})
        d = {k: now[k] - then.get(k, 0) for k in now}
        if any(d.values()):
            tables[name] = {k: round(v / n, 3) for k, v in d.items()}
    indexes = {}
    for name, now in b["indexes"].items():
        then = a["indexes"].get(name, {"blks": 0, "scans": 0})
        blks, scans = now["blks"] - then["blks"], now["scans"] - then["scans"]
        ins = wal.get(name, {}).get("insertions", 0)
        if blks or scans or ins:
            indexes[name] = {
                "insertions": round(ins / n, 3),
                "buffers": round(blks / n, 3),
                "scans": round(scans / n, 3),
                "wal_bytes": round(wal.get(name, {}).get("bytes", 0) / n, 1),
            }
    heap_wal = {
        name: {
            "wal_bytes": round(w["bytes"] / n, 1),
            "records": {k: round(v / n, 3) for k, v in sorted(w["records"].items())},
        }
        for name, w in wal.items()
        if name not in indexes
    }
    return {
        "tables": tables,
        "indexes": indexes,
        "heap_wal": heap_wal,
        "wal_bytes_per_task": round(wal_total / n, 1),
    }


# --------------------------------------------------------------------------------------
# the report


def rollup(
    catalog: dict[str, dict[str, Any]],
    uses: list[dict[str, Any]],
    phases: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """One row per root index: statements that use it, size, cost per task."""
    rows: dict[str, dict[str, Any]] = {}
    for name, info in catalog.items():
        row = rows.setdefault(
            info["root"],
            {
                "index": info["root"],
                "table": info["table_root"],
                "definition": catalog.get(info["root"], info)["definition"],
                "unique": info["unique"],
                "bytes": 0,
                "partitions": [],
                "used_by": set(),
                "schedule_insertions": {},
                "drain_insertions": {},
                "drain_buffers": {},
            },
        )
        if not info["partitioned"]:
            row["bytes"] += info["bytes"]
            row["partitions"].append(name)
    for use in uses:
        for index in use.get("indexes", {}):
            root = catalog.get(index, {}).get("root")
            if root in rows:
                rows[root]["used_by"].add(use["name"])
    for phase in phases:
        label = "keyed" if phase["keyed"] else "plain"
        for part, key in (("schedule", "schedule_insertions"), ("drain", "drain_insertions")):
            for index, figures in phase[part]["indexes"].items():
                root = catalog.get(index, {}).get("root")
                if root in rows:
                    got = rows[root][key].get(label, 0.0)
                    rows[root][key][label] = round(got + figures["insertions"], 3)
                    if part == "drain":
                        b = rows[root]["drain_buffers"].get(label, 0.0)
                        rows[root]["drain_buffers"][label] = round(b + figures["buffers"], 3)
    out = []
    for row in rows.values():
        row["used_by"] = sorted(row["used_by"])
        out.append(row)
    order = {t: i for i, t in enumerate(TABLES)}
    return sorted(out, key=lambda r: (order.get(r["table"], 99), r["index"]))


def fmt_bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n //= 1024
    return f"{n} TB"


def markdown(
    rows: list[dict[str, Any]],
    phases: list[dict[str, Any]],
    seeded: dict[str, int],
    uses: list[dict[str, Any]],
) -> str:
    def per(d: dict[str, float], label: str) -> str:
        v = d.get(label)
        return "0" if not v else f"{v:g}"

    lines = [
        f"Seeded: {seeded['finished']:,} finished ({seeded['finished_keyed']:,} keyed),"
        f" {seeded['dead']:,} DEAD, {seeded['cold']:,} cold, "
        f"{seeded['hot_due'] + seeded['hot_later']:,} hot.",
        "",
        "| index | unique | size | used by (plans of shipped statements) |"
        " ins./task schedule | ins./task drain | ins./task drain, keyed | buffers/task drain |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        used = ", ".join(r["used_by"]) or "**none**"
        lines.append(
            f"| `{r['index']}` | {'unique' if r['unique'] else ''} | {fmt_bytes(r['bytes'])} |"
            f" {used} | {per(r['schedule_insertions'], 'plain')} |"
            f" {per(r['drain_insertions'], 'plain')} | {per(r['drain_insertions'], 'keyed')} |"
            f" {per(r['drain_buffers'], 'plain')} |"
        )
    scans = [u for u in uses if u.get("big_seq_scans")]
    lines += [
        "",
        f"Statements whose plans read a relation of more than {BIG_SCAN_ROWS:,} rows"
        " sequentially:" + ("" if scans else " none."),
        "",
    ]
    lines += [
        f"- {u['statement']}: "
        + ", ".join(f"{rel} ({n:,} rows)" for rel, n in u["big_seq_scans"].items())
        for u in scans
    ]
    refused = [u for u in uses if "error" in u]
    if refused:
        lines += ["", "Not planned (refused the benchmark's parameters):", ""]
        lines += [f"- {u['statement']}: {u['error']}" for u in refused]
    for phase in phases:
        label = "keyed" if phase["keyed"] else "plain"
        lines += [
            "",
            f"Heap tuples per task, {label} ({phase['tasks']:,} tasks; schedule / drain):",
            "",
            "| table | ins | upd | hot upd | del |",
            "|---|---:|---:|---:|---:|",
        ]
        names = sorted(set(phase["schedule"]["tables"]) | set(phase["drain"]["tables"]))
        for name in names:
            s = phase["schedule"]["tables"].get(name, {})
            d = phase["drain"]["tables"].get(name, {})
            cells = [f"{s.get(k, 0):g} / {d.get(k, 0):g}" for k in ("ins", "upd", "hot_upd", "del")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ins_s = sum(v["insertions"] for v in phase["schedule"]["indexes"].values())
        ins_d = sum(v["insertions"] for v in phase["drain"]["indexes"].values())
        hot = phase["drain"]["heap_wal"].get("tasks_hot", {}).get("records", {})
        if hot:
            lines += [
                "",
                f"WAL records per task on tasks_hot's heap while draining ({label}): "
                + ", ".join(f"{k} {v:g}" for k, v in hot.items()),
            ]
        lines += [
            "",
            f"Index insertions per task ({label}): schedule {ins_s:.2f}, drain {ins_d:.2f};"
            f" WAL per task: schedule {phase['schedule']['wal_bytes_per_task']:,.0f} B,"
            f" drain {phase['drain']['wal_bytes_per_task']:,.0f} B.",
        ]
    return "\n".join(lines)


def run(dsn: str, finished: int, drain: int, processes: int) -> dict[str, Any]:
    measure.step(f"seeding {finished:,} finished tasks (and the other tiers)")
    seeded = seed(dsn, finished)
    measure.note(json.dumps(seeded))
    with psycopg.connect(dsn, autocommit=True) as conn:
        catalog = index_catalog(conn)
        measure.step("the plans of every named statement (auto_explain, rolled back)")
        uses = statement_uses(conn)
    failed = [u for u in uses if "error" in u]
    measure.note(f"{len(uses)} statements planned, {len(failed)} refused their parameters")
    phases = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The seed's due hot rows would be drained too: out of the way first (the rest
        # come due over the day, a few during the drain).
        conn.execute(
            "DELETE FROM pgsched.tasks_hot WHERE next_run_at <= now() + interval '1 minute'"
        )
        conn.execute("VACUUM ANALYZE pgsched.tasks_hot")
    for keyed in (False, True):
        measure.step(
            f"drain of {drain:,} {'keyed ' if keyed else ''}tasks by {processes} worker"
            " process(es), default flags: tuples, buffers, index insertions"
        )
        phases.append(drain_phase(dsn, drain, processes, keyed))
        measure.note(f"completed {phases[-1]['completed']:,} in {phases[-1]['drain_s']} s")
    rows = rollup(catalog, uses, phases)
    return {
        "seeded": seeded,
        "indexes": rows,
        "index_partitions": catalog,
        "statements": uses,
        "drains": phases,
        "markdown": markdown(rows, phases, seeded, uses),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_index_use", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--finished", type=int, default=20_000, help="finished tasks seeded (20,000)"
    )
    parser.add_argument("--drain", type=int, default=5_000, help="tasks drained per phase")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--dsn", default=None, help="an existing empty database (superuser)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.finished < 100 or args.drain < 100:
        parser.error("--finished and --drain must be at least 100")
    load = measure.loadavg()
    with measure.database(args.dsn) as dsn:
        result = run(dsn, args.finished, args.drain, args.processes)
    print(result["markdown"], flush=True)
    measure.write_json(
        args.out,
        {
            "benchmark": "index_use",
            "command": " ".join(["python -m benchmarks.bench_index_use", *(argv or sys.argv[1:])]),
            "machine": measure.machine_info(),
            "loadavg_before": load,
            "loadavg_after": measure.loadavg(),
            **{k: v for k, v in result.items() if k != "markdown"},
            "markdown": result["markdown"],
        },
    )
    return 0 if all(p["finished"] for p in result["drains"]) else 1


if __name__ == "__main__":
    sys.exit(main())
