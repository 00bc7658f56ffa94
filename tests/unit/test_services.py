"""The one shape of a worker's loops (pgsched/worker/services.py): each in its own error
boundary, logged under its name. No database: the units of work are plain coroutines."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pgsched.worker.services import LoopService, LoopServices, Periodic


def test_a_failed_run_is_logged_by_name_and_the_next_one_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []

    async def run_once() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("the database went away")

    async def scenario() -> None:
        service = Periodic("lane.normal.lease_rescue", 0.01, run_once)
        services = LoopServices(on_died=lambda: pytest.fail("a periodic failure stops nothing"))
        services.start(service)
        for _ in range(500):
            if len(runs) >= 3:
                break
            await asyncio.sleep(0.01)
        await services.stop(service)

    with caplog.at_level(logging.WARNING, logger="pgsched.worker"):
        asyncio.run(scenario())
    assert len(runs) >= 3
    failed = [r for r in caplog.records if r.name == "pgsched.worker.lane.normal.lease_rescue"]
    assert len(failed) == 1, caplog.text
    assert failed[0].getMessage() == (
        "lane.normal.lease_rescue failed (the database went away); it runs again in 0.01s"
    )


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_loop_that_ends_on_its_own_is_logged_by_name_and_stops_the_worker(
    caplog: pytest.LogCaptureFixture, ending: str
) -> None:
    died: list[str] = []

    async def flush_loop() -> None:
        await asyncio.sleep(0)
        if ending == "raises":
            raise ValueError("a bug in the loop")

    async def scenario() -> None:
        service = LoopService("lane.high.outcomes", flush_loop)
        LoopServices(on_died=lambda: died.append("stop")).start(service)
        await service.ended()
        await asyncio.sleep(0)  # the done callback runs on the next turn of the loop

    with caplog.at_level(logging.CRITICAL, logger="pgsched.worker"):
        asyncio.run(scenario())
    assert died == ["stop"]
    (record,) = [r for r in caplog.records if r.name == "pgsched.worker.lane.high.outcomes"]
    assert record.getMessage().startswith("service lane.high.outcomes died: ")
    if ending == "raises":
        assert "a bug in the loop" in record.getMessage()


def test_stopped_services_end_quietly_and_stop_waits_for_their_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cleaned_up: list[str] = []

    def forever(name: str) -> LoopService:
        async def loop() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0.02)  # a loop's own clean-up, awaited by stop
                cleaned_up.append(name)

        return LoopService(name, loop)

    async def scenario() -> None:
        services = LoopServices(on_died=lambda: pytest.fail("a stopped service did not die"))
        first, second = forever("a"), forever("b")
        services.start(first, second)
        await asyncio.sleep(0.01)
        await services.stop(first, second)
        assert sorted(cleaned_up) == ["a", "b"]
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.DEBUG, logger="pgsched.worker"):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.name.startswith("pgsched.worker.")]
