-- task_finish_many and task_heartbeat_many take the tenant of the tasks they are given
-- (tenant, last, default NULL: any tenant). sql/code/finish.sql and
-- sql/code/leases_rescue.sql make them again with it: a distributed-mode worker writes
-- each tenant's outcomes and renewals on that tenant's shard alone, so a worker node that
-- is down holds back only its own tenants (docs/scaling.md).
DROP FUNCTION IF EXISTS pgsched.task_finish_many(
    bigint[], uuid[], text[], text[], interval[], timestamptz, jsonb[]
);
DROP FUNCTION IF EXISTS pgsched.task_heartbeat_many(bigint[], uuid[], interval, timestamptz);
