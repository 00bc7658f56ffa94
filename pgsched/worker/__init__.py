"""The worker: claims due tasks of its lanes and runs their handlers.

config.py    what a worker is told (lanes, concurrency, batch sizes, lease, grace)
wakeup.py    LISTEN/NOTIFY on a dedicated connection that reconnects by itself
leases.py    the heartbeat thread that keeps leases alive whatever handlers do
outcomes.py  the buffer that writes completions and failures in batches
ledger.py    the completed-work ledger of keyed tasks, written in batches after execute
runner.py    one task through validate / before_execute / execute / after_execute
claim_loop.py  one claim loop per lane: claim, start, sleep until the next due time
threads.py   each lane's own thread pool for plain handlers; stuck threads counted
stall.py     the watchdog that names a task blocking the event loop
gc_tuning.py the garbage-collector settings of a worker process
services.py  the one shape of every loop above: name, start, stop, unit of work, errors
lane_engine.py  one lane: its event loop and thread, and the list of its services
worker.py    the process: the heartbeat, the lanes, the sweeper; shutdown on SIGTERM / SIGINT
"""

from pgsched.worker.config import LaneSettings, WorkerConfig
from pgsched.worker.worker import Worker

__all__ = ["LaneSettings", "Worker", "WorkerConfig"]
