"""Handlers the tracing tests run, in a real worker process or in-process by drain: each
opens a span of its own, which must be a child of pgsched's execution span."""

from __future__ import annotations

from opentelemetry import trace

from pgsched import App, RetryPolicy, TaskContext

app = App()
tracer = trace.get_tracer("tests.apps.tracing_app")


@app.handler("traced")
async def traced(ctx: TaskContext) -> None:
    with tracer.start_as_current_span("handler.work") as span:
        span.set_attribute("order", ctx.payload.get("order", 0))


@app.handler("traced_fails", retry=RetryPolicy(base_seconds=60, cap_seconds=60))
def traced_fails(ctx: TaskContext) -> None:
    raise RuntimeError("the mail server is down")
