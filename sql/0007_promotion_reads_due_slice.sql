-- 0007 — promotion reads only the slice coming due.
--
-- 0005's task_promote_due filtered with `next_run_at - t < window`: an expression the
-- due index cannot serve, so each sweep read the whole cold tier (with ten million
-- future tasks, seconds per sweep for a few hundred rows). The same test written as
-- `next_run_at < t + window` is a range on tasks_cold_due_idx: the sweep reads the rows
-- it moves and stops. Forward-only: replaced here, not edited in 0005.

CREATE OR REPLACE FUNCTION pgsched.task_promote_due(
    max_tasks integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL,
    within interval DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    cfg pgsched.settings;
    horizon timestamptz;
    promoted integer;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO cfg FROM pgsched.settings;
    -- In seconds, as 0005's interval comparison counted: a '1 day' window is 24 hours
    -- even across a DST change in the session's time zone.
    horizon := t + extract(epoch FROM coalesce(task_promote_due.within, cfg.hot_window))
        * interval '1 second';
    WITH due AS MATERIALIZED (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PENDING' AND tk.next_run_at < horizon
         ORDER BY tk.next_run_at
         LIMIT task_promote_due.max_tasks
           FOR UPDATE SKIP LOCKED
    ),
    moved AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED',
               status_reason = CASE
                   WHEN tk.next_run_at <= t THEN 'promoted late: already due (overdue sweep)'
                   ELSE 'promoted into the hot window'
               END,
               updated_at = t
          FROM due
         WHERE tk.id = due.id AND tk.status = 'PENDING'
        RETURNING tk.lane, tk.next_run_at
    )
    SELECT count(*), coalesce(array_agg(DISTINCT m.lane) FILTER (WHERE m.next_run_at - t < cfg.immediate_window), '{}')
      INTO promoted, wake
      FROM moved AS m;
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    RETURN promoted;
END;
$$;
