"""Faults of a cluster, under load, with real workers on a distributed database: a shard
moved between the worker nodes while tasks are scheduled and run. Nothing lost (every task
scheduled completes), nothing run twice (exactly one claim and one completion each, in the
events). The lateness during the move is printed beside the lateness outside it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.citus_cluster import CitusCluster, dbname_of
from tests.support.worker_helpers import Workers, run_cli, running_workers, wait_until

APP = "tests.apps.distributed_app:app"
TENANTS = [f"tenant-{i:02d}" for i in range(12)]


@pytest.fixture
def dist_dsn(citus: CitusCluster) -> Iterator[str]:
    dsn = citus.new_database("pgsched_faults")
    done = run_cli({**os.environ, "PGSCHED_DSN": dsn}, "migrate", "--distributed")
    assert done.returncode == 0, done
    yield dsn
    citus.drop_database(dbname_of(dsn))


class Producer(threading.Thread):
    """Schedules `per_tick` echo tasks due now, spread over the tenants, every `tick` s."""

    def __init__(self, dsn: str, per_tick: int = 6, tick: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.dsn, self.per_tick, self.tick = dsn, per_tick, tick
        self.ids: list[int] = []
        self.errors: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        n = 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.is_set():
                owners = [TENANTS[(n + i) % len(TENANTS)] for i in range(self.per_tick)]
                n += self.per_tick
                try:
                    rows = conn.execute(
                        "SELECT task_id FROM pgsched.schedule_tasks("
                        "array_fill('echo'::text, ARRAY[%s]), tenant_ids => %s)",
                        (self.per_tick, owners),
                    ).fetchall()
                    self.ids += [int(r[0]) for r in rows]
                except psycopg.Error as exc:
                    self.errors.append(str(exc).splitlines()[0])
                time.sleep(self.tick)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)


def run_once_each(conn: psycopg.Connection, ids: list[int]) -> dict[str, int]:
    """How the scheduled tasks ended: counts of the expected and of anything else."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FROM pgsched.tasks"
        " WHERE id = ANY(%s)",
        (ids,),
    ).fetchone()
    odd = conn.execute(
        "SELECT count(*) FROM (SELECT task_id FROM pgsched.task_events WHERE task_id = ANY(%s)"
        " GROUP BY task_id HAVING count(*) <> 2"
        " OR count(*) FILTER (WHERE to_status = 'PROCESSING') <> 1"
        " OR count(*) FILTER (WHERE to_status = 'COMPLETED') <> 1) AS x",
        (ids,),
    ).fetchone()
    assert row is not None and odd is not None
    return {"completed": int(row[0]), "rows": int(row[1]), "not_once": int(odd[0])}


def lateness_ms(
    conn: psycopg.Connection, ids: list[int], start: Any, end: Any, inside: bool
) -> dict[str, float]:
    rows = conn.execute(
        "SELECT extract(epoch FROM occurred_at - scheduled_for) * 1000 FROM pgsched.task_events"
        " WHERE task_id = ANY(%s) AND to_status = 'PROCESSING'"
        " AND (scheduled_for BETWEEN %s AND %s) = %s",
        (ids, start, end, inside),
    ).fetchall()
    values = sorted(float(r[0]) for r in rows)
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(values[len(values) // 2], 1),
        "p99": round(values[min(len(values) - 1, int(len(values) * 0.99))], 1),
        "max": round(values[-1], 1),
    }


def test_a_shard_moved_while_workers_run_loses_nothing_and_runs_nothing_twice(
    citus: CitusCluster, dist_dsn: str, tmp_path: Path
) -> None:
    with running_workers({**os.environ, "PGSCHED_DSN": dist_dsn}, tmp_path) as workers:
        _shard_move(citus, dist_dsn, workers)


def _shard_move(citus: CitusCluster, dsn: str, workers: Workers) -> None:
    for name in ("a", "b"):
        workers.start(name, app=APP, lease=5.0, poll=0.2).wait_running()
    producer = Producer(dsn)
    producer.start()
    with psycopg.connect(dsn, autocommit=True) as conn:
        time.sleep(4)
        # The shard holding the first tenant, with every shard colocated with it.
        row = conn.execute(
            "SELECT s.shardid, s.nodeport FROM citus_shards AS s"
            " WHERE s.table_name = 'pgsched.tasks'::regclass"
            " AND s.shardid = get_shard_id_for_distribution_column('pgsched.tasks', %s::text)",
            (TENANTS[0],),
        ).fetchone()
        assert row is not None
        shard, source = int(row[0]), int(row[1])
        target = next(w.port for w in citus.workers if w.port != source)
        started = conn.execute("SELECT clock_timestamp()").fetchone()
        conn.execute(
            "SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s,"
            " shard_transfer_mode => 'block_writes')",
            (shard, source, target),
        )
        ended = conn.execute("SELECT clock_timestamp()").fetchone()
        assert started is not None and ended is not None
        placed = conn.execute(
            "SELECT nodeport FROM citus_shards WHERE shardid = %s", (shard,)
        ).fetchone()
        assert placed == (target,)
        time.sleep(4)
        producer.stop()
        assert producer.errors == [], producer.errors
        ids = producer.ids
        assert len(ids) > 200
        wait_until(
            lambda: run_once_each(conn, ids)["completed"] == len(ids),
            90,
            what="every scheduled task to complete",
        )
        outcome = run_once_each(conn, ids)
        assert outcome == {"completed": len(ids), "rows": len(ids), "not_once": 0}
        during = lateness_ms(conn, ids, started[0], ended[0], True)
        outside = lateness_ms(conn, ids, started[0], ended[0], False)
        move_s = (ended[0] - started[0]).total_seconds()
        print(
            f"\nshard move: {move_s:.2f} s; {len(ids)} tasks, 0 lost, 0 run twice;"
            f" claim lateness due during the move {during}, outside it {outside}"
        )
        for w in workers.started:
            assert " ERROR " not in w.log(), w.log()
