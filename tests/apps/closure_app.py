"""A handler that cannot run in a handler process: a closure (not importable by name)
with a timeout. `pgsched worker --app tests.apps.closure_app:app` refuses to start."""

from __future__ import annotations

from typing import Any

from pgsched import App, TaskContext

app = App()


def _made_here() -> Any:
    def closure(ctx: TaskContext) -> None:
        return None

    return closure


app.register("closure", _made_here(), timeout=5)
