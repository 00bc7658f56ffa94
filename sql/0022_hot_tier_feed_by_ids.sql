-- 0022 — feeding the Redis hot tier after a commit (optional; see 0015 and 0021).
--
-- The sweep leader's mirror finds every task due soon within a pass, whoever queued it.
-- A producer scheduling through the Python App, and a worker whose outcomes retried or
-- released tasks, know the ids they just committed: right after the commit they ask here
-- which of them the mirror would hold, and push those to Redis at once. Best effort: if
-- the push fails, the leader's next pass finds them in Postgres as before.
--
--   hot_tier_due_by_ids(ids)  of these ids, those the mirror holds: QUEUED, due before
--                             the immediate window's end, on a lane the hot tier serves
--                             (hot_tier_lane_usable), and (for a producer's login) of a
--                             tenant the login acts for

CREATE FUNCTION pgsched.hot_tier_due_by_ids(
    ids bigint[],
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (id bigint, lane text, priority integer, next_run_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    until timestamptz;
    usable pgsched.task_lane[];
    -- Workers requeue any tenant's tasks; a producer's login learns only of its tenants.
    every_tenant boolean := pg_has_role(session_user, 'pgsched_worker', 'MEMBER')
        OR pgsched.login_acts_for_all_tenants();
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'ids must be an array of task ids, got NULL' USING ERRCODE = '22023';
    END IF;
    IF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'ids holds % ids; at most 10000 per call', cardinality(ids)
            USING ERRCODE = '22023';
    END IF;
    SELECT h.immediate_until INTO until FROM pgsched.tier_horizons(t) AS h;
    SELECT coalesce(array_agg(l.lane), '{}') INTO usable
      FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l (lane)
     WHERE pgsched.hot_tier_lane_usable(l.lane);
    RETURN QUERY
    SELECT tk.id, tk.lane::text, tk.priority, tk.next_run_at
      FROM pgsched.tasks AS tk
     WHERE tk.id = ANY(hot_tier_due_by_ids.ids)
       AND tk.status = 'QUEUED'
       AND tk.next_run_at < until
       AND tk.lane = ANY(usable)
       AND (every_tenant OR EXISTS (
            SELECT 1 FROM pgsched.producer_tenants AS b
             WHERE b.role_name = session_user AND b.tenant_id = tk.tenant_id));
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.hot_tier_due_by_ids(bigint[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.hot_tier_due_by_ids(bigint[], timestamptz)
TO pgsched_producer, pgsched_worker, pgsched_admin;
