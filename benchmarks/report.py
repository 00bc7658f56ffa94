# Markdown rows and table cells read best one per line here.
# ruff: noqa: E501, RUF001
"""The suite's report: the targets (met / not met), a table on stdout, RESULTS.md and plots.

    python -m benchmarks.report DIR/results.json [--publish]   # re-render from a results file

Plots (matplotlib, Agg backend) go to DIR/plots/: throughput against backlog size, the
lateness CDF per system, and the unhealthy-database timeline. --publish also copies
RESULTS.md and the plots to benchmarks/ (the committed report).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------
# helpers


def g(d: Any, *path: Any, default: Any = None) -> Any:
    for key in path:
        if d is None:
            return default
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
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} B" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def count_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return f"{n:,}"


def table(rows: list[list[Any]], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def peer(results: dict[str, Any], name: str) -> dict[str, Any]:
    for p in results.get("peers", []):
        if p.get("system") == name:
            return p
    return {}


def lateness_at(runs: list[dict[str, Any]], rate: float, default_poll: bool = False) -> Any:
    for r in runs or []:
        if r.get("rate_per_s") == rate and bool(r.get("default_poll")) == default_poll:
            return r
    return None


# --------------------------------------------------------------------------------------
# targets


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    quick = g(results, "plan", "quick", default=False)

    def add(name: str, figure: str, met: bool | None, note: str = "") -> None:
        out.append({"target": name, "figure": figure, "met": met, "note": note})

    # backlog flatness
    flat = g(results, "case2", "flatness")
    largest = g(results, "case2", "largest_backlog")
    ctl = g(results, "case2", "control")
    add(
        "backlog flatness >= 0.9",
        f"{fmt(flat, 3)} (median throughput with {count_label(largest or 0)} future tasks"
        " / with none)"
        + (
            f"; control with no backlog but the buffer cache as full:"
            f" {fmt(ctl.get('ratio_to_empty'), 3)} of empty, so the backlog itself"
            f" {fmt(ctl.get('largest_to_control'), 3)}"
            if ctl
            else ""
        ),
        None if flat is None else flat >= 0.9,
    )

    # throughput vs the faster peer
    best = g(results, "case3", "best")
    peers_best = [
        (p["system"], g(p, "throughput", "best", "tasks_per_s")) for p in results.get("peers", [])
    ]
    peers_best = [(n, v) for n, v in peers_best if v]
    if best and peers_best:
        name, rate = max(peers_best, key=lambda x: x[1])
        ratio = best["tasks_per_s"] / rate
        events_ok = all(
            (r.get("verification") or {}).get("ok", False)
            for r in g(results, "case3", "runs", default=[])
            if r.get("finished")
        )
        add(
            "throughput >= 3x the faster peer, every transition written",
            f"{best['tasks_per_s']:,}/s vs {name} {rate:,}/s = {ratio:.2f}x;"
            f" 2 events per task verified: {fmt(events_ok)}",
            ratio >= 3 and events_ok,
        )
    else:
        add("throughput >= 3x the faster peer, every transition written", "not measured", None)

    # lateness at 1000/s
    late = lateness_at(g(results, "case4", "rates", default=[]), 1000)
    if late:
        p99, mx = late["ms"]["p99"], late["ms"]["max"]
        peer_p99 = {
            p["system"]: g(lateness_at(p.get("lateness", []), 1000), "ms", "p99")
            for p in results.get("peers", [])
        }
        lower = all(v is not None and p99 < v for v in peer_p99.values()) if peer_p99 else None
        peers_txt = ", ".join(f"{k} {fmt(v, 1)}" for k, v in peer_p99.items())
        add(
            "lateness at 1,000/s: p99 <= 25 ms",
            f"p99 {fmt(p99, 1)} ms",
            p99 is not None and p99 <= 25,
        )
        add(
            "lateness at 1,000/s: max <= 250 ms",
            f"max {fmt(mx, 1)} ms",
            mx is not None and mx <= 250,
        )
        add(
            "lateness at 1,000/s: p99 lower than both peers'",
            f"pgsched {fmt(p99, 1)} ms; {peers_txt or 'peers not measured'}",
            lower,
        )
    # 10M in under 3 minutes
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
                "quick mode: projected, not measured" if quick else "projected",
            )
    # one at a time
    single = g(results, "case1", "single")
    if single:
        tx = single["one_transaction"]["rows_per_s"]
        ac = single["autocommit"]["rows_per_s"]
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
    # claim path bytes
    fr1 = g(results, "case1", "sizes", "hot_fraction")
    fr2 = g(results, "case5", "after_work", "hot_fraction")
    fractions = [f for f in (fr1, fr2) if f is not None]
    if fractions:
        tasks = g(results, "case1", "sizes", "task_rows")
        add(
            "claim path <= 1% of bytes",
            f"tasks_hot + indexes = {fmt((fr1 or 0) * 100, 4)}% right after scheduling"
            f" {fmt(tasks)} tasks; {fmt((fr2 or 0) * 100, 4)}% after the backlog runs",
            max(fractions) <= 0.01,
        )
    # engine transactions
    ages = engine_xact_ages(results)
    if ages:
        worst = max(ages, key=lambda x: x[1])
        add(
            "engine transactions never open more than a few seconds (<= 5 s)",
            f"max {worst[1]:.3f} s ({worst[0]}), over {len(ages)} sampled runs",
            worst[1] <= 5.0,
        )
    return out


def cpu_per_task(r: dict[str, Any]) -> float | None:
    w = g(r, "cpu_us_per_task", "workers")
    p = g(r, "cpu_us_per_task", "postgres")
    return None if w is None or p is None else w + p


def median_of(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def engine_xact_ages(results: dict[str, Any]) -> list[tuple[str, float]]:
    ages: list[tuple[str, float]] = []

    def take(label: str, r: dict[str, Any] | None) -> None:
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
    take("case 6 (under the held transaction)", g(results, "case6"))
    return ages


# --------------------------------------------------------------------------------------
# plots


def plots(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    colors = {"pgsched": "#1f77b4", "procrastinate": "#d62728", "PGQueuer": "#2ca02c"}

    # throughput against backlog size
    series = {"pgsched": g(results, "case2", "points", default=[])}
    for p in results.get("peers", []):
        series[p["system"]] = g(p, "backlog", "points", default=[])
    if any(series.values()):
        sizes = sorted({pt["backlog"] for pts in series.values() for pt in pts})
        pos = {s: i for i, s in enumerate(sizes)}
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, pts in series.items():
            pts = [pt for pt in pts if pt.get("median_tasks_per_s")]
            if not pts:
                continue
            xs = [pos[pt["backlog"]] for pt in pts]
            ys = [pt["median_tasks_per_s"] for pt in pts]
            ax.plot(xs, ys, marker="o", label=name, color=colors.get(name))
            for pt in pts:
                for r in pt.get("runs", []):
                    if r.get("tasks_per_s"):
                        ax.scatter(
                            pos[pt["backlog"]],
                            r["tasks_per_s"],
                            s=12,
                            alpha=0.4,
                            color=colors.get(name),
                        )
        ax.set_xticks(range(len(sizes)), [count_label(s) for s in sizes])
        ax.set_xlabel("future tasks already scheduled (cold backlog)")
        ax.set_ylabel("no-op tasks/s, one worker process (median; dots: runs)")
        ax.set_yscale("log")
        ax.set_title("Throughput against backlog size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "throughput_vs_backlog.png", dpi=110)
        plt.close(fig)
        made.append("throughput_vs_backlog.png")

    # lateness CDF per system
    curves: list[tuple[str, dict[str, Any], str]] = []
    for r in g(results, "case4", "rates", default=[]):
        curves.append(("pgsched", r, "-" if r["rate_per_s"] >= 1000 else ":"))
    promo = results.get("case4_promotion") or g(results, "case4", "promotion")
    if promo:
        curves.append(("pgsched", promo, "--"))
    for p in results.get("peers", []):
        for r in p.get("lateness", []):
            curves.append((p["system"], r, "-" if r["rate_per_s"] >= 1000 else ":"))
    curves = [c for c in curves if c[1].get("cdf")]
    if curves:
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for name, r, style in curves:
            pts = r["cdf"]
            xs = [max(v, 0.01) for v, _ in pts]
            ys = [f for _, f in pts]
            label = f"{name} {r['rate_per_s']:,.0f}/s"
            if r is promo:
                label += " via promotion"
            if r.get("default_poll"):
                label += " (default 5 s poll)"
                style = "-."
            ax.step(xs, ys, where="post", linestyle=style, label=label, color=colors.get(name))
        ax.set_xscale("log")
        ax.set_xlabel("lateness: start - due time (ms, log)")
        ax.set_ylabel("fraction of tasks started")
        ax.axvline(25, color="grey", linewidth=0.8, linestyle="--")
        ax.axvline(250, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title("Lateness CDF per system (25 ms and 250 ms marked)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(out / "lateness_cdf.png", dpi=110)
        plt.close(fig)
        made.append("lateness_cdf.png")

    # unhealthy timeline
    c6 = results.get("case6")
    if c6 and g(c6, "probe", "windows"):
        fig, ax = plt.subplots(figsize=(8, 4.2))
        w = c6["probe"]["windows"]
        ax.plot([x["t"] for x in w], [x["p99"] for x in w], label="claim probe p99 (5 s windows)")
        lw = c6.get("lateness_windows", [])
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
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper left")
        ax.set_title(f"Unhealthy database: {c6['rate_per_s']}/s while a transaction is held open")
        fig.tight_layout()
        fig.savefig(out / "unhealthy.png", dpi=110)
        plt.close(fig)
        made.append("unhealthy.png")
    return made


# --------------------------------------------------------------------------------------
# stdout table


def summary_table(results: dict[str, Any]) -> str:
    rows = [
        [t["target"], t["figure"], {True: "MET", False: "NOT MET", None: "?"}[t["met"]]]
        for t in results.get("targets", [])
    ]
    widths = [
        max(len(str(r[i])) for r in [*rows, ["target", "figure", "status"]]) for i in range(3)
    ]
    widths[1] = min(widths[1], 90)
    lines = ["", "=" * 100, "pgsched benchmark suite: targets", "=" * 100]
    lines.append(
        "  ".join(h.ljust(w) for h, w in zip(["target", "figure", "status"], widths, strict=True))
    )
    for r in rows:
        lines.append("  ".join(str(c)[:w].ljust(w) for c, w in zip(r, widths, strict=True)))
    lines.append("")
    lines.append(
        "system          throughput (best)        lateness 1000/s p99 / max      backlog ratio"
    )
    systems = [
        (
            "pgsched",
            g(results, "case3", "best"),
            lateness_at(g(results, "case4", "rates", default=[]), 1000),
            g(results, "case2", "flatness"),
        )
    ]
    for p in results.get("peers", []):
        pts = g(p, "backlog", "points", default=[])
        systems.append(
            (
                p["system"],
                g(p, "throughput", "best"),
                lateness_at(p.get("lateness", []), 1000),
                pts[-1].get("ratio_to_empty") if pts else None,
            )
        )
    for name, best, late, ratio in systems:
        tp = f"{best['tasks_per_s']:,}/s" if best else "–"
        lt = f"{fmt(g(late, 'ms', 'p99'), 1)} / {fmt(g(late, 'ms', 'max'), 1)} ms" if late else "–"
        lines.append(f"{name:15s} {tp:24s} {lt:30s} {fmt(ratio, 3)}")
    lines.append("=" * 100)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# RESULTS.md


def markdown(results: dict[str, Any], plot_files: list[str]) -> str:
    m = results.get("machine", {})
    pkgs = m.get("packages", {})
    plan = results.get("plan", {})
    quick = plan.get("quick")
    md: list[str] = []
    md.append("# pgsched benchmark results" + (" (quick mode)" if quick else ""))
    md.append("")
    md.append(
        f"Command: `{results.get('command')}` — started {results.get('started_at')}, took"
        f" {fmt(results.get('total_s', 0) / 60, 1)} min. Mode: **{'quick (CI sizes)' if quick else 'full'}**."
    )
    if results.get("size_note"):
        md.append("")
        md.append(f"**Sizes:** {results['size_note']}")
    md.append("")
    md.append("## Machine and software")
    md.append("")
    md.append(
        table(
            [
                ["CPU", f"{m.get('nproc')} cores ({m.get('cpu_model')})"],
                ["memory", f"{m.get('memory_gib')} GiB"],
                ["kernel", m.get("kernel")],
                ["Postgres", g(results, "server", "version", default="?").split(" on ")[0]],
                ["Python", m.get("python")],
                ["packages", ", ".join(f"{k} {v}" for k, v in pkgs.items())],
                [
                    "pgsched commit",
                    f"{m.get('git_commit', '')[:12]}"
                    + (" (engine files modified)" if m.get("engine_files_modified") else ""),
                ],
                [
                    "load average (1, 5, 15 min)",
                    f"at start {results.get('loadavg_start')}, at end {results.get('loadavg_end')}",
                ],
            ],
            ["", ""],
        )
    )
    md.append("")
    md.append(
        "The machine is shared with other work (test runs): the load average above says how"
        " much. Every figure is from one run of the suite on it; treat differences of ~10–20 %"
        " as noise."
    )
    md.append("")
    md.append("### Postgres settings (a throwaway, durable cluster started by the suite)")
    md.append("")
    why = results.get("server_settings_why", {})
    md.append(
        table(
            [[f"`{k}`", f"`{v['value']}`", v["why"]] for k, v in why.items()],
            ["setting", "value", "why"],
        )
    )
    md.append("")
    md.append("Everything else is at the server's defaults (autovacuum on, default naptime 1 min).")
    md.append("")

    md.append("## Targets")
    md.append("")
    md.append(
        table(
            [
                [
                    t["target"],
                    t["figure"],
                    {True: "**met**", False: "**not met**", None: "not measured"}[t["met"]]
                    + (f" ({t['note']})" if t.get("note") else ""),
                ]
                for t in results.get("targets", [])
            ],
            ["target", "figure", "status"],
        )
    )
    md.append("")
    if results.get("errors"):
        md.append(
            "**Stages that failed:** "
            + "; ".join(f"{k}: {v}" for k, v in results["errors"].items())
        )
        md.append("")

    # case 1
    c1 = results.get("case1")
    if c1:
        md.append("## Case 1 — scheduling")
        md.append("")
        b = c1["bulk"]
        md.append(
            f"**Bulk:** {b['rows']:,} future tasks due over 365 days (from +25 h, so all cold),"
            f" raw `pgsched.schedule_tasks` with binary arrays, {b['chunk_size']:,} rows per call,"
            f" {b['connections']} connections in parallel: **{b['wall_s']:.1f} s, {b['rows_per_s']:,} rows/s**"
            f" ({b['rows_per_s_per_connection']:,} rows/s per busy connection)."
        )
        md.append("")
        s = c1["sizes"]
        rels = s["relations"]
        md.append(f"**On disk** after `VACUUM ANALYZE` ({s['task_rows']:,} tasks):")
        md.append("")
        md.append(
            table(
                [
                    [
                        n,
                        fmt(r["rows"]),
                        fbytes(r["heap_bytes"]),
                        fbytes(r["indexes_bytes"]),
                        fbytes(r["total_bytes"]),
                    ]
                    for n, r in rels.items()
                ]
                + [["**all**", fmt(s["task_rows"]), "", "", f"**{fbytes(s['total_bytes'])}**"]],
                ["relation", "rows", "heap", "indexes", "total"],
            )
        )
        md.append("")
        md.append(
            f"**{s['bytes_per_task']:.0f} bytes per task** (tasks, indexes, idempotency keys and events; scheduling writes no events)."
        )
        md.append("")
        g1 = c1["single"]
        cl = c1.get("commit_latency", {})
        md.append(
            f"**One at a time** ({g1['calls']:,} calls of `pgsched.schedule_task` from one connection):"
        )
        md.append("")
        rows = [
            [
                "autocommit (each call its own transaction)",
                f"{g1['autocommit']['rows_per_s']:,}/s",
                f"{g1['autocommit']['ms_per_call']} ms",
            ],
            [
                "in one transaction",
                f"{g1['one_transaction']['rows_per_s']:,}/s",
                f"{g1['one_transaction']['ms_per_call']} ms",
            ],
        ]
        md.append(table(rows, ["mode", "rate", "per call"]))
        md.append("")
        if cl:
            c = cl["ms"]
            md.append(
                f"**Commit latency of this disk:** a one-row autocommit INSERT takes p50 {c['p50']} ms,"
                f" p99 {c['p99']} ms (n={c['n']}) — so one connection can commit at most"
                f" ~{cl['commits_per_s_one_connection']:,} times a second; autocommit scheduling is bounded by it."
            )
            fs = c1.get("pg_test_fsync", {})
            if fs.get("fdatasync"):
                md.append(
                    f" `pg_test_fsync` (the server's `wal_sync_method` is fdatasync): one 8 kB write +"
                    f" fdatasync = {fs['fdatasync']['usecs_per_op']} µs ({fs['fdatasync']['ops_per_s']:,.0f} ops/s)."
                )
            md.append("")

    # case 2
    c2 = results.get("case2")
    if c2:
        md.append("## Case 2 — backlog flatness")
        md.append("")
        w = c2["worker"]
        md.append(
            f"{c2['tasks_per_run']:,} no-op tasks due now, one `pgsched worker --app benchmarks.noop_app:app"
            f" --lanes normal --batch-size {w['batch_size']} --concurrency {w['concurrency']}` process;"
            f" each point run {c2['repeats']}×, median reported. Throughput = completions / (first claim →"
            f" last completion), from `pgsched.task_events`."
        )
        md.append("")
        rows = []
        for p in c2["points"]:
            runs = ", ".join(fmt(r.get("tasks_per_s")) for r in p["runs"])
            rows.append(
                [
                    count_label(p["backlog"]) if p["backlog"] else "0",
                    fmt(p["cold_tasks_present"]),
                    runs,
                    f"**{fmt(p['median_tasks_per_s'])}**",
                    fmt(p.get("ratio_to_empty"), 3),
                ]
            )
        md.append(
            table(
                rows,
                ["backlog", "cold tasks present", "runs (tasks/s)", "median", "ratio to empty"],
            )
        )
        md.append("")
        md.append(f"**Flatness: {fmt(c2.get('flatness'), 3)}** (target ≥ 0.9).")
        md.append("")
        ctl = c2.get("control")
        if ctl:
            cache = ctl.get("buffer_cache") or {}
            held = (
                f" ({cache['used']:,} of {cache['total']:,} shared buffers in use)"
                if cache.get("total")
                else ""
            )
            md.append(
                "**Control:** the same drain in a second database with no backlog at all, run right"
                f" after the largest point, while the buffer cache is still full of its pages{held}:"
                f" runs {', '.join(fmt(r.get('tasks_per_s')) for r in ctl['runs'])} tasks/s, median"
                f" **{fmt(ctl['median_tasks_per_s'])}** = {fmt(ctl.get('ratio_to_empty'), 3)} of the"
                f" empty run. Against this control the largest backlog runs at"
                f" **{fmt(ctl.get('largest_to_control'), 3)}**."
            )
            md.append("")
        cpu_rows = []
        for p in c2["points"]:
            costs = [cpu_per_task(r) for r in p["runs"] if cpu_per_task(r) is not None]
            other = [
                g(r, "cpu", "other_cores")
                for r in p["runs"]
                if g(r, "cpu", "other_cores") is not None
            ]
            cpu_rows.append(
                [
                    count_label(p["backlog"]) if p["backlog"] else "0",
                    ", ".join(f"{c:,.0f}" for c in costs),
                    fmt(median_of(costs), 0),
                    ", ".join(f"{o:.2f}" for o in other),
                ]
            )
        md.append(
            "The machine is shared, so throughput also moves with whatever else runs. CPU time per task"
            " (worker process + Postgres, from /proc) depends much less on the neighbours; if the backlog"
            " cost the claim path anything it would show here:"
        )
        md.append("")
        md.append(
            table(
                cpu_rows,
                [
                    "backlog",
                    "CPU µs per task (runs)",
                    "median",
                    "other processes' cores during the runs",
                ],
            )
        )
        md.append("")
        if "throughput_vs_backlog.png" in plot_files:
            md.append("![throughput against backlog size](plots/throughput_vs_backlog.png)")
            md.append("")

    # case 3
    c3 = results.get("case3")
    if c3:
        md.append("## Case 3 — throughput")
        md.append("")
        md.append(
            "No-op tasks end to end: scheduled due now (bulk), claimed, executed, completed, two"
            " events written per task (QUEUED→PROCESSING, PROCESSING→COMPLETED — verified per task)."
            " Empty cold tier. CPU in cores over the run (clients = the worker processes)."
        )
        md.append("")
        rows = []
        for r in c3["runs"]:
            v = r.get("verification") or {}
            rows.append(
                [
                    r["processes"],
                    r["batch_size"],
                    r["concurrency"],
                    f"{fmt(r['tasks_per_s'])}",
                    fmt(r.get("steady_median_per_s")),
                    g(r, "cpu", "clients_cores"),
                    g(r, "cpu", "postgres_cores"),
                    g(r, "cpu", "other_cores"),
                    g(r, "cpu_us_per_task", "workers"),
                    g(r, "cpu_us_per_task", "postgres"),
                    fmt(v.get("ok")),
                    fmt(g(r, "engine_xacts", "max_xact_age_s"), 2),
                ]
            )
        md.append(
            table(
                rows,
                [
                    "procs",
                    "batch",
                    "conc.",
                    "tasks/s",
                    "steady median/s",
                    "worker cores",
                    "pg cores",
                    "other cores",
                    "worker µs/task",
                    "pg µs/task",
                    "2 events/task",
                    "max xact s",
                ],
            )
        )
        md.append("")
        best = c3.get("best")
        if best:
            md.append(
                f"**Best: {best['tasks_per_s']:,} tasks/s** with {best['processes']} worker process(es), batch {best['batch_size']}, concurrency {best['concurrency']}."
            )
            md.append("")
        cost = c3.get("statement_cost")
        if cost:
            md.append(
                f"**What the hot path costs Postgres** ({cost['tasks']:,} tasks claimed and completed"
                f" {cost['batch']} at a time from one connection, no worker; wall time per task, each"
                " statement its own commit). The transition trigger writes both task_events rows and"
                " checks each transition; it was disabled for the middle run only, to price it:"
            )
            md.append("")
            md.append(
                table(
                    [
                        [mode, v["claim_us"], v["finish_us"], f"**{v['total_us']}**"]
                        for mode, v in cost["modes"].items()
                    ],
                    ["run", "claim µs/task", "completion µs/task", "total µs/task"],
                )
            )
            md.append("")

    # case 4
    c4 = results.get("case4")
    if c4:
        md.append("## Case 4 — lateness")
        md.append("")
        md.append(
            "Tasks due at exact 1/rate spacing, scheduled in advance (due within 15 min: QUEUED +"
            " NOTIFY), one worker process (batch/concurrency below). Lateness = claim time −"
            " due time, `pgsched.task_runs.started_at − scheduled_for`, both by the database clock."
        )
        md.append("")
        rows = []
        for label, r in [(f"{fmt(r['rate_per_s'])}/s", r) for r in c4.get("rates", [])] + [
            (f"step {fmt(r['rate_per_s'])}/s", r) for r in c4.get("steps", [])
        ]:
            ms = r["ms"]
            rows.append(
                [
                    label,
                    f"{r['duration_s']:g}",
                    f"{r['started']:,}/{r['tasks']:,}",
                    ms["p50"],
                    ms["p95"],
                    ms["p99"],
                    ms["p99_9"],
                    ms["max"],
                    fmt(r.get("sustained")) if "sustained" in r else "",
                    g(r, "cpu", "clients_cores"),
                    g(r, "cpu", "postgres_cores"),
                    g(r, "cpu", "other_cores"),
                    r.get("commit_p50_ms_before", "–"),
                ]
            )
        md.append(
            table(
                rows,
                [
                    "rate",
                    "s",
                    "started",
                    "p50 ms",
                    "p95",
                    "p99",
                    "p99.9",
                    "max",
                    "sustained",
                    "worker cores",
                    "pg cores",
                    "other cores",
                    "commit ms before",
                ],
            )
        )
        md.append("")
        first = (c4.get("rates") or [{}])[0]
        md.append(
            f"Worker: batch {first.get('batch_size')}, concurrency {first.get('concurrency')}. **Highest rate sustained: {fmt(c4.get('max_sustained_rate'))}/s** ({c4.get('sustained_rule')}; stepped {', '.join(fmt(r['rate_per_s']) for r in c4.get('steps', []))})."
        )
        md.append("")
        pr = results.get("case4_promotion") or c4.get("promotion")
        if pr:
            ms = pr["ms"]
            md.append(
                f"**Out of the cold tier:** {pr['tasks']:,} tasks at {pr['rate_per_s']}/s due beyond a hot window"
                f" reduced to {pr['hot_window_s']} s, beside {fmt(pr.get('cold_backlog'))} future tasks already cold (due beyond 25 h)"
                f" ({pr['went_cold']:,} went cold; {pr['promoted_events']:,} PENDING→QUEUED events),"
                f" `pgsched scheduler --promotion-interval 5` promoting: lateness p50 {ms['p50']} ms, p95 {ms['p95']},"
                f" p99 {ms['p99']}, p99.9 {ms['p99_9']}, max {ms['max']} ms."
            )
            sw = pr.get("sweep_ms", {})
            busy = [s for s in pr.get("sweeps", []) if s["promoted"]]
            if busy:
                md[-1] += (
                    f" {len(busy)} promotion sweeps moved rows ({sum(s['promoted'] for s in busy):,} rows,"
                    f" {sum(s['chunks'] for s in busy)} chunks of ≤ 10,000): per sweep p50 {sw.get('p50')} ms, max {sw.get('max')} ms"
                    " (from the scheduler's log)."
                )
            md.append("")
        if "lateness_cdf.png" in plot_files:
            md.append("![lateness CDF](plots/lateness_cdf.png)")
            md.append("")

    # case 5
    c5 = results.get("case5")
    if c5 or c1:
        md.append("## Case 5 — what the claim path touches")
        md.append("")
        s = g(results, "case1", "sizes")
        if s:
            md.append(
                f"Right after scheduling {s['task_rows']:,} tasks (after VACUUM): tasks_hot + its indexes ="
                f" {fbytes(s['hot_bytes'])} of {fbytes(s['total_bytes'])} = **{s['hot_fraction'] * 100:.4f} %**."
            )
        aw = g(c5, "after_work")
        if aw:
            st = aw.get("tasks_hot_stats", {})
            md.append(
                f" After the backlog runs pushed {fmt(g(results, 'case2', 'tasks_per_run'))} × {fmt(g(results, 'case2', 'repeats'))} tasks through it"
                f" (as the worker left it, no VACUUM): {fbytes(aw['hot_bytes'])} of {fbytes(aw['total_bytes'])} ="
                f" **{aw['hot_fraction'] * 100:.4f} %** (n_dead_tup {fmt(st.get('n_dead_tup'))}, autovacuums {fmt(st.get('autovacuum_count'))})."
            )
        pc = g(c5, "promotion_chunk")
        if pc:
            md.append("")
            md.append("")
            md.append(
                "**Promotion chunks** out of this cold tier (`pgsched.task_promote_due(k, now() + 30 days)`,"
                " each rolled back; first pass, then again with the pages cached): "
                + ", ".join(
                    f"{c['chunk']:,} rows {f['ms']:,.0f} / {c['ms']:,.0f} ms"
                    for f, c in zip(pc.get("first_pass", pc["runs"]), pc["runs"], strict=True)
                )
                + ". The sweep promotes in chunks of 10,000."
            )
        md.append("")

    # case 6
    c6 = results.get("case6")
    if c6:
        p = c6["probe"]
        md.append("## Case 6 — unhealthy database")
        md.append("")
        md.append(
            f"{c6['rate_per_s']} tasks/s (due now) through one worker process; after {c6['before_s']:g} s another session"
            f" holds a REPEATABLE READ transaction (with an xid) open for {c6['hold_s']:g} s, then commits; watched for"
            f" {c6['after_s']:g} s more. Claim latency: {p['what']}."
        )
        md.append("")
        rows = [
            [
                "claim probe p50 / p99 / max (ms)",
                f"{p['before_ms']['p50']} / {p['before_ms']['p99']} / {p['before_ms']['max']}",
                f"{p['during_ms']['p50']} / {p['during_ms']['p99']} / {p['during_ms']['max']}",
                f"{p['after_ms']['p50']} / {p['after_ms']['p99']} / {p['after_ms']['max']}",
            ],
            [
                "lateness p50 / p99 / max (ms)",
                f"{g(c6, 'lateness_before_ms', 'p50')} / {g(c6, 'lateness_before_ms', 'p99')} / {g(c6, 'lateness_before_ms', 'max')}",
                f"{g(c6, 'lateness_during_ms', 'p50')} / {g(c6, 'lateness_during_ms', 'p99')} / {g(c6, 'lateness_during_ms', 'max')}",
                "",
            ],
        ]
        md.append(table(rows, ["", "before", "while held", "after the commit"]))
        md.append("")
        lw = p.get("last_window_of_hold") or {}
        md.append(
            f"The claim p99 in the last 5 s of the hold: {lw.get('p99')} ms. tasks_hot dead tuples peaked at"
            f" {fmt(g(c6, 'tasks_hot', 'n_dead_tup_peak'))} ({fbytes(g(c6, 'tasks_hot', 'bytes_peak'))});"
            f" **p99 back to normal (≤ {p['normal_threshold_ms']} ms) {fmt(p['back_to_normal_after_commit_s'], 1)} s after the commit**;"
            f" first autovacuum of tasks_hot after the commit: {fmt(g(c6, 'tasks_hot', 'first_autovacuum_after_commit_s'), 1)} s."
            f" The worker's own oldest transaction during all of it: **{g(c6, 'engine_xacts', 'max_xact_age_s')} s**"
            f" ({g(c6, 'engine_xacts', 'samples')} samples of pg_stat_activity)."
        )
        md.append("")
        if "unhealthy.png" in plot_files:
            md.append("![unhealthy database timeline](plots/unhealthy.png)")
            md.append("")
        md.append("**What to watch:**")
        md.append("")
        for w in c6.get("watch", []):
            md.append(f"- {w['what']}: `{w['sql']}`")
        md.append("")
    ages = engine_xact_ages(results)
    if ages:
        md.append(
            f"**Engine transaction ages** (pg_stat_activity sampled every 0.5 s for the worker processes' backends"
            f" in every pgsched run): max {max(a for _, a in ages):.3f} s over {len(ages)} runs."
        )
        md.append("")

    # peers
    if results.get("peers"):
        md.append("## Peers, side by side")
        md.append("")
        md.append(
            "Same server, separate databases, same no-op handler (an `async def` that returns),"
            " one worker process unless stated, throughput and lateness from each system's own"
            " log tables by the database clock."
        )
        md.append("")
        rows = []
        for name, tp, late1k, late100, flat in [
            (
                "pgsched",
                g(results, "case3", "best"),
                lateness_at(g(results, "case4", "rates", default=[]), 1000),
                lateness_at(g(results, "case4", "rates", default=[]), 100),
                g(results, "case2", "points", default=[]),
            )
        ] + [
            (
                p["system"] + " " + p["version"],
                g(p, "throughput", "best"),
                lateness_at(p.get("lateness", []), 1000),
                lateness_at(p.get("lateness", []), 100),
                g(p, "backlog", "points", default=[]),
            )
            for p in results.get("peers", [])
        ]:
            flat_txt = "; ".join(
                f"{count_label(pt['backlog']) if pt['backlog'] else '0'}: {fmt(pt['median_tasks_per_s'])}/s"
                for pt in flat
            )
            rows.append(
                [
                    name,
                    f"{fmt(g(tp, 'tasks_per_s'))}/s ({g(tp, 'setting') or (str(g(tp, 'processes')) + ' proc, batch ' + str(g(tp, 'batch_size')) + ', conc. ' + str(g(tp, 'concurrency')))})"
                    if tp
                    else "–",
                    f"{fmt(g(late100, 'ms', 'p99'), 1)} / {fmt(g(late100, 'ms', 'max'), 1)}",
                    f"{fmt(g(late1k, 'ms', 'p99'), 1)} / {fmt(g(late1k, 'ms', 'max'), 1)}",
                    flat_txt,
                ]
            )
        md.append(
            table(
                rows,
                [
                    "system",
                    "throughput, best (setting)",
                    "lateness 100/s p99 / max ms",
                    "lateness 1,000/s p99 / max ms",
                    "one worker, by backlog (median)",
                ],
            )
        )
        md.append("")
        for p in results["peers"]:
            md.append(f"### {p['system']} {p['version']}")
            md.append("")
            rows = []
            for r in g(p, "throughput", "runs", default=[]):
                rows.append(
                    [
                        r["setting"],
                        fmt(r.get("tasks_per_s")),
                        fmt(r.get("completed")),
                        "" if r.get("finished") else f"capped at {r.get('capped_after_s')} s",
                        g(r, "cpu", "clients_cores"),
                        g(r, "cpu", "postgres_cores"),
                        g(r, "audit", "log_rows_per_job"),
                        fmt(g(r, "xacts", "max_xact_age_s"), 2),
                    ]
                )
            md.append(
                table(
                    rows,
                    [
                        "setting (throughput)",
                        "tasks/s",
                        "completed",
                        "",
                        "worker cores",
                        "pg cores",
                        "log rows/job",
                        "max xact s",
                    ],
                )
            )
            md.append("")
            rows = []
            for pt in g(p, "backlog", "points", default=[]):
                rows.append(
                    [
                        count_label(pt["backlog"]) if pt["backlog"] else "0",
                        ", ".join(
                            fmt(r.get("tasks_per_s")) + ("" if r.get("finished") else "*")
                            for r in pt["runs"]
                        ),
                        fmt(pt["median_tasks_per_s"]),
                        fmt(pt.get("ratio_to_empty"), 3),
                        fmt(pt.get("backlog_rows_per_s")),
                    ]
                )
            md.append(
                table(
                    rows,
                    [
                        "backlog",
                        "runs (tasks/s; * = capped)",
                        "median",
                        "ratio",
                        "backlog scheduled at (rows/s)",
                    ],
                )
            )
            md.append("")
            md.append(f"Cases 2 and 4 used: {p.get('chosen_setting')}.")
            md.append("")
            rows = []
            for r in p.get("lateness", []):
                ms = r["ms"]
                rows.append(
                    [
                        f"{fmt(r['rate_per_s'])}/s"
                        + (" default poll" if r.get("default_poll") else ""),
                        f"{r['started']:,}/{r['tasks']:,}",
                        ms["p50"],
                        ms["p95"],
                        ms["p99"],
                        ms["p99_9"],
                        ms["max"],
                        r.get("commit_p50_ms_before", "–"),
                    ]
                )
            md.append(
                table(
                    rows,
                    [
                        "lateness",
                        "started",
                        "p50 ms",
                        "p95",
                        "p99",
                        "p99.9",
                        "max",
                        "commit ms before",
                    ],
                )
            )
            md.append("")
            for r in p.get("lateness", []):
                if r.get("stall_snapshot"):
                    md.append(
                        f"At {fmt(r['rate_per_s'])}/s the workers fell behind; their sessions when the"
                        " wait ended: "
                        + "; ".join(
                            f"`{' | '.join(str(x) for x in row)}`"
                            for row in r["stall_snapshot"][:6]
                        )
                    )
                    md.append("")
        md.append("### Fairness notes")
        md.append("")
        for line in FAIRNESS:
            md.append(f"- {line}")
        md.append("")
    found = findings(results)
    if found:
        md.append("## Findings: engine bottlenecks, with evidence and the suggested change")
        md.append("")
        for i, text in enumerate(found, 1):
            md.append(f"{i}. {text}")
            md.append("")
    md.append("## Reproduce")
    md.append("")
    md.append(
        "```sh\n.venv/bin/pip install -e '.[bench]'\n.venv/bin/python -m benchmarks            # full (this report)\n.venv/bin/python -m benchmarks --quick    # CI sizes, a few minutes\n```"
    )
    md.append("")
    md.append(
        "Raw figures of every run: `results.json` next to the generated RESULTS.md (`--out`)."
    )
    md.append("")
    return "\n".join(md)


# Measured while this suite was being built, on the engine before 657aaa6 (cached generic
# plans in the hot path, unbounded outcome flushes); that commit fixed both. Kept as the
# evidence behind findings 2 and 3.
BEFORE_657AAA6 = (
    "Before 657aaa6 the same no-op drain swung between ~170 and ~4,700 tasks/s from run to run"
    " (20,000 tasks, one worker, batch 100 or 500, 200k cold tasks), with stalls of 45 s and more;"
    " pg_stat_statements showed `task_finish_many` at ~0.9 s per call (10 s at worst) and"
    " `task_heartbeat_many` at ~0.3 s, and pg_stat_activity up to 11,000 tasks PROCESSING at once."
    " The cached generic plan estimated `unnest()` of the batch at 10 rows and drove the UPDATE"
    " from `tasks_hot_lease_idx` (every PROCESSING row), rescanning the batch for each one, and"
    " `OutcomeBuffer.flush` wrote everything pending in one statement, so a slow flush made the"
    " next one bigger."
)


def findings(results: dict[str, Any]) -> list[str]:
    """The bottlenecks the figures point at, each with its evidence and a suggested change."""
    out: list[str] = []
    pc = g(results, "case5", "promotion_chunk", "runs", default=[])
    now_txt = (
        " At the measured commit the suite's promotion chunks out of the 10M cold tier take "
        + ", ".join(f"{r['chunk']:,} rows {r['ms']:,.0f} ms" for r in pc)
        + " (case 5, second pass)."
        if pc
        else ""
    )
    out.append(
        "**Fixed during this work (657aaa6, 8c0ca14): hot-path statements planned for ten rows,"
        " and a quadratic trigger.** "
        + BEFORE_657AAA6
        + " The statement-level transition trigger (`task_record_transitions`) joined `old_rows`"
        " and `new_rows` for a LIMIT 1 legality probe; the LIMIT made the planner nest the loops,"
        " and a legal statement (always) ran the probe to the end: auto_explain on a 2,000-row"
        " promotion showed `Rows Removed by Join Filter: 4000000` and 2.3 s in that probe;"
        " promotion chunks of 1,000 / 2,000 / 4,000 rows took 0.5 / 1.9 / 7.5 s. 657aaa6 gives the"
        " trigger and `task_claim_many` / `task_finish_many` / `task_heartbeat_many`"
        " `plan_cache_mode = force_custom_plan` and bounds each completion statement to"
        " `flush_size` rows; 8c0ca14 makes the probe an aggregate over a hash join (no LIMIT),"
        " which is linear whatever the planner guesses (a 10,000-row promotion: 26 s before, 0.6 s"
        " after)." + now_txt
    )
    out.append(
        "**Fixed during this work (8fe98e9): a claim could hash the whole hot tier.**"
        " `task_claim_many`'s UPDATE joins the ids its CTE locked back to tasks_hot. Once the"
        " partitioned parent had been analyzed (as after a large backlog load: its statistics say"
        " ids are unique) the planner estimated that join at max_tasks rows and preferred hashing"
        " every queued row of tasks_hot (a sequential scan per claim) to max_tasks primary-key"
        " probes; without parent statistics it guessed many more rows and kept the nested loop."
        " So the same claim was fast in one database and slow in another: auto_explain showed 14 ms"
        " instead of 7 ms for a claim of 500 with 27,500 rows queued, and claim + completion from"
        " one connection cost 43 µs per task beside a 10M cold tier against 37 µs without (claim"
        " alone 24 vs 17 µs). This was the backlog-flatness gap of an interrupted suite run at da7a026 (0.854; its"
        " control, no backlog with the cache just as full, ran at 1.004 of empty). 0009 pins the"
        " nested loop for the claim (its trigger keeps its hash joins)."
    )
    runs = [r for p in g(results, "case2", "points", default=[]) for r in p.get("runs", [])] + g(
        results, "case3", "runs", default=[]
    )
    over = [
        (g(r, "engine_xacts", "max_processing"), r.get("concurrency"), r.get("processes", 1))
        for r in runs
        if g(r, "engine_xacts", "max_processing") is not None and r.get("concurrency")
    ]
    # A lane holds at most `concurrency` running tasks plus the outcomes waiting to be
    # written: claims pause while flush_size (500, the worker's default) of them wait.
    flush_size = 500
    worst = max(over, key=lambda x: x[0] / ((x[1] + 2 * flush_size) * x[2]), default=None)
    if worst and worst[0] > (worst[1] + 2 * flush_size) * worst[2]:
        out.append(
            "**A lane held more tasks than its bound** (pgsched/worker/lanes.py,"
            " pgsched/worker/outcomes.py): at most concurrency running plus 2 x flush_size outcomes"
            f" waiting per process, but this run saw {worst[0]:,} tasks PROCESSING at once with"
            f" {worst[2]} worker process(es) of concurrency {worst[1]}. Look for a flush that"
            " does not release the lanes."
        )
    elif worst:
        out.append(
            "**The tasks a worker holds are bounded** (fixed during this work, 73916e0): a lane"
            " pauses its claims while flush_size outcomes wait to be written, so a process holds"
            " at most concurrency running tasks plus two flush_size's worth of finished ones (one"
            " statement being written, fewer than flush_size waiting); before, a slow"
            " flush let a lane claim again and again (up to 11,000 PROCESSING seen, see above)."
            f" This run's most PROCESSING at once: {worst[0]:,} with {worst[2]} process(es) of"
            f" concurrency {worst[1]}."
        )
    c2 = g(results, "case2", "points", default=[])
    if len(c2) >= 2:
        costs = [
            (
                p["backlog"],
                median_of([cpu_per_task(r) for r in p["runs"] if cpu_per_task(r) is not None]),
            )
            for p in c2
        ]
        costs = [(b, c) for b, c in costs if c]
        ctl = g(results, "case2", "control")
        control_txt = " No engine change suggested."
        if ctl and ctl.get("ratio_to_empty") and ctl.get("largest_to_control"):
            control_txt = (
                " The control (case 2): the same drain with no backlog at all, in a second database"
                " on the same server while the buffer cache is full of the backlog's pages, runs at"
                f" {fmt(ctl['ratio_to_empty'], 3)} of the empty figure, and the backlog database at"
                f" {fmt(ctl['largest_to_control'], 3)} of the control."
                + (
                    " What the cache holds does not slow the claim path, and neither does the cold"
                    " tier."
                    if ctl["largest_to_control"] >= 0.95
                    else " The gap belongs to the backlog database, not to the cache: compare the"
                    " hot-path plans in the two databases (auto_explain with"
                    " log_nested_statements, as for 8fe98e9 below)."
                )
            )
        if len(costs) >= 2:
            (_, c0), (b1, c1) = costs[0], costs[-1]
            others = [
                g(r, "cpu", "other_cores")
                for p in c2
                for r in p["runs"]
                if g(r, "cpu", "other_cores") is not None
            ]
            quiet = max(others) < 0.2
            out.append(
                f"**Backlog flatness is {fmt(g(results, 'case2', 'flatness'), 3)} by throughput; the cold"
                " tier is not on the claim path.** CPU per task (worker + Postgres) went from"
                f" {c0:,.0f} µs with an empty cold tier to {c1:,.0f} µs with {count_label(b1)} future tasks"
                f" ({c0 / c1:.2f} by that measure), while other processes on the 2 cores used"
                f" {min(others):.2f}–{max(others):.2f} cores"
                + (
                    ": the machine was quiet, so the rise is the server's own."
                    if quiet
                    else "; CPU time per task itself rises under such contention."
                )
                + " The statements of the hot path never reach"
                " tasks_cold: EXPLAIN on the 10M database shows the claim, the completion UPDATE and the"
                " heartbeat pruned to tasks_hot by their status predicates, and the completion's"
                " stale-report join probes the partitions only for outcomes that were refused."
                + control_txt
            )
    out.extend(throughput_finding(results))
    bulk = g(results, "case1", "bulk")
    if bulk:
        per_conn = bulk.get("rows_per_s_per_connection")
        out.append(
            f"**Bulk scheduling: {bulk['rows']:,} tasks in {bulk['wall_s']:.0f} s ({bulk['rows_per_s']:,} rows/s,"
            f" {per_conn:,} rows/s per busy connection).** Both connections are server-CPU bound in"
            " `schedule_tasks` / `task_insert_many` (the client's share of a call is a few percent:"
            " `call_client_cpu_s_summed` in results.json) and there are only 2 cores; 3 minutes for"
            " 10M needs ~56k rows/s"
            + (
                ", so the target holds with room to spare."
                if bulk["rows_per_s"] >= 56_000
                else ". benchmarks/bench_schedule.py's profile (full run) breaks a chunk down by"
                " statement and tries variants of the functions."
            )
        )
    single = g(results, "case1", "single")
    if single:
        cl = g(results, "case1", "commit_latency", "ms", "p50")
        out.append(
            f"**One at a time:** {single['one_transaction']['ms_per_call']} ms per call inside a transaction"
            f" ({single['one_transaction']['rows_per_s']:,}/s); autocommit {single['autocommit']['ms_per_call']} ms"
            f" ({single['autocommit']['rows_per_s']:,}/s): the commit adds"
            f" {single['autocommit']['ms_per_call'] - single['one_transaction']['ms_per_call']:.2f} ms"
            f" to every call (a bare one-row autocommit INSERT takes ~{cl} ms here), since each call"
            " waits for its own WAL flush. One connection calling in autocommit is bound by the"
            " commit, not by the function; inside a transaction (or several calls per commit, or"
            " `schedule_tasks`) the function alone counts."
        )
    ages = engine_xact_ages(results)
    if ages:
        label, age = max(ages, key=lambda x: x[1])
        head = (
            "**The engine's transactions stay short:**"
            if age <= 5.0
            else "**An engine transaction stayed open for more than 5 s:**"
        )
        out.append(
            f"{head} the oldest seen in any pgsched run was {age:.3f} s ({label}); no engine"
            " transaction, active or idle, was older (pg_stat_activity every 0.5 s). Under the"
            " held-open transaction of case 6 see that case for the worker's own figure."
        )
    out.append(
        "**PGQueuer's psycopg driver adds up to ~1 s to a pick when no NOTIFY arrives** (not an engine"
        " finding, but it shapes its lateness): `PsycopgDriver.watch_notifies` waits in"
        " `connection.notifies(timeout=1.0)`, which holds the connection, and every query of that"
        " QueueManager waits for it. Its asyncpg driver does not, but asyncpg is not in the bench extra."
    )
    return out


def throughput_finding(results: dict[str, Any]) -> list[str]:
    """Where the best throughput run spent its CPU, against the budget 3x the faster peer
    would leave on this machine."""
    best = g(results, "case3", "best")
    peers_best = [
        (p["system"], g(p, "throughput", "best", "tasks_per_s")) for p in results.get("peers", [])
    ]
    peers_best = [(n, v) for n, v in peers_best if v]
    cpu = (best or {}).get("cpu") or {}
    per_task = (best or {}).get("cpu_us_per_task") or {}
    nproc = g(results, "machine", "nproc")
    if not (best and peers_best and cpu and per_task and nproc):
        return []
    name, rate = max(peers_best, key=lambda x: x[1])
    goal = 3 * rate
    budget = nproc / goal * 1e6
    used = cpu["clients_cores"] + cpu["postgres_cores"]
    spent = per_task["workers"] + per_task["postgres"]
    modes = g(results, "case3", "statement_cost", "modes", default={})
    trigger = (
        f" The statement probe above prices the transition trigger (both task_events rows and the"
        f" legality check) at {modes['trigger']['total_us'] - modes['no trigger']['total_us']:.1f}"
        f" µs of the {modes['trigger']['total_us']} µs a claim and a completion take per task."
        if "trigger" in modes and "no trigger" in modes
        else ""
    )
    return [
        f"**Throughput is bound by the {nproc} cores, not by waiting.** The best run"
        f" ({best['tasks_per_s']:,}/s, {best['processes']} process(es)) used {cpu['clients_cores']}"
        f" worker + {cpu['postgres_cores']} Postgres = {used:.2f} of {nproc} cores: {spent:.0f} µs of"
        f" CPU per task ({per_task['workers']} worker, {per_task['postgres']} Postgres). Three times"
        f" {name}'s {rate:,}/s is {goal:,}/s, which leaves {budget:.0f} µs of CPU per task for"
        " worker and server together on this machine: less than Postgres alone spends on a task's"
        " claim, completion and two events now." + trigger + " Reaching it here would mean"
        " dropping work the engine promises (the per-transition events, the per-task lease and"
        " compare-and-set); on a machine with more cores the same CPU per task scales with"
        " worker processes."
    ]


FAIRNESS = [
    "**All three write a durable log per transition; they differ in what and how.** pgsched writes 2"
    " `task_events` rows per task (claim, completion: with worker, attempt, due time) and keeps the task"
    " row; procrastinate writes 3 `procrastinate_events` rows (deferred, started, succeeded; + scheduled"
    " for jobs with `schedule_at`) from row triggers and keeps the job row; PGQueuer writes 3 `pgqueuer_log`"
    " rows (queued, picked, successful) and deletes the job row when done. So the comparison is not"
    ' "audit vs no audit"; the log rows per job are in the tables above.',
    "**Batching differs by design.** procrastinate fetches one job per statement and finishes each job in"
    " its own transaction (a commit, so a WAL flush, per fetch and per finish); PGQueuer dequeues in batches"
    " and buffers completions; pgsched claims and completes in batches. On a disk with a multi-millisecond"
    " commit (case 1) per-job commits dominate.",
    "**Scheduling for later.** procrastinate notices a scheduled job only by polling"
    " (`fetch_job_polling_interval`, default 5 s; its NOTIFY fires at insert time): we ran it at 0.1 s, and"
    " once at the default. PGQueuer sleeps until the next `execute_after` (at least 0.1 s between polls)."
    " pgsched sleeps until the lane's next due time by the database clock, woken by NOTIFY.",
    "**Backlog.** Both peers pick by (priority, id) and filter the due time row by row, so future jobs"
    " inserted earlier sit in front of every due job in their index; pgsched keeps future work in another"
    " partition. Peers were measured up to 1M future jobs (10M would take their batch APIs too long for the"
    " time budget); a run that did not finish within its cap is reported as its rate until the cap (*).",
    "**Settings.** procrastinate: PsycopgConnector pool max_size = concurrency + 2 (≤ 52), concurrency swept"
    " (30 is its documentation's example). PGQueuer: psycopg async driver, one autocommit connection per"
    " QueueManager, batch_size swept (10 is its default; its docs say raise it for short jobs), several"
    " QueueManagers per process as its own benchmark does. Durable tables (PGQueuer's default durability)."
    " Cases 2 and 4 use each system's best one-process setting from case 3.",
    "**PGQueuer with the psycopg driver** (as asked) waits up to 1 s for its notify watcher before each"
    " query when no NOTIFY arrives (see Findings); its docs say its asyncpg driver is ~1.7x faster.",
    "**Same measurement.** Throughput = completions / (first start → last completion) from each system's"
    " own log; lateness = start (claim/fetch/pick time, transaction clock) − due time, both by the"
    " database clock.",
]


# --------------------------------------------------------------------------------------


def write(results: dict[str, Any], out: Path, publish: bool = False) -> None:
    results["targets"] = targets(results)
    out.mkdir(parents=True, exist_ok=True)
    made = plots(results, out / "plots")
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "RESULTS.md").write_text(markdown(results, made))
    print(summary_table(results))
    print(
        f"wrote {out / 'results.json'}, {out / 'RESULTS.md'} and {len(made)} plot(s) in {out / 'plots'}"
    )
    if publish and out.resolve() != BENCH:
        (BENCH / "plots").mkdir(exist_ok=True)
        for name in made:
            shutil.copy(out / "plots" / name, BENCH / "plots" / name)
        shutil.copy(out / "RESULTS.md", BENCH / "RESULTS.md")
        print(f"published {BENCH / 'RESULTS.md'} and {BENCH / 'plots'}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report")
    parser.add_argument("results", type=Path, help="a results.json written by the suite")
    parser.add_argument("--publish", action="store_true", help="also copy to benchmarks/")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    write(results, args.results.parent, args.publish)


if __name__ == "__main__":
    main()
