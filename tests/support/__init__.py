"""What the tests share beyond fixtures: throwaway servers (Redis, PgBouncer), the chaos
harness, worker-process helpers, plan and statistics readers. The benchmarks borrow the
servers and the harness from here; nothing in `pgsched/` imports it."""
