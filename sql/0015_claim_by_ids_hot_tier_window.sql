-- 0015 — what the optional Redis hot tier needs from the database.
--
-- Redis holds a mirror of ids only (the rows are the truth). A worker pops ids from it and
-- claims exactly those here; the sweep leader reads the ids to mirror here.
--
--   task_claim_ids(lane, ids, worker, lease)  claim these ids, if still QUEUED in the lane
--                                             and due by this database's clock
--   hot_tier_window(lane, max_tasks)          the QUEUED ids of a lane due within the
--                                             immediate window, as claims would take them
--   system_identifier()                       this cluster's identity: a mirror built from
--                                             another database (failover, restore) is stale

-- The same compare-and-set, lease and events as task_claim_many (the statement trigger
-- records each PROCESSING), but only for the given ids. An id that is gone, claimed,
-- cancelled, not yet due or of another lane is skipped without a word: the mirror may be
-- stale, the row decides. SKIP LOCKED: an id another worker holds is skipped, not waited on.
CREATE FUNCTION pgsched.task_claim_ids(
    lane pgsched.task_lane,
    ids bigint[],
    worker text,
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgsched.tasks
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'ids must be an array of task ids, got NULL' USING ERRCODE = '22023';
    END IF;
    IF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'ids holds % ids; at most 10000 per claim', cardinality(ids)
            USING ERRCODE = '22023';
    END IF;
    IF worker IS NULL OR worker = '' THEN
        RAISE EXCEPTION 'worker must name the claiming worker' USING ERRCODE = '22023';
    END IF;
    IF lease IS NULL OR lease <= INTERVAL '0' THEN
        RAISE EXCEPTION 'lease must be a positive interval, got %', lease USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.id = ANY(task_claim_ids.ids)
           AND tk.status = 'QUEUED'
           AND tk.lane = task_claim_ids.lane
           AND tk.next_run_at <= t
         ORDER BY tk.priority DESC, tk.next_run_at
           FOR UPDATE SKIP LOCKED
    )
    UPDATE pgsched.tasks AS tk
       SET status = 'PROCESSING',
           attempts = tk.attempts + 1,
           locked_by = task_claim_ids.worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = t + task_claim_ids.lease,
           last_run_at = t,
           updated_at = t,
           status_reason = NULL
      FROM due
     WHERE tk.id = due.id AND tk.status = 'QUEUED'
    RETURNING tk.*;
END;
$$;

-- The ids a mirror of the lane holds: QUEUED, due before the immediate window's end, at
-- most max_tasks of them in claim order (higher priority first, then earliest due). One
-- range scan of tasks_hot_claim_idx per priority, as task_claim_many reads it.
CREATE FUNCTION pgsched.hot_tier_window(
    lane pgsched.task_lane,
    max_tasks integer,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (id bigint, priority integer, next_run_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    until timestamptz;
BEGIN
    IF max_tasks IS NULL OR max_tasks < 1 THEN
        RAISE EXCEPTION 'max_tasks must be at least 1, got %', max_tasks USING ERRCODE = '22023';
    END IF;
    SELECT h.immediate_until INTO until FROM pgsched.tier_horizons(t) AS h;
    RETURN QUERY
    SELECT c.id, c.priority, c.next_run_at, t
      FROM unnest(pgsched.lane_priorities(hot_tier_window.lane)) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT tk.id, tk.priority, tk.next_run_at
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'QUEUED'
           AND tk.lane = hot_tier_window.lane
           AND tk.priority = p.priority
           AND tk.next_run_at < until
         ORDER BY tk.next_run_at
         LIMIT hot_tier_window.max_tasks
     ) AS c
     LIMIT hot_tier_window.max_tasks;
END;
$$;

-- pg_control_system() is for superusers and pg_monitor; the identity alone is no secret.
CREATE FUNCTION pgsched.system_identifier() RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT system_identifier::text FROM pg_control_system()
$$;

-- New functions are not everyone's: only the roles of 0006, as for the rest of the API.
REVOKE EXECUTE ON FUNCTION
pgsched.task_claim_ids(pgsched.task_lane, bigint[], text, interval, timestamptz),
pgsched.hot_tier_window(pgsched.task_lane, integer, timestamptz),
pgsched.system_identifier()
FROM public;
GRANT EXECUTE ON FUNCTION
pgsched.task_claim_ids(pgsched.task_lane, bigint[], text, interval, timestamptz),
pgsched.hot_tier_window(pgsched.task_lane, integer, timestamptz),
pgsched.system_identifier()
TO pgsched_worker, pgsched_admin;
