"""Helpers of the dashboard tests: a real `pgsched dashboard` process, a DEAD task."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import psycopg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[str]
    output: list[str]


@contextmanager
def running_dashboard(
    env: dict[str, str], *args: str, extra_env: dict[str, str] | None = None
) -> Iterator[Dashboard]:
    """A `pgsched dashboard` subprocess on a free port, stopped afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pgsched", "dashboard", "--port", str(port), *args],
        env={**env, **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    output: list[str] = []

    def drain() -> None:
        # A full pipe would stop the server at its next log line (a traceback per 500).
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                reader.join(5)
                raise AssertionError(f"dashboard exited {process.returncode}: {''.join(output)}")
            try:
                httpx.get(url + "/static/dashboard.css", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise AssertionError("dashboard did not start within 30 s") from None
                time.sleep(0.1)
        yield Dashboard(url, process, output)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def make_dead_task(
    conn: psycopg.Connection, task_type: str = "send_mail", error: str = "smtp refused"
) -> int:
    """A task that ran once and failed for good: FAILED, in the DEAD lane."""
    task_id = conn.execute(
        "SELECT pgsched.schedule_task(%s, max_attempts => 1, run_at => %s)",
        (task_type, datetime.now(UTC)),
    ).fetchone()[0]
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1, 'w-test', '5 minutes')"
    ).fetchall()
    assert [r[0] for r in claimed] == [task_id]
    applied = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(%s, %s, %s, %s)",
        ([task_id], [claimed[0][1]], ["FAILED"], [error]),
    ).fetchall()
    assert applied == [(True,)]
    return int(task_id)


def status_of(conn: psycopg.Connection, task_id: int) -> str:
    row = conn.execute(
        "SELECT status::text FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def csrf_field(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "the page carries no CSRF field"
    return match.group(1)


def env_without_auth(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("PGSCHED_DASHBOARD_")}


def make_dead_tasks(
    conn: psycopg.Connection, n: int, task_type: str = "send_mail", error: str = "smtp refused"
) -> list[int]:
    """n DEAD tasks at once (scheduled, claimed and failed in three statements)."""
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT task_id FROM pgsched.schedule_tasks("
            " task_types => array_fill(%s::text, ARRAY[%s]),"
            " max_attempts => array_fill(1::bigint, ARRAY[%s]),"
            " run_ats => array_fill(now(), ARRAY[%s]))",
            (task_type, n, n, n),
        ).fetchall()
    ]
    claimed = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', %s, 'w-test', '5 minutes')",
        (n,),
    ).fetchall()
    assert sorted(r[0] for r in claimed) == sorted(ids)
    conn.execute(
        "SELECT count(*) FROM pgsched.task_finish_many(%s, %s, %s, %s)",
        ([r[0] for r in claimed], [r[1] for r in claimed], ["FAILED"] * n, [error] * n),
    )
    return sorted(ids)
