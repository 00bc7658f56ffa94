"""A Citus cluster for tests: a coordinator and two worker nodes, each a throwaway Postgres
cluster (the chaos harness's `Cluster`, run as the server's user) with
``shared_preload_libraries=citus``.

A database on it (`CitusCluster.new_database`) exists on every node with the extension
created, and the coordinator knows itself (`citus_set_coordinator_host`) and both workers
(`citus_add_node`): Citus keeps its metadata per database, so each database is a cluster of
its own and tests never see each other's rows or shards.

Where Citus is not installed (no ``citus.so`` in the server's ``pkglibdir``),
`citus_missing()` says so, naming how to install it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgsched.embedded import find_bindir
from tests.support.chaos_harness import Cluster

INSTALL_HINT = (
    "Citus is not installed for this PostgreSQL server (no citus.so in {pkglibdir}): "
    "install it from Citus's own packages (https://docs.citusdata.com), or on Debian 12 with "
    "PostgreSQL 15 run `bash ../shared/citus/install.sh` from the repository (as root)"
)

# Citus wants more than the chaos harness's defaults: each node opens connections to the
# others, and prepared transactions carry a multi-node commit (two-phase commit).
CITUS_SETTINGS = [
    "shared_preload_libraries=citus",
    "max_prepared_transactions=100",
    "max_connections=200",
    # One shard per node and tenant group is enough to see placement; fewer shards make
    # every DDL and multi-shard statement cheaper on a shared machine.
    "citus.shard_count=4",
    # Nodes on one machine: no SSL between them.
    "citus.node_conninfo='sslmode=disable'",
]


def dbname_of(dsn: str) -> str:
    """The database a conninfo names."""
    return str(conninfo_to_dict(dsn)["dbname"])


def pkglibdir() -> Path:
    out = subprocess.run(
        [str(find_bindir() / "pg_config"), "--pkglibdir"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return Path(out)


def citus_missing() -> str | None:
    """Why Citus cannot be used here (a message naming how to install it), or None."""
    try:
        libdir = pkglibdir()
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"no PostgreSQL server binaries found ({exc}); Citus needs one"
    if not (libdir / "citus.so").exists():
        return INSTALL_HINT.format(pkglibdir=libdir)
    return None


class CitusNode(Cluster):
    """One node: a throwaway cluster with Citus preloaded, nothing migrated."""

    def __init__(self, name: str, settings: Sequence[str] = ()) -> None:
        super().__init__([*CITUS_SETTINGS, *settings])
        self.name = name

    def start(self) -> None:
        self._pg_ctl("initdb", "-D", str(self.datadir), "-o", "-U postgres --auth=trust -E UTF8")
        self.start_server()
        self.wait_accepting()


class CitusCluster:
    """A coordinator and `workers` worker nodes (default two), started together."""

    def __init__(self, workers: int = 2) -> None:
        self.coordinator = CitusNode("coordinator")
        self.workers = [CitusNode(f"worker-{i + 1}") for i in range(workers)]
        self._databases = 0

    @property
    def nodes(self) -> list[CitusNode]:
        return [self.coordinator, *self.workers]

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def stop(self) -> None:
        for node in self.nodes:
            with suppress(Exception):
                node.stop()

    def new_database(self, prefix: str = "pgsched_citus", *, register_nodes: bool = True) -> str:
        """A new database on every node with Citus in it and (unless `register_nodes` is
        false) the workers registered; returns the coordinator's conninfo for it."""
        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        for node in self.nodes:
            with node.connect() as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with node.connect(name) as conn:
                conn.execute("CREATE EXTENSION citus")
        if not register_nodes:
            return self.coordinator.dsn(name)
        with self.coordinator.connect(name) as conn:
            conn.execute(
                "SELECT citus_set_coordinator_host(%s, %s)",
                (self.coordinator.host, self.coordinator.port),
            )
            for worker in self.workers:
                conn.execute("SELECT citus_add_node(%s, %s)", (worker.host, worker.port))
        return self.coordinator.dsn(name)

    def drop_database(self, name: str) -> None:
        for node in self.nodes:
            with suppress(Exception), node.connect() as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
