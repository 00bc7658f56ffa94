"""Hostile input to every route of the dashboard: no value may make it answer 5xx.

The routes are read off the application itself and the field names off its templates and
its source (every `name="..."` of a form, every `query_params` / `form` lookup), so a new
route or a new field is thrown at without anyone adding it here. Each field gets a corpus of
values no search or form can use (NUL, numbers beyond bigint, negative, unicode, very long,
SQL metacharacters, malformed dates), alone, duplicated and all together, on every route,
with a valid CSRF token so that the writes' own checks are reached; a real dashboard
process answers them from a real database.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from starlette.routing import Route

import pgsched.dashboard.app as dashboard_app
from pgsched.dashboard.app import DashboardConfig, create_app
from pgsched.sweeps import RecurringSweep
from tests.support.dashboard_server import (
    csrf_field,
    env_without_auth,
    make_dead_task,
    running_dashboard,
)

DASHBOARD_DIR = Path(dashboard_app.__file__).resolve().parent

HOSTILE: list[str] = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "99999999999999999999",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "-1",
    "0",
    "1e309",
    "NaN",
    "\uff11\uff12\uff13",  # fullwidth digits: int() reads them as 123
    "1_000",
    "é🚀\u202etxt",
    "x" * 5_000,
    "' OR 1=1 --",
    "'; DROP TABLE pgsched.tasks; --",
    "%_\\",
    "<script>alert(1)</script>",
    "2026-13-45T25:61",
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00+14:00",
    "retry",
    "FAILED",
    "2026-12-05T10:00:00+00:00,5",
]

RAW_BODIES: list[tuple[str, bytes]] = [
    ("multipart/form-data; boundary=x", b"garbage--x\r\n\x00"),
    ("multipart/form-data", b"no boundary"),
    ("application/json", b'{"action": "retry"'),
    ("application/x-www-form-urlencoded", b"%zz=%%&action=%00&task_id=%ff%fe"),
    ("text/plain", b"\xff\xfe\x00"),
]

# Values whose answer is not just "not 5xx": the ones users met.
MUST_BE_400 = [
    ("GET", "/tasks?type=a%00b"),
    ("GET", "/dead?type=a%00b"),
    ("GET", "/tasks?id=99999999999999999999"),
    ("GET", "/tasks?tenant=%00"),
    ("GET", "/tasks?key=k%00"),
    ("GET", "/tasks/99999999999999999999"),
]


def field_names() -> set[str]:
    """Every field a template's form sends and every one the application reads."""
    names: set[str] = set()
    for template in (DASHBOARD_DIR / "templates").glob("*.html"):
        names |= set(re.findall(r'name="([a-z_]+)"', template.read_text()))
    for source in DASHBOARD_DIR.glob("*.py"):
        text = source.read_text()
        names |= set(re.findall(r'(?:query_params|form|params)\.get(?:list)?\("([a-z_]+)"', text))
        names |= set(re.findall(r'\b(?:text|clean_text|parse_id|parse_page)\(\s*"([a-z_]+)"', text))
    return names


def routes() -> list[tuple[str, str]]:
    """(method, path template) of every route of the application."""
    app = create_app(DashboardConfig(dsn="dbname=unused"))
    found = []
    for r in app.routes:
        if isinstance(r, Route):
            for method in sorted(r.methods or {"GET"}):
                if method != "HEAD":
                    found.append((method, r.path))
    return found


def test_the_corpus_reaches_every_route_and_field() -> None:
    """The discovery above finds what it must: the routes and the fields users fill."""
    paths = {p for _, p in routes()}
    assert {"/", "/tasks", "/tasks/{task_id:int}", "/dead", "/dead/confirm"} <= paths
    assert {"id", "type", "tenant", "key", "status", "due_from", "task_id", "action"} <= (
        field_names()
    )
    # Read by the application only (the pages' links carry them, no form does).
    assert {"after", "page", "events_after", "refresh", "done"} <= field_names()


def concrete_paths(template: str, ids: dict[str, list[str]]) -> list[str]:
    """The path template with its parameters filled with real and hostile values."""
    paths = [template]
    for match in re.finditer(r"\{(\w+)(?::(\w+))?\}", template):
        name, convertor = match.group(1), match.group(2) or "str"
        if convertor == "int":
            values = [*ids.get(name, []), "0", "9223372036854775808", "99999999999999999999"]
        else:
            values = ["pause", "resume", "delete", "explode", "%00", "PAUSE", "x" * 300]
        paths = [p.replace(match.group(0), v) for p in paths for v in values]
    return paths


@pytest.fixture
def env(db_env: dict[str, str]) -> dict[str, str]:
    return env_without_auth(db_env)


def test_no_hostile_value_on_any_route_answers_5xx(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    dead = make_dead_task(conn, error="ValueError: boom\n  File 'x.py', line 1")
    queued = conn.execute("SELECT pgsched.schedule_task('x')").fetchone()[0]
    schedule = conn.execute("SELECT pgsched.schedule_recurring('r', '0 9 * * *')").fetchone()[0]
    RecurringSweep().run_once(conn, conn.execute("SELECT now()").fetchone()[0])
    ids = {"task_id": [str(dead), str(queued)], "schedule_id": [str(schedule)]}
    fields = sorted(field_names())
    failures: list[tuple[Any, ...]] = []
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url, timeout=30) as client:
        token = csrf_field(client.get("/dead").text)

        def send(method: str, path: str, data: list[tuple[str, str]]) -> None:
            if len(failures) >= 20:
                return  # enough to see what is wrong
            try:
                if method == "GET":
                    response = client.get(path, params=tuple(data))
                else:
                    form: dict[str, list[str]] = {"csrf_token": [token]}
                    for name, value in data:
                        form.setdefault(name, []).append(value)
                    response = client.post(path, data=form)
            except httpx.TransportError as exc:
                failures.append((method, path, data[:3], repr(exc)))
                return
            if response.status_code >= 500:
                failures.append((method, path, data[:3], response.status_code))

        for method, template in routes():
            first, *others = concrete_paths(template, ids)
            for path in [first, *others]:
                send(method, path, [])  # every field missing
                for value in HOSTILE:
                    # All at once (the long value cut: uvicorn drops a request line over
                    # 16 KB before the application sees it).
                    send(method, path, [(f, value[:500]) for f in fields])
            # Each field on its own, and duplicated, on the path with real ids.
            for f in fields:
                for value in HOSTILE:
                    send(method, first, [(f, value)])
                for value in ("a\x00b", "99999999999999999999"):
                    send(method, first, [(f, value), (f, "1")])
                    send(method, first, [(f, "1"), (f, value)])
        # Bodies no form sends: malformed multipart and urlencoding, JSON, bytes that are
        # not UTF-8, and a multipart form whose fields are files.
        for method, template in routes():
            if method != "POST":
                continue
            path = concrete_paths(template, ids)[0]
            for content_type, body in RAW_BODIES:
                try:
                    status = client.post(
                        path, content=body, headers={"content-type": content_type}
                    ).status_code
                except httpx.TransportError as exc:
                    failures.append((path, content_type, repr(exc)))
                    continue
                if status >= 500:
                    failures.append((path, content_type, status))
            files = {f: ("x.txt", b"1\x00", "text/plain") for f in fields if f != "csrf_token"}
            status = client.post(path, data={"csrf_token": token}, files=files).status_code
            if status >= 500:
                failures.append((path, "files", status))
        for method, path in MUST_BE_400:
            try:
                answer: int | str = client.request(method, path).status_code
            except httpx.TransportError as exc:
                answer = repr(exc)
            if answer != 400:
                failures.append((method, path, answer))
    assert failures == [], failures[:20]


def test_an_id_beyond_bigint_is_refused_with_a_message(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    make_dead_task(conn)
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        assert client.get("/tasks", params={"type": "a\x00b"}).status_code == 400
        nul = client.get("/dead", params={"type": "a\x00b"})
        assert nul.status_code == 400 and "type: contains a NUL character" in nul.text
        big = client.get("/tasks", params={"id": "99999999999999999999"})
        assert big.status_code == 400 and "id: not a task id" in big.text
        token = csrf_field(client.get("/dead").text)
        for step in ("/dead/confirm", "/dead/apply"):
            refused = client.post(
                step,
                data={"csrf_token": token, "action": "retry", "task_id": "99999999999999999999"},
            )
            assert refused.status_code == 400, (step, refused.text)
            assert "task_id: every value must be a task id" in refused.text
            assert "does not exist" not in refused.text and "numeric" not in refused.text


def test_schedule_verbs_are_exactly_pause_resume_delete(
    conn: psycopg.Connection, env: dict[str, str]
) -> None:
    schedule_id = conn.execute(
        "SELECT pgsched.schedule_recurring('report', '0 9 * * *', 'Europe/Paris')"
    ).fetchone()[0]
    with running_dashboard(env) as dash, httpx.Client(base_url=dash.url) as client:
        token = csrf_field(client.get("/dead").text)
        for verb in ("explode", "Pause", "disable", "pause2"):
            odd = client.post(f"/schedules/{schedule_id}/{verb}", data={"csrf_token": token})
            assert odd.status_code == 404, (verb, odd.status_code)
        enabled = conn.execute(
            "SELECT enabled FROM pgsched.schedules WHERE id = %s", (schedule_id,)
        ).fetchone()[0]
        assert enabled, "an unknown verb paused the schedule"
        for verb in ("pause", "resume", "delete"):
            unknown = client.post("/schedules/424242/" + verb, data={"csrf_token": token})
            assert unknown.status_code == 409, (verb, unknown.status_code)
            assert "no schedule with id 424242" in unknown.text
        deleted = client.post(f"/schedules/{schedule_id}/delete", data={"csrf_token": token})
        assert deleted.status_code == 303
    gone = conn.execute("SELECT count(*) FROM pgsched.schedules WHERE id = %s", (schedule_id,))
    assert gone.fetchone()[0] == 0
