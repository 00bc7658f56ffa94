-- sql/code/dead_lane.sql — the DEAD lane.
--
-- dead_retry, dead_discard, dead_page and the lane_dead view.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- The DEAD lane's retry (0010): due now, routed like any new task. 0004 and 0010 meant to wake
-- the lanes from a CTE that the planner dropped (nothing read its rows), so no lane was woken
-- and a retried task waited for a worker's backup poll: the lanes are woken here.
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
    h record;
    tier text;
    retried_ids bigint[];
    wake pgsched.task_lane[];
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
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    tier := pgsched.tier_of(t, h.immediate_until, h.hot_until);
    WITH retried AS (
        UPDATE pgsched.tasks AS tk
           SET status = pgsched.tier_status(tier), attempts = 0, next_run_at = t,
               status_reason = dead_retry.reason, updated_at = t
         WHERE tk.status = 'FAILED'
           AND (dead_retry.all_tasks
                OR tk.id = dead_retry.task_id
                OR tk.task_type = dead_retry.task_type)
        RETURNING tk.id, tk.lane, tk.tenant_id, tk.task_type, tk.status, tk.next_run_at,
                  tk.attempts, tk.locked_by, tk.status_reason, tk.updated_at
    ),
    -- The retries' events when the functions write them (sql/code/transitions.sql).
    ev AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT r.id, r.tenant_id, r.task_type, 'FAILED', r.status,
               r.updated_at, r.next_run_at, r.attempts, r.locked_by, r.status_reason
          FROM retried AS r
         WHERE pgsched.events_by_functions()
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}'), coalesce(array_agg(DISTINCT r.lane), '{}')
      INTO retried_ids, wake
      FROM retried AS r;
    IF tier = 'IMMEDIATE' THEN
        PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(retried_ids) AS u(id);
END;
$$;
COMMENT ON FUNCTION pgsched.dead_retry(bigint, text, boolean, text, timestamp with time zone) IS 'Retry DEAD (FAILED) tasks: one id, a task type, or all_tasks; due now and routed as a new task (QUEUED), attempts starting over, recorded with the reason; the lanes are woken. Returns the ids retried.';
REVOKE ALL ON FUNCTION pgsched.dead_retry(bigint, text, boolean, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.dead_retry(bigint, text, boolean, text, timestamptz) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.dead_discard(
    task_id bigint,
    reason text DEFAULT 'discarded from the DEAD lane',
    as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    discarded pgsched.tasks;
    -- A value, not an expression: Citus allows no now() in an UPDATE's SET.
    t timestamptz := coalesce(dead_discard.as_of, now());
BEGIN
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = dead_discard.reason, updated_at = t
     WHERE tk.id = dead_discard.task_id AND tk.status = 'FAILED'
    RETURNING tk.* INTO discarded;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: task % is not in the DEAD lane', dead_discard.task_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF pgsched.events_by_functions() THEN
        PERFORM pgsched.task_event_write(discarded, 'FAILED');
        PERFORM pgsched.task_settle_finished(ARRAY[discarded.id], ARRAY['CANCELLED'::pgsched.task_status]);
    END IF;
    RETURN dead_discard.task_id;
END;
$$;
COMMENT ON FUNCTION pgsched.dead_discard(bigint, text, timestamp with time zone) IS 'Discard a DEAD task: CANCELLED, recorded with the reason. Returns its id.';
REVOKE ALL ON FUNCTION pgsched.dead_discard(bigint, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.dead_discard(bigint, text, timestamptz) TO pgsched_admin;

-- A page of the DEAD lane, newest failure first, with what each task holds back and how
-- many match in all. Read in steps, so that no statement joins the tasks with the
-- coordinator's dependency table (distributed mode refuses the join lane_dead makes).
CREATE OR REPLACE FUNCTION pgsched.dead_page(
    of_type text DEFAULT NULL,
    of_tenant text DEFAULT NULL,
    failed_since timestamptz DEFAULT NULL,
    max_rows integer DEFAULT 50,
    skip_rows integer DEFAULT 0
) RETURNS TABLE (
    id bigint, tenant_id text, task_type text, attempts bigint, max_attempts bigint,
    failed_at timestamptz, last_error text, holding_back bigint, total bigint
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    failed bigint[];
    pending bigint[];
    held_parents bigint[];
    held_counts bigint[];
    matched bigint;
BEGIN
    IF dead_page.max_rows IS NULL OR dead_page.max_rows < 1 OR dead_page.skip_rows < 0 THEN
        RAISE EXCEPTION 'pgsched: max_rows must be at least 1 and skip_rows at least 0, got % and %',
            dead_page.max_rows, dead_page.skip_rows USING ERRCODE = 'invalid_parameter_value';
    END IF;
    failed := ARRAY(
        SELECT tk.id FROM pgsched.tasks AS tk
         WHERE tk.status = 'FAILED'
           AND (dead_page.of_type IS NULL OR tk.task_type = dead_page.of_type)
           AND (dead_page.of_tenant IS NULL OR tk.tenant_id = dead_page.of_tenant)
           AND (dead_page.failed_since IS NULL OR tk.updated_at >= dead_page.failed_since)
         ORDER BY tk.updated_at DESC, tk.id DESC
         LIMIT dead_page.max_rows OFFSET coalesce(dead_page.skip_rows, 0));
    SELECT count(*) INTO matched FROM pgsched.tasks AS tk
     WHERE tk.status = 'FAILED'
       AND (dead_page.of_type IS NULL OR tk.task_type = dead_page.of_type)
       AND (dead_page.of_tenant IS NULL OR tk.tenant_id = dead_page.of_tenant)
       AND (dead_page.failed_since IS NULL OR tk.updated_at >= dead_page.failed_since);
    -- What each holds back: tasks still waiting for it (depends_on), PENDING.
    pending := ARRAY(
        SELECT c.id FROM pgsched.tasks AS c
         WHERE c.status = 'PENDING' AND c.id = ANY(ARRAY(
            SELECT d.child_id FROM pgsched.task_dependencies AS d
             WHERE d.parent_id = ANY(failed) AND NOT d.met)));
    SELECT coalesce(array_agg(h.parent_id), '{}'), coalesce(array_agg(h.n), '{}')
      INTO held_parents, held_counts
      FROM (SELECT d.parent_id, count(*) AS n FROM pgsched.task_dependencies AS d
             WHERE d.parent_id = ANY(failed) AND NOT d.met AND d.child_id = ANY(pending)
             GROUP BY d.parent_id) AS h;
    RETURN QUERY
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.attempts, tk.max_attempts, tk.updated_at,
           tk.last_error, coalesce(h.n, 0)::bigint, matched
      FROM pgsched.tasks AS tk
      LEFT JOIN unnest(held_parents, held_counts) AS h(parent_id, n) ON h.parent_id = tk.id
     WHERE tk.status = 'FAILED' AND tk.id = ANY(failed)
     ORDER BY tk.updated_at DESC, tk.id DESC;
END;
$$;
COMMENT ON FUNCTION pgsched.dead_page(text, text, timestamp with time zone, integer, integer) IS 'A page of the DEAD lane (FAILED tasks, newest failure first), filtered by task type, tenant and failed since: each with failed_at, last_error and holding_back (how many tasks wait for it, depends_on), and total, how many match in all. As the lane_dead view, read in steps so that it runs in distributed mode too.';
REVOKE ALL ON FUNCTION pgsched.dead_page(text, text, timestamptz, integer, integer) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.dead_page(text, text, timestamptz, integer, integer) TO pgsched_worker, pgsched_admin;

-- The DEAD lane: terminal failures, whatever lane they ran in, waiting for a person.
-- The columns tasks had when 0010 made these views with SELECT * (Postgres fixes a view's
-- columns when it is made): written out, so applying this file again keeps them.
CREATE OR REPLACE VIEW pgsched.lane_dead AS
SELECT
    id,
    tenant_id,
    task_type,
    schedule_type,
    next_run_at,
    cron_expression,
    timezone,
    payload,
    metadata,
    priority,
    lane,
    status,
    attempts,
    max_attempts,
    last_run_at,
    last_error,
    status_reason,
    idempotency_key,
    locked_by,
    lease_token,
    lease_expires_at,
    scope,
    product,
    parent_id,
    created_at,
    updated_at,
    schedule_id,
    -- What it holds back: tasks still waiting for it (depends_on), retried or released
    -- only by what happens to it.
    (
        SELECT count(*)
        FROM pgsched.task_dependencies AS d
        INNER JOIN pgsched.tasks AS c ON d.child_id = c.id AND c.status = 'PENDING'
        WHERE d.parent_id = t.id AND NOT d.met
    ) AS holding_back
FROM pgsched.tasks AS t
WHERE status = 'FAILED';
COMMENT ON VIEW pgsched.lane_dead IS 'The DEAD lane: FAILED tasks, to retry or discard, each with holding_back: how many tasks wait for it (depends_on).';
REVOKE ALL ON pgsched.lane_dead FROM public;
GRANT SELECT ON pgsched.lane_dead TO pgsched_worker;
GRANT ALL ON pgsched.lane_dead TO pgsched_admin;
