#!/usr/bin/env bash
# Run the test suite: set up whatever is missing, then pytest with any arguments given.
#   bash scripts/test.sh                      everything (tests/unit, integration, browser, chaos, citus)
#   bash scripts/test.sh --fast               the unit tier only: no database, seconds
#   bash scripts/test.sh -x -q tests/integration/test_sql_router.py
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${1:-}" == "--fast" ]]; then
    shift
    # The unit tier needs the package and pytest, nothing the full set-up installs on top.
    if [[ ! -x .venv/bin/python ]]; then
        bash scripts/setup.sh
    fi
    exec .venv/bin/python -m pytest tests/unit "$@"
fi

bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
