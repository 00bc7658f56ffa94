"""The dashboard over HTTP: a real `pgsched dashboard` process, a real client, a real database."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from pgsched.dashboard.security import TOKEN_HASH_ENV, hash_token
from pgsched.sweeps import RecurringSweep
from tests.support.dashboard_server import (
    csrf_field,
    env_without_auth,
    make_dead_task,
    running_dashboard,
    status_of,
)


@pytest.fixture
def env(db_env: dict[str, str]) -> dict[str, str]:
    return env_without_auth(db_env)


def test_overview_counts_due_work_per_lane_and_the_dead_lane(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    now = datetime.now(UTC)
    for _ in range(3):
        conn.execute("SELECT pgsched.schedule_task('ping', priority => 9, run_at => %s)", (now,))
    conn.execute("SELECT pgsched.schedule_task('later', run_at => %s)", (now + timedelta(hours=2),))
    make_dead_task(conn)
    with running_dashboard(env) as dash:
        page = httpx.get(dash.url + "/")
    assert page.status_code == 200
    high = page.text.split('data-lane="HIGH"')[1].split("</tr>")[0]
    assert "<td>HIGH</td><td>3</td><td>3</td><td>0</td>" in high  # due, queued, processing
    normal = page.text.split('data-lane="NORMAL"')[1].split("</tr>")[0]
    # The later task is queued, not due; the failed one counts as failed in the last hour.
    assert "<td>NORMAL</td><td>0</td><td>1</td><td>0</td>" in normal
    assert normal.count("<td>1</td>") == 3  # queued, failed 5 min, failed 60 min
    assert 'id="dead-count">1<' in page.text
    assert "<svg" in page.text and "<rect" in page.text


def test_task_search_finds_by_id_type_tenant_key_and_names_a_bad_field(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    ids = {}
    for name, tenant, key in [
        ("a", "acme", "inv:1"),
        ("b", "globex", "inv:1"),
        ("c", "acme", None),
    ]:
        ids[name] = conn.execute(
            "SELECT pgsched.schedule_task(%s, tenant_id => %s, idempotency_key => %s)",
            (f"type_{name}", tenant, key),
        ).fetchone()[0]
    with running_dashboard(env) as dash:

        def found(**params: str) -> set[int]:
            page = httpx.get(dash.url + "/tasks", params=params)
            assert page.status_code == 200, page.text
            return {i for i in ids.values() if f'href="/tasks/{i}"' in page.text}

        assert found(id=str(ids["b"])) == {ids["b"]}
        assert found(type="type_c") == {ids["c"]}
        assert found(tenant="acme") == {ids["a"], ids["c"]}
        assert found(key="inv:1", tenant="globex") == {ids["b"]}
        assert found(status="QUEUED") == set(ids.values())
        assert found(status="FAILED") == set()
        future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        assert found(due_from=future) == set()
        assert found(due_until=future) == set(ids.values())
        bad = httpx.get(dash.url + "/tasks", params={"id": "x1"})
        assert bad.status_code == 400 and "id: not a task id" in bad.text
        bad = httpx.get(dash.url + "/tasks", params={"due_from": "yesterday"})
        assert bad.status_code == 400 and "due_from: not a date and time" in bad.text


def test_task_page_shows_the_timeline_attempts_and_error(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    task_id = make_dead_task(conn, error="smtp refused: 550 mailbox unavailable")
    with running_dashboard(env) as dash:
        page = httpx.get(f"{dash.url}/tasks/{task_id}")
        missing = httpx.get(f"{dash.url}/tasks/999999")
    assert page.status_code == 200
    timeline = page.text.split('id="timeline"')[1]
    assert timeline.count('class="event"') == 2  # QUEUED -> PROCESSING -> FAILED
    assert "<td>QUEUED</td><td>PROCESSING</td>" in timeline
    assert "<td>PROCESSING</td><td>FAILED</td>" in timeline
    attempts = page.text.split('id="attempts"')[1].split("</table>")[0]
    assert "w-test" in attempts and "FAILED" in attempts
    assert "550 mailbox unavailable" in page.text
    assert missing.status_code == 404


def test_dead_retry_needs_confirmation_and_records_the_actor(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    first, second = make_dead_task(conn), make_dead_task(conn)
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        token = csrf_field(client.get("/dead").text)
        form = {"csrf_token": token, "action": "retry", "task_id": [str(first), str(second)]}
        confirm = client.post("/dead/confirm", data=form)
        assert confirm.status_code == 200 and "Retry 2 DEAD task(s)?" in confirm.text
        # Asking is not doing: both are still DEAD until the confirmation is posted.
        assert (status_of(conn, first), status_of(conn, second)) == ("FAILED", "FAILED")
        done = client.post("/dead/apply", data=form, follow_redirects=True)
    assert done.status_code == 200 and f"retry: {first} {second}" in done.text
    assert (status_of(conn, first), status_of(conn, second)) == ("QUEUED", "QUEUED")
    detail = conn.execute(
        "SELECT detail FROM pgsched.task_events WHERE task_id = %s ORDER BY id DESC LIMIT 1",
        (first,),
    ).fetchone()[0]
    assert detail.startswith("retried from the DEAD lane by ") and detail.endswith("via dashboard")


def test_a_bad_dead_lane_form_is_refused_at_both_steps(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    dead = make_dead_task(conn)
    bad_forms = [
        ({"action": "explode", "task_id": str(dead)}, "action: must be retry or discard"),
        ({"action": "retry"}, "task_id: select at least one task"),
        ({"action": "retry", "task_id": "seven"}, "task_id: every value must be a task id"),
    ]
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        token = csrf_field(client.get("/dead").text)
        for step in ("/dead/confirm", "/dead/apply"):
            for fields, message in bad_forms:
                refused = client.post(step, data={"csrf_token": token, **fields})
                assert refused.status_code == 400, (step, fields)
                assert message in refused.text, (step, fields)
    assert status_of(conn, dead) == "FAILED"


def test_a_refused_write_changes_nothing_of_the_batch(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    dead = make_dead_task(conn)
    queued = conn.execute("SELECT pgsched.schedule_task('x')").fetchone()[0]
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        token = csrf_field(client.get("/dead").text)
        form = {"csrf_token": token, "action": "discard", "task_id": [str(dead), str(queued)]}
        refused = client.post("/dead/apply", data=form)
    assert refused.status_code == 409 and "not in the DEAD lane" in refused.text
    assert status_of(conn, dead) == "FAILED"


def test_a_post_without_the_csrf_token_is_refused(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    dead = make_dead_task(conn)
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        real = csrf_field(client.get("/dead").text)  # the cookie is set: only the field lacks
        posts = {
            "/dead/apply": {"action": "retry", "task_id": str(dead)},
            "/dead/confirm": {"action": "retry", "task_id": str(dead)},
            f"/tasks/{dead}/cancel": {"reason": "x"},
            "/schedules/1/pause": {},
        }
        for path, data in posts.items():
            assert client.post(path, data=data).status_code == 403, path
            wrong = client.post(path, data={**data, "csrf_token": real + "x"})
            assert wrong.status_code == 403, path
        # A token from one browser does not work with another's cookie (or none).
        assert (
            httpx.post(
                dash.url + "/dead/apply",
                data={"csrf_token": real, "action": "retry", "task_id": str(dead)},
            ).status_code
            == 403
        )
    assert status_of(conn, dead) == "FAILED"


def test_every_post_route_is_guarded() -> None:
    from pgsched.dashboard.app import DashboardConfig, create_app

    app = create_app(DashboardConfig(dsn="dbname=unused"))
    posts = {
        getattr(r, "path", "") for r in app.routes if "POST" in (getattr(r, "methods", None) or ())
    }
    # The test above posts to each of these; a new write route must be added there.
    assert posts == {
        "/dead/apply",
        "/dead/confirm",
        "/tasks/{task_id:int}/cancel",
        "/schedules/{schedule_id:int}/{verb:str}",
    }


def test_read_only_mode_shows_no_write_buttons_and_refuses_posts(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    dead = make_dead_task(conn)
    with running_dashboard(env, "--read-only") as dash, httpx.Client(base_url=dash.url) as client:
        page = client.get("/dead")
        assert 'id="retry-selected"' not in page.text and 'type="checkbox"' not in page.text
        assert 'id="retry-all"' not in page.text and 'id="discard-all"' not in page.text
        assert client.get("/schedules/1/pause").status_code == 403
        assert 'id="retry"' not in client.get(f"/tasks/{dead}").text
        token = csrf_field(page.text)
        refused = client.post(
            "/dead/apply", data={"csrf_token": token, "action": "retry", "task_id": str(dead)}
        )
    assert refused.status_code == 403 and "read-only" in refused.text
    assert status_of(conn, dead) == "FAILED"


def test_a_non_local_bind_without_auth_is_refused_with_exit_2(env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pgsched", "dashboard", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert TOKEN_HASH_ENV in result.stderr and "Traceback" not in result.stderr


def test_with_a_token_every_page_needs_it_and_the_user_is_the_actor(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    dead = make_dead_task(conn)
    stored = hash_token("s3cret-token")
    with running_dashboard(env, "--host", "127.0.0.1", extra_env={TOKEN_HASH_ENV: stored}) as dash:
        assert httpx.get(dash.url + "/").status_code == 401
        assert httpx.get(dash.url + "/", auth=("alice", "wrong")).status_code == 401
        with httpx.Client(base_url=dash.url, auth=("alice", "s3cret-token")) as client:
            token = csrf_field(client.get("/dead").text)
            done = client.post(
                "/dead/apply", data={"csrf_token": token, "action": "discard", "task_id": str(dead)}
            )
    assert done.status_code == 303
    assert status_of(conn, dead) == "CANCELLED"
    detail = conn.execute(
        "SELECT detail FROM pgsched.task_events WHERE task_id = %s ORDER BY id DESC LIMIT 1",
        (dead,),
    ).fetchone()[0]
    assert detail == "discarded from the DEAD lane by alice via dashboard"


def test_hash_token_prints_a_hash_the_dashboard_accepts(env: dict[str, str]) -> None:
    from pgsched.dashboard.security import TokenAuth

    result = subprocess.run(
        [sys.executable, "-m", "pgsched", "dashboard", "--hash-token"],
        env=env,
        input="tok\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    stored = result.stdout.strip()
    assert stored.startswith("scrypt$") and "tok" not in stored.split("$", 1)[1]
    auth = TokenAuth.from_env({TOKEN_HASH_ENV: stored})
    assert auth is not None
    assert auth.user_for("Basic " + __import__("base64").b64encode(b"bob:tok").decode()) == "bob"
    assert auth.user_for("Basic " + __import__("base64").b64encode(b"bob:tak").decode()) is None


def test_schedule_pause_asks_first_and_records_who_did_it_once(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    schedule_id = conn.execute(
        "SELECT pgsched.schedule_recurring('report', '0 9 * * *', 'Europe/Paris')"
    ).fetchone()[0]
    now = conn.execute("SELECT now()").fetchone()[0]
    assert RecurringSweep().run_once(conn, now)["armed"] == 1  # its next occurrence waits
    armed_id = conn.execute(
        "SELECT armed_task_id FROM pgsched.schedules WHERE id = %s", (schedule_id,)
    ).fetchone()[0]
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        page = client.get("/schedules")
        assert "Europe/Paris" in page.text and "09:00 CE" in page.text  # CET or CEST
        # Pause cancels the armed occurrence: the list links to a confirmation, which says so.
        assert f'href="/schedules/{schedule_id}/pause"' in page.text
        assert f'action="/schedules/{schedule_id}/pause"' not in page.text
        confirm = client.get(f"/schedules/{schedule_id}/pause")
        assert confirm.status_code == 200
        effect = confirm.text.split('id="schedule-effect"')[1].split("</p>")[0]
        assert f'task <a href="/tasks/{armed_id}">{armed_id}</a>' in effect
        assert "is cancelled" in effect
        assert conn.execute(
            "SELECT enabled FROM pgsched.schedules WHERE id = %s", (schedule_id,)
        ).fetchone()[0], "asking is not doing"
        token = csrf_field(confirm.text)
        paused = client.post(f"/schedules/{schedule_id}/pause", data={"csrf_token": token})
        assert paused.status_code == 303
        assert "paused" in client.get("/schedules").text
        resumed = client.post(f"/schedules/{schedule_id}/resume", data={"csrf_token": token})
        assert resumed.status_code == 303
    events = conn.execute(
        "SELECT what, detail FROM pgsched.schedule_events WHERE schedule_id = %s ORDER BY id",
        (schedule_id,),
    ).fetchall()
    paused_detail = next(d for w, d in events if w == "paused")
    assert paused_detail.startswith("paused by ")
    assert paused_detail.count("via dashboard") == 1, paused_detail
    assert events[-1][0] == "resumed" and events[-1][1].count("via dashboard") == 1, events
    # The CLI's pause, not a bare disable: the occurrence armed for it is cancelled.
    assert status_of(conn, armed_id) == "CANCELLED"


def test_pages_render_through_a_read_only_role(
    conn: psycopg.Connection, env: dict[str, str], db_dsn: str
) -> None:
    conn.execute("CREATE ROLE dash_reader LOGIN")
    conn.execute("GRANT USAGE ON SCHEMA pgsched TO dash_reader")
    conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA pgsched TO dash_reader")
    try:
        make_dead_task(conn)
        read_dsn = psycopg.conninfo.make_conninfo(db_dsn, user="dash_reader")
        with running_dashboard(env, "--read-dsn", read_dsn) as dash:
            for path in [
                "/",
                "/tasks?type=send_mail",
                "/dead",
                "/schedules",
                "/tenants",
                "/workers",
            ]:
                assert httpx.get(dash.url + path).status_code == 200, path
    finally:
        conn.execute("DROP OWNED BY dash_reader")
        conn.execute("DROP ROLE dash_reader")
