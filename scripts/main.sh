#!/usr/bin/env bash
# The main job: set everything up, start the embedded Postgres (in $PGSCHED_HOME, default
# ~/.local/share/pgsched; as root the server runs as `postgres`), migrate it, and run the
# demo: a mix of tasks across tiers and lanes, run by a worker. `pgsched down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset PGSCHED_DSN
exec .venv/bin/pgsched demo
