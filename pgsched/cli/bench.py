"""`pgsched bench`: the benchmark suite, which lives beside the product, not inside it.

pgsched never imports the suite: it is found through the `pgsched.bench` entry point (which
names `benchmarks.__main__:main`, present in a source checkout installed editable), and only
once the `bench` extra (plots and the peers it compares against) is known to be installed.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import entry_points

import click

BENCH_EXTRA = ("matplotlib", "procrastinate", "pgqueuer")
ENTRY_POINT_GROUP = "pgsched.bench"


class BenchUnavailable(click.ClickException):
    exit_code = 2


def missing_extras() -> list[str]:
    """The modules of the `bench` extra that cannot be imported here."""
    missing = []
    for name in BENCH_EXTRA:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """The benchmark suite: `pgsched bench --quick` (minutes), `pgsched bench` (10M tasks).

    Same as `python -m benchmarks`; every option (see `pgsched bench --help`) passes through.
    Needs the `bench` extra and a source checkout: pip install -e '.[bench]'."""
    asks_help = "-h" in args or "--help" in args
    missing = missing_extras()
    if missing and not asks_help:
        raise BenchUnavailable(
            f"the benchmark suite needs the bench extra (missing: {', '.join(missing)}):"
            " pip install 'pgsched[bench]' (from a source checkout: pip install -e '.[bench]')"
        )
    found = entry_points(group=ENTRY_POINT_GROUP, name="suite")
    try:
        run_suite = next(iter(found)).load()
    except (StopIteration, ImportError):
        raise BenchUnavailable(
            "the benchmark suite ships with the source tree (benchmarks/), not with the"
            " package: install pgsched from a checkout with pip install -e '.[bench]'"
        ) from None
    sys.exit(run_suite(list(args)))
