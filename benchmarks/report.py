# ruff: noqa: RUF001, RUF002
"""The suite's report: the targets (met / not met), a table on stdout, RESULTS.md and plots.

    python -m benchmarks.report DIR/results.json [--publish]   # re-render from a results file

The narrative (what each case does, the fairness notes, the findings and the commits behind
them) is benchmarks/report_template.md; this module only computes what fills its
$placeholders: figures, tables and verdicts from results.json. Plots (matplotlib, Agg)
go to DIR/plots/. --publish also copies RESULTS.md and the plots to benchmarks/.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TEMPLATE = BENCH / "report_template.md"
FLUSH_SIZE = 500  # the worker's default: a lane holds concurrency + 2 x flush_size at most

# --------------------------------------------------------------------------------------
# formatting


def g(d: Any, *path: Any, default: Any = None) -> Any:
    """d[path[0]][path[1]]...; `default` where any step is missing."""
    for key in path:
        if isinstance(d, dict):
            d = d.get(key)
        elif isinstance(d, list) and isinstance(key, int) and -len(d) <= key < len(d):
            d = d[key]
        else:
            return default
    return default if d is None else d


def fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def fbytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:,.0f} B" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"


def count_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return f"{n:,}" if n else "0"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def ms3(d: Any) -> str:
    """p50 / p99 / max of a percentiles dict."""
    return " / ".join(str(g(d, k, default="–")) for k in PCT3)


PCT3 = ("p50", "p99", "max")


def median_of(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def lateness_at(runs: list[dict[str, Any]], rate: float, default_poll: bool = False) -> Any:
    for r in runs or []:
        if r.get("rate_per_s") == rate and bool(r.get("default_poll")) == default_poll:
            return r
    return None


def cpu_per_task(r: dict[str, Any]) -> float | None:
    w, p = g(r, "cpu_us_per_task", "workers"), g(r, "cpu_us_per_task", "postgres")
    return None if w is None or p is None else w + p


def fastest_peer(results: dict[str, Any]) -> tuple[str, int] | None:
    rates = [(p["system"], g(p, "throughput", "best", "tasks_per_s")) for p in peers(results)]
    return max(((n, v) for n, v in rates if v), key=lambda x: x[1], default=None)


def peers(results: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = results.get("peers") or []
    return found


def engine_xact_ages(results: dict[str, Any]) -> list[tuple[str, float]]:
    """(case: oldest statement, age in s) of the engine's oldest transaction, per run."""
    ages: list[tuple[str, float]] = []

    def take(label: str, r: Any) -> None:
        age = g(r, "engine_xacts", "max_xact_age_s")
        if age is not None:
            text = re.sub(r"--[^\n]*", " ", str(g(r, "engine_xacts", "oldest_query", default="")))
            query = " ".join(text.split())
            ages.append((f"{label}: {query[:70]}" if query else label, float(age)))

    for p in g(results, "case2", "points", default=[]):
        for r in p.get("runs", []):
            take("case 2", r)
    for r in g(results, "case3", "runs", default=[]):
        take("case 3", r)
    for r in g(results, "case4", "rates", default=[]) + g(results, "case4", "steps", default=[]):
        take("case 4", r)
    take("case 6 (under the held transaction)", results.get("case6"))
    return ages


# --------------------------------------------------------------------------------------
# targets


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, figure: str, met: bool | None, note: str = "") -> None:
        out.append({"target": name, "figure": figure, "met": met, "note": note})

    flat, ctl = g(results, "case2", "flatness"), g(results, "case2", "control")
    largest = g(results, "case2", "largest_backlog", default=0)
    add(
        "backlog flatness >= 0.9",
        f"{fmt(flat, 3)} (median throughput with {count_label(largest)} future tasks / with none)"
        + (
            "; control with no backlog but the buffer cache as full:"
            f" {fmt(ctl.get('ratio_to_empty'), 3)} of empty, so the backlog itself"
            f" {fmt(ctl.get('largest_to_control'), 3)}"
            if ctl
            else ""
        ),
        None if flat is None else flat >= 0.9,
    )
    best, peer_best = g(results, "case3", "best"), fastest_peer(results)
    name = "throughput >= 3x the faster peer, every transition written"
    if best and peer_best:
        ratio = best["tasks_per_s"] / peer_best[1]
        events_ok = all(
            g(r, "verification", "ok", default=False)
            for r in g(results, "case3", "runs", default=[])
            if r.get("finished")
        )
        add(
            name,
            f"{best['tasks_per_s']:,}/s vs {peer_best[0]} {peer_best[1]:,}/s = {ratio:.2f}x;"
            f" 2 events per task verified: {fmt(events_ok)}",
            ratio >= 3 and events_ok,
        )
    else:
        add(name, "not measured", None)
    late = lateness_at(g(results, "case4", "rates", default=[]), 1000)
    if late:
        p99, mx = late["ms"]["p99"], late["ms"]["max"]
        peer_p99 = {
            p["system"]: g(lateness_at(p.get("lateness", []), 1000), "ms", "p99")
            for p in peers(results)
        }
        lower = all(v is not None and p99 < v for v in peer_p99.values()) if peer_p99 else None
        add("lateness at 1,000/s: p99 <= 25 ms", f"p99 {fmt(p99, 1)} ms", p99 <= 25)
        add("lateness at 1,000/s: max <= 250 ms", f"max {fmt(mx, 1)} ms", mx <= 250)
        add(
            "lateness at 1,000/s: p99 lower than both peers'",
            f"pgsched {fmt(p99, 1)} ms; "
            + (", ".join(f"{k} {fmt(v, 1)}" for k, v in peer_p99.items()) or "peers not measured"),
            lower,
        )
    bulk = g(results, "case1", "bulk")
    if bulk:
        rows, wall, rate = bulk["rows"], bulk["wall_s"], bulk["rows_per_s"]
        if rows >= 10_000_000:
            add(
                "10M scheduled in under 3 minutes",
                f"{rows:,} in {wall:.1f} s ({rate:,} rows/s)",
                wall < 180,
            )
        else:
            projected = 10_000_000 / rate
            add(
                "10M scheduled in under 3 minutes",
                f"projected {projected:.0f} s from {rows:,} in {wall:.1f} s ({rate:,} rows/s)",
                projected < 180,
                "projected, not measured",
            )
    single = g(results, "case1", "single")
    if single:
        tx, ac = single["one_transaction"]["rows_per_s"], single["autocommit"]["rows_per_s"]
        commit_ms = g(results, "case1", "commit_latency", "ms", "p50")
        bound = (
            f"; a commit alone takes {commit_ms} ms here (bound {1000 / commit_ms:,.0f}/s)"
            if commit_ms
            else ""
        )
        add(
            "one at a time >= 2,000/s from one connection (in one transaction)",
            f"{tx:,}/s in one transaction",
            tx >= 2000,
        )
        add(
            "one at a time >= 2,000/s from one connection (autocommit)",
            f"{ac:,}/s autocommit{bound}",
            ac >= 2000,
            "each call commits, so waits for a WAL flush: bounded by the disk's commit latency",
        )
    fr1, fr2 = (
        g(results, "case1", "sizes", "hot_fraction"),
        g(results, "case5", "after_work", "hot_fraction"),
    )
    fractions = [f for f in (fr1, fr2) if f is not None]
    if fractions:
        add(
            "claim path <= 1% of bytes",
            f"tasks_hot + indexes = {fmt((fr1 or 0) * 100, 4)}% right after scheduling"
            f" {fmt(g(results, 'case1', 'sizes', 'task_rows'))} tasks; {fmt((fr2 or 0) * 100, 4)}%"
            " after the backlog runs",
            max(fractions) <= 0.01,
        )
    ages = engine_xact_ages(results)
    if ages:
        label, age = max(ages, key=lambda x: x[1])
        add(
            "engine transactions never open more than a few seconds (<= 5 s)",
            f"max {age:.3f} s ({label}), over {len(ages)} sampled runs",
            age <= 5.0,
        )
    return out


# --------------------------------------------------------------------------------------
# tables: the generated part of RESULTS.md

Column = tuple[str, Callable[[Any], Any]]


def columns(rows: Sequence[Any], spec: Sequence[Column]) -> str:
    """A markdown table of `rows`, one column per (header, value of a row)."""
    return table([h for h, _ in spec], [[get(r) for _, get in spec] for r in rows])


def cpu(key: str) -> Callable[[Any], Any]:
    return lambda r: g(r, "cpu", key)


LATENESS: list[Column] = [
    ("p50 ms", lambda r: r["ms"]["p50"]),
    ("p95", lambda r: r["ms"]["p95"]),
    ("p99", lambda r: r["ms"]["p99"]),
    ("p99.9", lambda r: r["ms"]["p99_9"]),
    ("max", lambda r: r["ms"]["max"]),
]
STARTED: Column = ("started", lambda r: f"{r['started']:,}/{r['tasks']:,}")
COMMIT_BEFORE: Column = ("commit ms before", lambda r: r.get("commit_p50_ms_before", "–"))


def case_tables(results: dict[str, Any]) -> dict[str, str]:
    t: dict[str, str] = {}
    s = g(results, "case1", "sizes")
    if s:
        rels = [{"name": n, **r} for n, r in s["relations"].items()]
        rels.append({"name": "**all**", "rows": s["task_rows"], "all_bytes": s["total_bytes"]})
        t["case1_sizes_table"] = columns(
            rels,
            [
                ("relation", lambda r: r["name"]),
                ("rows", lambda r: fmt(r["rows"])),
                ("heap", lambda r: fbytes(r.get("heap_bytes")) if "heap_bytes" in r else ""),
                ("indexes", lambda r: fbytes(r["indexes_bytes"]) if "indexes_bytes" in r else ""),
                (
                    "total",
                    lambda r: (
                        fbytes(r.get("total_bytes"))
                        if "all_bytes" not in r
                        else f"**{fbytes(r['all_bytes'])}**"
                    ),
                ),
            ],
        )
    single = g(results, "case1", "single")
    if single:
        modes = [("autocommit (each call its own transaction)", single["autocommit"])]
        modes.append(("in one transaction", single["one_transaction"]))
        t["case1_single_table"] = columns(
            modes,
            [
                ("mode", lambda m: m[0]),
                ("rate", lambda m: f"{m[1]['rows_per_s']:,}/s"),
                ("per call", lambda m: f"{m[1]['ms_per_call']} ms"),
            ],
        )
    points = g(results, "case2", "points", default=[])

    def runs_of(runs: list[dict[str, Any]]) -> str:
        return ", ".join(fmt(r.get("tasks_per_s")) for r in runs)

    def others_of(p: dict[str, Any]) -> list[float]:
        return [o for o in (g(r, "cpu", "other_cores") for r in p["runs"]) if o is not None]

    def costs_of(p: dict[str, Any]) -> list[float]:
        return [c for c in map(cpu_per_task, p["runs"]) if c is not None]

    backlog: Column = ("backlog", lambda p: count_label(p["backlog"]))
    t["case2_table"] = columns(
        points,
        [
            backlog,
            ("cold tasks present", lambda p: fmt(p["cold_tasks_present"])),
            ("runs (tasks/s)", lambda p: runs_of(p["runs"])),
            ("median", lambda p: f"**{fmt(p['median_tasks_per_s'])}**"),
            ("ratio to empty", lambda p: fmt(p.get("ratio_to_empty"), 3)),
        ],
    )
    t["case2_cpu_table"] = columns(
        points,
        [
            backlog,
            ("CPU µs per task (runs)", lambda p: ", ".join(f"{c:,.0f}" for c in costs_of(p))),
            ("median", lambda p: fmt(median_of(costs_of(p)), 0)),
            (
                "other processes' cores during the runs",
                lambda p: ", ".join(f"{o:.2f}" for o in others_of(p)),
            ),
        ],
    )
    t["case2_control_runs"] = runs_of(g(results, "case2", "control", "runs", default=[]))
    t["case3_table"] = columns(
        g(results, "case3", "runs", default=[]),
        [
            ("procs", lambda r: r["processes"]),
            ("batch", lambda r: r["batch_size"]),
            ("conc.", lambda r: r["concurrency"]),
            ("tasks/s", lambda r: fmt(r["tasks_per_s"])),
            ("steady median/s", lambda r: fmt(r.get("steady_median_per_s"))),
            ("worker cores", cpu("clients_cores")),
            ("pg cores", cpu("postgres_cores")),
            ("other cores", cpu("other_cores")),
            ("worker µs/task", lambda r: g(r, "cpu_us_per_task", "workers")),
            ("pg µs/task", lambda r: g(r, "cpu_us_per_task", "postgres")),
            ("2 events/task", lambda r: fmt(g(r, "verification", "ok"))),
            ("max xact s", lambda r: fmt(g(r, "engine_xacts", "max_xact_age_s"), 2)),
        ],
    )
    t["case3_cost_table"] = columns(
        list(g(results, "case3", "statement_cost", "modes", default={}).items()),
        [
            ("run", lambda m: m[0]),
            ("claim µs/task", lambda m: m[1]["claim_us"]),
            ("completion µs/task", lambda m: m[1]["finish_us"]),
            ("total µs/task", lambda m: f"**{m[1]['total_us']}**"),
        ],
    )
    c4 = results.get("case4") or {}
    late = [{"label": f"{fmt(r['rate_per_s'])}/s", **r} for r in c4.get("rates", [])]
    late += [{"label": f"step {fmt(r['rate_per_s'])}/s", **r} for r in c4.get("steps", [])]
    t["case4_table"] = columns(
        late,
        [
            ("rate", lambda r: r["label"]),
            ("s", lambda r: f"{r['duration_s']:g}"),
            STARTED,
            *LATENESS,
            ("sustained", lambda r: fmt(r["sustained"]) if "sustained" in r else ""),
            ("worker cores", cpu("clients_cores")),
            ("pg cores", cpu("postgres_cores")),
            ("other cores", cpu("other_cores")),
            COMMIT_BEFORE,
        ],
    )
    c6 = results.get("case6")
    if c6:
        p = c6["probe"]
        rows = [["claim probe p50 / p99 / max (ms)", *(ms3(p[k]) for k in PROBE_SPANS)]]
        rows.append(
            [
                "lateness p50 / p99 / max (ms)",
                ms3(c6.get("lateness_before_ms")),
                ms3(c6.get("lateness_during_ms")),
                "",
            ]
        )
        t["c6_table"] = table(["", "before", "while held", "after the commit"], rows)
    if peers(results):
        t["peers_table"] = peers_summary_table(results)
        t["peer_sections"] = "\n\n".join(peer_section(p) for p in peers(results))
    return t


PROBE_SPANS = ("before_ms", "during_ms", "after_ms")


def peers_summary_table(results: dict[str, Any]) -> str:
    pgsched = {
        "name": "pgsched",
        "best": g(results, "case3", "best"),
        "lateness": g(results, "case4", "rates", default=[]),
        "points": g(results, "case2", "points", default=[]),
    }
    systems = [pgsched] + [
        {
            "name": f"{p['system']} {p['version']}",
            "best": g(p, "throughput", "best"),
            "lateness": p.get("lateness", []),
            "points": g(p, "backlog", "points", default=[]),
        }
        for p in peers(results)
    ]

    def best(s: dict[str, Any]) -> str:
        b = s["best"]
        if not b:
            return "–"
        setting = b.get("setting") or (
            f"{b['processes']} proc, batch {b['batch_size']}, conc. {b['concurrency']}"
        )
        return f"{fmt(b['tasks_per_s'])}/s ({setting})"

    def late(rate: int) -> Callable[[dict[str, Any]], str]:
        return lambda s: " / ".join(
            fmt(g(lateness_at(s["lateness"], rate), "ms", k), 1) for k in ("p99", "max")
        )

    return columns(
        systems,
        [
            ("system", lambda s: s["name"]),
            ("throughput, best (setting)", best),
            ("lateness 100/s p99 / max ms", late(100)),
            ("lateness 1,000/s p99 / max ms", late(1000)),
            (
                "one worker, by backlog (median)",
                lambda s: "; ".join(
                    f"{count_label(pt['backlog'])}: {fmt(pt['median_tasks_per_s'])}/s"
                    for pt in s["points"]
                ),
            ),
        ],
    )


def peer_section(p: dict[str, Any]) -> str:
    """One peer's own tables: throughput settings, backlog points, lateness."""
    throughput = columns(
        g(p, "throughput", "runs", default=[]),
        [
            ("setting (throughput)", lambda r: r["setting"]),
            ("tasks/s", lambda r: fmt(r.get("tasks_per_s"))),
            ("completed", lambda r: fmt(r.get("completed"))),
            ("", lambda r: "" if r.get("finished") else f"capped at {r.get('capped_after_s')} s"),
            ("worker cores", cpu("clients_cores")),
            ("pg cores", cpu("postgres_cores")),
            ("log rows/job", lambda r: g(r, "audit", "log_rows_per_job")),
            ("max xact s", lambda r: fmt(g(r, "xacts", "max_xact_age_s"), 2)),
        ],
    )
    capped = lambda r: fmt(r.get("tasks_per_s")) + ("" if r.get("finished") else "*")  # noqa: E731
    backlog = columns(
        g(p, "backlog", "points", default=[]),
        [
            ("backlog", lambda pt: count_label(pt["backlog"])),
            ("runs (tasks/s; * = capped)", lambda pt: ", ".join(map(capped, pt["runs"]))),
            ("median", lambda pt: fmt(pt["median_tasks_per_s"])),
            ("ratio", lambda pt: fmt(pt.get("ratio_to_empty"), 3)),
            ("backlog scheduled at (rows/s)", lambda pt: fmt(pt.get("backlog_rows_per_s"))),
        ],
    )
    runs = p.get("lateness", [])

    def rate(r: dict[str, Any]) -> str:
        return f"{fmt(r['rate_per_s'])}/s" + (" default poll" if r.get("default_poll") else "")

    lateness = columns(runs, [("lateness", rate), STARTED, *LATENESS, COMMIT_BEFORE])
    stalls = [
        f"At {fmt(r['rate_per_s'])}/s the workers fell behind; their sessions when the wait ended: "
        + "; ".join(f"`{' | '.join(str(x) for x in row)}`" for row in r["stall_snapshot"][:6])
        for r in runs
        if r.get("stall_snapshot")
    ]
    chosen = f"Cases 2 and 4 used: {p.get('chosen_setting')}."
    head = f"### {p['system']} {p['version']}"
    return "\n\n".join([head, throughput, backlog, chosen, lateness, *stalls])


# --------------------------------------------------------------------------------------
# what the template quotes beyond the tables: figures derived from several results


PLOTS = {
    "throughput_vs_backlog": "throughput against backlog size",
    "lateness_cdf": "lateness CDF",
    "unhealthy": "unhealthy database timeline",
}


def derived(results: dict[str, Any], plot_files: list[str]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    quick = g(results, "plan", "quick", default=False)
    d["mode_title"] = " (quick mode)" if quick else ""
    d["mode"] = "quick (CI sizes)" if quick else "full"
    d["total_min"] = fmt(results.get("total_s", 0) / 60, 1)
    d["machine_table"] = machine_table(results)
    why = results.get("server_settings_why", {})
    d["settings_table"] = table(
        ["setting", "value", "why"],
        [[f"`{k}`", f"`{v['value']}`", v["why"]] for k, v in why.items()],
    )
    d["targets_table"] = targets_table(results)
    errors = results.get("errors") or {}
    d["errors"] = "; ".join(f"{k}: {v}" for k, v in errors.items())
    d["errors"] = f"**Stages that failed:** {d['errors']}" if errors else ""
    for name, alt in PLOTS.items():
        shown = f"{name}.png" in plot_files
        d[f"plot_{name}"] = f"![{alt}](plots/{name}.png)" if shown else ""
    d |= case_tables(results)

    bulk, single = g(results, "case1", "bulk"), g(results, "case1", "single")
    if bulk:
        d["bulk_verdict"] = (
            "so the target holds with room to spare"
            if bulk["rows_per_s"] >= 56_000
            else "which this run does not reach"
        )
    if single:
        extra = single["autocommit"]["ms_per_call"] - single["one_transaction"]["ms_per_call"]
        d["commit_cost_ms"] = f"{extra:.2f}"
    fd = g(results, "case1", "pg_test_fsync", "fdatasync")
    d["pg_test_fsync"] = (
        f" `pg_test_fsync` (the server's `wal_sync_method` is fdatasync): one 8 kB write +"
        f" fdatasync = {fd['usecs_per_op']} µs ({fd['ops_per_s']:,.0f} ops/s)."
        if fd
        else ""
    )

    c2 = results.get("case2") or {}
    cache = g(c2, "control", "buffer_cache", default={})
    d["buffer_cache"] = (
        f" ({cache['used']:,} of {cache['total']:,} shared buffers in use)"
        if cache.get("total")
        else ""
    )
    costs = [median_of([cpu_per_task(r) for r in p["runs"]]) for p in c2.get("points", [])]
    others = [g(r, "cpu", "other_cores") for p in c2.get("points", []) for r in p["runs"]]
    others = [o for o in others if o is not None]
    if len(costs) >= 2 and costs[0] and costs[-1] and others:
        d["cpu_empty_us"], d["cpu_largest_us"] = f"{costs[0]:,.0f}", f"{costs[-1]:,.0f}"
        d["cpu_ratio"] = f"{costs[0] / costs[-1]:.2f}"
        d["other_cores_range"] = f"{min(others):.2f}–{max(others):.2f}"
        d["quiet_verdict"] = (
            "the machine was quiet, so the rise is the server's own"
            if max(others) < 0.2
            else "CPU time per task itself rises under such contention"
        )
    ltc = g(c2, "control", "largest_to_control")
    d["control_verdict"] = (
        "What the cache holds does not slow the claim path, and neither does the cold tier."
        if ltc is not None and ltc >= 0.95
        else "The gap belongs to the backlog database, not to the cache: compare the hot-path"
        " plans in the two databases (auto_explain with log_nested_statements)."
    )

    best, modes = (
        g(results, "case3", "best", default={}),
        g(results, "case3", "statement_cost", "modes", default={}),
    )
    if "trigger" in modes and "no trigger" in modes:
        d["trigger_us"] = f"{modes['trigger']['total_us'] - modes['no trigger']['total_us']:.1f}"
    cores, per_task = best.get("cpu") or {}, best.get("cpu_us_per_task") or {}
    peer_best, nproc = fastest_peer(results), g(results, "machine", "nproc")
    if cores and per_task:
        d["best_cores"] = f"{cores['clients_cores'] + cores['postgres_cores']:.2f}"
        d["best_cpu_us"] = f"{per_task['workers'] + per_task['postgres']:.0f}"
    if peer_best and nproc:
        d["fastest_peer"], d["fastest_peer_per_s"] = peer_best[0], fmt(peer_best[1])
        d["goal_per_s"] = fmt(3 * peer_best[1])
        d["goal_cpu_us"] = f"{nproc / (3 * peer_best[1]) * 1e6:.0f}"
    runs = [r for p in c2.get("points", []) for r in p["runs"]] + g(
        results, "case3", "runs", default=[]
    )
    held = [
        (g(r, "engine_xacts", "max_processing"), r["concurrency"], r.get("processes", 1))
        for r in runs
        if g(r, "engine_xacts", "max_processing") is not None and r.get("concurrency")
    ]
    worst = max(held, key=lambda x: x[0] / ((x[1] + 2 * FLUSH_SIZE) * x[2]), default=None)
    if worst:
        d["most_processing"], d["most_processing_concurrency"], d["most_processing_procs"] = worst
        d["lane_bound_verdict"] = (
            "within the bound"
            if worst[0] <= (worst[1] + 2 * FLUSH_SIZE) * worst[2]
            else "OVER the bound: look for a flush that does not release the lanes"
        )

    d["stepped"] = ", ".join(fmt(r["rate_per_s"]) for r in g(results, "case4", "steps", default=[]))
    busy = [s for s in g(results, "case4_promotion", "sweeps", default=[]) if s["promoted"]]
    d["promo_sweeps"] = len(busy)
    d["promo_rows"] = sum(s["promoted"] for s in busy)
    d["promo_chunks"] = sum(s["chunks"] for s in busy)
    pc = g(results, "case5", "promotion_chunk")
    if pc:
        pairs = zip(pc.get("first_pass", pc["runs"]), pc["runs"], strict=True)
        d["promotion_chunks"] = ", ".join(
            f"{c['chunk']:,} rows {a['ms']:,.0f} / {c['ms']:,.0f} ms" for a, c in pairs
        )
        d["promotion_chunks_cached"] = ", ".join(
            f"{c['chunk']:,} rows {c['ms']:,.0f} ms" for c in pc["runs"]
        )
    ages = engine_xact_ages(results)
    if ages:
        d["xact_where"], age = max(ages, key=lambda x: x[1])
        d["xact_max_s"], d["xact_runs"] = f"{age:.3f}", len(ages)
        d["xact_verdict"] = (
            "The engine's transactions stay short:"
            if age <= 5.0
            else "An engine transaction stayed open for more than 5 s:"
        )
    return d


def machine_table(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    commit = str(m.get("git_commit", ""))[:12]
    modified = " (engine files modified)" if m.get("engine_files_modified") else ""
    loads = f"at start {results.get('loadavg_start')}, at end {results.get('loadavg_end')}"
    rows = [
        ["CPU", f"{m.get('nproc')} cores ({m.get('cpu_model')})"],
        ["memory", f"{m.get('memory_gib')} GiB"],
        ["kernel", m.get("kernel")],
        ["Postgres", str(g(results, "server", "version", default="?")).split(" on ")[0]],
        ["Python", m.get("python")],
        ["packages", ", ".join(f"{k} {v}" for k, v in m.get("packages", {}).items())],
        ["pgsched commit", commit + modified],
        ["load average (1, 5, 15 min)", loads],
    ]
    return table(["", ""], rows)


def targets_table(results: dict[str, Any]) -> str:
    status = {True: "**met**", False: "**not met**", None: "not measured"}
    return columns(
        results.get("targets", []),
        [
            ("target", lambda t: t["target"]),
            ("figure", lambda t: t["figure"]),
            ("status", lambda t: status[t["met"]] + (f" ({t['note']})" if t["note"] else "")),
        ],
    )


# --------------------------------------------------------------------------------------
# rendering: ${name} or ${dotted.path.in.results:format}

PLACEHOLDER = re.compile(r"\$\{([^}:]+)(?::([^}]*))?\}")


def render(template: str, results: dict[str, Any], plot_files: list[str]) -> str:
    """Each ${name} in the template is a derived figure or a path into results.json
    (`case1.bulk.rows_per_s`), with an optional format: a Python format spec, `bytes` or
    `count` (10M). Integers get thousands separators. A placeholder with no value (a stage
    skipped or failed) renders as "–" and is named once on stdout."""
    values = derived(results, plot_files)
    missing: set[str] = set()

    def fill(m: re.Match[str]) -> str:
        name, spec = m[1], m[2]
        v = values.get(name, g(results, *(int(k) if k.isdigit() else k for k in name.split("."))))
        if v is None:
            missing.add(name)
            return "–"
        if spec == "bytes":
            return fbytes(v)
        if spec == "count":
            return count_label(v)
        if spec:
            return format(v, spec)
        return fmt(v) if isinstance(v, int) and not isinstance(v, bool) else str(v)

    text = PLACEHOLDER.sub(fill, template)
    if missing:
        print("report: no figure for " + ", ".join(sorted(missing)))
    return re.sub(r"\n{3,}", "\n\n", text)


def markdown(results: dict[str, Any], plot_files: list[str]) -> str:
    return render(TEMPLATE.read_text(), results, plot_files)


# --------------------------------------------------------------------------------------
# plots


COLORS = {"pgsched": "#1f77b4", "procrastinate": "#d62728", "PGQueuer": "#2ca02c"}


def plots(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=110)
        plt.close(fig)
        made.append(f"{name}.png")

    series = {"pgsched": g(results, "case2", "points", default=[])}
    for p in peers(results):
        series[p["system"]] = g(p, "backlog", "points", default=[])
    if any(series.values()):
        sizes = sorted({pt["backlog"] for pts in series.values() for pt in pts})
        pos = {s: i for i, s in enumerate(sizes)}
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, pts in series.items():
            pts = [pt for pt in pts if pt.get("median_tasks_per_s")]
            if pts:
                ax.plot(
                    [pos[pt["backlog"]] for pt in pts],
                    [pt["median_tasks_per_s"] for pt in pts],
                    marker="o",
                    label=name,
                    color=COLORS.get(name),
                )
            for pt in pts:
                ys = [r["tasks_per_s"] for r in pt.get("runs", []) if r.get("tasks_per_s")]
                ax.scatter(
                    [pos[pt["backlog"]]] * len(ys), ys, s=12, alpha=0.4, color=COLORS.get(name)
                )
        ax.set_xticks(range(len(sizes)), [count_label(s) for s in sizes])
        ax.set_xlabel("future tasks already scheduled (cold backlog)")
        ax.set_ylabel("no-op tasks/s, one worker process (median; dots: runs)")
        ax.set_yscale("log")
        ax.set_title("Throughput against backlog size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        save(fig, "throughput_vs_backlog")

    promo = results.get("case4_promotion")
    curves = [("pgsched", r) for r in g(results, "case4", "rates", default=[])]
    curves += [("pgsched", promo)] if promo else []
    curves += [(p["system"], r) for p in peers(results) for r in p.get("lateness", [])]
    curves = [(n, r) for n, r in curves if r.get("cdf")]
    if curves:
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for name, r in curves:
            style = "-" if r["rate_per_s"] >= 1000 else ":"
            label = f"{name} {r['rate_per_s']:,.0f}/s"
            if r is promo:
                label, style = label + " via promotion", "--"
            if r.get("default_poll"):
                label, style = label + " (default 5 s poll)", "-."
            xs = [max(v, 0.01) for v, _ in r["cdf"]]
            ax.step(
                xs,
                [fr for _, fr in r["cdf"]],
                where="post",
                linestyle=style,
                label=label,
                color=COLORS.get(name),
            )
        ax.set_xscale("log")
        ax.set_xlabel("lateness: start - due time (ms, log)")
        ax.set_ylabel("fraction of tasks started")
        ax.axvline(25, color="grey", linewidth=0.8, linestyle="--")
        ax.axvline(250, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title("Lateness CDF per system (25 ms and 250 ms marked)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        save(fig, "lateness_cdf")

    c6 = results.get("case6")
    if c6 and g(c6, "probe", "windows"):
        fig, ax = plt.subplots(figsize=(8, 4.2))
        w, lw = c6["probe"]["windows"], c6.get("lateness_windows", [])
        ax.plot([x["t"] for x in w], [x["p99"] for x in w], label="claim probe p99 (5 s windows)")
        if lw:
            ax.plot(
                [x["t"] for x in lw], [x["p99"] for x in lw], label="lateness p99 (10 s windows)"
            )
        ax.axvspan(
            c6["hold_began_at_s"],
            c6["hold_ended_at_s"],
            color="orange",
            alpha=0.15,
            label="transaction held open",
        )
        ax.set_yscale("log")
        ax.set_xlabel("seconds")
        ax.set_ylabel("ms (log)")
        ax2 = ax.twinx()
        s = g(c6, "tasks_hot", "samples", default=[])
        ax2.plot(
            [x["t"] for x in s],
            [x["n_dead_tup"] for x in s],
            color="grey",
            linewidth=0.8,
            label="tasks_hot n_dead_tup",
        )
        ax2.set_ylabel("dead tuples in tasks_hot")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
        ax.set_title(f"Unhealthy database: {c6['rate_per_s']}/s while a transaction is held open")
        save(fig, "unhealthy")
    return made


# --------------------------------------------------------------------------------------


def write(results: dict[str, Any], out: Path, publish: bool = False) -> None:
    results["targets"] = targets(results)
    out.mkdir(parents=True, exist_ok=True)
    made = plots(results, out / "plots")
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "RESULTS.md").write_text(markdown(results, made))
    print("\n" + targets_table(results) + "\n\n" + peers_summary_table(results) + "\n")
    print(
        f"wrote {out / 'results.json'}, {out / 'RESULTS.md'} and {len(made)} plot(s)"
        f" in {out / 'plots'}"
    )
    if publish and out.resolve() != BENCH:
        (BENCH / "plots").mkdir(exist_ok=True)
        for name in made:
            shutil.copy(out / "plots" / name, BENCH / "plots" / name)
        shutil.copy(out / "RESULTS.md", BENCH / "RESULTS.md")
        print(f"published {BENCH / 'RESULTS.md'} and {BENCH / 'plots'}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report")
    parser.add_argument("results", type=Path, help="a results.json written by the suite")
    parser.add_argument("--publish", action="store_true", help="also copy to benchmarks/")
    args = parser.parse_args(argv)
    write(json.loads(args.results.read_text()), args.results.parent, args.publish)


if __name__ == "__main__":
    main()
