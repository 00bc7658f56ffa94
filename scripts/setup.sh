#!/usr/bin/env bash
# Set up a machine to develop and test pgsched. Safe to run again: it only does what is
# missing. Run it as root on a fresh Debian/Ubuntu machine and it installs the system
# packages itself; run it as another user and it says what to install, then stops.
#
#   PostgreSQL server binaries  the tests start their own throwaway server (initdb, pg_ctl)
#   python3 >= 3.11 with venv   .venv/ with pgsched installed editable, plus its dev tools
#   chromium                    the dashboard's browser tests drive it (Playwright)
#   faketime (optional)         the clock-skew tests shift a process's host clock
#   redis-server                the Redis hot tier's tests start their own throwaway server
#   pgbouncer                   the transaction-pooler tests start their own throwaway one
#   nodejs, npm                 the docs' JavaScript examples run under Node.js (pg package)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'setup: %s\n' "$*"; }

is_root() { [[ "$(id -u)" == 0 ]]; }

apt_updated=0
apt_install() {
    if ((apt_updated == 0)); then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "apt-get install -y $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

have_pg_server() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

find_python() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# --- system packages -----------------------------------------------------------------------
missing=()
have_pg_server || missing+=(postgresql)
find_python >/dev/null || missing+=(python3)
if ! command -v runuser >/dev/null 2>&1; then
    missing+=(util-linux)
fi
# Only the dashboard's browser tests need it; they say so and skip without it.
if ! command -v chromium >/dev/null 2>&1 && is_root && command -v apt-get >/dev/null 2>&1; then
    missing+=(chromium)
fi

# The Redis hot tier's tests start their own redis-server; without it they fail naming it.
if ! command -v redis-server >/dev/null 2>&1; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        missing+=(redis-server)
    else
        say "the Redis hot tier's tests need redis-server: sudo apt-get install -y redis-server"
    fi
fi
# The PgBouncer tests start their own pgbouncer (transaction mode); without it they fail
# naming it. Debian installs it in /usr/sbin, outside a non-root user's PATH.
if ! command -v pgbouncer >/dev/null 2>&1 && [[ ! -x /usr/sbin/pgbouncer ]]; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        missing+=(pgbouncer)
    else
        say "the PgBouncer tests need pgbouncer: sudo apt-get install -y pgbouncer"
    fi
fi

# The JavaScript examples of the docs (tests/integration/test_docs_examples.py) run under Node.js;
# without it they are skipped, saying so.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        missing+=(nodejs npm)
    else
        say "optional: sudo apt-get install -y nodejs npm (for the docs' JavaScript examples)"
    fi
fi

if ((${#missing[@]} > 0)); then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        apt_install "${missing[@]}"
    else
        say "missing system packages: ${missing[*]}"
        say "install them, then run this script again:"
        say "    sudo apt-get update && sudo apt-get install -y ${missing[*]}"
        exit 1
    fi
fi

have_pg_server || { say "PostgreSQL server binaries still missing after install"; exit 1; }
# libfaketime: the clock-skew tests run a sweeper and a worker with their host clock an
# hour off. Optional: without it those tests fail and say what to install.
if ! compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        apt_install faketime
    else
        say "optional: sudo apt-get install -y faketime (for the clock-skew tests)"
    fi
fi
if is_root && ! id -u "${PGSCHED_PG_USER:-postgres}" >/dev/null 2>&1; then
    say "running as root, and Postgres refuses to run as root: the tests run it as the"
    say "'${PGSCHED_PG_USER:-postgres}' user, which does not exist (the postgresql package creates it)"
    exit 1
fi

# --- Python environment --------------------------------------------------------------------
python=$(find_python) || { say "no python3 >= 3.11 found"; exit 1; }

if [[ ! -x .venv/bin/python ]]; then
    say "creating .venv with $python"
    if ! "$python" -m venv .venv 2>/dev/null; then
        rm -rf .venv
        if is_root && command -v apt-get >/dev/null 2>&1; then
            version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
            apt_install "python${version}-venv" || apt_install python3-venv
            "$python" -m venv .venv
        else
            say "$python cannot create a virtual environment; install python3-venv and rerun"
            exit 1
        fi
    fi
fi

# Reinstall when pyproject.toml changed since the last successful install.
stamp=.venv/.pgsched-setup
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]] ||
    ! .venv/bin/python -c 'import pgsched, pytest_postgresql, pgqueuer, procrastinate, mkdocs_click' >/dev/null 2>&1; then
    # The bench extra too: the tests run the benchmarks' smoke forms and their peers' setup.
    # The docs extra: CI builds the site (mkdocs build --strict).
    say "installing pgsched (editable) with its dev, bench and docs dependencies into .venv"
    .venv/bin/python -m pip install --disable-pip-version-check -q --upgrade pip
    .venv/bin/python -m pip install --disable-pip-version-check -q -e '.[dev,bench,docs]'
    echo "$want" >"$stamp"
fi

# The pg package for the docs' JavaScript examples, kept inside .venv (git ignores it).
docs_node=.venv/docs-node
if command -v npm >/dev/null 2>&1 && [[ ! -d "$docs_node/node_modules/pg" ]]; then
    say "installing the pg package for Node.js into $docs_node"
    npm install --no-audit --no-fund --silent --prefix "$docs_node" pg@8.23.1 >/dev/null ||
        say "npm install pg failed: the docs' JavaScript examples install it themselves"
fi

say "ready: $(.venv/bin/python --version), PostgreSQL $(compgen -G '/usr/lib/postgresql/*/bin' | sed 's#.*/postgresql/\([0-9]*\)/bin#\1#' | sort -n | tail -1)"
