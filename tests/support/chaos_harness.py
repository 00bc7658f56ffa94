"""The chaos harness: a Postgres cluster of its own, real workers, a producer, and figures.

Used by the short form (``pytest tests/chaos``) and the long form
(``python -m benchmarks.chaos``), which run the same scenarios
(``benchmarks/chaos/scenarios.py``). Several
scenarios restart or reconfigure the server, so the cluster is this harness's own (never
the test session's, never a default port): made with ``tests/bin/pg_ctl_unprivileged``
(which runs the server as ``postgres`` under root).

Each scenario reports:
- scheduled: tasks whose scheduling committed;
- completed: of those, tasks that reached their expected final status;
- lost: tasks that did not reach a final status by the end of the scenario;
- run twice: executions of the same task and attempt beyond the first, counted from the
  handlers' run log (a task re-run under a new attempt after a fault is an at-least-once
  retry, not a duplicate);
- recovery: seconds from the end of the fault until work flows again (defined per scenario).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgsched.embedded import find_bindir
from pgsched.migrations import migrate

REPO_ROOT = Path(__file__).resolve().parents[2]
# The test suite's pg_ctl wrapper: runs the server as `postgres` when we are root.
PG_CTL = str(REPO_ROOT / "tests" / "bin" / "pg_ctl_unprivileged")
PGSCHED = str(Path(sys.executable).with_name("pgsched"))
APP = "benchmarks.chaos.app:app"
TEMPLATE = "pgsched_chaos_template"
FINAL = ("COMPLETED", "FAILED", "DEAD", "CANCELLED")

SERVER_SETTINGS = [
    # Counts calls and time of the PL/pgSQL functions (the claim) in pg_stat_user_functions.
    "track_functions=pl",
    # fsync off is safe here: an immediate shutdown kills processes, not the OS page cache.
    # Commits stay synchronous, or an immediate restart would forget acknowledged work.
    "fsync=off",
    "full_page_writes=off",
    "max_connections=100",
    "shared_buffers=64MB",
    "listen_addresses=127.0.0.1",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_server_user(argv: Sequence[str]) -> list[str]:
    """`argv` run as the server's user when we are root (Postgres's tools refuse root, and
    the files they write must be the server's)."""
    if os.geteuid() != 0:
        return list(argv)
    return ["runuser", "-u", os.environ.get("PGSCHED_PG_USER", "postgres"), "--", *argv]


def give_to_server_user(path: Path) -> None:
    """Hand a folder (and what is in it) to the server's user, when we are root."""
    if os.geteuid() == 0:
        user = os.environ.get("PGSCHED_PG_USER", "postgres")
        subprocess.run(["chown", "-R", f"{user}:", str(path)], check=True)


class Cluster:
    """A throwaway Postgres cluster: initdb, start, restart (fast / immediate), stop; a
    base backup of it, and a cluster recovered from one (`restored`)."""

    def __init__(self, settings: Sequence[str] = ()) -> None:
        self.settings = [*SERVER_SETTINGS, *settings]
        self.root = Path(tempfile.mkdtemp(prefix="pgsched-chaos-"))
        os.chmod(self.root, 0o755)
        self.datadir = self.root / "data"
        self.logfile = self.root / "server.log"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self._databases = 0

    def _pg_ctl(self, *args: str, timeout: float = 120) -> None:
        env = {**os.environ, "PGSCHED_PG_BINDIR": str(find_bindir())}
        subprocess.run([PG_CTL, *args], check=True, timeout=timeout, capture_output=True, env=env)

    def start(self) -> None:
        self._pg_ctl("initdb", "-D", str(self.datadir), "-o", "-U postgres --auth=trust -E UTF8")
        self.start_server()
        with self.connect() as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
        migrate(self.dsn(TEMPLATE))

    def _options(self, settings: Sequence[str] = ()) -> str:
        return " ".join(
            [f"-p {self.port}", f"-c unix_socket_directories={self.root}"]
            + [f"-c {s}" for s in [*self.settings, *settings]]
        )

    def restart(self, mode: str, settings: Sequence[str] | None = None) -> None:
        """Restart (-m fast or immediate); with `settings`, under the cluster's settings plus
        these (they win), until the next restart given settings (`()`: the cluster's own)."""
        options = [] if settings is None else ["-o", self._options(settings)]
        self._pg_ctl(
            "restart", "-D", str(self.datadir), "-m", mode, "-w", "-l", str(self.logfile), *options
        )

    def stop_server(self) -> None:
        """Stop the server (-m immediate), its data kept: `start_server` starts it again."""
        self._pg_ctl("stop", "-D", str(self.datadir), "-m", "immediate", "-w")

    def start_server(self) -> None:
        self._pg_ctl(
            "start", "-D", str(self.datadir), "-w", "-l", str(self.logfile), "-o", self._options()
        )

    def stop(self) -> None:
        with suppress(Exception):
            self._pg_ctl("stop", "-D", str(self.datadir), "-m", "immediate", "-w")
        shutil.rmtree(self.root, ignore_errors=True)

    def base_backup(self, dest: Path) -> None:
        """A base backup of the running server into `dest`, a new folder under this cluster's
        root (pg_basebackup, fast checkpoint, the WAL it needs streamed alongside)."""
        argv = [str(find_bindir() / "pg_basebackup"), "-D", str(dest), "-c", "fast"]
        argv += ["-X", "stream", "-h", self.host, "-p", str(self.port), "-U", "postgres"]
        done = subprocess.run(as_server_user(argv), timeout=300, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed ({done.returncode}): {done.stderr}")

    @classmethod
    def restored(cls, backup: Path, settings: Sequence[str]) -> Cluster:
        """A new cluster on a port of its own, started from a copy of `backup` in recovery
        (`settings`: restore_command, the recovery target); returns once it is promoted."""
        restored = cls(settings)
        shutil.copytree(backup, restored.datadir)
        (restored.datadir / "recovery.signal").touch()
        os.chmod(restored.datadir, 0o700)
        give_to_server_user(restored.root)
        os.chmod(restored.root, 0o755)
        restored.start_server()
        restored.wait_accepting()

        def promoted() -> bool:
            with restored.connect() as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                return row is not None and not row[0]

        wait_for(promoted, 120, "the restored cluster to reach its target and promote")
        return restored

    def standby(self, name: str) -> Cluster:
        """A streaming standby of this running cluster, started and replicating as
        application `name` (what `synchronous_standby_names` names), on a port of its own."""
        conninfo = f"host={self.host} port={self.port} user=postgres application_name={name}"
        standby = Cluster([f"primary_conninfo='{conninfo}'", "hot_standby=on"])
        give_to_server_user(standby.root)
        self.base_backup(standby.datadir)
        (standby.datadir / "standby.signal").touch()
        give_to_server_user(standby.root)
        os.chmod(standby.root, 0o755)
        standby.start_server()
        standby.wait_accepting()
        return standby

    def promote(self) -> None:
        """Promote this standby to a primary (`pg_ctl promote`), waiting until it is one."""
        self._pg_ctl("promote", "-D", str(self.datadir), "-w")

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(host=self.host, port=str(self.port), user="postgres", dbname=dbname)

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=5)

    def new_database(self) -> str:
        self._databases += 1
        name = f"pgsched_chaos_{os.getpid()}_{self._databases}"
        with self.connect() as admin:
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(TEMPLATE)
                )
            )
        return name

    def wait_accepting(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.connect():
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@contextmanager
def cluster(settings: Sequence[str] = ()) -> Iterator[Cluster]:
    c = Cluster(settings)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@dataclass
class Figures:
    scenario: str
    scheduled: int
    completed: int
    lost: int
    run_twice: int
    reruns: int
    recovery_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)
    # Figures sampled over time (a row per window), for the JSON only.
    series: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        recovery = "-" if self.recovery_s is None else f"{self.recovery_s:.2f}s"
        extra = "".join(f" {k}={v}" for k, v in self.extra.items())
        return (
            f"CHAOS {self.scenario}: scheduled={self.scheduled} completed={self.completed}"
            f" lost={self.lost} run_twice={self.run_twice} reruns={self.reruns}"
            f" recovery={recovery}{extra}"
        )

    def as_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class WorkerProcess:
    """One `pgsched worker` process; its stdout and stderr go to `log_path`."""

    worker_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait_log(self, text: str, timeout: float = 20.0) -> None:
        def seen() -> bool:
            if not self.alive() and text not in self.log():
                raise AssertionError(
                    f"worker {self.worker_id} exited ({self.proc.returncode}) before logging "
                    f"{text!r}\n{self.log()}"
                )
            return text in self.log()

        wait_for(seen, timeout, f"worker {self.worker_id} to log {text!r}")

    def wait_running(self, timeout: float = 20.0) -> None:
        """Until the worker logged that its lane loops run (after its pool opened)."""
        self.wait_log(f"worker {self.worker_id} running lanes", timeout)


class Workers:
    """Starts workers as a user does (the `pgsched` console script beside this Python),
    from the repository root; kills whatever is left at close and prints every log."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def start(
        self,
        worker_id: str,
        *,
        app: str = APP,
        lanes: str = "normal",
        lease: float = 2.0,
        poll: float = 0.5,
        grace: float = 5.0,
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        argv = [
            PGSCHED,
            "worker",
            *("--app", app, "--lanes", lanes, "--lease", str(lease)),
            *("--poll-interval", str(poll), "--grace", str(grace), "--worker-id", worker_id),
            *extra,
        ]
        log_path = self.log_dir / f"worker-{worker_id}.log"
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env=env or self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(worker_id, proc, log_path)
        self.started.append(worker)
        return worker

    def logs(self) -> str:
        parts = []
        for w in self.started:
            state = "running" if w.alive() else f"exited {w.proc.returncode}"
            parts.append(f"----- worker {w.worker_id} ({state}) -----\n{w.log()}")
        return "\n".join(parts)

    def close(self, *, show_logs: bool = True) -> None:
        for w in self.started:
            if w.alive():
                w.proc.kill()
        for w in self.started:
            with suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=10)
        if self.started and show_logs:
            print(self.logs())


class Scenario:
    """One scenario's database, run log, workers and producer."""

    def __init__(self, cluster: Cluster, name: str, workdir: Path) -> None:
        self.cluster = cluster
        self.name = name
        self.dbname = cluster.new_database()
        self.dsn = cluster.dsn(self.dbname)
        self.workdir = workdir
        self.run_log = workdir / f"{name}-runs.log"
        self.run_log.touch()
        self.env = {
            **os.environ,
            "PGSCHED_DSN": self.dsn,
            "PGSCHED_CHAOS_RUN_LOG": str(self.run_log),
            "PGAPPNAME": "pgsched-chaos-worker",
        }
        self.workers = Workers(self.env, workdir)
        self._monitor: psycopg.Connection[Any] | None = None
        self.execute("CREATE TABLE public.chaos_tx (task_id bigint NOT NULL)")

    # -- the database, surviving its restarts -----------------------------------------
    def execute(self, query: Any, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        """Run one statement on the monitor connection (reconnected if the fault broke it)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                if self._monitor is None or self._monitor.closed or self._monitor.broken:
                    self._monitor = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
                return self._monitor.execute(query, params)
            except psycopg.OperationalError:
                self._monitor = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def schedule(self, task_type: str, payload: dict[str, Any] | None = None, **kw: Any) -> int:
        names = "".join(f", {n} => %({n})s" for n in kw)
        row = self.execute(
            f"SELECT pgsched.schedule_task(task_type => %(t)s, payload => %(p)s::jsonb{names})",
            {"t": task_type, "p": json.dumps(payload or {}), **kw},
        ).fetchone()
        return int(row[0])

    def statuses(self, ids: Sequence[int]) -> dict[int, str]:
        rows = self.execute(
            "SELECT id, status::text FROM pgsched.tasks WHERE id = ANY(%s)", (list(ids),)
        ).fetchall()
        return {int(r[0]): r[1] for r in rows}

    def settle(self, ids: Sequence[int], timeout: float) -> dict[int, str]:
        """Wait until every task is final (or the timeout); their statuses."""
        deadline = time.monotonic() + timeout
        while True:
            now = self.statuses(ids)
            if all(s in FINAL for s in now.values()) or time.monotonic() > deadline:
                return now
            time.sleep(0.2)

    # -- runs ----------------------------------------------------------------------------
    def runs(self) -> list[tuple[int, int, str, float]]:
        out = []
        for line in self.run_log.read_text().splitlines():
            task_id, attempt, worker, at = line.split()
            out.append((int(task_id), int(attempt), worker, float(at)))
        return out

    def first_run_after(self, t: float, ids: Sequence[int] | None = None) -> float | None:
        wanted = None if ids is None else set(ids)
        times = [
            at for tid, _, _, at in self.runs() if at >= t and (wanted is None or tid in wanted)
        ]
        return min(times) if times else None

    def figures(
        self,
        ids: Sequence[int],
        final: dict[int, str],
        *,
        expected: str | dict[int, str] = "COMPLETED",
        recovery_s: float | None,
        series: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> Figures:
        runs = self.runs()
        per_attempt = Counter((tid, attempt) for tid, attempt, _, _ in runs)
        per_task = Counter(tid for tid, _, _, _ in runs)
        wanted = set(ids)
        want = expected if isinstance(expected, dict) else dict.fromkeys(ids, expected)
        completed = sum(1 for i in ids if final.get(i) == want[i])
        lost = sum(1 for i in ids if final.get(i) not in FINAL)
        if lost:
            extra["unfinished"] = dict(
                Counter(str(final.get(i)) for i in ids if final.get(i) not in FINAL)
            )
        figures = Figures(
            scenario=self.name,
            scheduled=len(ids),
            completed=completed,
            lost=lost,
            run_twice=sum(n - 1 for (tid, _), n in per_attempt.items() if tid in wanted and n > 1),
            reruns=sum(n - 1 for tid, n in per_task.items() if tid in wanted and n > 1),
            recovery_s=None if recovery_s is None else round(recovery_s, 2),
            extra=extra,
            series=series or [],
        )
        print(figures.line(), flush=True)
        return figures

    def close(self, *, show_logs: bool = True) -> None:
        self.workers.close(show_logs=show_logs)
        if self._monitor is not None:
            self._monitor.close()
        with suppress(Exception), self.cluster.connect() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(self.dbname)
                )
            )


class Producer:
    """Schedules tasks at a steady rate on its own connection, riding out outages.

    Only tasks whose scheduling returned an id count as scheduled. Through a pooler in
    transaction mode, `prepare_threshold=None`: its server sessions change between calls.
    """

    def __init__(
        self,
        dsn: str,
        rate: float,
        make: Callable[[int], tuple[str, dict[str, Any], dict[str, Any]]],
        *,
        prepare_threshold: int | None = 5,
    ) -> None:
        self.dsn = dsn
        self.prepare_threshold = prepare_threshold
        self.rate = rate
        self.make = make
        self.ids: list[int] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        n = 0
        start = time.monotonic()
        while not self._stop.is_set():
            due = start + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
                continue
            task_type, payload, kw = self.make(n)
            names = "".join(f", {k} => %({k})s" for k in kw)
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(
                        self.dsn,
                        autocommit=True,
                        connect_timeout=2,
                        prepare_threshold=self.prepare_threshold,
                    )
                row = conn.execute(
                    "SELECT pgsched.schedule_task(task_type => %(t)s,"
                    f" payload => %(p)s::jsonb{names})",
                    {"t": task_type, "p": json.dumps(payload), **kw},
                ).fetchone()
                assert row is not None
                self.ids.append(int(row[0]))
            except psycopg.Error:
                # Down or read-only: the producer's call failed, nothing was scheduled.
                self.refused += 1
                if conn is not None and (conn.broken or conn.closed):
                    conn = None
                self._stop.wait(0.1)
            n += 1
        if conn is not None:
            conn.close()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
