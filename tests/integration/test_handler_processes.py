"""Plain handlers with a timeout run in handler processes, which are killed when the attempt
must end: the timeout, a cancel past its grace, a process that dies on its own. The worker
never exits because of a handler, and nothing of a killed handler runs on."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from functools import partial
from typing import Any

import psycopg
import pytest

from pgsched import App
from pgsched.errors import ConfigError, InvalidTaskError
from pgsched.handlers import TaskContext, TaskHandler
from pgsched.worker import Worker, WorkerConfig
from tests.support.worker_helpers import PGSCHED, Workers, schedule, statuses, task, wait_until

APP = "tests.apps.isolation:app"


def logged(conn: psycopg.Connection, task_id: int, step: str) -> list[str]:
    rows = conn.execute(
        "SELECT detail FROM public.worker_test_log WHERE task_id = %s AND step = %s ORDER BY id",
        (task_id, step),
    ).fetchall()
    return [r[0] for r in rows]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie not reaped yet still answers: its state says it is dead.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def all_gone(pids: list[int]) -> bool:
    return all(gone(pid) for pid in pids)


def test_hung_plain_handlers_are_killed_on_their_timeout_and_the_worker_runs_on(
    conn: psycopg.Connection, workers: Workers
) -> None:
    # Far more hung handlers than --max-stuck-threads: none of them holds a thread.
    w = workers.start(
        "W1", app=APP, lanes="low", extra=["--concurrency", "4", "--max-stuck-threads", "1"]
    )
    w.wait_running()
    hung = [
        schedule(conn, "hung_sync", '{"seconds": 600}', priority=1, max_attempts=2)
        for _ in range(6)
    ]
    wait_until(
        lambda: set(statuses(conn, hung).values()) == {"FAILED"},
        40,
        what="every hung handler to time out twice and go DEAD",
    )
    for task_id in hung:
        row = task(conn, task_id)
        assert row["attempts"] == 2
        assert row["last_error"] == "timed out after 1.0s (its handler process was killed)"
        pids = [int(p) for p in logged(conn, task_id, "start")]
        assert len(pids) == 2
        # Killed: not running on, as a thread would.
        wait_until(partial(all_gone, pids), 10, what="the children gone")
    assert "stuck" not in w.log()
    after = schedule(conn, "quick_sync", priority=1)
    wait_until(lambda: statuses(conn, [after])[after] == "COMPLETED", 10, what="a later task")
    assert w.alive()


@pytest.mark.parametrize(("how", "signal_name"), [("sigkill", "SIGKILL"), ("segfault", "SIGSEGV")])
def test_a_handler_process_that_dies_fails_its_attempt_and_the_lane_runs_on(
    conn: psycopg.Connection, workers: Workers, how: str, signal_name: str
) -> None:
    w = workers.start("W1", app=APP, lanes="normal")
    w.wait_running()
    dying = schedule(conn, "dies", f'{{"how": "{how}"}}', max_attempts=2)
    quick = [schedule(conn, "quick_sync") for _ in range(5)]
    wait_until(
        lambda: (
            statuses(conn, [dying, *quick])
            == {dying: "FAILED", **dict.fromkeys(quick, "COMPLETED")}
        ),
        30,
        what="the dying task retried then DEAD, the others done",
    )
    row = task(conn, dying)
    assert row["attempts"] == 2
    assert re.fullmatch(
        rf"HandlerProcessDied: handler process \d+ was killed by {signal_name}.* while running "
        "execute",
        row["last_error"],
    ), row
    assert re.search(
        rf"task {dying} \(type dies, lane NORMAL, attempt 1\): attempt failed: "
        rf"HandlerProcessDied\(.handler process \d+ was killed by {signal_name}",
        w.log(),
    ), w.log()
    assert w.alive()


def test_every_plain_step_runs_in_one_process_and_errors_keep_their_class(
    conn: psycopg.Connection, workers: Workers
) -> None:
    w = workers.start("W1", app=APP, lanes="normal")
    w.wait_running()
    ok = schedule(conn, "process_steps")
    failing = schedule(conn, "process_steps", '{"fail": true}', max_attempts=1)
    wait_until(
        lambda: statuses(conn, [ok, failing]) == {ok: "COMPLETED", failing: "FAILED"},
        20,
        what="both to end",
    )
    before_pid, execute_pid = logged(conn, ok, "execute")[0].split()
    assert before_pid == execute_pid != str(os.getpid())
    error = task(conn, failing)["last_error"]
    assert error.startswith("ValueError: execute failed on purpose"), error
    assert "error_class=ValueError" in w.log() or "attempt failed: ValueError(" in w.log()


def test_a_cancel_reaches_the_handler_process_and_one_that_ignores_it_is_killed(
    conn: psycopg.Connection, workers: Workers
) -> None:
    w = workers.start("W1", app=APP, lanes="normal", extra=["--cancel-grace", "1"])
    w.wait_running()
    polite = schedule(conn, "waits_for_cancel")
    deaf = schedule(conn, "ignores_cancel")
    wait_until(
        lambda: logged(conn, polite, "start") and logged(conn, deaf, "start"),
        20,
        what="both handlers to start",
    )
    for task_id in (polite, deaf):
        conn.execute("SELECT pgsched.cancel_task(%s, reason => 'test')", (task_id,))
    wait_until(
        lambda: statuses(conn, [polite, deaf]) == {polite: "CANCELLED", deaf: "CANCELLED"},
        20,
        what="both to end CANCELLED",
    )
    assert logged(conn, polite, "saw_cancel")
    deaf_pid = int(logged(conn, deaf, "start")[0])
    wait_until(lambda: gone(deaf_pid), 10, what="the deaf handler's process gone")
    assert "its handler process was killed" in w.log()
    assert w.alive()


def test_isolation_is_chosen_by_kind_and_a_wrong_one_is_refused() -> None:
    app = App()

    def plain(ctx: TaskContext) -> None: ...

    async def coroutine(ctx: TaskContext) -> None: ...

    assert app.register("a", plain, timeout=5).isolation == "process"
    assert app.register("b", plain).isolation == "thread"
    assert app.register("c", plain, timeout=5, isolation="thread").isolation == "thread"
    assert app.register("d", plain, isolation="process").isolation == "process"
    assert app.register("e", plain, timeout=5, transactional=True).isolation == "thread"
    assert app.register("f", coroutine, timeout=5).isolation == "thread"
    with pytest.raises(InvalidTaskError, match="choose 'process' or 'thread'"):
        app.register("g", plain, isolation="fork")
    with pytest.raises(InvalidTaskError, match="has async ones"):
        app.register("h", coroutine, isolation="process")
    with pytest.raises(InvalidTaskError, match="transactional handler"):
        app.register("i", plain, isolation="process", transactional=True)

    class Mixed(TaskHandler):
        async def validate(self, ctx: TaskContext) -> None: ...

        def execute(self, ctx: TaskContext) -> None: ...

    # A plain execute with an async step keeps its thread: one context for every step.
    assert app.register("j", Mixed(), timeout=5).isolation == "thread"


def test_a_handler_that_cannot_reach_a_process_is_refused_at_start_naming_the_fix() -> None:
    app = App()

    def local_closure(ctx: TaskContext) -> Any:  # not importable by name
        return None

    app.register("closure", local_closure, timeout=5)
    worker = Worker("host=/nonexistent dbname=x", app.registry, WorkerConfig())
    with pytest.raises(ConfigError) as refused:
        asyncio.run(worker.run(install_signal_handlers=False))
    message = str(refused.value)
    assert "'closure'" in message and "importable by name" in message
    assert "isolation='thread'" in message


def test_the_cli_refuses_such_a_handler_with_a_message_and_exit_code_2(
    db_env: dict[str, str],
) -> None:
    done = subprocess.run(
        [PGSCHED, "worker", "--app", "tests.apps.closure_app:app"],
        env=db_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "importable by name" in done.stderr and "isolation='thread'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_fork_server_imports_the_command_line_its_children_would_import_again(
    workers: Workers,
) -> None:
    # Each handler process runs the worker's main script again as it starts; the `pgsched`
    # script imports pgsched.cli. Imported once in the fork server, a process starts in a
    # few milliseconds of CPU; imported in every process, in about 40.
    w = workers.start("W1", app=APP, lanes="normal")
    w.wait_running()
    servers = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
        if parent == w.proc.pid and "multiprocessing.forkserver" in argv:
            servers.append(argv)
    assert len(servers) == 1, servers
    assert "'pgsched.cli'" in servers[0] and "'tests.apps.isolation'" in servers[0], servers
