-- 0021 — claims by id (the Redis hot tier, 0015) only where they claim as task_claim_many.
--
-- Since 0017 a lane's claim is fair across tenants unless the lane is in
-- settings.fairness_off_lanes, and any row of task_limits caps what claims may take. The
-- hot tier's mirror is one sorted set per lane in priority then due order: popping from it
-- is neither fair across tenants nor aware of limits. So task_claim_ids claims only on a
-- lane whose claims are in that plain order (fairness off) while no limit exists; elsewhere
-- it claims nothing, and the worker's top-up (task_claim_many) claims fairly, within limits.
--
--   hot_tier_lane_usable(lane)  true when claims by id claim as task_claim_many would

CREATE FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT hot_tier_lane_usable.lane = ANY (s.fairness_off_lanes)
           AND NOT EXISTS (SELECT 1 FROM pgsched.task_limits)
      FROM pgsched.settings AS s
$$;

CREATE OR REPLACE FUNCTION pgsched.task_claim_ids(
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
    IF NOT pgsched.hot_tier_lane_usable(task_claim_ids.lane) THEN
        -- Fair or limited: only task_claim_many claims here.
        RETURN;
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

REVOKE EXECUTE ON FUNCTION pgsched.hot_tier_lane_usable(pgsched.task_lane) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.hot_tier_lane_usable(pgsched.task_lane)
TO pgsched_worker, pgsched_admin;
