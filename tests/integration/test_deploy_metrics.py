"""The shipped alert rules and Grafana dashboard use only metrics pgsched exports.

Both files are loaded, every PromQL expression in them is reduced to the metric names it
reads, and each must be a sample name in a real scrape of a worker that also runs the
sweeps (so one process exports the worker's and the sweeper leader's metrics) after real
tasks ran. `up` is the one name allowed besides: Prometheus writes it for every scrape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import yaml

from tests.support.metrics_helpers import metrics_url, wait_scrape
from tests.support.paths import REPO_ROOT
from tests.support.worker_helpers import (
    Workers,
    schedule,
)

ALERTS = REPO_ROOT / "deploy" / "prometheus-alerts.yml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana-dashboard.json"
PROMETHEUS_OWN = {"up"}

# PromQL words that are not metric names: operators, modifiers, aggregation keywords.
_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan",
}  # fmt: skip
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPINGS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLES = re.compile(r"\$\w+")
_IDENTIFIER = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, label names, durations,
    Grafana variables and keywords removed)."""
    text = _STRINGS.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPINGS.sub(" ", text)
    text = _VARIABLES.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def test_metric_names_are_read_from_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (lane, le) (rate(foo_bucket{lane=~"a|b"}'
        "[$__rate_interval]))) > 3 and on (lane) max by (lane) (bar offset 5m) or absent(baz)"
        ' unless up{job="x"} == 0'
    )
    assert metric_names(expr) == {"foo_bucket", "bar", "baz", "up"}


def alert_expressions() -> dict[str, str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def dashboard_expressions() -> dict[str, str]:
    dashboard = json.loads(DASHBOARD.read_text())

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    return {
        f"{panel['title']} / {target['refId']}": target["expr"]
        for panel in panels(dashboard["panels"])
        for target in panel.get("targets", [])
    }


def test_the_files_cover_what_an_operator_watches() -> None:
    alerts = alert_expressions()
    assert {
        "PgschedLaneLate",
        "PgschedDeadGrowing",
        "PgschedOldestDueWaiting",
        "PgschedNoSweeperLeader",
        "PgschedWorkerDown",
        "PgschedDeadlineMissed",
    } <= alerts.keys()
    read = {name for expr in dashboard_expressions().values() for name in metric_names(expr)}
    assert {
        "pgsched_task_lateness_seconds_bucket",
        "pgsched_task_outcomes_total",
        "pgsched_dead_tasks",
        "pgsched_queue_oldest_due_age_seconds",
    } <= read


def test_every_metric_the_files_read_is_exported(
    conn: psycopg.Connection, workers: Workers
) -> None:
    schedule(conn, "fn_async")
    schedule(conn, "always_fails", max_attempts=1)
    # DEAD at once and due to be done in 2 s: the deadline sweep (every 20 s) counts a miss.
    conn.execute(
        "SELECT pgsched.schedule_task('always_fails', max_attempts => 1,"
        " complete_by => now() + interval '2 seconds')"
    )
    worker = workers.start(
        "deploy",
        extra=["--sweeps", "--metrics-port", "0", "--queue-depth-interval", "0.5"],
    )
    base = metrics_url(worker.log)
    got = wait_scrape(
        base,
        lambda s: (
            s.total("pgsched_task_outcomes_total") == 3
            and s.value("pgsched_dead_tasks") == 2
            and s.total("pgsched_deadline_missed_total") == 1
        ),
        60,
        what="the outcomes counted, the DEAD gauge read and the missed deadline counted",
    )
    exported = got.names() | PROMETHEUS_OWN
    expressions = {**alert_expressions(), **dashboard_expressions()}
    assert len(expressions) >= 15
    unknown = {
        where: sorted(metric_names(expr) - exported)
        for where, expr in expressions.items()
        if metric_names(expr) - exported
    }
    assert not unknown, f"not exported: {unknown}\nexported: {sorted(exported)}"
    assert all(metric_names(expr) for expr in expressions.values())
