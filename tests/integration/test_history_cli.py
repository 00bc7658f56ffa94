"""`pgsched history` and the pgsched.run_history view: did it run, when, where, how late.

Runs are made with the real claim and finish functions (task_claim_many /
task_finish_many) at chosen `as_of` times, so every scheduled/started/finished time and
every lateness is known exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched import App
from pgsched.sweeps import RecurringSweep
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import schedule

PGSCHED = str(Path(sys.executable).with_name("pgsched"))
S = timedelta(seconds=1)
M = timedelta(minutes=1)


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`pgsched ARGS` as a user runs it (not checked)."""
    return subprocess.run(
        [PGSCHED, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@dataclass
class Run:
    task_id: int
    attempt: int
    scheduled: datetime
    started: datetime
    finished: datetime | None
    worker: str
    outcome: str
    detail: str | None = None

    @property
    def lateness_ms(self) -> float:
        return (self.started - self.scheduled) / timedelta(milliseconds=1)


def claim(conn: psycopg.Connection, task_id: int, worker: str, at: datetime) -> Any:
    rows = conn.execute(
        "SELECT id, lease_token FROM pgsched.task_claim_many('NORMAL', 1, %s, '5 minutes', %s)",
        (worker, at),
    ).fetchall()
    assert [r[0] for r in rows] == [task_id], f"expected to claim {task_id}, got {rows}"
    return rows[0][1]


def report(
    conn: psycopg.Connection,
    task_id: int,
    token: Any,
    outcome: str,
    at: datetime,
    error: Any = None,
) -> None:
    rows = conn.execute(
        "SELECT applied FROM pgsched.task_finish_many(%s, %s, %s, %s, NULL, %s)",
        ([task_id], [token], [outcome], [error], at),
    ).fetchall()
    assert rows == [(True,)]


@dataclass
class Story:
    base: datetime
    runs: dict[str, Run]
    ids: dict[str, int]


@pytest.fixture
def story(conn: psycopg.Connection) -> Story:
    """Runs of `report` for acme (and neighbours), three hours ago, at exact times."""
    row = conn.execute("SELECT date_trunc('second', now()) - interval '3 hours'").fetchone()
    assert row is not None
    base: datetime = row[0]
    due = {
        "before": base - 60 * M,  # acme/report, before --since
        "r1": base,
        "r2": base + 10 * M,
        "r3": base + 20 * M,  # fails once, then completes
        "r4": base + 30 * M,  # fails for good
        "other_tenant": base + 40 * M,
        "other_type": base + 50 * M,
        "running": base + 60 * M,
    }
    kinds = {"other_tenant": ("report", "globex"), "other_type": ("export", "acme")}
    ids = {
        name: schedule(
            conn,
            kinds.get(name, ("report", "acme"))[0],
            tenant_id=kinds.get(name, ("report", "acme"))[1],
            run_at=at,
            max_attempts=3,
        )
        for name, at in due.items()
    }
    runs: dict[str, Run] = {}

    def run(name: str, key: str, worker: str, late: timedelta, took: timedelta) -> None:
        started = due[name] + late
        token = claim(conn, ids[name], worker, started)
        report(conn, ids[name], token, "COMPLETED", started + took)
        runs[key] = Run(ids[name], 1, due[name], started, started + took, worker, "COMPLETED")

    run("before", "before", "w-a", 3 * S, S)
    run("r1", "r1", "w-a", 2 * S, 3 * S)
    run("r2", "r2", "w-b", timedelta(milliseconds=250), timedelta(milliseconds=750))
    # r3: attempt 1 fails (retried at once), attempt 2 completes on another worker.
    t1 = due["r3"] + S
    token = claim(conn, ids["r3"], "w-a", t1)
    report(conn, ids["r3"], token, "RETRY", t1 + S, "timeout talking to upstream")
    runs["r3a1"] = Run(
        ids["r3"], 1, due["r3"], t1, t1 + S, "w-a", "QUEUED", "timeout talking to upstream"
    )
    retried_due = t1 + S  # a RETRY with no delay is due again when it was reported
    t2 = retried_due + S
    token = claim(conn, ids["r3"], "w-b", t2)
    report(conn, ids["r3"], token, "COMPLETED", t2 + S)
    runs["r3a2"] = Run(ids["r3"], 2, retried_due, t2, t2 + S, "w-b", "COMPLETED")
    # r4: validate refused it: straight to DEAD, with a two-line error.
    t4 = due["r4"] + timedelta(milliseconds=500)
    token = claim(conn, ids["r4"], "w-a", t4)
    report(conn, ids["r4"], token, "FAILED", t4 + S, "payload has no 'to'\nTraceback ...")
    runs["r4"] = Run(
        ids["r4"], 1, due["r4"], t4, t4 + S, "w-a", "FAILED", "payload has no 'to'\nTraceback ..."
    )
    run("other_tenant", "other_tenant", "w-a", S, S)
    run("other_type", "other_type", "w-a", S, S)
    started = due["running"] + 2 * S
    claim(conn, ids["running"], "w-c", started)
    runs["running"] = Run(ids["running"], 1, due["running"], started, None, "w-c", "RUNNING")
    return Story(base, runs, ids)


def parse_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def as_runs(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """CLI JSON rows -> comparable tuples."""
    return [
        (
            r["task_id"],
            r["attempt"],
            parse_time(r["scheduled_for"]),
            parse_time(r["started_at"]),
            parse_time(r["finished_at"]),
            r["worker"],
            r["outcome"],
            r["detail"],
        )
        for r in rows
    ]


def expected(*runs: Run) -> list[tuple[Any, ...]]:
    return [
        (r.task_id, r.attempt, r.scheduled, r.started, r.finished, r.worker, r.outcome, r.detail)
        for r in runs
    ]


def history_json(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    done = run_cli(env, "history", *args, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert isinstance(rows, list)
    return rows


def test_history_json_answers_exactly_the_runs_asked_for(
    story: Story, db_env: dict[str, str]
) -> None:
    since = (story.base - M).isoformat()
    rows = history_json(
        db_env,
        "--type",
        "report",
        "--tenant",
        "acme",
        "--since",
        since,
        "--status",
        "COMPLETED",
    )
    runs = story.runs
    # Newest first; r3's failed first attempt, the other tenant, the other type, the run
    # before --since and the unfinished one are all left out.
    assert as_runs(rows) == expected(runs["r3a2"], runs["r2"], runs["r1"])
    for row, run in zip(rows, [runs["r3a2"], runs["r2"], runs["r1"]], strict=True):
        assert row["lateness_ms"] == pytest.approx(run.lateness_ms, abs=0.01)
        assert (row["tenant_id"], row["task_type"], row["schedule_id"]) == ("acme", "report", None)
    assert [round(r["lateness_ms"]) for r in rows] == [1000, 250, 2000]

    # The same through the Python API.
    api = App(db_env["PGSCHED_DSN"]).history(
        task_type="report", tenant_id="acme", since=story.base - M, outcome="COMPLETED"
    )
    assert [(r["task_id"], r["attempt"]) for r in api] == [(r[0], r[1]) for r in as_runs(rows)]
    with pytest.raises(TypeError, match="unknown history filters"):
        App(db_env["PGSCHED_DSN"]).history(colour="red")


def test_history_filters(story: Story, db_env: dict[str, str]) -> None:
    runs = story.runs
    acme = ["--type", "report", "--tenant", "acme"]
    everything = history_json(db_env, *acme)
    assert as_runs(everything) == expected(
        runs["running"],
        runs["r4"],
        runs["r3a2"],
        runs["r3a1"],
        runs["r2"],
        runs["r1"],
        runs["before"],
    )
    assert everything[0]["finished_at"] is None and everything[0]["outcome"] == "RUNNING"
    failed = history_json(db_env, *acme, "--status", "failed")  # case does not matter
    assert as_runs(failed) == expected(runs["r4"])
    until = (story.base + 15 * M).isoformat()
    assert as_runs(history_json(db_env, *acme, "--until", until)) == expected(
        runs["r2"], runs["r1"], runs["before"]
    )
    # Relative times: everything started in the last day.
    assert len(history_json(db_env, *acme, "--since", "-1d")) == 7
    assert as_runs(history_json(db_env, *acme, "--limit", "2")) == expected(
        runs["running"], runs["r4"]
    )
    by_task = history_json(db_env, "--task", str(story.ids["r3"]))
    assert as_runs(by_task) == expected(runs["r3a2"], runs["r3a1"])

    # The other filters, through the same query from Python.
    app = App(db_env["PGSCHED_DSN"])
    now = datetime.now(UTC)
    assert app.history(task_type="report", tenant_id="acme", since=now - 30 * M) == []
    queued = app.history(task_type="report", tenant_id="acme", outcome="QUEUED")
    assert [(r["task_id"], r["attempt"]) for r in queued] == [(story.ids["r3"], 1)]
    assert {r["tenant_id"] for r in app.history(task_type="report")} == {"acme", "globex"}
    assert {r["task_type"] for r in app.history(tenant_id="acme")} == {"report", "export"}

    for bad, message in [
        ("yesterday", "is not a time"),
        ("2026-12-01T00:00:00", "has no UTC offset"),
    ]:
        done = run_cli(db_env, "history", "--since", bad)
        assert done.returncode != 0
        assert message in done.stderr, done.stderr


def test_history_wide_table_output(story: Story, db_env: dict[str, str]) -> None:
    done = run_cli(db_env, "history", "--type", "report", "--tenant", "acme", "--wide")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    assert header == [
        "TASK_ID",
        "TENANT_ID",
        "TASK_TYPE",
        "ATTEMPT",
        "SCHEDULED_FOR",
        "STARTED_AT",
        "FINISHED_AT",
        "LATENESS_MS",
        "WORKER",
        "OUTCOME",
        "DETAIL",
    ]
    cells = [
        dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines[1:]
    ]
    runs = story.runs
    order = ["running", "r4", "r3a2", "r3a1", "r2", "r1", "before"]
    assert [(int(c["TASK_ID"]), int(c["ATTEMPT"])) for c in cells] == [
        (runs[k].task_id, runs[k].attempt) for k in order
    ]
    by_key = dict(zip(order, cells, strict=True))
    assert by_key["r2"]["LATENESS_MS"] == "250.000"
    assert by_key["r2"]["WORKER"] == "w-b" and by_key["r2"]["OUTCOME"] == "COMPLETED"
    assert datetime.fromisoformat(by_key["r2"]["STARTED_AT"]) == runs["r2"].started
    assert by_key["r2"]["DETAIL"] == "-"
    # The running one has no finish yet; the DEAD one shows the first line of its error.
    assert by_key["running"]["FINISHED_AT"] == "-" and by_key["running"]["OUTCOME"] == "RUNNING"
    assert by_key["r4"]["OUTCOME"] == "FAILED"
    assert by_key["r4"]["DETAIL"] == "payload has no 'to'"
    assert by_key["r3a1"]["DETAIL"] == "timeout talking to upstream"


def test_history_table_with_no_runs_prints_the_header(db_env: dict[str, str]) -> None:
    empty = run_cli(db_env, "history", "--type", "nothing-ran")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.splitlines()[0].startswith("ID")
    assert len(empty.stdout.splitlines()) == 1


def test_run_history_view_answers_from_sql(story: Story, conn: psycopg.Connection) -> None:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM pgsched.run_history WHERE task_id = %s ORDER BY attempt",
            (story.ids["r3"],),
        ).fetchall()
    r3a1, r3a2 = story.runs["r3a1"], story.runs["r3a2"]
    assert [
        (r["attempt"], r["scheduled_for"], r["started_at"], r["finished_at"], r["worker"])
        for r in rows
    ] == [
        (1, r3a1.scheduled, r3a1.started, r3a1.finished, "w-a"),
        (2, r3a2.scheduled, r3a2.started, r3a2.finished, "w-b"),
    ]
    assert [(r["outcome"], r["detail"]) for r in rows] == [
        ("QUEUED", "timeout talking to upstream"),
        ("COMPLETED", None),
    ]
    assert [r["lateness"] for r in rows] == [S, S]
    assert {(r["tenant_id"], r["task_type"], r["schedule_id"]) for r in rows} == {
        ("acme", "report", None)
    }
    # A question an operator asks at psql: what ran for acme in that hour, by outcome.
    counted = conn.execute(
        "SELECT outcome, count(*) FROM pgsched.run_history WHERE tenant_id = 'acme'"
        " AND started_at >= %s AND started_at < %s GROUP BY outcome ORDER BY outcome",
        (story.base, story.base + timedelta(hours=1)),
    ).fetchall()
    assert counted == [("COMPLETED", 4), ("FAILED", 1), ("QUEUED", 1)]


def test_history_of_a_recurring_schedule_names_the_schedule(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    made = conn.execute(
        "SELECT pgsched.schedule_recurring(task_type => 'nightly', cron_expression => '0 2 * * *',"
        " timezone => 'Europe/Berlin', tenant_id => 'acme', as_of => %s)",
        (datetime(2026, 3, 1, tzinfo=UTC),),
    ).fetchone()
    assert made is not None
    schedule_id = made[0]
    fires = []
    for day in (1, 2):
        now = datetime(2026, 3, day, 1, 0, 30, tzinfo=UTC)  # 02:00:30 in Berlin (CET)
        assert RecurringSweep().run_once(conn, now) == {"armed": 1, "not_armed": 0}
        task_id, fire = conn.execute(
            "SELECT armed_task_id, last_fire_at FROM pgsched.schedules WHERE id = %s",
            (schedule_id,),
        ).fetchone() or (None, None)
        assert fire == datetime(2026, 3, day, 1, 0, tzinfo=UTC)
        token = claim(conn, task_id, "w-night", fire + 2 * S)
        report(conn, task_id, token, "COMPLETED", fire + 10 * S)
        fires.append((task_id, fire))
    rows = history_json(db_env, "--type", "nightly")
    assert [(r["task_id"], r["schedule_id"], parse_time(r["scheduled_for"])) for r in rows] == [
        (task_id, schedule_id, fire) for task_id, fire in reversed(fires)
    ]
    assert [r["lateness_ms"] for r in rows] == [2000.0, 2000.0]
    view = conn.execute(
        "SELECT count(*) FROM pgsched.run_history WHERE schedule_id = %s AND outcome = 'COMPLETED'",
        (schedule_id,),
    ).fetchone()
    assert view is not None and view[0] == 2


def test_lateness_is_given_to_the_microsecond_without_float_noise(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    row = conn.execute("SELECT date_trunc('second', now()) - interval '1 hour'").fetchone()
    assert row is not None
    due: datetime = row[0]
    task_id = schedule(conn, "ping", run_at=due)
    token = claim(conn, task_id, "w-a", due + timedelta(microseconds=890))
    report(conn, task_id, token, "COMPLETED", due + S)

    done = run_cli(db_env, "history", "--task", str(task_id), "--json")
    assert done.returncode == 0, done.stderr
    assert '"lateness_ms": 0.89,' in done.stdout
    assert json.loads(done.stdout)[0]["lateness_ms"] == 0.89
    wide = run_cli(db_env, "history", "--task", str(task_id), "--wide").stdout
    assert " 0.890 " in wide
