"""OpenTelemetry (pgsched/tracing.py): one trace from the request that schedules a task to
its handler's execution, through the claim, in-process (drain) and in a real worker
process exporting by its environment; and nothing at all when tracing is off."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pgsched import App, tracing
from pgsched.testing import drain
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import Workers, statuses, wait_until

APP = "tests.apps.tracing_app:app"


class Spans:
    """Tracing on in this process: pgsched's spans, a request's and the handlers' (through
    the global provider, as `trace.get_tracer` in a handler module finds it), in memory."""

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _global = False

    def __init__(self) -> None:
        if not Spans._global:
            # Once per process (OpenTelemetry refuses a second); each test clears the spans.
            trace.set_tracer_provider(self.provider)
            Spans._global = True
        self.exporter.clear()

    def request(self, name: str) -> Any:
        """A span of the application's, as a web framework's instrumentation makes."""
        return self.provider.get_tracer("tests.request").start_as_current_span(name)

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()


@pytest.fixture
def spans() -> Iterator[Spans]:
    found = Spans()
    tracing.enable(found.provider)
    try:
        yield found
    finally:
        tracing.disable()


@pytest.fixture
def tracing_app(db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> App:
    from tests.apps.tracing_app import app

    monkeypatch.setattr(app, "_dsn", db_dsn)
    return app


def _named(finished: Any, name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def _one(finished: Any, name: str) -> ReadableSpan:
    found = _named(finished, name)
    assert len(found) == 1, [s.name for s in finished]
    return found[0]


def test_one_trace_from_the_request_to_the_handler_in_process(
    spans: Spans, tracing_app: App
) -> None:
    with spans.request("POST /orders") as request:
        task = tracing_app.schedule("traced", {"order": 7}, tenant_id="acme")
    result = drain(tracing_app)
    assert result.completed == 1

    finished = spans.finished()
    schedule = _one(finished, "pgsched.schedule")
    claim = _one(finished, "pgsched.claim")
    execute = _one(finished, "pgsched.execute")
    work = _one(finished, "handler.work")
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in (schedule, claim, execute, work)} == {trace_id}
    assert schedule.parent is not None
    assert schedule.parent.span_id == request.get_span_context().span_id
    assert claim.parent is not None and claim.parent.span_id == schedule.context.span_id
    assert execute.parent is not None and execute.parent.span_id == schedule.context.span_id
    assert work.parent is not None and work.parent.span_id == execute.context.span_id
    assert schedule.attributes is not None and execute.attributes is not None
    assert schedule.attributes["pgsched.task.id"] == int(task)
    assert dict(execute.attributes) == {
        "pgsched.task.id": int(task),
        "pgsched.task.type": "traced",
        "pgsched.lane": "NORMAL",
        "pgsched.tenant": "acme",
        "pgsched.attempt": 1,
        "pgsched.outcome": "COMPLETED",
    }


def test_a_traceparent_given_in_sql_parents_the_execution(
    spans: Spans, tracing_app: App, conn: psycopg.Connection[Any]
) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    conn.execute(
        "SELECT pgsched.schedule_task(task_type => 'traced_fails', traceparent => %s)",
        (traceparent,),
    )
    assert drain(tracing_app).retried == 1
    execute = _one(spans.finished(), "pgsched.execute")
    assert f"{execute.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert execute.parent is not None and f"{execute.parent.span_id:016x}" == "b7ad6b7169203331"
    assert execute.attributes is not None
    assert execute.attributes["pgsched.outcome"] == "RETRY"
    assert not execute.status.is_ok
    assert "the mail server is down" in (execute.status.description or "")


def _console_spans(text: str) -> list[dict[str, Any]]:
    """The spans a ConsoleSpanExporter printed (indented JSON documents) among log lines."""
    found, lines, inside = [], [], False
    for line in text.splitlines():
        if line == "{":
            inside, lines = True, [line]
        elif inside:
            lines.append(line)
            if line == "}":
                inside = False
                found.append(json.loads("\n".join(lines)))
    return found


def test_a_worker_process_exports_the_execution_in_the_requests_trace(
    spans: Spans,
    tracing_app: App,
    workers: Workers,
    conn: psycopg.Connection[Any],
) -> None:
    with spans.request("POST /orders") as request:
        task = tracing_app.schedule("traced", {"order": 8})
    workers.env = {**workers.env, "PGSCHED_OTEL": "1", "OTEL_TRACES_EXPORTER": "console"}
    worker = workers.start("W1", app=APP)
    wait_until(lambda: statuses(conn, [task]) == {task: "COMPLETED"}, 30, what="the task")
    trace_id = f"0x{request.get_span_context().trace_id:032x}"
    schedule_id = f"0x{_one(spans.finished(), 'pgsched.schedule').context.span_id:016x}"

    def exported() -> list[dict[str, Any]]:
        return [s for s in _console_spans(worker.log()) if s["context"]["trace_id"] == trace_id]

    wait_until(
        lambda: {"pgsched.execute", "handler.work"} <= {s["name"] for s in exported()},
        30,
        what="the worker's spans",
    )
    by_name = {s["name"]: s for s in exported()}
    execute = by_name["pgsched.execute"]
    assert execute["parent_id"] == schedule_id
    assert execute["attributes"]["pgsched.task.id"] == int(task)
    assert execute["attributes"]["pgsched.outcome"] == "COMPLETED"
    assert by_name["pgsched.claim"]["parent_id"] == schedule_id
    assert by_name["handler.work"]["parent_id"] == execute["context"]["span_id"]


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_off_it_imports_nothing_and_costs_no_object_per_task(db_env: dict[str, str]) -> None:
    env = {k: v for k, v in db_env.items() if k != "PGSCHED_OTEL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    code = """
import sys
from pgsched import App, tracing
from pgsched.testing import drain
app = App()
app.register("noop", lambda ctx: None)
app.schedule("noop")
assert drain(app).completed == 1
record = lambda outcome: None
assert tracing.recording(record) is record
assert tracing.executing(object()) is tracing.executing(object())
assert not [m for m in sys.modules if m.startswith("opentelemetry")], "imported"
print("ok")
"""
    done = _run_python(code, env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_turned_on_without_the_extra_it_says_so_and_runs_untraced(
    db_env: dict[str, str],
) -> None:
    env = {**db_env, "PGSCHED_OTEL": "1", "PYTHONPATH": str(REPO_ROOT)}
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from pgsched import App
app = App()
print(int(app.schedule("noop")))
"""
    done = _run_python(code, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PGSCHED_OTEL: tracing needs the otel extra: pip install 'pgsched[otel]'" in done.stderr
    assert "Traceback" not in done.stderr
