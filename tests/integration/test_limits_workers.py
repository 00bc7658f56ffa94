"""Limits across real worker processes, set with the `pgsched limits` CLI as an operator
would: a concurrency limit holds at exactly its value across four workers, a rate limit
holds across them, a change applies without restarting anyone, and bad input is refused
(exit 2) with nothing written. Also the Python API's refusal."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from pgsched import App, InvalidLimitError
from tests.support.worker_helpers import Workers, run_cli, wait_until

WORKER_FLAGS = ["--concurrency", "16", "--batch-size", "20"]


def start_four(workers: Workers) -> None:
    started = [workers.start(f"w{n}", poll=0.5, extra=WORKER_FLAGS) for n in range(4)]
    for worker in started:
        worker.wait_running()


def schedule_many(conn: psycopg.Connection, task_type: str, n: int, payload: str) -> None:
    conn.execute(
        "SELECT count(*) FROM pgsched.schedule_tasks("
        " task_types => array_fill(%s::text, ARRAY[%s]),"
        " payloads => array_fill(%s::jsonb, ARRAY[%s]))",
        (task_type, n, payload, n),
    )


def count(conn: psycopg.Connection, task_type: str, status: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pgsched.tasks"
        " WHERE task_type = %s AND status = %s::pgsched.task_status",
        (task_type, status),
    ).fetchone()
    assert row is not None
    return int(row[0])


class ProcessingSampler:
    """Samples the PROCESSING count of a task type from its own connection, every 10 ms."""

    def __init__(self, dsn: str, task_type: str) -> None:
        self.dsn = dsn
        self.task_type = task_type
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                self.samples.append(count(conn, self.task_type, "PROCESSING"))
                time.sleep(0.01)

    def __enter__(self) -> ProcessingSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


def most_overlapping(conn: psycopg.Connection, task_type: str) -> int:
    """The most handler runs (start..end in worker_test_log) of a type that overlapped."""
    row = conn.execute(
        "WITH runs AS ("
        "  SELECT l.task_id, min(l.at) FILTER (WHERE l.step = 'start') AS s,"
        "         max(l.at) FILTER (WHERE l.step = 'end') AS e"
        "    FROM public.worker_test_log AS l JOIN pgsched.tasks AS t ON t.id = l.task_id"
        "   WHERE t.task_type = %s GROUP BY l.task_id)"
        " SELECT max((SELECT count(*) FROM runs AS o WHERE o.s <= r.s AND o.e > r.s))"
        " FROM runs AS r",
        (task_type,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_concurrency_limit_of_five_holds_across_four_workers(
    workers: Workers, conn: psycopg.Connection, db_env: dict[str, str], db_dsn: str
) -> None:
    done = run_cli(db_env, "limits", "set", "--type", "sleepy", "--max-processing", "5")
    assert done.returncode == 0, done.stderr
    assert "at most 5 processing" in done.stdout
    schedule_many(conn, "sleepy", 60, '{"seconds": 0.3}')
    with ProcessingSampler(db_dsn, "sleepy") as sampler:
        start_four(workers)
        wait_until(
            lambda: count(conn, "sleepy", "COMPLETED") == 60, 90, what="all 60 sleepy completed"
        )
    assert max(sampler.samples) == 5, sorted(set(sampler.samples))
    assert most_overlapping(conn, "sleepy") <= 5
    # Every worker took part: the limit is shared, not one worker's.
    claimed_by = conn.execute(
        "SELECT count(DISTINCT worker) FROM public.worker_test_log WHERE step = 'start'"
    ).fetchone()
    assert claimed_by is not None and claimed_by[0] >= 2


def test_rate_limit_holds_across_four_workers(
    workers: Workers, conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    rate = 20
    done = run_cli(db_env, "limits", "set", "--type", "fn_async", "--rate", f"{rate}/s")
    assert done.returncode == 0, done.stderr
    schedule_many(conn, "fn_async", 100, "{}")
    start_four(workers)
    wait_until(
        lambda: count(conn, "fn_async", "COMPLETED") == 100, 60, what="all 100 fn_async completed"
    )
    claimed = [
        r[0]
        for r in conn.execute(
            "SELECT extract(epoch FROM last_run_at)::float8 FROM pgsched.tasks"
            " WHERE task_type = 'fn_async' ORDER BY last_run_at"
        )
    ]
    burst = max(rate // 10, 1)
    # The bucket: a burst, then `rate` per second; never more in any one-second window.
    for n, at in enumerate(claimed):
        in_window = sum(1 for other in claimed[n:] if other < at + 1.0)
        assert in_window <= rate + burst, (n, in_window)
    achieved = (len(claimed) - burst) / (claimed[-1] - claimed[0])
    assert rate * 0.7 <= achieved <= rate * 1.05, achieved


def test_a_limit_changes_live(
    workers: Workers, conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    assert (
        run_cli(db_env, "limits", "set", "--type", "fn_async", "--max-processing", "0").returncode
        == 0
    )
    start_four(workers)
    schedule_many(conn, "fn_async", 10, "{}")
    schedule_many(conn, "fn_sync", 5, "{}")
    # Other types run; the paused one stays due.
    wait_until(lambda: count(conn, "fn_sync", "COMPLETED") == 5, 30, what="fn_sync completed")
    time.sleep(1.0)
    assert count(conn, "fn_async", "QUEUED") == 10
    done = run_cli(db_env, "limits", "set", "--type", "fn_async", "--max-processing", "10")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: count(conn, "fn_async", "COMPLETED") == 10, 30, what="fn_async completed")
    listed = run_cli(db_env, "limits", "list")
    assert listed.returncode == 0, listed.stderr
    assert "fn_async" in listed.stdout and "fair claims: HIGH on, NORMAL on" in listed.stdout
    cleared = run_cli(db_env, "limits", "clear", "--type", "fn_async")
    assert cleared.returncode == 0 and "no limit" in cleared.stdout
    assert conn.execute("SELECT count(*) FROM pgsched.task_limits").fetchone() == (0,)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--type", "x", "--max-processing", "-1"], "max_processing"),
        (["--type", "x", "--rate", "5/hour"], "--rate"),
        (["--type", "x", "--rate", "0/s"], "rate"),
        (["--type", "x"], "max_processing or rate"),
        (["--max-processing", "3"], "--type and --tenant"),
        (["--type", "x", "--tenant", "t", "--max-processing", "3"], "--type and --tenant"),
        (["--type", "", "--max-processing", "3"], "key"),
    ],
)
def test_cli_refuses_bad_limits(
    conn: psycopg.Connection, db_env: dict[str, str], args: list[str], field: str
) -> None:
    done = run_cli(db_env, "limits", "set", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert field in done.stderr
    assert "Traceback" not in done.stderr
    assert conn.execute("SELECT count(*) FROM pgsched.task_limits").fetchone() == (0,)


def test_cli_fairness_switch(conn: psycopg.Connection, db_env: dict[str, str]) -> None:
    assert run_cli(db_env, "limits", "fairness", "normal", "off").returncode == 0
    row = conn.execute("SELECT fairness_off_lanes::text FROM pgsched.settings").fetchone()
    assert row == ("{NORMAL}",)
    bad = run_cli(db_env, "limits", "fairness", "DEAD", "off")
    assert bad.returncode == 2 and "lane" in bad.stderr
    assert run_cli(db_env, "limits", "fairness", "NORMAL", "on").returncode == 0
    assert conn.execute("SELECT fairness_off_lanes::text FROM pgsched.settings").fetchone() == (
        "{}",
    )


def test_python_api(conn: psycopg.Connection, db_dsn: str) -> None:
    app = App(db_dsn)
    row = app.limit_set("tenant", "acme", max_processing=2, rate=600, per="minute")
    assert (row["scope"], row["key"], row["max_processing"], row["rate"]) == (
        "tenant",
        "acme",
        2,
        600,
    )
    assert [(r["key"], r["per"], r["processing"]) for r in app.limits()] == [("acme", "minute", 0)]
    with pytest.raises(InvalidLimitError, match="rate"):
        app.limit_set("tenant", "acme", rate=-5)
    assert app.limits()[0]["rate"] == 600
    assert app.limit_clear("tenant", "acme") is True
    assert app.limits() == []
