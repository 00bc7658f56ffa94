"""What a worker is told. Defaults suit a small deployment; the CLI exposes each."""

from __future__ import annotations

from dataclasses import dataclass, field

from pgsched.lanes import Lane


@dataclass(frozen=True)
class LaneSettings:
    """How hard one lane may run: at most `concurrency` tasks at once and, when `rate`
    is set, at most `rate` task starts per second."""

    concurrency: int
    rate: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be a positive number of tasks per second")


@dataclass(frozen=True)
class WorkerConfig:
    lanes: tuple[Lane, ...] = (Lane.HIGH, Lane.NORMAL, Lane.LOW)
    concurrency: int = 16
    batch_size: int = 100
    lease_seconds: float = 30.0
    # Backup poll: bounds lateness when a notification is lost. Jittered by +/-25%.
    poll_interval: float = 2.0
    grace_seconds: float = 30.0
    flush_size: int = 500
    flush_interval: float = 0.005
    # BATCH is bulk fan-out: deliberately slow unless told otherwise.
    batch_concurrency: int = 4
    batch_rate: float | None = 200.0
    rescue_interval: float = 5.0
    worker_id: str | None = None
    # Also run the sweeps (one elected leader among all processes that do).
    run_sweeps: bool = False
    lane_overrides: dict[Lane, LaneSettings] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.lanes:
            raise ValueError("a worker needs at least one lane")
        if Lane.DEAD in self.lanes:
            raise ValueError("the DEAD lane holds terminal failures; no worker runs it")
        if self.batch_size < 1 or self.concurrency < 1 or self.flush_size < 1:
            raise ValueError("batch_size, concurrency and flush_size must be at least 1")
        if self.lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")

    def lane_settings(self, lane: Lane) -> LaneSettings:
        if lane in self.lane_overrides:
            return self.lane_overrides[lane]
        if lane is Lane.BATCH:
            return LaneSettings(self.batch_concurrency, self.batch_rate)
        return LaneSettings(self.concurrency)
