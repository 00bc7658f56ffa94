"""What a caller hands pgsched to schedule, checked before it reaches the database.

The database checks everything again (other languages call it directly); this model adds
what only Python can see, above all a naive datetime, which psycopg would otherwise
silently read in the session's time zone.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

PLAIN_TASK_TYPE = r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$"
PLAIN_TENANT_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$"


class TaskSpec(BaseModel):
    """One task to schedule. `run_at` must carry a time zone; None means now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_type: str = Field(pattern=PLAIN_TASK_TYPE)
    payload: Any = Field(default_factory=dict)
    run_at: AwareDatetime | None = None
    tenant_id: str = Field(default="default", pattern=PLAIN_TENANT_ID)
    priority: int = Field(default=5, ge=0, le=10)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    max_attempts: int = Field(default=3, ge=1)
    lane: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tenant_id")
    @classmethod
    def _tenant_not_reserved(cls, value: str) -> str:
        # The engine names its own rows with a leading "_" (a fan-out parent is "_all"); the
        # database refuses such tenants, so refuse them here too, before anything is sent.
        if value.startswith("_"):
            raise ValueError(f"tenant_id {value!r} starts with '_', which is reserved for pgsched")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: Any) -> Any:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload is not JSON-serialisable: {exc}") from None
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_is_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata is not JSON-serialisable: {exc}") from None
        return value

    @field_validator("lane")
    @classmethod
    def _lane_known(cls, value: str | None) -> str | None:
        if value is None:
            return None
        upper = value.strip().upper()
        if upper == "DEAD":
            raise ValueError("lane DEAD cannot be scheduled into: tasks reach it only by failing")
        if upper not in {"HIGH", "NORMAL", "LOW", "BATCH"}:
            raise ValueError(f"unknown lane {value!r} (one of HIGH, NORMAL, LOW, BATCH)")
        return upper
