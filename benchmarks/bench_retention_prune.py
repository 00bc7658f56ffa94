"""Retention by deleting rows (the path before sql/0024 and sql/0027) against dropping whole
partitions (finished_partitions_maintain, partitions_maintain), in one run on one server;
then a task's timeline read from the partitioned task_events against the same events in one
plain table.

Each of the two retention phases works on its own N tasks due now, claimed and finished
(500 a batch): 1 % FAILED for good (the DEAD lane, kept), the rest COMPLETED, so N rows of
finished tasks and 2N in `pgsched.task_events`. Then, from one connection (its backend's CPU
read from /proc, the WAL position before and after), with `as_of` 32 days ahead so that
every row is past 30 days' retention:

    delete  the tasks deleted 10,000 a statement as retention_prune did before 0027 (the
            delete phase's tasks finish now, into the rows tasks_finished's archive holds,
            with the indexes tasks_done had), and the events of tasks that are gone deleted
            10,000 a statement as 0010's retention_prune did, until nothing is left
    drop    the retention sweep's path: `finished_partitions_maintain` (the expired periods
            of finished tasks dropped), `retention_prune` (nothing left to delete by row),
            then `partitions_maintain` (the DEAD tasks' events copied into a new archive,
            the expired partitions dropped). The drop phase's tasks finish as of an hour
            into tomorrow (UTC), in the first dated period: the periods made ahead, as a
            database migrated before today has them (the partitions ahead were made first,
            not timed)

    timeline   N tasks' 2N events spread over 30 daily partitions, and the same rows in a
            plain table with the indexes task_events had before 0024; the dashboard's
            timeline query (by task_id) for 2,000 random tasks on each, alternating,
            prepared; then each table's reads alone for the backend's CPU per read; shared
            buffers touched per read from EXPLAIN (ANALYZE, BUFFERS)

    by id   N COMPLETED tasks spread over 30 daily periods of tasks_finished, and the same
            rows in a plain table with the indexes tasks_done had before 0027; a task read
            by id from each, measured as the timeline is

    claims  the backend CPU of claiming and completing 500 tasks at a time (two events
            each) into the partitioned task_events against the plain table it was, two
            databases on the server, rounds alternating

    python -m benchmarks.bench_retention_prune --tasks 100000
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.bench_search_index_cost import BATCH, DUE_NOW, Probe

DEAD_SHARE = 0.01
CHUNK = 10_000
AHEAD = "now() + interval '32 days'"
PRUNE_TASKS = f"SELECT tasks FROM pgsched.retention_prune('30 days', {CHUNK}, {AHEAD})"
# The tasks half of retention_prune before 0027 (sql/0024), as it ran there.
DELETE_TASKS = f"""
WITH old AS (
    SELECT tk.id, tk.status, tk.updated_at FROM pgsched.tasks AS tk
     WHERE tk.status IN ('COMPLETED', 'CANCELLED')
       AND tk.updated_at < {AHEAD} - interval '30 days'
     LIMIT {CHUNK}
)
DELETE FROM pgsched.tasks AS tk USING old
 WHERE tk.id = old.id AND tk.status = old.status AND tk.updated_at = old.updated_at
"""
# An hour into the first dated period of tasks_finished (UTC days: the default period).
TOMORROW = "date_trunc('day', now(), 'UTC') + interval '1 day 1 hour'"
# The events half of retention_prune before 0024 (sql/0010), as it ran there.
DELETE_EVENTS = f"""
WITH old AS (
    SELECT e.id, e.occurred_at FROM pgsched.task_events AS e
     WHERE e.occurred_at < {AHEAD} - interval '30 days'
       AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = e.task_id)
     LIMIT {CHUNK}
)
DELETE FROM pgsched.task_events AS e USING old
 WHERE e.id = old.id AND e.occurred_at = old.occurred_at
"""
MAKE_AHEAD = (
    f"SELECT count(*) FROM pgsched.partitions_maintain(keep => '1000 days', as_of => {AHEAD})"
)
MAKE_FINISHED_AHEAD = (
    "SELECT count(*) FROM pgsched.finished_partitions_maintain("
    f"keep => '1000 days', as_of => {AHEAD})"
)
MAINTAIN_FINISHED = (
    "SELECT partition_name, action, task_rows FROM pgsched.finished_partitions_maintain("
    f"keep => '30 days', as_of => {AHEAD}, lock_wait => '10 seconds')"
)
FINISHED_BYTES = (
    "SELECT coalesce(sum(pg_total_relation_size(('pgsched.' || quote_ident(p.partition_name))"
    "::regclass)), 0)::bigint FROM pgsched.finished_partitions() AS p"
)
FINISHED_DEAD = (
    "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_all_tables"
    " WHERE schemaname = 'pgsched' AND relname LIKE 'tasks\\_finished\\_%'"
)
MAINTAIN = (
    "SELECT partition_name, action, event_rows FROM pgsched.partitions_maintain("
    f"keep => '30 days', as_of => {AHEAD}, lock_wait => '10 seconds')"
)
EVENTS_BYTES = (
    "SELECT coalesce(sum(pg_total_relation_size(('pgsched.' || quote_ident(p.partition_name))"
    "::regclass)), 0)::bigint FROM pgsched.event_partitions() AS p"
)
EVENTS_DEAD = (
    "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_all_tables"
    " WHERE schemaname = 'pgsched' AND relname LIKE 'task\\_events\\_%'"
)
TIMELINE = (
    "SELECT e.id, e.occurred_at, e.from_status::text, e.to_status::text, e.attempt,"
    " e.worker, e.scheduled_for, e.detail FROM {table} AS e"
    " WHERE e.task_id = %s ORDER BY e.id"
)


def finish_tasks(conn: psycopg.Connection[Any], n: int, as_of: str | None = None) -> int:
    """N tasks due now, claimed and finished (as of `as_of`, an SQL expression, when given);
    returns how many ended in the DEAD lane."""
    finished_at = measure.one(conn, f"SELECT {as_of}") if as_of else None
    conn.execute(DUE_NOW, {"n": n})
    # max_attempts 1 for every hundredth, so that its failure is final.
    dead = conn.execute(
        "UPDATE pgsched.tasks SET max_attempts = 1 WHERE status = 'QUEUED' AND id % 100 = 0"
    ).rowcount
    finished = 0
    while finished < n:
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'bench', '3 days')",
            (BATCH,),
        ).fetchall()
        if not claimed:
            raise RuntimeError(f"claimed and finished {finished} of {n} tasks")
        conn.execute(
            "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s, %s, as_of => %s)",
            (
                [r[0] for r in claimed],
                [r[1] for r in claimed],
                ["FAILED" if r[0] % 100 == 0 else "COMPLETED" for r in claimed],
                [None] * len(claimed),
                finished_at,
            ),
        )
        finished += len(claimed)
    return int(dead)


def sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    time.sleep(1.5)  # backends flush their table counters at most once a second
    return {
        "tasks_done_bytes": int(
            measure.one(conn, "SELECT pg_total_relation_size('pgsched.tasks_done')")
        ),
        "tasks_finished_bytes": int(measure.one(conn, FINISHED_BYTES)),
        "tasks_finished_dead_tuples": int(measure.one(conn, FINISHED_DEAD)),
        "task_events_bytes": int(measure.one(conn, EVENTS_BYTES)),
        "task_events_dead_tuples": int(measure.one(conn, EVENTS_DEAD)),
    }


def settle(conn: psycopg.Connection[Any]) -> None:
    conn.execute("VACUUM ANALYZE")
    conn.execute("CHECKPOINT")


def phase(
    conn: psycopg.Connection[Any], n: int, run: Any, as_of: str | None = None
) -> dict[str, Any]:
    """Finish N tasks (as of `as_of`), then time `run(conn)` as the retention it stands for.
    The DEAD tasks of this phase and any before stay, with their events."""
    kept_before = int(measure.one(conn, "SELECT count(*) FROM pgsched.tasks"))
    dead = finish_tasks(conn, n, as_of)
    where = dict(
        conn.execute(
            "SELECT tableoid::regclass::text, count(*) FROM pgsched.tasks"
            " WHERE status = 'COMPLETED' GROUP BY 1"
        ).fetchall()
    )
    events = int(measure.one(conn, "SELECT count(*) FROM pgsched.task_events"))
    settle(conn)
    before = sizes(conn)
    probe = Probe(conn)
    cpu0, wal0 = probe.read()
    t0 = time.perf_counter()
    detail = run(conn)
    seconds = time.perf_counter() - t0
    cpu1, wal1 = probe.read()
    after = sizes(conn)
    left = int(measure.one(conn, "SELECT count(*) FROM pgsched.task_events"))
    kept = int(measure.one(conn, "SELECT count(*) FROM pgsched.tasks"))
    want = kept_before + dead
    if kept != want or left != 2 * want:
        raise RuntimeError(f"left {kept} tasks and {left} events; expected {want} and {2 * want}")
    result = {
        "completed_tasks_in": where,
        "events_before": events,
        "events_left": left,
        "dead_tasks": dead,
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu1 - cpu0, 3),
        "wal_bytes": probe.wal_bytes(wal0, wal1),
        "before": before,
        "after": after,
        **detail,
    }
    return result


def delete_path(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    calls = tasks = events = 0
    while True:
        t = conn.execute(DELETE_TASKS).rowcount
        e = conn.execute(DELETE_EVENTS).rowcount
        calls += 1
        tasks += t
        events += e
        if t < CHUNK and e < CHUNK:
            return {"calls": calls, "tasks_deleted": tasks, "events_deleted": events}


def drop_path(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    calls = tasks = 0
    t00 = time.perf_counter()
    finished_acted = conn.execute(MAINTAIN_FINISHED).fetchall()
    finished_s = time.perf_counter() - t00
    finished_actions = [a for _, a, _ in finished_acted]
    if "not_dropped" in finished_actions or "dropped" not in finished_actions:
        raise RuntimeError(f"finished_partitions_maintain did not drop: {finished_acted}")
    t0 = time.perf_counter()
    while True:
        t = int(measure.one(conn, PRUNE_TASKS))
        calls += 1
        tasks += t
        if t < CHUNK:
            break
    prune_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    acted = conn.execute(MAINTAIN).fetchall()
    maintain_s = time.perf_counter() - t1
    actions = [a for _, a, _ in acted]
    if "not_dropped" in actions or "dropped" not in actions:
        raise RuntimeError(f"partitions_maintain did not drop: {acted}")
    return {
        "calls": calls,
        "tasks_deleted": tasks,
        "finished_partitions_maintain_s": round(finished_s, 3),
        "finished_partitions_dropped": [p for p, a, _ in finished_acted if a == "dropped"],
        "tasks_prune_s": round(prune_s, 3),
        "partitions_maintain_s": round(maintain_s, 3),
        "partitions_dropped": actions.count("dropped") + 1,  # and the old archive
        "events_archived": next(r for _, a, r in acted if a == "archived"),
    }


def shared_hits(conn: psycopg.Connection[Any], table: str, task_id: int) -> int:
    plan = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + TIMELINE.format(table=table), (task_id,)
    ).fetchall()
    text = "\n".join(r[0] for r in plan)
    # The top node's line counts every buffer touched below it.
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", text)
    assert found is not None, text
    return int(found.group(1)) + int(found.group(2) or 0)


def timeline(conn: psycopg.Connection[Any], n: int, reads: int) -> dict[str, Any]:
    """Timeline reads by task_id: partitioned (30 daily partitions) against one plain table."""
    conn.execute(
        "SELECT count(*) FROM pgsched.partitions_maintain("
        "keep => '1000 days', as_of => now() + interval '32 days')"
    )
    base = int(measure.one(conn, "SELECT 10000000"))
    conn.execute(
        "INSERT INTO pgsched.task_events (task_id, tenant_id, task_type, from_status, to_status,"
        " occurred_at, scheduled_for, attempt, worker)"
        " SELECT %(base)s + g / 2, 't' || (g %% 100), 'type' || (g %% 8),"
        " CASE WHEN g %% 2 = 0 THEN 'QUEUED' ELSE 'PROCESSING' END::pgsched.task_status,"
        " CASE WHEN g %% 2 = 0 THEN 'PROCESSING' ELSE 'COMPLETED' END::pgsched.task_status,"
        " date_trunc('day', now()) + (3 + (g / 2) %% 30) * interval '1 day'"
        "   + (g / 2) * interval '1 ms',"
        " now(), 1, 'bench' FROM generate_series(0, 2 * %(n)s - 1) AS g",
        {"base": base, "n": n},
    )
    conn.execute(
        "CREATE TABLE bench_events_plain AS SELECT * FROM pgsched.task_events WHERE task_id >= %s",
        (base,),
    )
    conn.execute("ALTER TABLE bench_events_plain ADD PRIMARY KEY (id)")
    conn.execute("CREATE INDEX ON bench_events_plain (task_id, id)")
    conn.execute("CREATE INDEX ON bench_events_plain (tenant_id, occurred_at)")
    conn.execute("CREATE INDEX ON bench_events_plain USING brin (occurred_at)")
    settle(conn)
    partitions = int(measure.one(conn, "SELECT count(*) FROM pgsched.event_partitions()"))
    holding = int(
        measure.one(
            conn,
            "SELECT count(DISTINCT tableoid) FROM pgsched.task_events WHERE task_id >= %s",
            (base,),
        )
    )
    rng = random.Random(15)
    ids = [base + rng.randrange(n) for _ in range(reads)]
    tables = {"partitioned": "pgsched.task_events", "plain": "bench_events_plain"}
    seconds: dict[str, list[float]] = {name: [] for name in tables}
    for task_id in ids[:50]:  # warm both, and let psycopg prepare the statements
        for table in tables.values():
            conn.execute(TIMELINE.format(table=table), (task_id,), prepare=True).fetchall()
    for task_id in ids:
        for name, table in tables.items():
            t0 = time.perf_counter()
            rows = conn.execute(TIMELINE.format(table=table), (task_id,), prepare=True).fetchall()
            seconds[name].append(time.perf_counter() - t0)
            if len(rows) != 2:
                raise RuntimeError(f"task {task_id}: {len(rows)} events in {table}")
    # The server's CPU per read, each table on its own: less at the mercy of a busy machine
    # than the client's clock.
    probe = Probe(conn)
    cpu_per_read: dict[str, float] = {}
    for name, table in tables.items():
        cpu0, _ = probe.read()
        for task_id in ids:
            conn.execute(TIMELINE.format(table=table), (task_id,), prepare=True).fetchall()
        cpu1, _ = probe.read()
        cpu_per_read[name] = (cpu1 - cpu0) / len(ids)
    result: dict[str, Any] = {
        "tasks": n,
        "events": 2 * n,
        "partitions": partitions,
        "partitions_holding_the_events": holding,
        "reads": reads,
    }
    for name, table in tables.items():
        pct = measure.percentiles([s * 1e6 for s in seconds[name]])
        result[name] = {
            "p50_us": pct["p50"],
            "p95_us": pct["p95"],
            "p99_us": pct["p99"],
            "shared_buffers_per_read": shared_hits(conn, table, ids[0]),
            "backend_cpu_us_per_read": round(cpu_per_read[name] * 1e6, 1),
        }
    p50_part, p50_plain = result["partitioned"]["p50_us"], result["plain"]["p50_us"]
    result["p50_ratio"] = round(float(p50_part) / float(p50_plain), 2)
    if cpu_per_read["plain"] > 0:
        result["cpu_ratio"] = round(cpu_per_read["partitioned"] / cpu_per_read["plain"], 2)
    return result


TASK_BY_ID = "SELECT * FROM {table} AS t WHERE t.id = %s"


def task_by_id(conn: psycopg.Connection[Any], n: int, reads: int) -> dict[str, Any]:
    """A finished task read by id: tasks_finished (30 daily periods holding the rows, plus
    the periods ahead, the archive and the default partition) against the same rows in one
    plain table with the indexes tasks_done had before 0027. The probes of tasks_cold,
    tasks_hot and tasks_done, which a read of pgsched.tasks by id adds to both, are left
    out."""
    base = 20_000_000
    conn.execute(
        "INSERT INTO pgsched.tasks (id, tenant_id, task_type, next_run_at, lane, status,"
        " priority, attempts, last_run_at, updated_at)"
        " SELECT %(base)s + g, 't' || (g %% 100), 'type' || (g %% 8), now(), 'NORMAL',"
        " 'COMPLETED', 5, 1, now(),"
        " date_trunc('day', now(), 'UTC') + (1 + g %% 30) * interval '1 day' + g * interval '1 ms'"
        " FROM generate_series(0, %(n)s - 1) AS g",
        {"base": base, "n": n},
    )
    conn.execute(
        "CREATE TABLE bench_tasks_plain AS SELECT * FROM pgsched.tasks WHERE id >= %s", (base,)
    )
    conn.execute("ALTER TABLE bench_tasks_plain ADD PRIMARY KEY (id, status)")
    for columns in ("task_type, id", "tenant_id, id", "next_run_at", "parent_id"):
        conn.execute(f"CREATE INDEX ON bench_tasks_plain ({columns})")
    conn.execute("CREATE INDEX ON bench_tasks_plain (status, id) WHERE status <> 'COMPLETED'")
    conn.execute(
        "CREATE INDEX ON bench_tasks_plain (updated_at) WHERE status IN ('COMPLETED', 'CANCELLED')"
    )
    settle(conn)
    partitions = int(measure.one(conn, "SELECT count(*) FROM pgsched.finished_partitions()"))
    holding = int(
        measure.one(
            conn,
            "SELECT count(DISTINCT tableoid) FROM pgsched.tasks_finished WHERE id >= %s",
            (base,),
        )
    )
    rng = random.Random(25)
    ids = [base + rng.randrange(n) for _ in range(reads)]
    tables = {"partitioned": "pgsched.tasks_finished", "plain": "bench_tasks_plain"}
    for task_id in ids[:50]:
        for table in tables.values():
            conn.execute(TASK_BY_ID.format(table=table), (task_id,), prepare=True).fetchall()
    seconds: dict[str, list[float]] = {name: [] for name in tables}
    for task_id in ids:
        for name, table in tables.items():
            t0 = time.perf_counter()
            rows = conn.execute(TASK_BY_ID.format(table=table), (task_id,), prepare=True).fetchall()
            seconds[name].append(time.perf_counter() - t0)
            if len(rows) != 1:
                raise RuntimeError(f"task {task_id}: {len(rows)} rows in {table}")
    probe = Probe(conn)
    cpu_per_read: dict[str, float] = {}
    for name, table in tables.items():
        cpu0, _ = probe.read()
        for task_id in ids:
            conn.execute(TASK_BY_ID.format(table=table), (task_id,), prepare=True).fetchall()
        cpu1, _ = probe.read()
        cpu_per_read[name] = (cpu1 - cpu0) / len(ids)
    result: dict[str, Any] = {
        "tasks": n,
        "partitions": partitions,
        "partitions_holding_the_tasks": holding,
        "reads": reads,
    }
    for name, table in tables.items():
        pct = measure.percentiles([x * 1e6 for x in seconds[name]])
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + TASK_BY_ID.format(table=table),
            (ids[0],),
        ).fetchall()
        found = re.search(
            r"Buffers: shared hit=(\d+)(?: read=(\d+))?", "\n".join(r[0] for r in plan)
        )
        assert found is not None
        result[name] = {
            "p50_us": pct["p50"],
            "p95_us": pct["p95"],
            "shared_buffers_per_read": int(found.group(1)) + int(found.group(2) or 0),
            "backend_cpu_us_per_read": round(cpu_per_read[name] * 1e6, 1),
        }
    result["p50_ratio"] = round(
        float(result["partitioned"]["p50_us"]) / float(result["plain"]["p50_us"]), 2
    )
    if cpu_per_read["plain"] > 0:
        result["cpu_ratio"] = round(cpu_per_read["partitioned"] / cpu_per_read["plain"], 2)
    return result


# task_events as it was before migration 0024: one plain table, its key on id alone.
UNPARTITION = """
ALTER TABLE pgsched.task_events RENAME TO task_events_partitioned;
CREATE TABLE pgsched.task_events (LIKE pgsched.task_events_partitioned INCLUDING DEFAULTS);
ALTER TABLE pgsched.task_events ADD PRIMARY KEY (id);
CREATE INDEX ON pgsched.task_events (task_id, id);
CREATE INDEX ON pgsched.task_events (tenant_id, occurred_at);
CREATE INDEX ON pgsched.task_events USING brin (occurred_at);
"""


def claim_cycle_cpu(conn: psycopg.Connection[Any], probe: Probe) -> float:
    """Schedule BATCH tasks due now (not counted), then claim and complete them: the
    backend's CPU seconds for the claim and the completion, which write the two events."""
    conn.execute(DUE_NOW, {"n": BATCH})
    cpu0, _ = probe.read()
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'bench', '1 hour')",
        (BATCH,),
    ).fetchall()
    conn.execute(
        "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s, %s)",
        (
            [r[0] for r in claimed],
            [r[1] for r in claimed],
            ["COMPLETED"] * len(claimed),
            [None] * len(claimed),
        ),
    )
    cpu1, _ = probe.read()
    if len(claimed) != BATCH:
        raise RuntimeError(f"claimed {len(claimed)} of {BATCH}")
    return cpu1 - cpu0


def claim_path(server: Any, rounds: int) -> dict[str, Any]:
    """Claim + completion CPU per task writing events into the partitioned task_events
    against the plain table it was, in two databases of one server, rounds alternating."""
    dsns = {
        "partitioned": measure.pgsched_database(server, "claims_partitioned"),
        "plain": measure.pgsched_database(server, "claims_plain"),
    }
    with psycopg.connect(dsns["plain"], autocommit=True) as conn:
        conn.execute(UNPARTITION)
    cpu = {name: 0.0 for name in dsns}
    conns = {name: psycopg.connect(dsn, autocommit=True) for name, dsn in dsns.items()}
    try:
        probes = {name: Probe(c) for name, c in conns.items()}
        for name, c in conns.items():  # warm: plans, caches
            for _ in range(3):
                claim_cycle_cpu(c, probes[name])
        names = list(conns)
        for n in range(rounds):
            # Each goes first every other round, so that neither gains from going second.
            for name in names if n % 2 == 0 else names[::-1]:
                cpu[name] += claim_cycle_cpu(conns[name], probes[name])
    finally:
        for c in conns.values():
            c.close()
    tasks = rounds * BATCH
    per_task = {name: round(cpu[name] / tasks * 1e6, 2) for name in cpu}
    return {
        "tasks_each": tasks,
        "backend_cpu_us_per_task": per_task,
        "ratio": round(per_task["partitioned"] / per_task["plain"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="finished tasks per phase")
    parser.add_argument("--reads", type=int, default=2_000, help="timeline reads per table")
    parser.add_argument(
        "--claim-rounds", type=int, default=60, help="claim + completion rounds of 500 per table"
    )
    parser.add_argument("--out", type=Path, default=measure.RESULTS / "retention_prune.json")
    args = parser.parse_args(argv)
    server = measure.start_server()
    try:
        dsn = measure.pgsched_database(server, "bench")
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Today's partition and the ones ahead exist from the migration; the ones the
            # drop phase's `as_of` needs are made now, so that neither phase pays for them.
            conn.execute(MAKE_AHEAD)
            conn.execute(MAKE_FINISHED_AHEAD)
            measure.step("delete phase")
            delete = phase(conn, args.tasks, delete_path)
            measure.step("drop phase")
            drop = phase(conn, args.tasks, drop_path, as_of=TOMORROW)
            measure.step("timeline reads")
            reads = timeline(conn, args.tasks, args.reads)
            measure.step("finished task by id")
            by_id = task_by_id(conn, args.tasks, args.reads)
        measure.step("claim and completion: partitioned events vs one table")
        claims = claim_path(server, args.claim_rounds)
    finally:
        server.stop()
    print(f"\n{args.tasks:,} finished tasks a phase ({delete['dead_tasks']:,} DEAD a phase, kept)")
    for name, r in (("delete rows", delete), ("drop partitions", drop)):
        print(
            f"{name}: {r['seconds']} s, backend CPU {r['cpu_s']} s,"
            f" WAL {r['wal_bytes'] / 2**20:.1f} MiB; task_events"
            f" {r['before']['task_events_bytes'] / 2**20:.1f} ->"
            f" {r['after']['task_events_bytes'] / 2**20:.1f} MiB,"
            f" {r['after']['task_events_dead_tuples']:,} dead tuples left;"
            f" finished tasks {r['before']['tasks_finished_bytes'] / 2**20:.1f} ->"
            f" {r['after']['tasks_finished_bytes'] / 2**20:.1f} MiB,"
            f" {r['after']['tasks_finished_dead_tuples']:,} dead tuples left"
            f" ({r['tasks_deleted']:,} deleted by row)"
        )
    print(
        f"  of which finished_partitions_maintain {drop['finished_partitions_maintain_s']} s"
        f" (dropped {', '.join(drop['finished_partitions_dropped'])}),"
        f" retention_prune {drop['tasks_prune_s']} s,"
        f" partitions_maintain {drop['partitions_maintain_s']} s"
        f" ({drop['events_archived']:,} events of DEAD tasks archived)"
    )
    print(
        f"timeline by task_id, {reads['events']:,} events over"
        f" {reads['partitions_holding_the_events']} daily partitions"
        f" ({reads['partitions']} partitions in all):"
        f" p50 {reads['partitioned']['p50_us']:.0f} us partitioned,"
        f" {reads['plain']['p50_us']:.0f} us one table (x{reads['p50_ratio']});"
        f" backend CPU per read {reads['partitioned']['backend_cpu_us_per_read']} us vs"
        f" {reads['plain']['backend_cpu_us_per_read']} us (x{reads.get('cpu_ratio')});"
        f" buffers per read {reads['partitioned']['shared_buffers_per_read']}"
        f" vs {reads['plain']['shared_buffers_per_read']}"
    )
    print(
        f"finished task by id, {by_id['tasks']:,} tasks over"
        f" {by_id['partitions_holding_the_tasks']} daily partitions"
        f" ({by_id['partitions']} partitions of tasks_finished in all):"
        f" p50 {by_id['partitioned']['p50_us']:.0f} us partitioned,"
        f" {by_id['plain']['p50_us']:.0f} us one table (x{by_id['p50_ratio']});"
        f" backend CPU per read {by_id['partitioned']['backend_cpu_us_per_read']} us vs"
        f" {by_id['plain']['backend_cpu_us_per_read']} us (x{by_id.get('cpu_ratio')});"
        f" buffers per read {by_id['partitioned']['shared_buffers_per_read']}"
        f" vs {by_id['plain']['shared_buffers_per_read']}"
    )
    print(
        f"claim + completion, {claims['tasks_each']:,} tasks each: backend CPU"
        f" {claims['backend_cpu_us_per_task']['partitioned']} us a task with partitioned"
        f" events, {claims['backend_cpu_us_per_task']['plain']} us with one table"
        f" (x{claims['ratio']})"
    )
    measure.write_json(
        args.out,
        {
            "benchmark": "retention_prune",
            "command": " ".join(
                ["python -m benchmarks.bench_retention_prune", *(argv or sys.argv[1:])]
            ),
            "machine": measure.machine_info(),
            "tasks": args.tasks,
            "delete": delete,
            "drop": drop,
            "timeline": reads,
            "finished_task_by_id": by_id,
            "claim_path": claims,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
