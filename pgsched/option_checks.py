"""Checks of numeric settings, done when a configuration is built: each refusal is a
`ConfigError` whose message names the option and the value given."""

from __future__ import annotations

import math

from pgsched.errors import ConfigError


def require_int(option: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{option} must be a whole number (got {value!r})")
    if value < minimum:
        raise ConfigError(f"{option} must be at least {minimum} (got {value})")


def require_seconds(
    option: str, value: object, *, minimum: float = 0.0, zero_ok: bool = False
) -> None:
    """A finite number of seconds, above `minimum` (or equal to it when `zero_ok`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{option} must be a number of seconds (got {value!r})")
    if not math.isfinite(value):
        raise ConfigError(f"{option} must be a finite number of seconds (got {value})")
    if value < minimum or (value == minimum and not zero_ok):
        bound = f"at least {minimum:g}" if zero_ok else f"more than {minimum:g}"
        raise ConfigError(f"{option} must be {bound} seconds (got {value:g})")


def require_rate(option: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{option} must be a number of tasks per second (got {value!r})")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{option} must be a positive number of tasks per second (got {value})")
