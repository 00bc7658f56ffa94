"""Case 6, an unhealthy database: another session holds a transaction open under load.

A steady load (plan.unhealthy_rate tasks/s, due now, scheduled by a producer thread in
batches every 100 ms) runs through one `pgsched worker --lanes normal` process. After a
baseline, a separate session opens a REPEATABLE READ transaction, takes an xid and a
snapshot, and sits idle in it for 5 minutes (quick: 30 s): VACUUM can then remove nothing
that died after it began, so every claimed and finished task leaves dead tuples in
tasks_hot (and dead entries in its claim index) that the claims must step over.

Measured throughout:
  * claim latency: a probe connection times pgsched.task_claim_many('NORMAL', 5, ...) on the
    loaded lane every 200 ms, in a transaction it rolls back (so it never takes work away);
    p50 / p99 per 5 s window;
  * lateness (claim time - due time, pgsched.task_runs) per 10 s window;
  * tasks_hot: live and dead tuples, size, autovacuum runs (pg_stat_user_tables), once a second;
  * the oldest transaction of the worker's own backends (pg_stat_activity), twice a second.

Reported: baseline p99, p99 during the hold, and how long after the COMMIT the p99 is back
to normal (every later 5 s window within max(2 x baseline p99, baseline p99 + 2 ms)).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from benchmarks import measure
from benchmarks.measure import XactSampler, note, one, percentiles, step
from benchmarks.suite import Plan

WINDOW_S = 5.0
LATENESS_WINDOW_S = 10.0


class Producer(threading.Thread):
    """Schedules `rate` no-op tasks per second, due now, in 10 batches a second."""

    def __init__(self, dsn: str, rate: int) -> None:
        super().__init__(name="unhealthy-producer", daemon=True)
        self.dsn = dsn
        self.per_tick = max(1, rate // 10)
        self.scheduled = 0
        self.behind_ticks = 0
        self.first_id: int | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        sql = "SELECT min(task_id) FROM pgsched.schedule_tasks(task_types => %b::text[])"
        with psycopg.connect(self.dsn, autocommit=True, application_name="bench-producer") as conn:
            tick = time.monotonic()
            while not self._stop_event.is_set():
                first = one(conn, sql, (["noop"] * self.per_tick,))
                if self.first_id is None:
                    self.first_id = int(first)
                self.scheduled += self.per_tick
                tick += 0.1
                pause = tick - time.monotonic()
                if pause > 0:
                    self._stop_event.wait(pause)
                else:
                    self.behind_ticks += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


class Probe(threading.Thread):
    """Times the claim statement on the loaded lane, rolled back, every 200 ms."""

    def __init__(self, dsn: str, t0: float) -> None:
        super().__init__(name="unhealthy-probe", daemon=True)
        self.dsn = dsn
        self.t0 = t0
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        sql = (
            "SELECT count(*) FROM pgsched.task_claim_many("
            "'NORMAL', 5, 'bench-probe', interval '30 seconds')"
        )
        with psycopg.connect(self.dsn, application_name="bench-probe") as conn:
            while not self._stop_event.wait(0.2):
                started = time.perf_counter()
                try:
                    conn.execute(sql).fetchone()
                    self.samples.append((started - self.t0, (time.perf_counter() - started) * 1000))
                except psycopg.Error:
                    self.errors += 1
                conn.rollback()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


class Monitor(threading.Thread):
    """Once a second: tasks_hot's tuples and size, autovacuum, the holder's age."""

    def __init__(self, dsn: str, t0: float) -> None:
        super().__init__(name="unhealthy-monitor", daemon=True)
        self.dsn = dsn
        self.t0 = t0
        self.rows: list[dict[str, Any]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.wait(1.0):
                row = conn.execute(
                    "SELECT s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.last_autovacuum,"
                    " pg_total_relation_size('pgsched.tasks_hot'),"
                    " (SELECT max(extract(EPOCH FROM clock_timestamp() - xact_start))"
                    "    FROM pg_stat_activity WHERE application_name = 'bench-holder')"
                    " FROM pg_stat_user_tables s"
                    " WHERE s.schemaname = 'pgsched' AND s.relname = 'tasks_hot'"
                ).fetchone()
                if row is None:
                    continue
                live, dead, autovacuums, last_av, size, holder_age = row
                self.rows.append(
                    {
                        "t": round(time.monotonic() - self.t0, 1),
                        "n_live_tup": int(live),
                        "n_dead_tup": int(dead),
                        "autovacuum_count": int(autovacuums),
                        "last_autovacuum": last_av.isoformat() if last_av else None,
                        "tasks_hot_bytes": int(size),
                        "holder_open_s": round(holder_age, 1) if holder_age else None,
                    }
                )

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def windows(samples: list[tuple[float, float]], width: float) -> list[dict[str, Any]]:
    buckets: dict[int, list[float]] = {}
    for t, v in samples:
        buckets.setdefault(int(t // width), []).append(v)
    out = []
    for k in sorted(buckets):
        p = percentiles(buckets[k])
        out.append({"t": k * width, "n": p["n"], "p50": p["p50"], "p99": p["p99"], "max": p["max"]})
    return out


def run(dsn: str, plan: Plan) -> dict[str, Any]:
    measure.clear_worked_tasks(dsn)
    name = "bench-unhealthy"
    worker = measure.pgsched_workers(dsn, name, 1, 500, 500).start()
    worker.wait_listening(dsn)
    t0 = time.monotonic()
    producer = Producer(dsn, plan.unhealthy_rate)
    probe = Probe(dsn, t0)
    monitor = Monitor(dsn, t0)
    sampler = XactSampler(dsn, name)
    for thread in (producer, probe, monitor, sampler):
        thread.start()
    hold_begin = hold_end = None
    try:
        step(
            f"case 6: baseline: {plan.unhealthy_rate}/s through one worker for"
            f" {plan.unhealthy_before_s:g}s, probing the claim every 200 ms"
        )
        _sleep(plan.unhealthy_before_s, worker)
        step(f"case 6: another session holds a transaction open for {plan.unhealthy_hold_s:g}s")
        with psycopg.connect(dsn, application_name="bench-holder") as holder:
            holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            holder.execute("SELECT txid_current(), count(*) FROM pgsched.tasks_hot").fetchone()
            hold_begin = time.monotonic() - t0
            _sleep(plan.unhealthy_hold_s, worker, every=30, monitor=monitor)
            holder.commit()
            hold_end = time.monotonic() - t0
        step(f"case 6: transaction ended; watching recovery for {plan.unhealthy_after_s:g}s")
        _sleep(plan.unhealthy_after_s, worker, every=30, monitor=monitor)
    finally:
        producer.stop()
        probe.stop()
        monitor.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            measure.wait_until(
                lambda: (lambda c: (c == 0, c))(
                    one(conn, "SELECT count(*) FROM pgsched.tasks_hot")
                ),
                60.0,
            )
        xacts = sampler.stop()
        codes = worker.stop(dsn=dsn)
    total_s = time.monotonic() - t0
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT extract(EPOCH FROM started_at - scheduled_for)::float8 * 1000,"
            " extract(EPOCH FROM started_at)::float8 FROM pgsched.task_runs"
            " WHERE task_id >= %s AND attempt = 1",
            (producer.first_id or 0,),
        ).fetchall()
        epoch_t0 = float(one(conn, "SELECT extract(EPOCH FROM clock_timestamp())::float8")) - (
            time.monotonic() - t0
        )
    lateness = [(started - epoch_t0, late) for late, started in rows]
    probe_windows = windows(probe.samples, WINDOW_S)
    late_windows = windows(lateness, LATENESS_WINDOW_S)
    assert hold_begin is not None and hold_end is not None
    before = [v for t, v in probe.samples if 5.0 <= t < hold_begin]
    during = [v for t, v in probe.samples if hold_begin <= t < hold_end]
    after = [v for t, v in probe.samples if t >= hold_end]
    base = percentiles(before)
    threshold = max(2 * (base["p99"] or 0), (base["p99"] or 0) + 2.0)
    recovered_at = None
    for i, w in enumerate(probe_windows):
        if w["t"] + WINDOW_S <= hold_end:
            continue
        if all(x["p99"] <= threshold for x in probe_windows[i:]):
            recovered_at = w["t"]
            break
    last_hold_window = [w for w in probe_windows if w["t"] + WINDOW_S <= hold_end][-1:]
    dead_peak = max((r["n_dead_tup"] for r in monitor.rows), default=None)
    autovacuum_after = [r for r in monitor.rows if r["t"] >= hold_end and r["autovacuum_count"] > 0]
    first_av_after = None
    av_at_end = next((r["autovacuum_count"] for r in monitor.rows if r["t"] >= hold_end), None)
    for r in autovacuum_after:
        if av_at_end is not None and r["autovacuum_count"] > av_at_end:
            first_av_after = round(r["t"] - hold_end, 1)
            break
    result: dict[str, Any] = {
        "rate_per_s": plan.unhealthy_rate,
        "before_s": plan.unhealthy_before_s,
        "hold_s": plan.unhealthy_hold_s,
        "after_s": plan.unhealthy_after_s,
        "hold_began_at_s": round(hold_begin, 1),
        "hold_ended_at_s": round(hold_end, 1),
        "total_s": round(total_s, 1),
        "scheduled": producer.scheduled,
        "producer_ticks_behind": producer.behind_ticks,
        "probe": {
            "what": "pgsched.task_claim_many('NORMAL', 5, ...) on the loaded lane, rolled back,"
            " every 200 ms from its own connection",
            "errors": probe.errors,
            "before_ms": base,
            "during_ms": percentiles(during),
            "after_ms": percentiles(after),
            "last_window_of_hold": last_hold_window[0] if last_hold_window else None,
            "windows": probe_windows,
            "normal_threshold_ms": round(threshold, 3),
            "back_to_normal_after_commit_s": (
                round(max(recovered_at - hold_end, 0.0), 1) if recovered_at is not None else None
            ),
        },
        "lateness_windows": late_windows,
        "lateness_during_ms": percentiles([v for t, v in lateness if hold_begin <= t < hold_end]),
        "lateness_before_ms": percentiles([v for t, v in lateness if 5.0 <= t < hold_begin]),
        "tasks_hot": {
            "samples": monitor.rows,
            "n_dead_tup_peak": dead_peak,
            "bytes_peak": max((r["tasks_hot_bytes"] for r in monitor.rows), default=None),
            "first_autovacuum_after_commit_s": first_av_after,
        },
        "engine_xacts": xacts,
        "worker_exit_codes": codes,
        "worker_warnings": worker.warnings(),
    }
    worker.cleanup()
    p = result["probe"]
    note(
        f"claim probe p99: before {p['before_ms']['p99']} ms, during {p['during_ms']['p99']} ms"
        f" (last hold window {last_hold_window[0]['p99'] if last_hold_window else '-'} ms),"
        f" after {p['after_ms']['p99']} ms; back to normal"
        f" {p['back_to_normal_after_commit_s']} s after the COMMIT"
    )
    note(
        f"tasks_hot dead tuples peaked at {dead_peak:,}; first autovacuum after the COMMIT:"
        f" {first_av_after} s; the worker's oldest transaction: {xacts['max_xact_age_s']} s"
    )
    return result


def _sleep(
    seconds: float, worker: measure.Procs, every: float = 0.0, monitor: Monitor | None = None
) -> None:
    end = time.monotonic() + seconds
    last = time.monotonic()
    while (left := end - time.monotonic()) > 0:
        worker.check_alive()
        time.sleep(min(left, 1.0))
        if every and monitor is not None and time.monotonic() - last >= every and monitor.rows:
            last = time.monotonic()
            r = monitor.rows[-1]
            note(
                f"t={r['t']:.0f}s tasks_hot: {r['n_live_tup']:,} live, {r['n_dead_tup']:,} dead,"
                f" {r['tasks_hot_bytes'] / 1e6:.1f} MB, autovacuums {r['autovacuum_count']}"
            )
