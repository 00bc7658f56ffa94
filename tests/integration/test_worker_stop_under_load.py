"""A clean shutdown under a steady load leaves none of its tasks PROCESSING.

Real worker processes run many short tasks in three lanes while a producer keeps
scheduling more; each is stopped with SIGTERM at a different moment (in the middle of a
claim, a flush, between them). Right after it exits, no task may still be PROCESSING under
its id: what ran is written, what it claimed but had not started is released (the attempt
given back). A task left behind would wait for its lease to expire and run late, or twice.
In the end every task has run exactly once. With `--redis`, most claims go through Redis
(a pop, a claim by id, a top-up claim, a forget): more steps for a shutdown to land in.
"""

from __future__ import annotations

import contextlib
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from pgsched.hot_tier.keys import LaneKeys
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer
from tests.support.worker_helpers import PGSCHED, Workers, create_test_tables, wait_until

ROUNDS = 12
LANES = "high,normal,low"
PRIORITIES = (9, 5, 2)  # one task for each lane
PRODUCER_TICK = 0.01  # three tasks a tick: about 300 a second
# Long: a lease that expired during the test would hide a task left PROCESSING (rescued).
LEASE = 120.0


class Producer:
    """Schedules three `counted` tasks (one a lane), due `lead` seconds on, every tick until
    stopped."""

    def __init__(self, dsn: str, lead: float) -> None:
        self._dsn = dsn
        self._lead = lead
        self._stop = threading.Event()
        self.scheduled = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with psycopg.connect(self._dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    conn.execute(
                        "SELECT count(*) FROM pgsched.schedule_tasks(task_types => %s,"
                        " priorities => %s, run_ats => array_fill(now() + %s, ARRAY[%s]))",
                        (
                            ["counted"] * len(PRIORITIES),
                            list(PRIORITIES),
                            timedelta(seconds=self._lead),
                            len(PRIORITIES),
                        ),
                    )
                    self.scheduled += len(PRIORITIES)
                    self._stop.wait(PRODUCER_TICK)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.error is None, f"the producer failed: {self.error!r}"


def left_processing(conn: psycopg.Connection, worker_id: str) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM pgsched.tasks WHERE status = 'PROCESSING' AND locked_by = %s ORDER BY id",
        (worker_id,),
    ).fetchall()
    return [int(r[0]) for r in rows]


@contextmanager
def redis_sweeper(env: dict[str, str], log_path: Path, url: str) -> Iterator[None]:
    """A sweeper keeping the lanes' Redis mirror (the tasks due soon) up to date."""
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [PGSCHED, "sweeper", "--redis", url, "--redis-mirror-interval", "0.2"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("tier", ["postgres", "redis"])
def test_sigterm_under_load_leaves_none_of_its_tasks_processing(
    conn: psycopg.Connection,
    workers: Workers,
    db_dsn: str,
    db_env: dict[str, str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    tier: str,
) -> None:
    create_test_tables(conn)
    extra = ["--batch-size", "20", "--concurrency", "20", "--flush-size", "50"]
    with contextlib.ExitStack() as stack:
        lead = 0.0
        if tier == "redis":
            redis: RedisServer = request.getfixturevalue("redis_server")
            for lane in ("HIGH", "NORMAL", "LOW"):  # the hot tier serves plain order
                conn.execute("SELECT pgsched.lane_set_fairness(%s, false)", (lane,))
            stack.enter_context(redis_sweeper(db_env, tmp_path / "sweeper.log", redis.url))
            extra += ["--redis", redis.url]
            lead = 1.0  # mirrored before they fall due: claimed by id

            def mirrored() -> bool:
                with redis.client() as c:
                    return bool(c.exists(LaneKeys("pgsched", "LOW").meta))

            wait_until(mirrored, 15, what="the sweeper to build the mirror")
        stopped_clean(conn, workers, db_dsn, lead, extra)


def stopped_clean(
    conn: psycopg.Connection, workers: Workers, dsn: str, lead: float, extra: list[str]
) -> None:
    seed = random.randrange(1_000_000)
    pick = random.Random(seed)
    producer = Producer(dsn, lead).start()
    left: dict[str, list[int]] = {}
    claimed_by_id = 0
    try:
        for n in range(ROUNDS):
            # Small batches and slots: many claims (and flushes) in flight at any time.
            worker = workers.start(f"S{n}", lanes=LANES, lease=LEASE, grace=10, extra=extra)
            worker.wait_running()
            time.sleep(pick.uniform(0.0, 1.5))
            worker.send(signal.SIGTERM)
            assert worker.wait_exit(30) == 0
            stranded = left_processing(conn, worker.worker_id)
            if stranded:
                left[worker.worker_id] = stranded
            claimed_by_id += sum(int(m) for m in re.findall(r"(\d+) claimed by id", worker.log()))
    finally:
        producer.stop()
    assert not left, (
        f"tasks left PROCESSING by workers that stopped cleanly (seed {seed}): "
        + "; ".join(f"{w}: {len(ids)} ({ids[:10]})" for w, ids in left.items())
    )

    # What the stopped workers left QUEUED runs now, once.
    last = workers.start("S-last", lanes=LANES, lease=LEASE, extra=extra)
    wait_until(
        lambda: conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM pgsched.tasks"
            " WHERE task_type = 'counted' AND status <> 'COMPLETED')"
        ).fetchone()[0],
        120,
        what="every task to complete",
    )
    last.send(signal.SIGTERM)
    assert last.wait_exit(30) == 0
    row = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE runs = 1), count(*) FILTER (WHERE runs > 1)"
        "  FROM (SELECT t.id, count(l.id) AS runs FROM pgsched.tasks AS t"
        "        LEFT JOIN public.worker_test_log AS l ON l.task_id = t.id AND l.step = 'ran'"
        "        WHERE t.task_type = 'counted' GROUP BY t.id) AS r"
    ).fetchone()
    assert row is not None
    total, ran_once, ran_twice = row
    assert total == producer.scheduled
    assert (ran_once, ran_twice) == (total, 0)
    if "--redis" in extra:
        assert claimed_by_id > 0, "no task was claimed through Redis"
