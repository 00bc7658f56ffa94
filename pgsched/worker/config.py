"""What a worker is told. Defaults suit a small deployment; the CLI exposes each.

Every value is checked when the configuration is built, before anything connects: a zero
batch size would claim nothing forever, a zero concurrency would never start a task, a
negative lease would expire before it was granted. A refusal is a `ConfigError` whose
message names the command-line option and the value given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgsched.errors import ConfigError
from pgsched.hot_tier.config import HotTierConfig
from pgsched.lanes import Lane
from pgsched.option_checks import require_int, require_rate, require_seconds
from pgsched.pooler import DEFAULT_PREPARE_THRESHOLD, listen_target, parse_prepare_threshold
from pgsched.worker.claim_floor import PROBE_S

# The option each field is set by on `pgsched worker`: refusals name what the operator typed.
OPTION_NAMES = {
    "concurrency": "--concurrency",
    "batch_size": "--batch-size",
    "flush_size": "--flush-size",
    "flush_interval": "--flush-interval",
    "lease_seconds": "--lease",
    "poll_interval": "--poll-interval",
    "grace_seconds": "--grace",
    "cancel_grace_seconds": "--cancel-grace",
    "batch_concurrency": "--batch-concurrency",
    "batch_rate": "--batch-rate",
    "rescue_interval": "rescue_interval",
    "floor_probe_interval": "floor_probe_interval",
    "max_stuck_threads": "--max-stuck-threads",
    "stall_threshold": "--stall-threshold",
    "wakeup_debounce": "--wakeup-debounce",
    "claim_interval": "--claim-interval",
}


@dataclass(frozen=True)
class LaneSettings:
    """How hard one lane may run: at most `concurrency` tasks at once and, when `rate`
    is set, at most `rate` task starts per second."""

    concurrency: int
    rate: float | None = None

    def __post_init__(self) -> None:
        require_int("concurrency", self.concurrency, 1)
        if self.rate is not None:
            require_rate("rate", self.rate)


@dataclass(frozen=True)
class WorkerConfig:
    lanes: tuple[Lane, ...] = (Lane.HIGH, Lane.NORMAL, Lane.LOW)
    # Tasks at once per lane. A claim takes at most the free slots, so this also bounds the
    # rows per claim: at 16 (the old default) every claim of a steady stream took at most
    # 16 rows, and the fixed cost of each claim (round trip, planning, commit) held a
    # no-op workload near 4,000 tasks/s on two cores.
    concurrency: int = 100
    batch_size: int = 100
    lease_seconds: float = 30.0
    # Backup poll: bounds lateness when a notification is lost. Jittered by +/-25%.
    poll_interval: float = 2.0
    grace_seconds: float = 30.0
    # A plain handler asked to stop (ctx.cancelled) has this long to return before its
    # attempt is abandoned (CANCELLED) and its thread counted as stuck.
    cancel_grace_seconds: float = 10.0
    flush_size: int = 500
    flush_interval: float = 0.005
    # BATCH is bulk fan-out: deliberately slow unless told otherwise.
    batch_concurrency: int = 4
    batch_rate: float | None = 200.0
    rescue_interval: float = 5.0
    # How often each lane looks for queued rows behind its claim floor that no NOTIFY
    # announced (pgsched/worker/claim_floor.py): how long such a row can wait.
    floor_probe_interval: float = PROBE_S
    worker_id: str | None = None
    # Also run the sweeps (one elected leader among all processes that do).
    run_sweeps: bool = False
    # A plain-function handler that timed out keeps its thread until it returns (Python
    # cannot stop a thread). Past this many such threads the worker drains and exits
    # non-zero, so its supervisor starts a clean process.
    max_stuck_threads: int = 10
    # The event loop not ticking for this long means an async handler blocks it: logged,
    # with the task that did.
    stall_threshold: float = 1.0
    # Notifications only hint that a lane has work: at most one claim they trigger per lane
    # per this interval, however many arrive (a flood costs a bounded number of claims).
    wakeup_debounce: float = 0.02
    # A claim that found some due work but less than it asked for is followed by the next
    # one this long after it (a full claim, by the next one at once): due work is gathered
    # into fewer, larger claims. Bounds the lateness it adds.
    claim_interval: float = 0.005
    lane_overrides: dict[Lane, LaneSettings] = field(default_factory=dict)
    # Claim through the Redis hot tier (`--redis`); None: Postgres alone.
    hot_tier: HotTierConfig | None = None
    # Behind a transaction pooler (see pgsched.pooler): where LISTEN runs (None: the
    # database's DSN; 'none': nowhere, the lanes poll), and psycopg's prepare threshold
    # (None: never prepare, which a transaction pooler needs).
    listen_dsn: str | None = None
    prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD

    def __post_init__(self) -> None:
        if not self.lanes:
            raise ConfigError("--lanes: a worker needs at least one lane")
        if Lane.DEAD in self.lanes:
            raise ConfigError("--lanes: the DEAD lane holds terminal failures; no worker runs it")
        names = OPTION_NAMES
        require_int(names["concurrency"], self.concurrency, 1)
        require_int(names["batch_size"], self.batch_size, 1)
        require_int(names["flush_size"], self.flush_size, 1)
        require_int(names["batch_concurrency"], self.batch_concurrency, 1)
        require_int(names["max_stuck_threads"], self.max_stuck_threads, 0)
        require_seconds(names["lease_seconds"], self.lease_seconds, minimum=1.0, zero_ok=True)
        require_seconds(names["poll_interval"], self.poll_interval)
        require_seconds(names["grace_seconds"], self.grace_seconds, zero_ok=True)
        require_seconds(names["cancel_grace_seconds"], self.cancel_grace_seconds, zero_ok=True)
        require_seconds(names["flush_interval"], self.flush_interval)
        require_seconds(names["rescue_interval"], self.rescue_interval)
        require_seconds(names["floor_probe_interval"], self.floor_probe_interval)
        require_seconds(names["stall_threshold"], self.stall_threshold)
        require_seconds(names["wakeup_debounce"], self.wakeup_debounce, zero_ok=True)
        require_seconds(names["claim_interval"], self.claim_interval, zero_ok=True)
        if self.batch_rate is not None:
            require_rate(names["batch_rate"], self.batch_rate)
        parse_prepare_threshold(self.prepare_threshold)
        listen_target("", self.listen_dsn)

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What every connection of the worker is opened with."""
        return {"prepare_threshold": self.prepare_threshold}

    def listen_target(self, dsn: str) -> str | None:
        """Where the worker's LISTEN runs; None: nowhere."""
        return listen_target(dsn, self.listen_dsn)

    def lane_settings(self, lane: Lane) -> LaneSettings:
        if lane in self.lane_overrides:
            return self.lane_overrides[lane]
        if lane is Lane.BATCH:
            return LaneSettings(self.batch_concurrency, self.batch_rate)
        return LaneSettings(self.concurrency)
