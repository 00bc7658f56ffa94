"""Reading a real process's metrics port: where it listens, a scrape parsed by
prometheus-client's own parser, and sample look-ups by name and labels."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.worker_helpers import wait_until

_LISTENING = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")


def metrics_url(log: Callable[[], str], timeout: float = 20.0) -> str:
    """The base URL a process logged at start (`--metrics-port 0` picks a free port)."""
    found = wait_until(lambda: _LISTENING.search(log()), timeout, what="the metrics port line")
    return f"http://{found.group(1)}:{found.group(2)}"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.families = list(text_string_to_metric_families(text))
        self.samples = [
            Sample(s.name, dict(s.labels), s.value) for f in self.families for s in f.samples
        ]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample of `name` whose labels include `labels`; None when absent."""
        found = [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        assert len(found) <= 1, found
        return found[0].value if found else None

    def total(self, name: str, **labels: str) -> float:
        """Sum of every sample of `name` whose labels include `labels`."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


def scrape(base: str) -> Scrape:
    response = httpx.get(f"{base}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def probe(base: str, path: str) -> tuple[int, str]:
    response = httpx.get(f"{base}{path}", timeout=10)
    return response.status_code, response.text


def wait_probe(base: str, path: str, code: int, timeout: float = 10.0) -> str:
    """Poll `path` until it answers `code`; returns the body."""

    def answered() -> str | None:
        got, body = probe(base, path)
        return body if got == code else None

    return wait_until(answered, timeout, what=f"{path} to answer {code}")


def wait_scrape(
    base: str, predicate: Callable[[Scrape], bool], timeout: float, what: str
) -> Scrape:
    """Scrape until `predicate` holds for a scrape; returns that scrape."""

    def matching() -> Scrape | None:
        got = scrape(base)
        return got if predicate(got) else None

    return wait_until(matching, timeout, what=what)
