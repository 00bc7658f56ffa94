"""Single-node mode on a Citus coordinator: the flows of the one-node suite, unchanged.

`pgsched migrate` on a coordinator with two worker nodes registered leaves every table
local to the coordinator (nothing is distributed), so pgsched behaves as on plain
PostgreSQL. These are the integration tests of scheduling, claiming, completion, retries,
the DEAD lane, recurring schedules, idempotency and the audit trail, imported as they are
and run against this tier's fixtures (tests/citus/conftest.py): the same SQL from a bare
connection, the same `pgsched` commands and real `pgsched worker` processes, pointed at
the coordinator.
"""

from __future__ import annotations

from tests.integration.test_created_or_existed import (
    test_app_schedule_and_schedule_many,
    test_schedule_task_ex_from_sql,
)
from tests.integration.test_recurring import (
    test_same_key_per_tenant_returns_the_same_schedule,
    test_worker_path_arms_the_next_occurrence_after_a_completion,
)
from tests.integration.test_sql_transitions import (
    test_lifecycle_is_recorded,
    test_set_based_claim_records_each_row,
)
from tests.integration.test_worker_claims import test_concurrent_claims_are_bounded_and_disjoint
from tests.integration.test_worker_leases import (
    test_sigkilled_workers_tasks_are_rescued_by_another_worker,
)
from tests.integration.test_worker_lifecycle import (
    test_lifecycle_order_async_and_sync,
    test_transactional_write_commits_with_completion,
)
from tests.integration.test_worker_retries import (
    test_dead_lane_commands,
    test_retries_back_off_then_dead,
)

__all__ = [
    "test_app_schedule_and_schedule_many",
    "test_concurrent_claims_are_bounded_and_disjoint",
    "test_dead_lane_commands",
    "test_lifecycle_is_recorded",
    "test_lifecycle_order_async_and_sync",
    "test_retries_back_off_then_dead",
    "test_same_key_per_tenant_returns_the_same_schedule",
    "test_schedule_task_ex_from_sql",
    "test_set_based_claim_records_each_row",
    "test_sigkilled_workers_tasks_are_rescued_by_another_worker",
    "test_transactional_write_commits_with_completion",
    "test_worker_path_arms_the_next_occurrence_after_a_completion",
]
