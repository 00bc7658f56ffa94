"""The `pgsched` command line, one module per command group:

root        the group, its global options (--dsn, --debug, --version), the error boundary
tasks       schedule (a task, or with --cron a recurring schedule), cancel, status, history
show        one task: its row and its timeline
schedules   recurring schedules: list, show, pause, resume, delete
doctor      is the database ready and is anything stuck (exit 1 on a failed check)
findings    what status and doctor read: sweep leader, overdue cold work, expired leases
dead        the DEAD lane: list, retry, discard
tenants     the tenant registry: add, disable, list
limits      limits per task type / tenant: set, clear, list; fair claims per lane
processes   worker, sweeper (and its old name, scheduler)
database    migrate; up / down (the embedded Postgres); demo (the main job)
bench       the benchmark suite, when its extra is installed
dashboard   the web UI, when its extra is installed
times       the one time parser (--at, --since, --until)
messages    refusals in one style (`error: ...`), in the words of the options typed
options     shared option types and table output
"""

from pgsched.cli import (
    bench,
    dashboard,
    database,
    dead,
    doctor,
    limits,
    processes,
    schedules,
    show,
    tasks,
    tenants,
)
from pgsched.cli.root import main

for command in (
    tasks.schedule,
    tasks.cancel,
    tasks.status,
    tasks.history,
    show.show,
    schedules.schedules,
    doctor.doctor,
    dead.dead,
    tenants.tenants,
    limits.limits,
    processes.worker,
    processes.sweeper,
    processes.scheduler,
    database.migrate_cmd,
    database.up,
    database.down,
    database.demo,
    bench.bench,
    dashboard.dashboard,
):
    main.add_command(command)

__all__ = ["main"]
