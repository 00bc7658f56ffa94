"""Workers and a sweeper started as a user starts them, with `--redis`, against a real
redis-server: every task runs once, most of them claimed through Redis, and a FLUSHALL or
a Redis restart mid-run loses nothing (the workers claim from Postgres meanwhile, the
sweeper rebuilds the mirror)."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgsched.hot_tier.keys import LaneKeys
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer
from tests.support.worker_helpers import (
    PGSCHED,
    Workers,
    wait_until,
)

WAVE = 150


@pytest.fixture(autouse=True)
def plain_order_normal(conn: psycopg.Connection) -> None:
    """The hot tier serves lanes in plain priority order (fair claims are the default)."""
    conn.execute("SELECT pgsched.lane_set_fairness('NORMAL', false)")


@pytest.fixture
def sweeper(
    db_env: dict[str, str], tmp_path: Path, redis_server: RedisServer
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log_path = tmp_path / "sweeper.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [PGSCHED, "sweeper", "--redis", redis_server.url, "--redis-mirror-interval", "0.2"],
            cwd=REPO_ROOT,
            env=db_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, log_path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(log_path.read_text(errors="replace"))


def schedule_wave(conn: psycopg.Connection) -> list[int]:
    """WAVE tasks due over the next 3 seconds: most are mirrored before they fall due."""
    rows = conn.execute(
        "SELECT pgsched.schedule_task('fn_async', run_at => now() + (i %% 30) * interval '100 ms')"
        " FROM generate_series(1, %s) AS i",
        (WAVE,),
    ).fetchall()
    return [int(r[0]) for r in rows]


@pytest.mark.parametrize("fault", ["none", "flushall", "restart"])
def test_tasks_claimed_through_redis_run_once_whatever_happens_to_redis(
    conn: psycopg.Connection,
    workers: Workers,
    sweeper: tuple[subprocess.Popen[bytes], Path],
    redis_server: RedisServer,
    fault: str,
) -> None:
    _, sweeper_log = sweeper
    started = [
        workers.start(f"w{n}", extra=["--redis", redis_server.url, "--concurrency", "8"])
        for n in range(2)
    ]
    for w in started:
        w.wait_running()
    keys = LaneKeys("pgsched", "NORMAL")

    def mirrored() -> bool:
        with redis_server.client() as c:
            return bool(c.exists(keys.meta))

    wait_until(mirrored, 15, what="the sweeper to build the mirror")
    ids = schedule_wave(conn)
    time.sleep(1.5)
    if fault == "flushall":
        redis_server.flushall()
    elif fault == "restart":
        redis_server.kill()
        redis_server.start()
    ids += schedule_wave(conn)

    def all_completed() -> bool:
        row = conn.execute(
            "SELECT count(*) FROM pgsched.tasks WHERE id = ANY(%s) AND status = 'COMPLETED'",
            (ids,),
        ).fetchone()
        return bool(row and row[0] == len(ids))

    wait_until(all_completed, 60, what=f"{len(ids)} tasks to complete")
    runs = conn.execute(
        "SELECT count(*), count(DISTINCT task_id) FROM public.worker_test_log"
        " WHERE task_id = ANY(%s) AND step = 'execute'",
        (ids,),
    ).fetchone()
    assert runs == (len(ids), len(ids)), "a task ran twice, or not at all"
    claims = conn.execute(
        "SELECT count(*) FROM pgsched.task_events"
        " WHERE task_id = ANY(%s) AND to_status = 'PROCESSING'",
        (ids,),
    ).fetchone()
    assert claims == (len(ids),)
    for w in started:
        w.send(signal.SIGTERM)
    for w in started:
        assert w.wait_exit(30) == 0
    by_id = sum(int(m) for w in started for m in re.findall(r"(\d+) claimed by id", w.log()))
    assert by_id > 0, "no task was claimed through Redis"
    if fault != "none":
        # Rebuilt after the fault: the run id in the meta key is the live server's.
        def rebuilt() -> bool:
            with redis_server.client() as c:
                return c.hget(keys.meta, "run_id") == redis_server.run_id()

        wait_until(rebuilt, 15, what="the mirror to be rebuilt")
        assert "rebuilding it" in sweeper_log.read_text()
