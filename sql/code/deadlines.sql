-- sql/code/deadlines.sql — deadlines.
--
-- deadline_sweep judges the deadlines of tasks (tasks.complete_by, written by
-- schedule_task's complete_by or, for a recurring occurrence, by schedule_arm from the
-- schedule's complete_within) and deadline_misses reads the misses back.
--
-- A task is judged once, when its deadline has passed or when it completed, whichever
-- comes first: met if it COMPLETED by complete_by (its completion time is updated_at,
-- which the finish sets), missed otherwise (still waiting, running, DEAD, cancelled, or
-- completed late). A miss writes a task_events row (from_status = to_status, the detail
-- saying what the task was doing), a schedule_events row 'deadline_missed' for a recurring
-- occurrence (with its fire time), and schedules deadline_callback if the task names one.
-- The judgement and its records are one statement's work per batch, on the rows the
-- partial index tasks_deadline_unjudged_idx holds.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

CREATE OR REPLACE FUNCTION pgsched.deadline_sweep(
    max_tasks integer DEFAULT 1000, as_of timestamptz DEFAULT NULL
) RETURNS TABLE (
    task_id bigint,
    tenant_id text,
    task_type text,
    status pgsched.task_status,
    complete_by timestamptz,
    outcome text,
    schedule_id bigint,
    callback_task_id bigint
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    judged_ids bigint[];
    picked bigint[];
    missed_ids bigint[];
    missed_schedules bigint[];
    missed_statuses pgsched.task_status[];
    missed_by timestamptz[];
    m record;
    callback bigint;
BEGIN
    IF deadline_sweep.max_tasks IS NULL OR deadline_sweep.max_tasks < 1 THEN
        RAISE EXCEPTION 'pgsched: max_tasks must be at least 1, got %', quote_nullable(deadline_sweep.max_tasks)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pgsched.distributed_mode() THEN
        -- No row lock across shards (sql/code/distribution.sql): picked without locks; the
        -- UPDATE below judges a row once (deadline_outcome IS NULL, a compare-and-set).
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
        SELECT coalesce(array_agg(d.id), '{}') INTO picked
          FROM (
            SELECT tk.id
              FROM pgsched.tasks AS tk
             WHERE tk.complete_by IS NOT NULL AND tk.deadline_outcome IS NULL
               AND (tk.complete_by <= t OR tk.status = 'COMPLETED')
             ORDER BY tk.complete_by
             LIMIT deadline_sweep.max_tasks
          ) AS d;
    ELSE
        SELECT coalesce(array_agg(d.id), '{}') INTO picked
          FROM (
            SELECT tk.id
              FROM pgsched.tasks AS tk
             WHERE tk.complete_by IS NOT NULL AND tk.deadline_outcome IS NULL
               AND (tk.complete_by <= t OR tk.status = 'COMPLETED')
             ORDER BY tk.complete_by
             LIMIT deadline_sweep.max_tasks
               FOR UPDATE SKIP LOCKED
          ) AS d;
    END IF;

    WITH judged AS (
        UPDATE pgsched.tasks AS tk
           SET deadline_outcome = CASE
               WHEN tk.status = 'COMPLETED' AND tk.updated_at <= tk.complete_by THEN 'met'
               ELSE 'missed' END
         WHERE tk.id = ANY (picked) AND tk.deadline_outcome IS NULL
        RETURNING tk.id
    )

    SELECT coalesce(array_agg(j.id), '{}') INTO judged_ids FROM judged AS j;

    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status, occurred_at, scheduled_for, attempt, detail
    )
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at, tk.attempts,
           format('deadline missed: complete_by %s, %s', tk.complete_by,
                  CASE tk.status
                      WHEN 'COMPLETED' THEN format('completed late, at %s', tk.updated_at)
                      WHEN 'FAILED' THEN 'failed (DEAD lane)'
                      WHEN 'CANCELLED' THEN 'cancelled'
                      WHEN 'PROCESSING' THEN format('still running (attempt %s)', tk.attempts)
                      ELSE format('not started (%s, due %s)', tk.status, tk.next_run_at)
                  END)
      FROM pgsched.tasks AS tk
     WHERE tk.id = ANY(judged_ids) AND tk.deadline_outcome = 'missed';

    -- The missed occurrences of recurring schedules: the tasks read first, then joined as
    -- values (in distributed mode schedules stay on the coordinator, and Citus joins no
    -- local table to a distributed one in one statement).
    SELECT coalesce(array_agg(tk.id), '{}'), coalesce(array_agg(tk.schedule_id), '{}'),
           coalesce(array_agg(tk.status), '{}'), coalesce(array_agg(tk.complete_by), '{}')
      INTO missed_ids, missed_schedules, missed_statuses, missed_by
      FROM pgsched.tasks AS tk
     WHERE tk.id = ANY(judged_ids) AND tk.deadline_outcome = 'missed' AND tk.schedule_id IS NOT NULL;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, fire_at, detail)
    SELECT x.schedule_id, t, 'deadline_missed', o.fire_at,
           format('task %s was %s at its deadline %s', x.id, x.status, x.complete_by)
      FROM unnest(missed_ids, missed_schedules, missed_statuses, missed_by) AS x (id, schedule_id, status, complete_by)
      LEFT JOIN pgsched.schedule_occurrences AS o ON o.schedule_id = x.schedule_id AND o.task_id = x.id
     WHERE EXISTS (SELECT 1 FROM pgsched.schedules AS s WHERE s.id = x.schedule_id);

    FOR m IN
        SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.complete_by, tk.deadline_outcome,
               tk.schedule_id, tk.deadline_callback
          FROM pgsched.tasks AS tk
         WHERE tk.id = ANY(judged_ids)
         ORDER BY tk.complete_by, tk.id
    LOOP
        callback := NULL;
        IF m.deadline_outcome = 'missed' AND m.deadline_callback IS NOT NULL THEN
            callback := pgsched.schedule_task(
                task_type => m.deadline_callback,
                payload => jsonb_build_object(
                    'task_id', m.id, 'task_type', m.task_type, 'status', m.status,
                    'complete_by', m.complete_by, 'schedule_id', m.schedule_id),
                tenant_id => m.tenant_id,
                as_of => t);
        END IF;
        RETURN QUERY SELECT m.id, m.tenant_id, m.task_type, m.status, m.complete_by, m.deadline_outcome,
                            m.schedule_id, callback;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION pgsched.deadline_sweep(integer, timestamp with time zone) IS 'The deadline sweep: judges up to max_tasks tasks whose complete_by has passed (as of as_of) or which completed: met if COMPLETED by complete_by, missed otherwise. A miss writes a task event (and a schedule event deadline_missed for a recurring occurrence) and schedules the task''s deadline_callback. Returns each task judged, with its outcome and the callback task''s id.';
REVOKE ALL ON FUNCTION pgsched.deadline_sweep(integer, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.deadline_sweep(integer, timestamptz) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE VIEW pgsched.deadline_misses AS
SELECT
    id AS task_id,
    tenant_id,
    task_type,
    complete_by,
    status,
    updated_at,
    schedule_id,
    deadline_callback
FROM pgsched.tasks
WHERE deadline_outcome = 'missed';
COMMENT ON VIEW pgsched.deadline_misses IS 'Every task that missed its deadline, while retention keeps it: its complete_by, its status now (and when it last changed), its schedule and callback task type. The event of each miss, with what the task was doing then, is in task_events (detail ''deadline missed: ...'').';
REVOKE ALL ON pgsched.deadline_misses FROM public;
GRANT SELECT ON pgsched.deadline_misses TO pgsched_worker;
GRANT ALL ON pgsched.deadline_misses TO pgsched_admin;
