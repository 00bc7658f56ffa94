"""The metrics port of real worker and sweeper processes: /metrics scraped over HTTP and
parsed with prometheus-client's parser after real tasks ran; /healthz and /readyz."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from tests.support.metrics_helpers import (
    Scrape,
    metrics_url,
    probe,
    scrape,
    wait_probe,
    wait_scrape,
)
from tests.support.processes import Processes
from tests.support.worker_helpers import (
    Workers,
    schedule,
    statuses,
    wait_until,
)

if TYPE_CHECKING:
    from tests.conftest import PgServer

METRICS = ("--metrics-port", "0")


def test_a_worker_counts_what_its_tasks_did(conn: psycopg.Connection, workers: Workers) -> None:
    completed = [schedule(conn, "fn_async") for _ in range(3)]
    retried_then_dead = schedule(conn, "always_fails", max_attempts=2)
    refused = schedule(conn, "refuses")  # validate refuses: DEAD at once, no retry
    ids = [*completed, retried_then_dead, refused]
    worker = workers.start("metrics-1", extra=METRICS)
    base = metrics_url(worker.log)
    wait_until(
        lambda: set(statuses(conn, ids).values()) == {"COMPLETED", "FAILED"},
        30,
        what="every task to finish",
    )

    def counted() -> Scrape | None:
        got = scrape(base)
        return got if got.total("pgsched_task_outcomes_total") == 6 else None

    got = wait_until(counted, 10, what="six outcomes counted")
    outcomes = "pgsched_task_outcomes_total"
    assert got.value(outcomes, task_type="fn_async", outcome="completed", lane="NORMAL") == 3
    assert got.value(outcomes, task_type="always_fails", outcome="retried") == 1
    assert got.value(outcomes, task_type="always_fails", outcome="dead") == 1
    assert got.value(outcomes, task_type="refuses", outcome="failed") == 1
    claimed = "pgsched_tasks_claimed_total"
    assert got.value(claimed, task_type="fn_async", lane="NORMAL") == 3
    assert got.value(claimed, task_type="always_fails") == 2
    assert got.value(claimed, task_type="refuses") == 1
    # One lateness and one execution time per attempt run, in the lane's histogram.
    assert got.value("pgsched_task_lateness_seconds_count", lane="NORMAL") == 6
    assert got.value("pgsched_task_execution_seconds_count", lane="NORMAL") == 6
    assert got.value("pgsched_task_lateness_seconds_sum", lane="NORMAL") >= 0  # type: ignore[operator]
    assert got.value("pgsched_task_execution_seconds_sum", lane="NORMAL") > 0  # type: ignore[operator]
    assert got.value("pgsched_tasks_in_flight", lane="NORMAL") == 0
    # No task ids, no tenants by default; the queue depth is the sweeper leader's.
    labels = {key for sample in got.samples for key in sample.labels}
    assert not {"task_id", "id", "tenant", "tenant_id"} & labels, labels
    assert not any(name.startswith("pgsched_queue_") for name in got.names())
    assert "process_start_time_seconds" in got.names()


def test_in_flight_counts_running_tasks_and_the_tenant_label_is_opt_in(
    conn: psycopg.Connection, workers: Workers
) -> None:
    sleeping = [
        schedule(conn, "sleepy", payload='{"seconds": 30}', tenant_id=tenant)
        for tenant in ("default", "default")
    ]
    worker = workers.start("metrics-tenant", extra=[*METRICS, "--metrics-tenant-label"])
    base = metrics_url(worker.log)
    got = wait_scrape(
        base,
        lambda s: s.value("pgsched_tasks_in_flight", lane="NORMAL") == 2,
        20,
        what="two tasks in flight",
    )
    assert got.value("pgsched_tasks_claimed_total", task_type="sleepy", tenant="default") == 2
    assert statuses(conn, sleeping) == dict.fromkeys(sleeping, "PROCESSING")
    # One is cancelled while it runs: counted as cancelled, the other still in flight.
    conn.execute("SELECT pgsched.cancel_task(%s, 'not needed')", (sleeping[0],))
    got = wait_scrape(
        base,
        lambda s: s.value("pgsched_task_outcomes_total", outcome="cancelled") == 1,
        20,
        what="the cancelled task counted",
    )
    cancelled = {"task_type": "sleepy", "tenant": "default", "outcome": "cancelled"}
    assert got.value("pgsched_task_outcomes_total", **cancelled) == 1
    assert got.value("pgsched_tasks_in_flight", lane="NORMAL") == 1


def test_healthz_and_readyz_of_a_running_worker(
    conn: psycopg.Connection, workers: Workers, db_name: str, pg_server: PgServer
) -> None:
    worker = workers.start("health-1", extra=[*METRICS, "--stall-threshold", "0.5"])
    base = metrics_url(worker.log)
    worker.wait_running()
    assert probe(base, "/healthz") == (200, "ok\n")
    assert probe(base, "/readyz") == (200, "ok\n")
    assert probe(base, "/nothing")[0] == 404

    # A newer pgsched migrated the database: this worker's schema is no longer current.
    conn.execute(
        "INSERT INTO pgsched.schema_migrations (version, name, checksum)"
        " VALUES (9999, 'from_the_future', 'x')"
    )
    body = wait_probe(base, "/readyz", 503, 10)
    assert "newer pgsched" in body and "9999" in body
    assert probe(base, "/healthz")[0] == 200  # alive: a restart would not help
    conn.execute("DELETE FROM pgsched.schema_migrations WHERE version = 9999")
    wait_probe(base, "/readyz", 200, 10)

    # The database refuses connections.
    admin = pg_server.connect()
    admin.execute(
        sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(db_name))
    )
    try:
        body = wait_probe(base, "/readyz", 503, 10)
        assert body.startswith("database unreachable:"), body
    finally:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(db_name))
        )
        admin.close()
    wait_probe(base, "/readyz", 200, 10)

    # An async handler that never yields blocks the event loop: not healthy meanwhile.
    schedule(conn, "hog", payload='{"seconds": 4}')
    body = wait_probe(base, "/healthz", 503, 15)
    assert body.startswith("event loop blocked for"), body
    assert "--stall-threshold 0.5s" in body
    wait_probe(base, "/healthz", 200, 15)

    # Draining after SIGTERM: no longer ready.
    schedule(conn, "sleepy", payload='{"seconds": 3}')
    wait_until(lambda: scrape(base).value("pgsched_tasks_in_flight", lane="NORMAL") == 1, 15)
    worker.send(signal.SIGTERM)
    assert wait_probe(base, "/readyz", 503, 5) == "shutting down\n"
    assert worker.wait_exit(20) == 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_readyz_says_the_database_is_unreachable_while_a_worker_waits_for_it(
    workers: Workers, db_env: dict[str, str]
) -> None:
    workers.env = {
        **db_env,
        "PGSCHED_DSN": f"host=127.0.0.1 port={_closed_port()} user=postgres dbname=x",
    }
    worker = workers.start("waits", extra=METRICS)
    base = metrics_url(worker.log)
    worker.wait_log("cannot reach the database")
    code, body = probe(base, "/readyz")
    assert code == 503 and body.startswith("database unreachable:"), body
    assert probe(base, "/healthz") == (200, "ok\n")
    assert worker.alive()


def test_a_metrics_port_in_use_is_refused_at_start(workers: Workers, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = workers.start("clash", extra=["--metrics-port", str(port)])
        assert worker.wait_exit(20) == 2
    assert f"--metrics-port {port}: cannot listen" in worker.log()
    assert "Traceback" not in worker.log()


# -- the sweeper: queue depth on the leader only ----------------------------------------


def _start_sweeper(processes: Processes, name: str) -> tuple[int, str]:
    index = processes.start(
        name,
        "sweeper",
        "--leader-retry",
        "0.5",
        "--queue-depth-interval",
        "0.5",
        # The rescue sweep would promote the overdue PENDING task planted below.
        "--rescue-interval",
        "3600",
        *METRICS,
    )
    return index, metrics_url(lambda: processes.log(index))


def _leader(bases: list[str]) -> int:
    def one_leads() -> int | None:
        leading = [i for i, b in enumerate(bases) if scrape(b).value("pgsched_sweeper_leader")]
        return leading[0] + 1 if len(leading) == 1 else None

    return wait_until(one_leads, 20, what="one sweeper leading") - 1


def test_queue_depth_gauges_come_from_the_sweeper_leader_only(
    conn: psycopg.Connection, processes: Processes
) -> None:
    for _ in range(3):
        schedule(conn, "due")
    # Due a minute ago: the oldest due NORMAL task's age is at least that.
    conn.execute("SELECT pgsched.schedule_task('due', run_at => now() - interval '1 minute')")
    schedule(conn, "due", priority=9)
    for _ in range(2):
        conn.execute("SELECT pgsched.schedule_task('soon', run_at => now() + interval '5 min')")
    conn.execute("SELECT pgsched.schedule_task('later', run_at => now() + interval '2 hours')")
    for _ in range(4):
        conn.execute("SELECT pgsched.schedule_task('cold', run_at => now() + interval '3 days')")
    # Two in the DEAD lane.
    conn.execute("SELECT pgsched.schedule_task('doomed', priority => 1)")
    conn.execute("SELECT pgsched.schedule_task('doomed', priority => 1)")
    conn.execute(
        "SELECT pgsched.task_finish_many(array_agg(c.id), array_agg(c.lease_token),"
        " array_agg('FAILED'::text), array_agg('no'::text), array_agg(NULL::interval))"
        " FROM pgsched.task_claim_many('LOW', 10, 'test') AS c"
    )

    first, first_base = _start_sweeper(processes, "sweeper-a")
    second, second_base = _start_sweeper(processes, "sweeper-b")
    bases = [first_base, second_base]
    leader = _leader(bases)
    follower = 1 - leader

    def snapshot_of(base: str) -> Scrape | None:
        got = scrape(base)
        return got if got.value("pgsched_dead_tasks") is not None else None

    got = wait_until(lambda: snapshot_of(bases[leader]), 15, what="the leader's queue depth")
    assert got.value("pgsched_queue_due_tasks", lane="NORMAL") == 4
    assert got.value("pgsched_queue_due_tasks", lane="HIGH") == 1
    assert got.value("pgsched_queue_due_tasks", lane="LOW") == 0
    assert got.value("pgsched_queue_due_tasks", lane="BATCH") == 0
    oldest = got.value("pgsched_queue_oldest_due_age_seconds", lane="NORMAL")
    assert oldest is not None and oldest >= 60
    assert got.value("pgsched_queue_oldest_due_age_seconds", lane="LOW") == 0
    assert got.value("pgsched_queue_pending_tasks", tier="immediate") == 2
    assert got.value("pgsched_queue_pending_tasks", tier="hot") == 1
    assert got.value("pgsched_queue_pending_tasks", tier="cold") == 4
    assert got.value("pgsched_dead_tasks") == 2
    assert got.value("pgsched_overdue_pending_tasks") == 0

    # Cold work already due that no promotion moved (the rescue sweep waits an hour).
    conn.execute(
        "UPDATE pgsched.tasks SET next_run_at = now() - interval '10 minutes'"
        " WHERE id = (SELECT min(id) FROM pgsched.tasks WHERE task_type = 'cold')"
    )

    def overdue() -> Scrape | None:
        got = scrape(bases[leader])
        return got if got.value("pgsched_overdue_pending_tasks") == 1 else None

    got = wait_until(overdue, 15, what="the overdue PENDING task counted")
    age = got.value("pgsched_overdue_pending_oldest_age_seconds")
    assert age is not None and age >= 600
    # Once the cold partition was analyzed, its count is the planner's estimate: a task
    # scheduled after the ANALYZE is not in it (an exact count would read every cold row).
    conn.execute("ANALYZE pgsched.tasks_cold")
    conn.execute("SELECT pgsched.schedule_task('cold', run_at => now() + interval '4 days')")
    schedule(conn, "due", priority=9)  # marks the snapshots taken after both
    got = wait_scrape(
        bases[leader],
        lambda s: s.value("pgsched_queue_due_tasks", lane="HIGH") == 2,
        10,
        what="a snapshot after the ANALYZE",
    )
    assert got.value("pgsched_queue_pending_tasks", tier="cold") == 4
    assert conn.execute("SELECT count(*) FROM pgsched.tasks_cold").fetchone() == (5,)

    # The follower exports its leader flag, and no queue depth.
    follower_scrape = scrape(bases[follower])
    assert follower_scrape.value("pgsched_sweeper_leader") == 0
    assert not [
        n
        for n in follower_scrape.names()
        if n.startswith(("pgsched_queue_", "pgsched_dead_", "pgsched_overdue_"))
    ]

    # The leader goes: the other takes over, and its gauges appear.
    processes.proc([first, second][leader]).send_signal(signal.SIGTERM)
    processes.proc([first, second][leader]).wait(15)
    wait_until(lambda: snapshot_of(bases[follower]), 20, what="the new leader's queue depth")
    assert scrape(bases[follower]).value("pgsched_sweeper_leader") == 1
