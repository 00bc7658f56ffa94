"""Benchmark the scheduling paths: bulk (App.schedule_many and raw SQL) and one at a time.

    python -m benchmarks.bench_schedule                 # 10,000,000 tasks, 10,000 single calls
    python -m benchmarks.bench_schedule --quick         # 200,000 tasks, 2,000 calls (CI)
    python -m benchmarks.bench_schedule --dsn postgresql://...   # an existing (scratch!) database

Unless --dsn is given it starts its own throwaway Postgres (benchmarks/pgserver.py) with
durable settings, and removes it at the end.

Case 1, bulk. --rows future tasks, due uniformly over 365 days starting 25 h from now (all in
the cold tier), with a small payload {"user": i, "kind": "reminder"}:
  * the first --app-rows go through App.schedule_many (pydantic TaskSpec per row, then the
    bulk SQL function in App's own chunks), timed as input generation / validation / call,
    and the call split into client CPU (psycopg adaptation) and waiting on the server;
  * the rest go straight to pgsched.schedule_tasks with binary arrays, 50,000 rows per call,
    over --jobs connections in parallel.
Then VACUUM ANALYZE and the bytes on disk per relation, per task, and hot vs the whole.

Case 2, one at a time: --single calls of pgsched.schedule_task from one connection, each its
own transaction (autocommit), then the same number inside one transaction.

Profile (default on for full runs, --profile to force): one extra 50,000-row chunk run with
auto_explain and function tracking inside a transaction that is rolled back, and (on our own
server only) the same chunk against variants of the SQL functions, also rolled back.

Writes every figure to --out (default benchmarks/results/schedule.json; with --quick,
benchmarks/results/schedule-quick.json, so a CI-sized run never overwrites a full one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.pgserver import DEFAULT_SETTINGS, PgServer
from pgsched.app import SCHEDULE_CHUNK, App
from pgsched.migrations import migrate
from pgsched.tasks import TaskSpec

DEFAULT_OUT = Path(__file__).parent / "results" / "schedule.json"
# A CI-sized run must not overwrite the figures of a full one.
DEFAULT_OUT_QUICK = Path(__file__).parent / "results" / "schedule-quick.json"
TASK_TYPE = "send_reminder"
SPAN_SECONDS = 365 * 86_400
# Knuth's multiplicative constant; prime, so i -> i*K mod SPAN is a bijection on [0, SPAN):
# due times are distinct, uniform over the year, and arrive in scattered (not sorted) order.
SCATTER = 2_654_435_761
RAW_CHUNK = 50_000
APP_BATCH = 100_000

RAW_SQL = (
    "SELECT count(*) FROM pgsched.schedule_tasks("
    "task_types => %b::text[], payloads => %b::jsonb[], run_ats => %b::timestamptz[])"
)
SINGLE_SQL = "SELECT pgsched.schedule_task(task_type => %s, payload => %s, run_at => %s)"
RELATIONS = ("tasks_cold", "tasks_hot", "tasks_done", "idempotency_keys", "task_events")


def log(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------------------
# input


@dataclass(frozen=True)
class Workload:
    start: datetime  # the earliest due time: 25 h from now, past the 24 h hot window

    def run_at(self, i: int) -> datetime:
        return self.start + timedelta(seconds=(i * SCATTER) % SPAN_SECONDS)

    def dicts(self, lo: int, hi: int) -> list[dict[str, Any]]:
        return [
            {
                "task_type": TASK_TYPE,
                "payload": {"user": i, "kind": "reminder"},
                "run_at": self.run_at(i),
            }
            for i in range(lo, hi)
        ]

    def arrays(self, lo: int, hi: int) -> tuple[list[str], list[str], list[datetime]]:
        # JSON text for the payloads: what any client language would send; the server parses
        # it into jsonb either way.
        payloads = [f'{{"user": {i}, "kind": "reminder"}}' for i in range(lo, hi)]
        return [TASK_TYPE] * (hi - lo), payloads, [self.run_at(i) for i in range(lo, hi)]


# --------------------------------------------------------------------------------------
# case 1a: App.schedule_many


@dataclass
class Progress:
    total: int
    every: int
    t0: float = field(default_factory=time.perf_counter)
    done: int = 0
    next_mark: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.next_mark = self.every

    def add(self, label: str, n: int) -> None:
        with self.lock:
            self.done += n
            if self.done < self.next_mark and self.done < self.total:
                return
            while self.next_mark <= self.done:
                self.next_mark += self.every
            elapsed = time.perf_counter() - self.t0
            log(
                f"  [{label}] {self.done:>12,} / {self.total:,} rows  {elapsed:8.1f} s"
                f"  {self.done / elapsed:>10,.0f} rows/s"
            )


def bench_app(dsn: str, work: Workload, lo: int, hi: int, progress: Progress) -> dict[str, Any]:
    app = App(dsn)
    gen = validate = call_wall = call_cpu = 0.0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(lo, hi, APP_BATCH):
            stop = min(hi, start + APP_BATCH)
            t0 = time.perf_counter()
            dicts = work.dicts(start, stop)
            t1 = time.perf_counter()
            specs = [TaskSpec.model_validate(d) for d in dicts]
            t2 = time.perf_counter()
            c0 = time.process_time()
            ids = app.schedule_many(specs, conn=conn)
            c1 = time.process_time()
            t3 = time.perf_counter()
            assert len(ids) == stop - start
            gen += t1 - t0
            validate += t2 - t1
            call_wall += t3 - t2
            call_cpu += c1 - c0
            progress.add("App.schedule_many", stop - start)
    rows = hi - lo
    end_to_end = validate + call_wall
    return {
        "path": "App.schedule_many (TaskSpec per row, bulk SQL function)",
        "rows": rows,
        "chunk_size": SCHEDULE_CHUNK,
        "rows_per_call": APP_BATCH,
        "input_generation_s": round(gen, 3),
        "validation_s": round(validate, 3),
        "call_s": round(call_wall, 3),
        "call_client_cpu_s": round(call_cpu, 3),
        "call_server_wait_s": round(max(0.0, call_wall - call_cpu), 3),
        "end_to_end_s": round(end_to_end, 3),
        "rows_per_s": round(rows / end_to_end),
        "rows_per_s_call_only": round(rows / call_wall),
        "note": "rows_per_s counts validation + call; input generation (building the "
        "caller's dicts) is excluded and reported separately",
    }


# --------------------------------------------------------------------------------------
# case 1b: raw SQL, binary arrays, parallel connections


def bench_raw(
    dsn: str, work: Workload, lo: int, hi: int, jobs: int, progress: Progress
) -> dict[str, Any]:
    chunks = [(s, min(hi, s + RAW_CHUNK)) for s in range(lo, hi, RAW_CHUNK)]
    lock = threading.Lock()
    per_conn: list[dict[str, float]] = [
        {"rows": 0, "gen_s": 0.0, "call_s": 0.0, "call_cpu_s": 0.0} for _ in range(jobs)
    ]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        stats = per_conn[k]
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while True:
                    with lock:
                        if not chunks or errors:
                            return
                        start, stop = chunks.pop(0)
                    t0 = time.perf_counter()
                    params = work.arrays(start, stop)
                    t1 = time.perf_counter()
                    c0 = time.thread_time()
                    row = conn.execute(RAW_SQL, params).fetchone()
                    c1 = time.thread_time()
                    t2 = time.perf_counter()
                    assert row is not None and row[0] == stop - start, row
                    stats["rows"] += stop - start
                    stats["gen_s"] += t1 - t0
                    stats["call_s"] += t2 - t1
                    stats["call_cpu_s"] += c1 - c0
                    progress.add(f"raw SQL x{jobs}", stop - start)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    rows = hi - lo
    calls = sum(s["call_s"] for s in per_conn)
    return {
        "path": f"raw SQL pgsched.schedule_tasks, binary arrays, {RAW_CHUNK:,} rows per call, "
        f"{jobs} connection(s) in parallel",
        "rows": rows,
        "chunk_size": RAW_CHUNK,
        "connections": jobs,
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall),
        "input_generation_s_summed": round(sum(s["gen_s"] for s in per_conn), 3),
        "call_s_summed": round(calls, 3),
        "call_client_cpu_s_summed": round(sum(s["call_cpu_s"] for s in per_conn), 3),
        "rows_per_s_per_connection": round(rows / calls * 1.0) if calls else None,
        "per_connection": [
            {k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()} for s in per_conn
        ],
    }


# --------------------------------------------------------------------------------------
# sizes


def measure_sizes(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute("VACUUM ANALYZE pgsched.tasks, pgsched.idempotency_keys, pgsched.task_events")
        vacuum_s = time.perf_counter() - t0
        relations: dict[str, Any] = {}
        for name in RELATIONS:
            row = conn.execute(
                "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid),"
                " pg_indexes_size(c.oid)"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'pgsched' AND c.relname = %s",
                (name,),
            ).fetchone()
            assert row is not None, name
            (count,) = conn.execute(f"SELECT count(*) FROM pgsched.{name}").fetchone() or (0,)
            indexes = conn.execute(
                "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)"
                " FROM pg_index i WHERE i.indrelid = %s::regclass ORDER BY 1",
                (f"pgsched.{name}",),
            ).fetchall()
            total, heap, idx = (int(v) for v in row)
            relations[name] = {
                "rows": int(count),
                "total_bytes": total,
                "heap_bytes": heap,
                "indexes_bytes": idx,
                "heap_plus_indexes_bytes": heap + idx,
                "other_bytes": total - heap - idx,  # TOAST, free space map, visibility map
                "indexes": {n: int(b) for n, b in indexes},
            }
        cold_counts = conn.execute(
            "SELECT status::text, count(*) FROM pgsched.tasks GROUP BY 1 ORDER BY 1"
        ).fetchall()
    task_rows = sum(relations[n]["rows"] for n in ("tasks_cold", "tasks_hot", "tasks_done"))
    total = sum(r["total_bytes"] for r in relations.values())
    hot = relations["tasks_hot"]["total_bytes"]
    return {
        "vacuum_analyze_s": round(vacuum_s, 3),
        "relations": relations,
        "status_counts": {s: int(c) for s, c in cold_counts},
        "task_rows": task_rows,
        "total_bytes": total,
        "bytes_per_task": round(total / task_rows, 1) if task_rows else None,
        "hot_bytes": hot,
        "hot_fraction": hot / total if total else None,
    }


# --------------------------------------------------------------------------------------
# case 2: one at a time


def bench_single(dsn: str, work: Workload, n: int, offset: int) -> dict[str, Any]:
    def args(i: int) -> tuple[str, Jsonb, datetime]:
        return TASK_TYPE, Jsonb({"user": i, "kind": "reminder"}), work.run_at(i)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SINGLE_SQL, args(offset - 1), prepare=True)  # warm: plans, caches
        t0 = time.perf_counter()
        for i in range(offset, offset + n):
            conn.execute(SINGLE_SQL, args(i), prepare=True)
        autocommit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with conn.transaction():
            for i in range(offset + n, offset + 2 * n):
                conn.execute(SINGLE_SQL, args(i), prepare=True)
        one_tx_s = time.perf_counter() - t0
    return {
        "calls": n,
        "autocommit": {
            "what": "each call its own transaction (a commit, so a WAL flush, per task)",
            "seconds": round(autocommit_s, 3),
            "rows_per_s": round(n / autocommit_s),
            "ms_per_call": round(autocommit_s / n * 1000, 3),
        },
        "one_transaction": {
            "what": f"{n:,} calls inside one transaction, one commit",
            "seconds": round(one_tx_s, 3),
            "rows_per_s": round(n / one_tx_s),
            "ms_per_call": round(one_tx_s / n * 1000, 3),
        },
    }


# --------------------------------------------------------------------------------------
# profile of one chunk (rolled back)

_DURATION = re.compile(r"duration: ([\d.]+) ms\s+plan:\s*Query Text:\s*(.*)", re.DOTALL)
_JIT = re.compile(r"JIT:.*?Total ([\d.]+) ms", re.DOTALL)

# Rewrites of the live functions for the what-if runs (inside a rolled-back transaction).
_BOUNDED_REGEX = re.compile(r"([\w.]+) !~ '(\^\[[^']*\]\[[^']*\])\{0,(\d+)\}\$'")


def _fix_bounded_regex(body: str) -> str:
    return _BOUNDED_REGEX.sub(
        lambda m: f"({m[1]} !~ '{m[2]}*$' OR length({m[1]}) > {int(m[3]) + 1})", body
    )


def _functions(conn: psycopg.Connection[Any], where: str) -> list[str]:
    """Signatures (regprocedure text) of the pgsched functions matching `where`."""
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        f" WHERE n.nspname = 'pgsched' AND {where} ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def _variant_stable(conn: psycopg.Connection[Any]) -> None:
    # Declared IMMUTABLE but calling STABLE functions (format(), the text -> enum cast), so
    # the planner will not inline them: each row pays a SQL-function call.
    found = _functions(
        conn, "p.proname IN ('task_input_problem', 'lane_for') AND p.provolatile = 'i'"
    )
    if not found:
        raise LookupError("task_input_problem and lane_for are already not IMMUTABLE")
    for signature in found:
        conn.execute(f"ALTER FUNCTION {signature} STABLE")


def _variant_jit_off(conn: psycopg.Connection[Any]) -> None:
    for signature in _functions(conn, "p.proname = 'schedule_tasks'"):
        conn.execute(f"ALTER FUNCTION {signature} SET jit = off")


def _variant_regex(conn: psycopg.Connection[Any]) -> None:
    found = _functions(conn, "p.prosrc ~ '\\{0,[0-9]+\\}\\$'")
    changed = 0
    for signature in found:
        row = conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (signature,)).fetchone()
        assert row is not None
        fixed = _fix_bounded_regex(row[0])
        if fixed == row[0]:
            continue
        try:
            with conn.transaction():  # a savepoint: one odd function does not spoil the rest
                conn.execute(fixed.encode())
            changed += 1
        except psycopg.Error:
            continue
    if not changed:
        raise LookupError("no bounded regex {0,N} found in the pgsched functions")


VARIANTS: dict[str, list[Callable[[psycopg.Connection[Any]], None]]] = {
    "as shipped": [],
    "jit off for schedule_tasks": [_variant_jit_off],
    "task_input_problem + lane_for STABLE (inlined)": [_variant_stable],
    "bounded regex {0,99} -> * plus length check": [_variant_regex],
    "all three": [_variant_stable, _variant_regex, _variant_jit_off],
}


def profile_chunk(dsn: str, work: Workload, offset: int, what_if: bool) -> dict[str, Any]:
    params = work.arrays(offset, offset + RAW_CHUNK)
    out: dict[str, Any] = {"chunk_rows": RAW_CHUNK, "rolled_back": True}
    notes: list[str] = []
    with psycopg.connect(dsn) as conn:
        conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
        try:
            conn.execute("SET LOCAL track_functions = 'all'")
            conn.execute("LOAD 'auto_explain'")
            for setting, value in (
                # Above the per-row calls of non-inlined SQL functions, below every
                # statement of the chunk worth naming.
                ("auto_explain.log_min_duration", "25"),
                ("auto_explain.log_nested_statements", "on"),
                ("auto_explain.log_analyze", "on"),
                ("auto_explain.log_level", "notice"),
                ("client_min_messages", "notice"),
            ):
                conn.execute(f"SET LOCAL {setting} = '{value}'")
        except psycopg.Error as exc:
            out["skipped"] = f"needs superuser (track_functions, auto_explain): {exc}"
            return out
        t0 = time.perf_counter()
        conn.execute(RAW_SQL, params).fetchone()
        out["instrumented_call_s"] = round(time.perf_counter() - t0, 3)
        out["functions"] = [
            {"function": f, "calls": int(c), "total_ms": float(t), "self_ms": float(s)}
            for f, c, t, s in conn.execute(
                "SELECT funcname, calls, round(total_time::numeric, 1),"
                " round(self_time::numeric, 1)"
                " FROM pg_stat_xact_user_functions WHERE schemaname = 'pgsched'"
                " ORDER BY total_time DESC"
            ).fetchall()
        ]
        conn.rollback()
    statements = []
    for note in notes:
        m = _DURATION.search(note)
        if not m:
            continue
        jit = _JIT.search(note)
        statements.append(
            {
                "duration_ms": float(m[1]),
                "statement": " ".join(m[2].split())[:90],
                "jit_ms": float(jit[1]) if jit else None,
                "plan": note,
            }
        )
    out["statements"] = statements
    if what_if:
        out["what_if"] = what_if_variants(dsn, params)
    return out


def what_if_variants(dsn: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for name, changes in VARIANTS.items():
        times = []
        try:
            for _ in range(2):
                with psycopg.connect(dsn) as conn:
                    for change in changes:
                        change(conn)
                    t0 = time.perf_counter()
                    conn.execute(RAW_SQL, params).fetchone()
                    times.append(time.perf_counter() - t0)
                    conn.rollback()
        except (psycopg.Error, LookupError) as exc:
            results.append({"variant": name, "skipped": str(exc)})
            continue
        best = min(times)
        results.append(
            {
                "variant": name,
                "chunk_s": round(best, 3),
                "rows_per_s_one_connection": round(RAW_CHUNK / best),
            }
        )
    return results


# --------------------------------------------------------------------------------------
# context


def machine() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "psycopg_impl": psycopg.pq.__impl__,
        # Other work on the box skews every figure: the load average says whether there was any.
        "loadavg_1_5_15_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def server_context(dsn: str, own: PgServer | None) -> dict[str, Any]:
    names = [s.name for s in DEFAULT_SETTINGS] + ["jit", "autovacuum", "wal_level"]
    with psycopg.connect(dsn) as conn:
        (version,) = conn.execute("SELECT version()").fetchone() or ("?",)
        rows = conn.execute(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
            (names,),
        ).fetchall()
    why = {s.name: s.why for s in DEFAULT_SETTINGS} if own else {}
    return {
        "postgres_version": version,
        "server": "throwaway cluster started by this benchmark" if own else "given by --dsn",
        "settings": {
            name: {"setting": setting, "unit": unit, "why": why.get(name)}
            for name, setting, unit in rows
        },
    }


def schema_context(dsn: str) -> dict[str, Any]:
    """Which SQL was measured: the applied migrations (with checksums) and the git commit."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT version, name, checksum FROM pgsched.schema_migrations ORDER BY version"
        ).fetchall()
    git: dict[str, Any] = {}
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "sql", "pgsched"],
            capture_output=True,
            text=True,
        )
        if head.returncode == 0:
            git = {"commit": head.stdout.strip(), "sql_or_pgsched_modified": bool(dirty.stdout)}
    except OSError:
        pass
    return {
        "migrations": [{"version": v, "name": n, "checksum": c[:16]} for v, n, c in rows],
        "git": git,
    }


# --------------------------------------------------------------------------------------
# report


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return str(n)


def summary(r: dict[str, Any]) -> str:
    lines = ["", "=" * 78, "pgsched scheduling benchmark", "=" * 78]
    lines.append(f"postgres: {r['server']['postgres_version'].split(',')[0]}")
    m = r["machine"]
    lines.append(f"machine:  {m['nproc']} cores, {m['memory_gib']} GiB, {m['cpu']}")
    sc = r.get("schema", {})
    versions = ", ".join(f"{x['version']:04d}" for x in sc.get("migrations", []))
    commit = sc.get("git", {}).get("commit", "?")[:10]
    dirty = (
        " (sql/ or pgsched/ modified)" if sc.get("git", {}).get("sql_or_pgsched_modified") else ""
    )
    lines.append(f"schema:   migrations {versions}; git {commit}{dirty}")
    lines.append(
        f"load average at start {m['loadavg_1_5_15_at_start']},"
        f" at end {m.get('loadavg_1_5_15_at_end')}"
    )
    b = r["bulk"]
    lines.append("")
    lines.append(f"Case 1, bulk: {b['rows']:,} tasks in {b['wall_s']:.1f} s (all paths)")
    if "app" in b:
        a = b["app"]
        lines.append(
            f"  App.schedule_many      {a['rows']:>11,} rows  {a['rows_per_s']:>9,} rows/s"
            f"  (validate {a['validation_s']:.1f} s + call {a['call_s']:.1f} s:"
            f" client cpu {a['call_client_cpu_s']:.1f} s, server {a['call_server_wait_s']:.1f} s;"
            f" input gen {a['input_generation_s']:.1f} s excluded)"
        )
    if "raw" in b:
        w = b["raw"]
        lines.append(
            f"  raw SQL x{w['connections']} connections {w['rows']:>11,} rows"
            f"  {w['rows_per_s']:>9,} rows/s  ({w['wall_s']:.1f} s wall;"
            f" {w['rows_per_s_per_connection']:,} rows/s per busy connection;"
            f" input gen {w['input_generation_s_summed']:.1f} s summed)"
        )
    for label, rate in b.get("projected_s_for_rows", {}).items():
        lines.append(f"  projected for {b['rows']:,} rows via {label}: {rate:,.0f} s")
    s = r["sizes"]
    lines.append("")
    lines.append(f"On disk after VACUUM ANALYZE ({s['vacuum_analyze_s']:.1f} s):")
    lines.append(f"  {'relation':18s} {'rows':>12s} {'heap':>12s} {'indexes':>12s} {'total':>12s}")
    for name, rel in s["relations"].items():
        lines.append(
            f"  {name:18s} {rel['rows']:>12,} {fmt_bytes(rel['heap_bytes']):>12s}"
            f" {fmt_bytes(rel['indexes_bytes']):>12s} {fmt_bytes(rel['total_bytes']):>12s}"
        )
    lines.append(
        f"  total {fmt_bytes(s['total_bytes'])} for {s['task_rows']:,} tasks ="
        f" {s['bytes_per_task']:.1f} bytes per task"
    )
    lines.append(
        f"  hot partition + indexes (the claim path): {fmt_bytes(s['hot_bytes'])}"
        f" = {s['hot_fraction']:.6%} of the whole"
    )
    g = r["single"]
    lines.append("")
    lines.append(f"Case 2, one at a time ({g['calls']:,} calls of pgsched.schedule_task):")
    for key in ("autocommit", "one_transaction"):
        x = g[key]
        lines.append(
            f"  {key:16s} {x['rows_per_s']:>9,} rows/s  {x['ms_per_call']:.3f} ms/call"
            f"  ({x['what']})"
        )
    p = r.get("profile")
    if p and "statements" in p:
        lines.append("")
        lines.append(
            f"Profile of one {p['chunk_rows']:,}-row chunk (auto_explain, rolled back;"
            f" {p['instrumented_call_s']:.2f} s instrumented):"
        )
        for st in p["statements"]:
            jit = f"  [JIT {st['jit_ms']:.0f} ms]" if st["jit_ms"] else ""
            lines.append(f"  {st['duration_ms']:>9.1f} ms  {st['statement'][:60]}{jit}")
        for fn in p["functions"]:
            lines.append(
                f"  function {fn['function']:22s} calls {fn['calls']:>7,}"
                f"  self {fn['self_ms']:>9.1f} ms"
            )
        for v in p.get("what_if", []):
            if "skipped" in v:
                lines.append(f"  what-if {v['variant']}: skipped ({v['skipped']})")
            else:
                lines.append(
                    f"  what-if {v['variant']:48s} {v['chunk_s']:.2f} s/chunk"
                    f"  {v['rows_per_s_one_connection']:>7,} rows/s (1 conn)"
                )
    lines.append("=" * 78)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------


def run(dsn: str, args: argparse.Namespace, own: PgServer | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "arguments": {k: v for k, v in vars(args).items() if k not in {"dsn"} and not callable(v)},
        "machine": machine(),
    }
    result["arguments"]["out"] = str(args.out)
    log(f"migrating {'the throwaway cluster' if own else 'the given database'}")
    migrate(dsn)
    result["server"] = server_context(dsn, own)
    result["schema"] = schema_context(dsn)

    work = Workload(start=datetime.now(UTC) + timedelta(hours=25))
    rows, app_rows = args.rows, min(args.app_rows, args.rows)
    every = min(1_000_000, max(RAW_CHUNK, rows // 10))
    log(
        f"case 1: {rows:,} tasks due over 365 days from +25 h;"
        f" {app_rows:,} via App.schedule_many, {rows - app_rows:,} via raw SQL"
        f" x{args.jobs} connections"
    )
    bulk: dict[str, Any] = {"rows": rows}
    t0 = time.perf_counter()
    if app_rows:
        progress = Progress(total=app_rows, every=min(every, max(APP_BATCH, app_rows // 5)))
        bulk["app"] = bench_app(dsn, work, 0, app_rows, progress)
    if rows > app_rows:
        progress = Progress(total=rows - app_rows, every=every)
        bulk["raw"] = bench_raw(dsn, work, app_rows, rows, args.jobs, progress)
    bulk["wall_s"] = round(time.perf_counter() - t0, 3)
    projected = {}
    if "app" in bulk:
        projected["App.schedule_many"] = rows / bulk["app"]["rows_per_s"]
    if "raw" in bulk:
        projected[f"raw SQL x{args.jobs}"] = rows / bulk["raw"]["rows_per_s"]
    bulk["projected_s_for_rows"] = {k: round(v, 1) for k, v in projected.items()}
    result["bulk"] = bulk

    log("sizes: VACUUM ANALYZE, then bytes on disk")
    result["sizes"] = measure_sizes(dsn)

    log(f"case 2: {args.single:,} single calls, autocommit, then in one transaction")
    result["single"] = bench_single(dsn, work, args.single, offset=rows + 1)

    if args.profile:
        what_if = own is not None
        log(
            "profile: one chunk under auto_explain"
            + (", then what-if variants of the SQL functions" if what_if else "")
            + " (all rolled back)"
        )
        result["profile"] = profile_chunk(
            dsn, work, offset=rows + 2 * args.single + 2, what_if=what_if
        )
    result["finished_at"] = datetime.now(UTC).isoformat()
    result["machine"]["loadavg_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_schedule", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=None, help="bulk tasks (default 10,000,000)")
    parser.add_argument(
        "--app-rows",
        type=int,
        default=None,
        help="how many of --rows go through App.schedule_many (default 500,000; quick 20,000)",
    )
    parser.add_argument("--single", type=int, default=None, help="single calls (default 10,000)")
    parser.add_argument(
        "--jobs", type=int, default=2, help="parallel connections for the raw SQL path"
    )
    parser.add_argument("--dsn", default=None, help="use this (scratch!) database instead")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON results file (default results/schedule.json; quick: schedule-quick.json)",
    )
    parser.add_argument("--quick", action="store_true", help="rows=200,000, single=2,000 (CI)")
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="profile one chunk at the end (default: on, off with --quick)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = DEFAULT_OUT_QUICK if args.quick else DEFAULT_OUT
    if args.rows is None:
        args.rows = 200_000 if args.quick else 10_000_000
    if args.single is None:
        args.single = 2_000 if args.quick else 10_000
    if args.app_rows is None:
        args.app_rows = 20_000 if args.quick else 500_000
    if args.profile is None:
        args.profile = not args.quick
    if args.rows < 1 or args.single < 1 or args.jobs < 1 or args.app_rows < 0:
        parser.error("--rows, --single and --jobs must be positive, --app-rows not negative")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    t0 = time.perf_counter()
    server: PgServer | None = None
    try:
        if args.dsn:
            dsn = args.dsn
        else:
            server = PgServer()
            dsn = server.start()
        result = run(dsn, args, server)
    finally:
        if server is not None:
            server.stop()
    result["total_runtime_s"] = round(time.perf_counter() - t0, 1)
    print(summary(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    log(f"wrote {args.out} (total {result['total_runtime_s']:.1f} s)")


if __name__ == "__main__":
    main()
