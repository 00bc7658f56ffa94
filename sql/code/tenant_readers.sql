-- sql/code/tenant_readers.sql — tenant readers.
--
-- Row-level security on the tables a tenant reader reads (tasks, task_events and their
-- archive, schedules, tenant_readers), the function the policies call
-- (tenant_reader_tenants) and the views readers are meant to use (tenant_tasks,
-- tenant_task_events, tenant_schedules).
--
-- A role in pgsched_tenant_reader sees only the rows of the tenants bound to the roles it
-- can use in pgsched.tenant_readers; every other role sees every row, as before (the
-- policies pass it at once). The binding is by role, never by a session setting: a reader
-- that can run SQL can set any setting, but not become a role it was not granted.
-- Product and global tasks belong to the reserved tenant '_all', which no reader can be
-- bound to: a reader sees the child task each fan-out made for its tenant, not the parent
-- nor its cross-tenant summary.
--
-- The views are security_invoker, so the policies of the tables apply to whoever reads
-- them; a view owned by the schema's owner would bypass them.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, policies dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- NULL for a role that is no tenant reader (it sees every row); otherwise the tenants bound
-- to the roles it can use, possibly none. Runs as the caller: current_user is the reader.
CREATE OR REPLACE FUNCTION pgsched.tenant_reader_tenants() RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN NOT pg_catalog.pg_has_role(current_user, 'pgsched_tenant_reader', 'MEMBER') THEN NULL
        ELSE ARRAY(
            SELECT DISTINCT b.tenant_id
              FROM pgsched.tenant_readers AS b
              JOIN pg_catalog.pg_roles AS r ON r.rolname = b.role_name
             WHERE pg_catalog.pg_has_role(current_user, r.oid, 'USAGE')
             ORDER BY b.tenant_id)
    END
$$;
COMMENT ON FUNCTION pgsched.tenant_reader_tenants() IS 'The tenants the current role reads as a tenant reader (the bindings in pgsched.tenant_readers of the roles it can use; empty when none), or NULL for a role that is no tenant reader and so sees every row. The row-level-security policies call it.';
-- Every role that reads the tables runs it (a policy runs as the reader), so it is public: it
-- tells a role nothing but its own bindings.
GRANT EXECUTE ON FUNCTION pgsched.tenant_reader_tenants() TO public;

-- In distributed mode there are no policies: Citus refuses a policy with a subquery, and
-- pgsched.distribute() dropped them and took the tables from the readers (docs/scaling.md).
DO $$
BEGIN
    IF NOT pgsched.is_distributed() THEN
        -- The bindings: a reader sees its own, so it can tell which tenant it reads.
        ALTER TABLE pgsched.tenant_readers ENABLE ROW LEVEL SECURITY;
        DROP POLICY IF EXISTS tenant_readers_own ON pgsched.tenant_readers;
        CREATE POLICY tenant_readers_own ON pgsched.tenant_readers
        USING (
            (SELECT NOT pg_catalog.pg_has_role(current_user, 'pgsched_tenant_reader', 'MEMBER'))
            OR role_name IN (
                SELECT r.rolname FROM pg_catalog.pg_roles AS r
                WHERE pg_catalog.pg_has_role(current_user, r.oid, 'USAGE')
            )
        );

        -- One policy a table, for every command: a role that is no tenant reader passes at once
        -- (one evaluation a statement, not a row), so workers and admins read and write as before;
        -- a reader has no write grant, and reads only its tenants' rows.
        ALTER TABLE pgsched.tasks ENABLE ROW LEVEL SECURITY;
        DROP POLICY IF EXISTS tasks_tenant_reader ON pgsched.tasks;
        CREATE POLICY tasks_tenant_reader ON pgsched.tasks
        USING (
            (SELECT pgsched.tenant_reader_tenants()) IS NULL
            OR tenant_id = any((SELECT pgsched.tenant_reader_tenants())::text[])
        );

        ALTER TABLE pgsched.task_events ENABLE ROW LEVEL SECURITY;
        DROP POLICY IF EXISTS task_events_tenant_reader ON pgsched.task_events;
        CREATE POLICY task_events_tenant_reader ON pgsched.task_events
        USING (
            (SELECT pgsched.tenant_reader_tenants()) IS NULL
            OR tenant_id = any((SELECT pgsched.tenant_reader_tenants())::text[])
        );

        ALTER TABLE pgsched.task_events_archive ENABLE ROW LEVEL SECURITY;
        DROP POLICY IF EXISTS task_events_archive_tenant_reader ON pgsched.task_events_archive;
        CREATE POLICY task_events_archive_tenant_reader ON pgsched.task_events_archive
        USING (
            (SELECT pgsched.tenant_reader_tenants()) IS NULL
            OR tenant_id = any((SELECT pgsched.tenant_reader_tenants())::text[])
        );

        ALTER TABLE pgsched.schedules ENABLE ROW LEVEL SECURITY;
        DROP POLICY IF EXISTS schedules_tenant_reader ON pgsched.schedules;
        CREATE POLICY schedules_tenant_reader ON pgsched.schedules
        USING (
            (SELECT pgsched.tenant_reader_tenants()) IS NULL
            OR tenant_id = any((SELECT pgsched.tenant_reader_tenants())::text[])
        );
    END IF;
END;
$$;

CREATE OR REPLACE VIEW pgsched.tenant_tasks WITH (security_invoker = TRUE) AS
SELECT
    id,
    tenant_id,
    task_type,
    status,
    lane,
    priority,
    next_run_at,
    attempts,
    max_attempts,
    last_run_at,
    last_error,
    status_reason,
    payload,
    metadata,
    idempotency_key,
    schedule_type,
    schedule_id,
    parent_id,
    cancel_requested_at,
    cancel_reason,
    created_at,
    updated_at,
    result,
    waiting_for
FROM pgsched.tasks;
COMMENT ON VIEW pgsched.tenant_tasks IS 'A tenant reader''s tasks: every status, the run time, attempts, last error, payload and result (the handler''s return value), how many parents a workflow task still waits for, without lease tokens or worker names. Row-level security on pgsched.tasks lets a reader see only its tenants'' tasks (a fan-out''s child for its tenant, never the product or global parent).';
REVOKE ALL ON pgsched.tenant_tasks FROM public;
GRANT SELECT ON pgsched.tenant_tasks TO pgsched_tenant_reader, pgsched_worker;
GRANT ALL ON pgsched.tenant_tasks TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.tenant_task_events WITH (security_invoker = TRUE) AS
SELECT
    id,
    task_id,
    tenant_id,
    task_type,
    from_status,
    to_status,
    occurred_at,
    scheduled_for,
    attempt,
    detail
-- The archive is a partition of task_events (its oldest range), so this reads it too; and
-- the retention sweep can rebuild it without a view in its way.
FROM pgsched.task_events;
COMMENT ON VIEW pgsched.tenant_task_events IS 'A tenant reader''s task history: one row per transition (from_status, to_status, when, attempt, detail), from every partition of task_events, the archive among them, without worker names. Row-level security lets a reader see only its tenants'' events.';
REVOKE ALL ON pgsched.tenant_task_events FROM public;
GRANT SELECT ON pgsched.tenant_task_events TO pgsched_tenant_reader, pgsched_worker;
GRANT ALL ON pgsched.tenant_task_events TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.tenant_schedules WITH (security_invoker = TRUE) AS
SELECT
    id,
    tenant_id,
    task_type,
    cron_expression,
    timezone,
    enabled,
    quarantine_reason,
    misfire_policy,
    last_fire_at,
    payload,
    metadata,
    priority,
    lane,
    max_attempts,
    created_at,
    updated_at
FROM pgsched.schedules;
COMMENT ON VIEW pgsched.tenant_schedules IS 'A tenant reader''s recurring schedules: the cron expression and zone, enabled or quarantined, the last fire time. Row-level security on pgsched.schedules lets a reader see only its tenants'' schedules (product and global schedules belong to no tenant and are not shown).';
REVOKE ALL ON pgsched.tenant_schedules FROM public;
GRANT SELECT ON pgsched.tenant_schedules TO pgsched_tenant_reader, pgsched_worker;
GRANT ALL ON pgsched.tenant_schedules TO pgsched_admin;
