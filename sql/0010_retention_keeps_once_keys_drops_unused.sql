-- 0010 — retention keeps `ctx.once` keys (once is once, ever) and counts what it deletes
-- under its own name; what nothing used is gone (tasks.enabled, work_record_done, all_tenants_id).
--
-- Dropping tasks.enabled takes an ACCESS EXCLUSIVE lock on pgsched.tasks and every
-- partition for a moment (a catalog change: no row is rewritten; old rows keep the dead
-- byte until they are next written). Waiting for that lock behind a long transaction would
-- stall every claim queued behind it, so the wait is bounded: if it times out the migration
-- fails, changes nothing, and can simply be run again.
SET LOCAL lock_timeout = '5s';

-- Retention -------------------------------------------------------------------------------
--
-- The ledger is two things: completed keyed work (task_type = the task's type), which ages
-- out with the tasks it vouches for, and once-keys (task_type = '<type>#once', see
-- work_once), which `ctx.once` promises are true the first time *ever*; those are kept.
-- Ledger rows deleted are counted as `ledger`, no longer added to `idempotency_keys`.
DROP FUNCTION pgsched.retention_prune(interval, integer, timestamptz);

CREATE FUNCTION pgsched.retention_prune(
    keep interval DEFAULT '30 days',
    max_rows integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (tasks bigint, events bigint, idempotency_keys bigint, occurrences bigint, ledger bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cutoff timestamptz := coalesce(as_of, now()) - keep;
    n_tasks bigint;
    n_events bigint;
    n_keys bigint;
    n_occurrences bigint;
    n_ledger bigint;
BEGIN
    WITH old AS (
        SELECT tk.id, tk.status FROM pgsched.tasks AS tk
         WHERE tk.status IN ('COMPLETED', 'CANCELLED') AND tk.updated_at < cutoff
         LIMIT max_rows
    )
    DELETE FROM pgsched.tasks AS tk USING old
     WHERE tk.id = old.id AND tk.status = old.status;
    GET DIAGNOSTICS n_tasks = ROW_COUNT;

    -- Only the events of tasks that are gone: a kept task (DEAD, live) keeps its history.
    WITH old AS (
        SELECT e.id FROM pgsched.task_events AS e
         WHERE e.occurred_at < cutoff
           AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = e.task_id)
         LIMIT max_rows
    )
    DELETE FROM pgsched.task_events AS e USING old WHERE e.id = old.id;
    GET DIAGNOSTICS n_events = ROW_COUNT;

    WITH old AS (
        SELECT k.tenant_id, k.idempotency_key FROM pgsched.idempotency_keys AS k
         WHERE k.created_at < cutoff
           AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = k.task_id)
         LIMIT max_rows
    )
    DELETE FROM pgsched.idempotency_keys AS k USING old
     WHERE k.tenant_id = old.tenant_id AND k.idempotency_key = old.idempotency_key;
    GET DIAGNOSTICS n_keys = ROW_COUNT;

    WITH old AS (
        SELECT o.schedule_id, o.fire_at FROM pgsched.schedule_occurrences AS o
         WHERE o.created_at < cutoff
           AND NOT EXISTS (SELECT 1 FROM pgsched.schedules AS s
                            WHERE s.id = o.schedule_id AND s.last_fire_at = o.fire_at)
         LIMIT max_rows
    )
    DELETE FROM pgsched.schedule_occurrences AS o USING old
     WHERE o.schedule_id = old.schedule_id AND o.fire_at = old.fire_at;
    GET DIAGNOSTICS n_occurrences = ROW_COUNT;

    -- '#once' cannot occur in a task type (plain identifiers), so this spares exactly the
    -- once-keys.
    WITH old AS (
        SELECT w.tenant_id, w.task_type, w.idempotency_key FROM pgsched.completed_work AS w
         WHERE w.completed_at < cutoff AND w.task_type NOT LIKE '%#once'
         LIMIT max_rows
    )
    DELETE FROM pgsched.completed_work AS w USING old
     WHERE w.tenant_id = old.tenant_id AND w.task_type = old.task_type
       AND w.idempotency_key = old.idempotency_key;
    GET DIAGNOSTICS n_ledger = ROW_COUNT;

    RETURN QUERY SELECT n_tasks, n_events, n_keys, n_occurrences, n_ledger;
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.retention_prune(interval, integer, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.retention_prune(interval, integer, timestamptz)
TO pgsched_worker, pgsched_admin;

-- Unused functions ------------------------------------------------------------------------
--
-- work_record_done wrote the ledger one task at a time; work_record_done_many (0008)
-- replaced it on every path. all_tenants_id named the fan-out parent's tenant, '_all',
-- which the code spells out where it is used.
DROP FUNCTION pgsched.work_record_done(bigint, uuid);
DROP FUNCTION pgsched.all_tenants_id();

-- tasks.enabled ---------------------------------------------------------------------------
--
-- Written by cancel, dead retry and dead discard, read by nothing: a task's status says
-- whether it can run. The functions that wrote it are replaced first (same bodies without
-- it), and the lane views, which show every column, are made again without it.
CREATE OR REPLACE FUNCTION pgsched.cancel_task(
    task_id bigint,
    reason text DEFAULT 'cancelled',
    as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current pgsched.task_status;
    problem text;
BEGIN
    SELECT pgsched.producer_tenant_problem(ARRAY[tk.tenant_id]) INTO problem
      FROM pgsched.tasks AS tk WHERE tk.id = cancel_task.task_id;
    IF problem IS NOT NULL THEN
        -- Say no without naming the other tenant.
        RAISE EXCEPTION 'pgsched: role % may not cancel task %: it belongs to another tenant',
            session_user, cancel_task.task_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = coalesce(cancel_task.reason, 'cancelled'),
           updated_at = coalesce(cancel_task.as_of, now())
     WHERE tk.id = cancel_task.task_id AND tk.status IN ('PENDING', 'QUEUED');
    IF FOUND THEN
        RETURN cancel_task.task_id;
    END IF;
    SELECT tk.status INTO current FROM pgsched.tasks AS tk WHERE tk.id = cancel_task.task_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no task with id %', cancel_task.task_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RAISE EXCEPTION 'pgsched: task % is % and cannot be cancelled; only a task that has not started (PENDING or QUEUED) can be',
        cancel_task.task_id, current
        USING ERRCODE = 'object_not_in_prerequisite_state';
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.dead_retry(
    task_id bigint DEFAULT NULL,
    task_type text DEFAULT NULL,
    all_tasks boolean DEFAULT FALSE,
    reason text DEFAULT 'retried from the DEAD lane',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
BEGIN
    IF num_nonnulls(dead_retry.task_id, dead_retry.task_type) + (CASE WHEN all_tasks THEN 1 ELSE 0 END) <> 1 THEN
        RAISE EXCEPTION 'pgsched: dead_retry needs exactly one of task_id, task_type or all_tasks'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF dead_retry.task_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = dead_retry.task_id AND tk.status = 'FAILED') THEN
        RAISE EXCEPTION 'pgsched: task % is not in the DEAD lane', dead_retry.task_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN QUERY
    WITH retried AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED', attempts = 0, next_run_at = t, status_reason = dead_retry.reason,
               updated_at = t
         WHERE tk.status = 'FAILED'
           AND (dead_retry.all_tasks
                OR tk.id = dead_retry.task_id
                OR tk.task_type = dead_retry.task_type)
        RETURNING tk.id, tk.lane
    ),
    woken AS (
        SELECT pg_notify('pgsched_' || lower(l.lane::text), '')
          FROM (SELECT DISTINCT r.lane FROM retried AS r) AS l
    )
    SELECT r.id FROM retried AS r LEFT JOIN (SELECT count(*) AS n FROM woken) AS w ON TRUE;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.dead_discard(
    task_id bigint,
    reason text DEFAULT 'discarded from the DEAD lane',
    as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = dead_discard.reason,
           updated_at = coalesce(dead_discard.as_of, now())
     WHERE tk.id = dead_discard.task_id AND tk.status = 'FAILED';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: task % is not in the DEAD lane', dead_discard.task_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN dead_discard.task_id;
END;
$$;

DROP VIEW pgsched.lane_high, pgsched.lane_normal, pgsched.lane_low, pgsched.lane_batch,
pgsched.lane_dead;

ALTER TABLE pgsched.tasks DROP COLUMN enabled;

-- A view per lane: the live tasks of that lane (cold, queued or running).
CREATE VIEW pgsched.lane_high AS
SELECT * FROM pgsched.tasks
WHERE lane = 'HIGH' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

CREATE VIEW pgsched.lane_normal AS
SELECT * FROM pgsched.tasks
WHERE lane = 'NORMAL' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

CREATE VIEW pgsched.lane_low AS
SELECT * FROM pgsched.tasks
WHERE lane = 'LOW' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

CREATE VIEW pgsched.lane_batch AS
SELECT * FROM pgsched.tasks
WHERE lane = 'BATCH' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

-- The DEAD lane: terminal failures, whatever lane they ran in, waiting for a person.
CREATE VIEW pgsched.lane_dead AS
SELECT * FROM pgsched.tasks
WHERE status = 'FAILED';

GRANT SELECT ON pgsched.lane_high, pgsched.lane_normal, pgsched.lane_low, pgsched.lane_batch,
pgsched.lane_dead TO pgsched_worker;
GRANT ALL ON pgsched.lane_high, pgsched.lane_normal, pgsched.lane_low, pgsched.lane_batch,
pgsched.lane_dead TO pgsched_admin;
