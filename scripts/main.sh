#!/usr/bin/env bash
# The main job: set everything up, start the embedded local Postgres (under ./.pgsched),
# migrate it, and run the demo: a mix of tasks across tiers and lanes, run by a worker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset PGSCHED_DSN
exec .venv/bin/pgsched demo
