#!/usr/bin/env bash
# Run the test suite: set up whatever is missing, then pytest with any arguments given.
#   bash scripts/test.sh                      everything
#   bash scripts/test.sh -x -q tests/test_sql_router.py
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
