"""OpenTelemetry spans for scheduling, claiming and running a task (the `otel` extra).

One trace follows a task from the request that scheduled it to its handler:

    pgsched.schedule  (PRODUCER, a child of the caller's current span)
      pgsched.claim   (INTERNAL, the claim that took the task, per task)
      pgsched.execute (CONSUMER, around validate .. after_execute; the handler's own spans
                       are its children)

The trace context travels in the task: scheduling from Python stores the schedule span's
W3C `traceparent` with the task; a caller of `pgsched.schedule_task(... traceparent => ...)`
from any language passes its own. The worker reads it back from the claimed row. A task
without one gets an execution span of its own trace.

Attributes: pgsched.task.id, pgsched.task.type, pgsched.lane, pgsched.tenant,
pgsched.attempt, pgsched.outcome (COMPLETED, RETRY, FAILED, RELEASED, CANCELLED).

Off unless turned on, and then only if the extra is installed: `PGSCHED_OTEL=1` in the
environment (read once, at the first span), or `enable()` in code. Spans go to the global
tracer provider the application set up; when none is set and `OTEL_TRACES_EXPORTER` names
an exporter (`console`, or `otlp` with opentelemetry-exporter-otlp installed), pgsched
sets one up with it, so a worker is traced by its environment alone. Off, each hook is
one check of a module global: no import of opentelemetry, no object per task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pgsched.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from pgsched.producer import ScheduleOptions
    from pgsched.tasks import ScheduledTask, TaskRow, TaskSpec

log = logging.getLogger("pgsched.tracing")

ENV_SWITCH = "PGSCHED_OTEL"
TRACER_NAME = "pgsched"
# The names pgsched's spans and attributes use (the docs name them too).
SPAN_NAMES = ("pgsched.schedule", "pgsched.schedule_many", "pgsched.claim", "pgsched.execute")
ATTRIBUTE_NAMES = (
    "pgsched.task.id",
    "pgsched.task.type",
    "pgsched.lane",
    "pgsched.tenant",
    "pgsched.attempt",
    "pgsched.outcome",
    "pgsched.created",
    "pgsched.count",
    "pgsched.claim.batch",
)

# The tracer when on; decided at the first hook (or by enable/disable).
_tracer: Tracer | None = None
_decided = False
_NULL = contextlib.nullcontext()


def _wanted_by_env() -> bool:
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value in {"1", "true", "on", "yes"}:
        return True
    if value not in {"", "0", "false", "off", "no"}:
        log.error("%s=%r is not 1 or 0; tracing stays off", ENV_SWITCH, value)
    return False


def _decide() -> Tracer | None:
    if not _decided:
        _decide_first()
    return _tracer


def _decide_first() -> None:
    global _decided
    if _wanted_by_env():
        try:
            enable()
        except ConfigError as exc:
            # Scheduling and running tasks go on untraced; said once.
            log.error("%s; tracing stays off", exc)
    _decided = True


def enabled() -> bool:
    return _decide() is not None


def enable(tracer_provider: Any = None) -> None:
    """Turn tracing on in this process (spans go to `tracer_provider`, else the global
    one, set up from OTEL_TRACES_EXPORTER when there is none). Raises ConfigError when
    the `otel` extra is not installed."""
    global _tracer, _decided
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigError(
            f"{ENV_SWITCH}: tracing needs the otel extra: pip install 'pgsched[otel]'"
        ) from None
    if tracer_provider is None:
        _provider_from_env()
        _tracer = trace.get_tracer(TRACER_NAME)
    else:
        _tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    _decided = True


def disable() -> None:
    """Turn tracing off in this process (the environment is not read again)."""
    global _tracer, _decided
    _tracer, _decided = None, True


def _provider_from_env() -> None:
    """A tracer provider from OTEL_TRACES_EXPORTER, when the application set none."""
    from opentelemetry import trace

    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not exporter_name or exporter_name == "none":
        return
    if type(trace.get_tracer_provider()).__name__ != "ProxyTracerProvider":
        return  # the application's own
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError:
        raise ConfigError(
            "OTEL_TRACES_EXPORTER: exporting needs opentelemetry-sdk: pip install 'pgsched[otel]'"
        ) from None
    processor: SpanProcessor
    if exporter_name == "console":
        # One JSON document per span on stdout, as it ends.
        processor = SimpleSpanProcessor(ConsoleSpanExporter())
    elif exporter_name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http"
            ) from None
        processor = BatchSpanProcessor(OTLPSpanExporter())
    else:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={exporter_name!r}: pgsched sets up 'console' or 'otlp' "
            "(set up any other tracer provider in your application)"
        )
    service = os.environ.get("OTEL_SERVICE_NAME", "pgsched")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)


# -- scheduling -----------------------------------------------------------------------------


def scheduling(task_type: str, options: ScheduleOptions) -> contextlib.AbstractContextManager[Any]:
    """Around one schedule call: a `pgsched.schedule` span, whose trace context goes into
    `options` as the task's traceparent (unless the caller gave one). Yields what
    `scheduled` takes (None when tracing is off)."""
    tracer = _decide()
    if tracer is None:
        return _NULL
    attributes = {
        "pgsched.task.type": task_type,
        "pgsched.tenant": options.get("tenant_id") or "default",
    }
    return _scheduling(tracer, "pgsched.schedule", attributes, options)


@contextlib.contextmanager
def _scheduling(
    tracer: Tracer, name: str, attributes: dict[str, Any], options: ScheduleOptions | None
) -> Iterator[tuple[Span, str | None]]:
    from opentelemetry.trace import SpanKind

    with tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes) as span:
        traceparent = _traceparent()
        if options is not None and options.get("traceparent") is None:
            options["traceparent"] = traceparent
        yield span, traceparent


def _traceparent() -> str | None:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def scheduling_many(specs: Sized) -> contextlib.AbstractContextManager[Any]:
    """Around a schedule_many call: one `pgsched.schedule_many` span; yields what
    `traced_specs` takes (None when off)."""
    tracer = _decide()
    if tracer is None:
        return _NULL
    return _scheduling(tracer, "pgsched.schedule_many", {"pgsched.count": len(specs)}, None)


def traced_specs(traced: Any, specs: list[TaskSpec]) -> list[TaskSpec]:
    """The tasks of a schedule_many, each carrying the span's traceparent unless it has
    its own. Off: `specs` themselves."""
    if traced is None or traced[1] is None:
        return specs
    update = {"traceparent": traced[1]}
    return [s if s.traceparent else s.model_copy(update=update) for s in specs]


def scheduled(traced: Any, task: ScheduledTask) -> None:
    """The scheduled task's id on the span `scheduling` yielded (if any)."""
    if traced is not None:
        span = traced[0]
        span.set_attribute("pgsched.task.id", int(task))
        span.set_attribute("pgsched.created", bool(task.created))


# -- the worker -----------------------------------------------------------------------------


def _parent(task: TaskRow) -> Any:
    traceparent = getattr(task, "traceparent", None)
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def _task_attributes(task: TaskRow) -> dict[str, Any]:
    return {
        "pgsched.task.id": int(task.id),
        "pgsched.task.type": task.task_type,
        "pgsched.lane": str(task.lane),
        "pgsched.tenant": task.tenant_id,
        "pgsched.attempt": int(task.attempt),
    }


def claimed(lane: str, tasks: Sequence[TaskRow], started_ns: int) -> None:
    """A `pgsched.claim` span for each task a claim took (from `started_ns`, time.time_ns()
    when the claim began, to now), each in its task's trace."""
    if not tasks:
        return
    tracer = _decide()
    if tracer is None:
        return
    ended = time.time_ns()
    for task in tasks:
        span = tracer.start_span(
            "pgsched.claim",
            context=_parent(task),
            attributes={**_task_attributes(task), "pgsched.claim.batch": len(tasks)},
            start_time=started_ns,
        )
        span.end(end_time=ended)


@contextlib.contextmanager
def _executing(tracer: Tracer, task: TaskRow) -> Iterator[Span]:
    from opentelemetry.trace import SpanKind

    with tracer.start_as_current_span(
        "pgsched.execute",
        context=_parent(task),
        kind=SpanKind.CONSUMER,
        attributes=_task_attributes(task),
        record_exception=False,
        set_status_on_exception=True,
    ) as span:
        yield span
        if "pgsched.outcome" not in (getattr(span, "attributes", None) or {}):
            # Nothing was recorded through the buffer: a transactional completion.
            span.set_attribute("pgsched.outcome", "COMPLETED")


def executing(task: TaskRow) -> contextlib.AbstractContextManager[Any]:
    """Around one task's run: the `pgsched.execute` span, current while the handler runs."""
    tracer = _decide()
    if tracer is None:
        return _NULL
    return _executing(tracer, task)


class _Reported(Protocol):
    """What a span reads of an outcome (the worker's `Outcome`; this module imports
    nothing from the worker, which imports it)."""

    @property
    def outcome(self) -> str: ...

    @property
    def error(self) -> str | None: ...


_OutcomeT = TypeVar("_OutcomeT", bound=_Reported)


def recording(record: Callable[[_OutcomeT], None]) -> Callable[[_OutcomeT], None]:
    """`record` (the runner's outcome sink), also noting each outcome on the execution
    span current where it is recorded. Off: `record` itself."""
    if _decide() is None:
        return record

    def traced(outcome: _OutcomeT) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute("pgsched.outcome", outcome.outcome)
            if outcome.error is not None and outcome.outcome != "COMPLETED":
                span.set_status(Status(StatusCode.ERROR, outcome.error.splitlines()[0][:200]))
        record(outcome)

    return traced
