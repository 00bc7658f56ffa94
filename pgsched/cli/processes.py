"""The long-running processes: `pgsched worker` (runs tasks) and `pgsched sweeper` (runs the
sweeps while elected leader; `pgsched scheduler` is its old name, kept for one release)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pgsched.app import App
from pgsched.cli.options import LOG_LEVEL
from pgsched.cli.root import CliState, with_connect_timeout
from pgsched.dsn import check_conninfo
from pgsched.lanes import Lane
from pgsched.leadership import DEFAULT_LEASE_SECONDS
from pgsched.observability.logs import LOG_FORMATS, masked_database, start_logging
from pgsched.pooler import DEFAULT_PREPARE_THRESHOLD, listen_target, parse_prepare_threshold

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from pgsched.observability.server import MetricsServer, Problem
FC = TypeVar("FC", bound=Callable[..., Any])

LOG_FORMAT = click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default=None,
    help="text, or json: one object per line (default: the global --log-format).",
)

LISTEN_DSN = click.option(
    "--listen-dsn",
    envvar="PGSCHED_LISTEN_DSN",
    default=None,
    help="Where LISTEN runs: a direct Postgres connection when --dsn is a transaction"
    " pooler, or 'none' (no wake-ups: poll). Default: --dsn. Env: PGSCHED_LISTEN_DSN.",
)
PREPARE_THRESHOLD = click.option(
    "--prepare-threshold",
    envvar="PGSCHED_PREPARE_THRESHOLD",
    default=str(DEFAULT_PREPARE_THRESHOLD),
    show_default=True,
    help="Prepare a statement on the server after this many runs on a connection; 'none'"
    " never does (for a transaction pooler). Env: PGSCHED_PREPARE_THRESHOLD.",
)


def listen_dsn_option(listen_dsn: str | None) -> str | None:
    """--listen-dsn as given ('none' kept), with a connect timeout when it names a database."""
    if listen_dsn is None or listen_target("", listen_dsn) is None:
        return listen_dsn
    check_conninfo(listen_dsn, "--listen-dsn")
    return with_connect_timeout(listen_dsn)


def metrics_options(command: Any) -> Any:
    """--metrics-port / --metrics-host / --queue-depth-interval, on worker and sweeper."""
    options = [
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            default=None,
            help="Serve /metrics (Prometheus), /healthz and /readyz on this port (0: any free"
            " port, logged). Off by default.",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="Address the metrics port listens on (0.0.0.0 for a scraper on another host).",
        ),
        click.option(
            "--queue-depth-interval",
            type=float,
            default=15.0,
            show_default=True,
            help="Seconds between the leader's reads of the queue depth gauges.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def serve_metrics(
    host: str, port: int, registry: CollectorRegistry, liveness: Problem, readiness: Problem
) -> MetricsServer:
    from pgsched.observability.server import MetricsServer

    server = MetricsServer(host, port, registry, liveness=liveness, readiness=readiness)
    server.start()
    return server


def log_startup(process: str, dsn: str, **fields: Any) -> None:
    """The start-up line: version, settings, schema version, database (password masked)."""
    import logging

    import psycopg

    from pgsched import __version__
    from pgsched.migrations import schema_version

    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            version: int | str = schema_version(conn)
    except Exception as exc:
        version = f"unknown ({type(exc).__name__})"
    database = masked_database(dsn)
    logging.getLogger("pgsched").info(
        "pgsched %s %s starting: database %s, schema version %s, %s",
        __version__,
        process,
        database,
        version,
        ", ".join(f"{k} {v}" for k, v in fields.items()),
        extra={
            "fields": {
                "version": __version__,
                "process": process,
                "database": database,
                "schema_version": version,
                **fields,
            }
        },
    )


def redis_options(mirror: bool) -> Callable[[FC], FC]:
    """The Redis hot tier's options: a worker's, and (mirror=True) the sweeper's too."""
    options = [
        click.option(
            "--redis",
            "redis_url",
            default=None,
            metavar="URL",
            help="Redis hot tier (redis://host:port/db): "
            + ("mirror the due-soon ids there." if mirror else "claim ids popped from it."),
        ),
        click.option(
            "--redis-namespace",
            default="pgsched",
            show_default=True,
            help="Prefix of the hot tier's Redis keys.",
        ),
        click.option(
            "--redis-allow-eviction",
            is_flag=True,
            help="Run even if Redis' maxmemory-policy is not noeviction (warns loudly).",
        ),
    ]
    if mirror:
        options += [
            click.option(
                "--redis-mirror-interval",
                type=float,
                default=1.0,
                show_default=True,
                help="Seconds between mirror passes.",
            ),
            click.option(
                "--redis-reconcile-interval",
                type=float,
                default=30.0,
                show_default=True,
                help="Seconds between mirror-vs-Postgres count checks.",
            ),
            click.option(
                "--redis-window-max",
                type=int,
                default=10_000,
                show_default=True,
                help="Most ids mirrored per lane.",
            ),
        ]

    def apply(command: FC) -> FC:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def hot_tier_config(redis_url: str | None, **options: Any) -> Any:
    """The HotTierConfig the options describe; None without --redis."""
    if redis_url is None:
        return None
    from pgsched.hot_tier import HotTierConfig

    given = {name.removeprefix("redis_"): value for name, value in options.items()}
    return HotTierConfig(url=redis_url, **given)


def load_app(spec: str) -> App:
    """`module:attribute` -> the App it names."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{spec!r} is not module:attribute", param_hint="--app")
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--app"
        ) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a pgsched.App", param_hint="--app")
    return app


def parse_lanes(text: str) -> tuple[Lane, ...]:
    try:
        lanes = tuple(dict.fromkeys(Lane.parse(name) for name in text.split(",") if name.strip()))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lanes") from None
    if Lane.DEAD in lanes:
        raise click.BadParameter(
            "DEAD holds terminal failures; no worker runs it", param_hint="--lanes"
        )
    if not lanes:
        raise click.BadParameter("name at least one lane", param_hint="--lanes")
    return lanes


@click.command()
@click.option("--app", "app_spec", required=True, help="Your handlers: module:app (an App).")
@click.option(
    "--lanes", default="high,normal,low", show_default=True, help="Lanes to run, comma-separated."
)
@click.option(
    "--concurrency", type=int, default=100, show_default=True, help="Tasks at once, per lane."
)
@click.option("--batch-size", type=int, default=100, show_default=True, help="Max rows per claim.")
@click.option(
    "--flush-size",
    type=int,
    default=500,
    show_default=True,
    help="Max outcomes per completion statement; claims pause while this many wait.",
)
@click.option(
    "--flush-interval",
    type=float,
    default=0.005,
    show_default=True,
    help="Outcomes wait this long (s) for others to share their completion statement; on a"
    " busy database up to four times this (twice the last flush's round trip).",
)
@click.option(
    "--lease",
    "lease_seconds",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds a claim is held without a heartbeat before it is rescued.",
)
@click.option(
    "--poll-interval", type=float, default=2.0, show_default=True, help="Backup poll (s)."
)
@click.option(
    "--grace",
    "grace_seconds",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds running tasks get to finish after SIGTERM.",
)
@click.option(
    "--cancel-grace",
    "cancel_grace_seconds",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a plain handler asked to stop (ctx.cancelled) gets before it is abandoned.",
)
@click.option(
    "--batch-concurrency", type=int, default=4, show_default=True, help="BATCH tasks at once."
)
@click.option(
    "--batch-rate", type=float, default=200.0, show_default=True, help="BATCH starts/s (0: no cap)."
)
@click.option("--worker-id", default=None, help="Name in the record (default: host:pid).")
@click.option("--sweeps", is_flag=True, help="Also run the sweeps (one leader is elected).")
@click.option(
    "--max-stuck-threads",
    type=int,
    default=10,
    show_default=True,
    help="Timed-out plain handlers still holding a thread; past this, drain and exit 3.",
)
@click.option(
    "--stall-threshold",
    type=float,
    default=1.0,
    show_default=True,
    help="Log the task that blocks the event loop longer than this (s).",
)
@click.option(
    "--wakeup-debounce",
    type=float,
    default=0.02,
    show_default=True,
    help="At most one NOTIFY-triggered claim per lane per this interval (s).",
)
@click.option(
    "--claim-interval",
    type=float,
    default=0.005,
    show_default=True,
    help="After a claim that found fewer due tasks than it asked for, wait this long (s)"
    " before the next: fewer, larger claims; bounds the lateness it adds.",
)
@metrics_options
@click.option(
    "--metrics-tenant-label",
    is_flag=True,
    help="Label the claimed and outcome counters by tenant too. Each tenant multiplies those"
    " series: with many tenants this can overwhelm Prometheus (cardinality).",
)
@redis_options(mirror=False)
@LISTEN_DSN
@PREPARE_THRESHOLD
@click.option("--log-level", type=LOG_LEVEL, default="INFO", show_default=True, help="Log level.")
@LOG_FORMAT
@click.pass_obj
def worker(
    state: CliState,
    app_spec: str,
    lanes: str,
    concurrency: int,
    batch_size: int,
    flush_size: int,
    flush_interval: float,
    lease_seconds: float,
    poll_interval: float,
    grace_seconds: float,
    cancel_grace_seconds: float,
    batch_concurrency: int,
    batch_rate: float,
    worker_id: str | None,
    sweeps: bool,
    max_stuck_threads: int,
    stall_threshold: float,
    wakeup_debounce: float,
    claim_interval: float,
    metrics_port: int | None,
    metrics_host: str,
    queue_depth_interval: float,
    metrics_tenant_label: bool,
    redis_url: str | None,
    redis_namespace: str,
    redis_allow_eviction: bool,
    listen_dsn: str | None,
    prepare_threshold: str,
    log_level: str,
    log_format: str | None,
) -> None:
    """Run tasks of the given lanes until SIGTERM / SIGINT."""
    import asyncio
    import logging

    from pgsched.worker import Worker, WorkerConfig

    start_logging(log_level, log_format or state.log_format)
    app = load_app(app_spec)
    # A refused value raises ConfigError (naming the option): exit 2 at the boundary.
    config = WorkerConfig(
        lanes=parse_lanes(lanes),
        concurrency=concurrency,
        batch_size=batch_size,
        flush_size=flush_size,
        flush_interval=flush_interval,
        lease_seconds=lease_seconds,
        poll_interval=poll_interval,
        grace_seconds=grace_seconds,
        cancel_grace_seconds=cancel_grace_seconds,
        batch_concurrency=batch_concurrency,
        # 0 lifts the limit; a negative rate is refused by the configuration.
        batch_rate=batch_rate if batch_rate != 0 else None,
        worker_id=worker_id,
        run_sweeps=sweeps,
        max_stuck_threads=max_stuck_threads,
        stall_threshold=stall_threshold,
        wakeup_debounce=wakeup_debounce,
        claim_interval=claim_interval,
        hot_tier=hot_tier_config(
            redis_url, redis_namespace=redis_namespace, redis_allow_eviction=redis_allow_eviction
        ),
        listen_dsn=listen_dsn_option(listen_dsn),
        prepare_threshold=parse_prepare_threshold(prepare_threshold),
    )
    # The App's own DSN counts as naming a database; neither starts the embedded one.
    dsn = state.database(app._dsn, f"the DSN of {app_spec}")
    log_startup("worker", dsn, lanes=lanes, concurrency=concurrency)
    metrics = sweeper_metrics = None
    if metrics_port is not None:
        from pgsched.observability.metrics import SweeperMetrics, WorkerMetrics, new_registry
        from pgsched.observability.server import Readiness

        registry = new_registry()
        metrics = WorkerMetrics(
            registry, [lane.value for lane in config.lanes], tenant_label=metrics_tenant_label
        )
        if sweeps:
            sweeper_metrics = SweeperMetrics(registry, queue_depth_interval)
    runner = Worker(dsn, app.registry, config, metrics, sweeper_metrics)
    if metrics is not None and metrics_port is not None:
        serve_metrics(
            metrics_host,
            metrics_port,
            metrics.registry,
            runner.liveness_problem,
            Readiness(dsn, runner.readiness_problem).problem,
        )
    asyncio.run(runner.run())
    if runner.abandoned_threads or runner.exit_status:
        # A plain handler still running past the grace period would hold the interpreter
        # open (its thread cannot be interrupted); its task was released, so leave now.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(runner.exit_status)


@click.command()
@click.option("--once", is_flag=True, help="Run every sweep once (if elected) and exit.")
@click.option(
    "--promotion-interval", type=float, default=3600.0, show_default=True, help="Seconds."
)
@click.option("--recurring-interval", type=float, default=60.0, show_default=True, help="Seconds.")
@click.option("--rescue-interval", type=float, default=60.0, show_default=True, help="Seconds.")
@click.option(
    "--retention-interval", type=float, default=3600.0, show_default=True, help="Seconds."
)
@click.option(
    "--retention-days",
    type=float,
    default=30.0,
    show_default=True,
    help="Finished work older than this is deleted.",
)
@click.option(
    "--leader-retry",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between tries to become leader.",
)
@click.option(
    "--horizon-warn",
    type=float,
    default=300.0,
    show_default=True,
    help="Seconds a transaction may hold VACUUM's horizon back before the leader logs a"
    " warning naming it (pid, application, age).",
)
@metrics_options
@redis_options(mirror=True)
@click.option(
    "--leader-lease",
    type=float,
    default=DEFAULT_LEASE_SECONDS,
    show_default=True,
    help="Seconds the leader's lease lasts unrenewed (renewed every third of it): a leader"
    " that dies is replaced within this.",
)
@LISTEN_DSN
@PREPARE_THRESHOLD
@click.option("--log-level", type=LOG_LEVEL, default="INFO", show_default=True, help="Log level.")
@LOG_FORMAT
@click.pass_obj
def sweeper(
    state: CliState,
    once: bool,
    promotion_interval: float,
    recurring_interval: float,
    rescue_interval: float,
    retention_interval: float,
    retention_days: float,
    leader_retry: float,
    horizon_warn: float,
    metrics_port: int | None,
    metrics_host: str,
    queue_depth_interval: float,
    redis_url: str | None,
    redis_namespace: str,
    redis_allow_eviction: bool,
    redis_mirror_interval: float,
    redis_reconcile_interval: float,
    redis_window_max: int,
    leader_lease: float,
    listen_dsn: str | None,
    prepare_threshold: str,
    log_level: str,
    log_format: str | None,
) -> None:
    """Run the sweeps (promotion, recurring, rescue, deadlines, retention, horizon) while
    elected leader."""
    import signal
    from datetime import timedelta

    from pgsched.horizon import HorizonSweep
    from pgsched.sweeps import (
        DeadlineSweep,
        PromotionSweep,
        RecurringSweep,
        RescueSweep,
        RetentionSweep,
        Sweep,
        Sweeper,
        run_all_once,
    )

    start_logging(log_level, log_format or state.log_format)
    dsn = state.database()
    sweeps: list[Sweep] = [
        PromotionSweep(interval=promotion_interval),
        RecurringSweep(interval=recurring_interval),
        RescueSweep(interval=rescue_interval),
        DeadlineSweep(),
        RetentionSweep(interval=retention_interval, keep=timedelta(days=retention_days)),
        HorizonSweep(warn_after=horizon_warn),
    ]
    hot_tier = hot_tier_config(
        redis_url,
        redis_namespace=redis_namespace,
        redis_allow_eviction=redis_allow_eviction,
        redis_mirror_interval=redis_mirror_interval,
        redis_reconcile_interval=redis_reconcile_interval,
        redis_window_max=redis_window_max,
    )
    if hot_tier is not None:
        from pgsched.hot_tier.worker_side import open_mirror

        # A Redis that may evict is refused here (ConfigError: exit 2).
        sweeps.append(open_mirror(hot_tier))
    threshold = parse_prepare_threshold(prepare_threshold)
    if once:
        results = run_all_once(dsn, sweeps, leader_lease=leader_lease, prepare_threshold=threshold)
        for name, counts in results.items():
            click.echo(f"{name}: {json.dumps(counts)}")
        return
    metrics = None
    if metrics_port is not None:
        from pgsched.observability.metrics import SweeperMetrics, new_registry
        from pgsched.observability.server import Readiness

        registry = new_registry()
        metrics = SweeperMetrics(registry, queue_depth_interval)
        metrics.watch(sweeps)
        sweeps.append(metrics.sweep)
    runner = Sweeper(
        dsn,
        sweeps,
        leader_retry=leader_retry,
        leader_lease=leader_lease,
        listen_dsn=listen_dsn_option(listen_dsn),
        prepare_threshold=threshold,
    )
    log_startup("sweeper", dsn, leader_retry=leader_retry, leader_lease=leader_lease)
    if metrics is not None and metrics_port is not None:
        metrics.follow(lambda: runner.is_leader)
        serve_metrics(metrics_host, metrics_port, registry, lambda: None, Readiness(dsn).problem)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    signal.signal(signal.SIGINT, lambda *_: runner.stop())
    runner.run()


@click.pass_context
def _scheduler_alias(ctx: click.Context, /, **params: Any) -> None:
    click.echo(
        "pgsched: `pgsched scheduler` is deprecated (removed in the next release):"
        " use `pgsched sweeper`",
        err=True,
    )
    ctx.invoke(sweeper, **params)


scheduler = click.Command(
    "scheduler",
    callback=_scheduler_alias,
    params=sweeper.params,
    hidden=True,
    help="Old name of `pgsched sweeper` (deprecated).",
)
