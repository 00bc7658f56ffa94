"""How often a worker process passes the interpreter between its threads.

Each lane runs on a thread of its own (lane_engine.py). While one lane drains a backlog, its
thread holds the interpreter, and a lane waking for one due task waits for its turn:
CPython hands the interpreter over only after the holder has run for the switch interval
(5 ms by default), and a task's start needs the interpreter a few times (the wake-up, the
claim's reply). At 1 ms, HIGH's lateness p99 while 500,000 NORMAL tasks drained fell by
about 4 ms in both of two pairs of runs, and the drain's rate and CPU per task did not
change (benchmarks/RESULTS.md, `bench_burst`).
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_SECONDS = 0.001


def shorten_thread_switch_interval() -> None:
    """Let a waiting lane's thread take the interpreter after 1 ms, not 5. Call once at
    the worker's start."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
