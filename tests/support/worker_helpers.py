"""Shared helpers for the worker tests: real `pgsched worker` processes, polling with a
deadline, and readers for what a task went through.

Workers are started as a user starts them (the `pgsched` console script of this venv, with
`PGSCHED_DSN` in the environment) from the repository root, so `--app tests.apps.x:app`
imports. Each worker's stdout and stderr go to a file in the test's tmp_path; the logs of
every worker are printed at teardown (pytest shows them when the test failed) and appended
to the message of a `wait_until` that timed out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.support.paths import REPO_ROOT

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
APP = "tests.apps.dispatch:app"

T = TypeVar("T")

TEST_TABLES = """
CREATE TABLE IF NOT EXISTS public.worker_test_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    attempt bigint NOT NULL,
    worker text NOT NULL,
    step text NOT NULL,
    thread text NOT NULL,
    detail text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.worker_test_flags (name text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS public.worker_test_tx (task_id bigint NOT NULL, note text NOT NULL);
"""


def create_test_tables(conn: psycopg.Connection) -> None:
    """The tables the handlers of tests/apps/dispatch.py write to."""
    conn.execute(TEST_TABLES)


# -- waiting ----------------------------------------------------------------------------

_diagnostics: list[Callable[[], str]] = []


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    *,
    what: str = "condition",
    interval: float = 0.05,
) -> T:
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout`
    seconds with `what`, the last value seen and the logs of the running workers."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            logs = "\n".join(d() for d in _diagnostics)
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}; last value: {last!r}\n{logs}"
            )
        time.sleep(interval)


# -- worker processes -------------------------------------------------------------------


@dataclass
class WorkerProcess:
    worker_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    argv: list[str]
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        """The exit status; fails (with the log) if the process is still running."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.worker_id} still running {timeout}s later\n{self.log()}"
            ) from None

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        def seen() -> bool:
            if not self.alive() and text not in self.log():
                raise AssertionError(
                    f"worker {self.worker_id} exited ({self.proc.returncode}) before logging "
                    f"{text!r}\n{self.log()}"
                )
            return text in self.log()

        wait_until(seen, timeout, what=f"worker {self.worker_id} to log {text!r}")

    def wait_running(self, timeout: float = 20.0) -> None:
        """Until the worker logged that its lane loops run (after its pool opened)."""
        self.wait_log(f"worker {self.worker_id} running lanes", timeout)


class Workers:
    """Starts workers against one test database; kills whatever is left at close."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def start(
        self,
        worker_id: str,
        *,
        lanes: str = "normal",
        lease: float = 2.0,
        poll: float = 0.5,
        grace: float = 5.0,
        app: str = APP,
        extra: Sequence[str] = (),
    ) -> WorkerProcess:
        argv = [
            PGSCHED,
            "worker",
            "--app",
            app,
            "--lanes",
            lanes,
            "--lease",
            str(lease),
            "--poll-interval",
            str(poll),
            "--grace",
            str(grace),
            "--worker-id",
            worker_id,
            *extra,
        ]
        log_path = self.log_dir / f"worker-{worker_id}.log"
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(worker_id, proc, log_path, argv)
        self.started.append(worker)
        return worker

    def logs(self) -> str:
        parts = []
        for w in self.started:
            state = "running" if w.alive() else f"exited {w.proc.returncode}"
            parts.append(f"----- worker {w.worker_id} ({state}) -----\n{w.log()}")
        return "\n".join(parts)

    def close(self) -> None:
        for w in self.started:
            if w.alive():
                w.proc.kill()
        for w in self.started:
            with suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=10)
        if self.started:
            print(self.logs())


@contextmanager
def running_workers(env: dict[str, str], log_dir: Path) -> Iterator[Workers]:
    """Workers for one test; their logs join every timed-out wait_until's message."""
    workers = Workers(env, log_dir)
    _diagnostics.append(workers.logs)
    try:
        yield workers
    finally:
        _diagnostics.remove(workers.logs)
        workers.close()


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `pgsched ARGS` as a user would; returns the completed process (not checked)."""
    return subprocess.run(
        [PGSCHED, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def doctor_checks(env: dict[str, str]) -> tuple[int, dict[str, dict[str, str]]]:
    """Run `pgsched doctor --json`; returns its exit code and its checks by name."""
    done = run_cli(env, "doctor", "--json", timeout=120)
    report = json.loads(done.stdout)
    return done.returncode, {c["name"]: c for c in report["checks"]}


def run_cli_together(
    env: dict[str, str], *commands: Sequence[str], timeout: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """Run several independent `pgsched` commands at the same time (as several operators
    would); returns their completed processes in order."""
    procs = [
        subprocess.Popen(
            [PGSCHED, *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    done = []
    for args, proc in zip(commands, procs, strict=True):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        done.append(subprocess.CompletedProcess([PGSCHED, *args], proc.returncode, out, err))
    return done


# -- a host clock off by some time -------------------------------------------------------


def faketime_library() -> str:
    """libfaketime, which shifts a process's host clock (Debian: apt-get install faketime;
    scripts/setup.sh installs it when run as root)."""
    for candidate in (
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ):
        if os.path.exists(candidate):
            return candidate
    pytest.fail("libfaketime is missing: apt-get install faketime (scripts/setup.sh does)")


def skewed_env(env: dict[str, str], skew: str) -> dict[str, str]:
    """`env` for a process whose host clock is shifted by `skew` (libfaketime's '+1h' /
    '-1h'), monotonic clocks left alone."""
    return {
        **env,
        "LD_PRELOAD": faketime_library(),
        "FAKETIME": skew,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_RESET": "1",
    }


# -- reading what happened --------------------------------------------------------------


def schedule(conn: psycopg.Connection, task_type: str, payload: str = "{}", **kwargs: Any) -> int:
    """pgsched.schedule_task with named arguments (run_at, max_attempts, priority, lane...)."""
    names = "".join(f", {name} => %({name})s" for name in kwargs)
    row = conn.execute(
        f"SELECT pgsched.schedule_task(task_type => %(task_type)s,"
        f" payload => %(payload)s::jsonb{names})",
        {"task_type": task_type, "payload": payload, **kwargs},
    ).fetchone()
    assert row is not None
    return int(row[0])


def task(conn: psycopg.Connection, task_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM pgsched.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None, f"no task {task_id}"
    return row


def status(conn: psycopg.Connection, task_id: int) -> str:
    return str(task(conn, task_id)["status"])


def statuses(conn: psycopg.Connection, task_ids: Sequence[int]) -> dict[int, str]:
    rows = conn.execute(
        "SELECT id, status::text FROM pgsched.tasks WHERE id = ANY(%s)", (list(task_ids),)
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def events(conn: psycopg.Connection, task_id: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT id, from_status::text, to_status::text, occurred_at, scheduled_for,"
            " attempt, worker, detail FROM pgsched.task_events WHERE task_id = %s ORDER BY id",
            (task_id,),
        ).fetchall()


def transitions(conn: psycopg.Connection, task_id: int) -> list[tuple[str, str]]:
    return [(e["from_status"], e["to_status"]) for e in events(conn, task_id)]


def steps(conn: psycopg.Connection, task_id: int) -> list[dict[str, Any]]:
    """What the handler logged for a task, in order."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT step, attempt, worker, thread, detail, at FROM public.worker_test_log"
            " WHERE task_id = %s ORDER BY id",
            (task_id,),
        ).fetchall()


def count_function_calls(conn: psycopg.Connection) -> None:
    """Sessions started on this database from now on (a worker's) count the calls of
    PL/pgSQL functions, for `function_calls`."""
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(
            sql.Identifier(conn.info.dbname)
        )
    )


def function_calls(conn: psycopg.Connection, name: str) -> int:
    """Calls of pgsched.`name` so far, by sessions that count them and flushed their
    statistics (a session flushes as it goes idle, at most every second, and as it ends)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions"
        " WHERE schemaname = 'pgsched' AND funcname = %s",
        (name,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def db_now(conn: psycopg.Connection) -> Any:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def listener_backends(conn: psycopg.Connection) -> list[tuple[int, str]]:
    """Sessions of this database whose last statement was a LISTEN (workers' wake-ups)."""
    return [
        (int(r[0]), r[1])
        for r in conn.execute(
            "SELECT pid, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
            " AND pid <> pg_backend_pid() ORDER BY backend_start"
        ).fetchall()
    ]
