"""Progress: ctx.progress from handlers in a thread, a handler process and on the event
loop, written at most once a second per task however often it is called; read back with
pgsched.task_progress(id), `pgsched show` and the dashboard's task page."""

from __future__ import annotations

import subprocess

import httpx
import psycopg
import pytest

from tests.support.dashboard_server import env_without_auth, running_dashboard
from tests.support.worker_helpers import PGSCHED, Workers, schedule, status, wait_until

APP = "tests.apps.lifecycle:app"


def count_progress_writes(conn: psycopg.Connection) -> None:
    """Every row the workers write into pgsched.task_progress, logged by a trigger."""
    conn.execute(
        "CREATE TABLE public.progress_writes (task_id bigint, fraction real, note text,"
        " at timestamptz DEFAULT clock_timestamp())"
    )
    conn.execute(
        "CREATE FUNCTION public.log_progress_write() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO public.progress_writes (task_id, fraction, note)"
        " VALUES (NEW.task_id, NEW.fraction, NEW.note); RETURN NEW; END $$"
    )
    conn.execute(
        "CREATE TRIGGER progress_writes AFTER INSERT OR UPDATE ON pgsched.task_progress"
        " FOR EACH ROW EXECUTE FUNCTION public.log_progress_write()"
    )


def progress(conn: psycopg.Connection, task_id: int) -> tuple[float, str] | None:
    row = conn.execute(
        "SELECT fraction, note FROM pgsched.task_progress(%s)", (task_id,)
    ).fetchone()
    return None if row is None else (float(row[0]), row[1])


@pytest.mark.parametrize("task_type", ["progress_thread", "progress_process", "progress_async"])
def test_a_tight_loop_is_written_at_most_once_a_second(
    conn: psycopg.Connection, workers: Workers, task_type: str
) -> None:
    count_progress_writes(conn)
    task_id = schedule(conn, task_type, '{"seconds": 2.5}')
    workers.start("W1", app=APP)
    wait_until(lambda: status(conn, task_id) == "COMPLETED", 60, what="the task to complete")
    # The last report lands within a second of the end, with its note.
    final = wait_until(
        lambda: (p := progress(conn, task_id)) is not None and p[0] == 1.0 and p,
        10,
        what="the final progress",
    )
    calls = int(final[1].split()[2])
    writes = conn.execute(
        "SELECT count(*), extract(epoch FROM max(at) - min(at)) FROM public.progress_writes"
        " WHERE task_id = %s",
        (task_id,),
    ).fetchone()
    assert writes is not None
    count, span = int(writes[0]), float(writes[1] or 0)
    # Thousands of calls (200 for the async one), a handful of writes: one a second at
    # most over the writes' own span (plus the first).
    print(f"{task_type}: {calls} calls, {count} writes over {span:.2f} s")
    assert calls >= 200
    assert 2 <= count <= span + 2, (count, span, calls)
    gaps = conn.execute(
        "SELECT extract(epoch FROM at - lag(at) OVER (ORDER BY at)) FROM public.progress_writes"
        " WHERE task_id = %s ORDER BY at",
        (task_id,),
    ).fetchall()
    assert all(g[0] is None or g[0] >= 0.9 for g in gaps), gaps


def test_bad_progress_fails_the_attempt_saying_why(
    conn: psycopg.Connection, workers: Workers
) -> None:
    task_id = schedule(conn, "progress_bad", max_attempts=1)
    workers.start("W1", app=APP)
    wait_until(lambda: status(conn, task_id) == "FAILED", 60, what="the task to fail")
    error = conn.execute(
        "SELECT last_error FROM pgsched.tasks WHERE id = %s", (task_id,)
    ).fetchone()[0]
    assert "ValueError: progress 1.5 is out of range (a fraction from 0 to 1)" in error
    assert progress(conn, task_id) is None


def test_progress_from_sql_show_and_the_dashboard(
    conn: psycopg.Connection, db_env: dict[str, str]
) -> None:
    task_id = schedule(conn, "report")
    # A worker of any language writes it so; the last element wins for a task given twice.
    written = conn.execute(
        "SELECT pgsched.task_progress_set_many(ARRAY[%s, %s], ARRAY[0.25, 0.5]::real[],"
        " ARRAY['a quarter', 'half of <b>it</b>'])",
        (task_id, task_id),
    ).fetchone()
    assert written == (1,)
    assert progress(conn, task_id) == (0.5, "half of <b>it</b>")
    for bad in ("ARRAY[1.5]::real[]", "ARRAY[NULL]::real[]"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="is out of range"):
            conn.execute(
                f"SELECT pgsched.task_progress_set_many(ARRAY[%s], {bad}, NULL)", (task_id,)
            )
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="one element per task"):
        conn.execute("SELECT pgsched.task_progress_set_many(ARRAY[1, 2], ARRAY[0.5]::real[], NULL)")
    assert progress(conn, task_id) == (0.5, "half of <b>it</b>")
    assert progress(conn, task_id + 1000) is None

    shown = subprocess.run(
        [PGSCHED, "show", str(task_id)], env=db_env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    assert lines["progress"].split()[1] == "50%"
    assert "half of <b>it</b>" in lines["progress_note"]

    with running_dashboard(env_without_auth(db_env)) as dash:
        page = httpx.get(f"{dash.url}/tasks/{task_id}")
    assert page.status_code == 200
    cell = page.text.split('id="progress">')[1].split("</td>")[0]
    assert "50%" in cell and "half of &lt;b&gt;it&lt;/b&gt;" in cell
