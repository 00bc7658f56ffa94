-- 0036 — tenant readers: a role that reads only its tenants' tasks, events and schedules.
--
-- pgsched_tenant_reader is the group role; a reader role per tenant is made in it and bound
-- to its tenant(s) in pgsched.tenant_readers. The row-level-security policies that filter
-- the tables, the function they call and the views readers use live in
-- sql/code/tenant_readers.sql.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_tenant_reader') THEN
        CREATE ROLE pgsched_tenant_reader NOLOGIN;
    END IF;
END;
$$;

CREATE TABLE pgsched.tenant_readers (
    role_name name NOT NULL,
    tenant_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenant_readers_pkey PRIMARY KEY (role_name, tenant_id),
    -- A real tenant: never '*' (every tenant) nor a reserved id such as '_all'.
    CONSTRAINT tenant_readers_tenant_plain CHECK (tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$')
);

COMMENT ON TABLE pgsched.tenant_readers IS 'Which tenant(s) each reader role reads (role_name, tenant_id). A role in pgsched_tenant_reader sees the rows of the tenants bound to the roles it can use, and no row when none is bound.';

GRANT SELECT ON TABLE pgsched.tenant_readers TO pgsched_worker, pgsched_tenant_reader;
GRANT ALL ON TABLE pgsched.tenant_readers TO pgsched_admin;

-- Readers read these tables only through the columns below (no lease tokens, worker names
-- or who asked for a cancel), and only the rows the policies let through.
GRANT SELECT (
    id, tenant_id, task_type, schedule_type, next_run_at, cron_expression, timezone, payload,
    metadata, priority, lane, status, attempts, max_attempts, last_run_at, last_error,
    status_reason, idempotency_key, scope, product, parent_id, created_at, updated_at,
    schedule_id, cancel_requested_at, cancel_reason
) ON TABLE pgsched.tasks TO pgsched_tenant_reader;
GRANT SELECT (
    id, task_id, tenant_id, task_type, from_status, to_status, occurred_at, scheduled_for,
    attempt, detail
) ON TABLE pgsched.task_events TO pgsched_tenant_reader;
GRANT SELECT (
    id, task_id, tenant_id, task_type, from_status, to_status, occurred_at, scheduled_for,
    attempt, detail
) ON TABLE pgsched.task_events_archive TO pgsched_tenant_reader;
GRANT SELECT (
    id, tenant_id, task_type, cron_expression, timezone, payload, metadata, priority, lane,
    max_attempts, misfire_policy, catch_up_limit, idempotency_key, scope, product, enabled,
    quarantine_reason, last_fire_at, created_at, updated_at
) ON TABLE pgsched.schedules TO pgsched_tenant_reader;
GRANT USAGE ON SCHEMA pgsched TO pgsched_tenant_reader;
