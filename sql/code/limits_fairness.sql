-- sql/code/limits_fairness.sql — limits and fairness.
--
-- limits per task type and tenant (limit_set, limit_clear, limit_list, limit_room,
-- limit_tokens) and fair claims per lane (lane_set_fairness).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Tokens a limit holds at t: refilled at rate per rate_period up to its burst.
CREATE OR REPLACE FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamptz)
RETURNS double precision
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN l.rate IS NULL THEN NULL ELSE least(
        greatest(l.rate / 10.0, 1.0),
        coalesce(l.tokens, greatest(l.rate / 10.0, 1.0))
        + greatest(extract(EPOCH FROM t - coalesce(l.tokens_at, t)), 0)
        * l.rate / extract(EPOCH FROM l.rate_period)
    ) END
$$;
COMMENT ON FUNCTION pgsched.limit_tokens(pgsched.task_limits, timestamp with time zone) IS 'The tokens a limit''s rate bucket holds at t: refilled at rate per period, up to a tenth of the rate (at least 1).';
REVOKE ALL ON FUNCTION pgsched.limit_tokens(pgsched.task_limits, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.limit_tokens(pgsched.task_limits, timestamptz) TO pgsched_worker, pgsched_admin;

-- Each limit's room now: how many more tasks it lets a claim take (at most max_tasks).
-- Counts PROCESSING rows (tasks_hot_lease_idx covers exactly those) per limited key.
-- VOLATILE: called in its own statement, it sees what committed before that statement.
CREATE OR REPLACE FUNCTION pgsched.limit_room(max_tasks integer, t timestamptz)
RETURNS TABLE (scope text, key text, room integer)
LANGUAGE sql
AS $$
    SELECT l.scope, l.key, least(
        max_tasks,
        -- (greatest ignores NULLs: a limit without max_processing says so explicitly)
        CASE WHEN l.max_processing IS NULL THEN max_tasks ELSE greatest(l.max_processing - r.processing, 0) END,
        coalesce(floor(pgsched.limit_tokens(l, t))::integer, max_tasks)
    )
      FROM pgsched.task_limits AS l
      LEFT JOIN LATERAL (
        SELECT count(*)::integer AS processing
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PROCESSING'
           AND CASE l.scope WHEN 'task_type' THEN tk.task_type ELSE tk.tenant_id END = l.key
      ) AS r ON l.max_processing IS NOT NULL
$$;
COMMENT ON FUNCTION pgsched.limit_room(integer, timestamp with time zone) IS 'How many more tasks each limit lets a claim take now (at most max_tasks); used by the claims.';
REVOKE ALL ON FUNCTION pgsched.limit_room(integer, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.limit_room(integer, timestamptz) TO pgsched_worker, pgsched_admin;

-- Set (or replace) the limits of one task type or tenant. A field is refused with 22023
-- naming it, and nothing is written.
CREATE OR REPLACE FUNCTION pgsched.limit_set(
    scope text,
    key text,
    max_processing integer DEFAULT NULL,
    rate integer DEFAULT NULL,
    per text DEFAULT 'second'
) RETURNS pgsched.task_limits
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved pgsched.task_limits;
    period interval;
BEGIN
    IF limit_set.scope IS NULL OR limit_set.scope NOT IN ('task_type', 'tenant') THEN
        RAISE EXCEPTION 'scope must be task_type or tenant, got %', coalesce(limit_set.scope, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.key IS NULL OR limit_set.key = '' OR length(limit_set.key) > 200 THEN
        RAISE EXCEPTION 'key must be 1 to 200 characters (the % it limits)', limit_set.scope
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.max_processing IS NULL AND limit_set.rate IS NULL THEN
        RAISE EXCEPTION 'max_processing or rate must be given (limit_clear removes a limit)'
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.max_processing < 0 OR limit_set.max_processing > 1000000 THEN
        RAISE EXCEPTION 'max_processing must be 0 to 1000000, got %', limit_set.max_processing
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.rate < 1 OR limit_set.rate > 1000000 THEN
        RAISE EXCEPTION 'rate must be 1 to 1000000, got %', limit_set.rate
            USING ERRCODE = '22023';
    END IF;
    period := CASE limit_set.per WHEN 'second' THEN INTERVAL '1 second' WHEN 'minute' THEN INTERVAL '1 minute' END;
    IF limit_set.rate IS NOT NULL AND period IS NULL THEN
        RAISE EXCEPTION 'per must be second or minute, got %', coalesce(limit_set.per, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgsched.task_limits AS l (scope, key, max_processing, rate, rate_period)
    VALUES (
        limit_set.scope, limit_set.key, limit_set.max_processing, limit_set.rate,
        CASE WHEN limit_set.rate IS NOT NULL THEN period END
    )
    ON CONFLICT ON CONSTRAINT task_limits_pkey DO UPDATE
       SET max_processing = excluded.max_processing,
           rate = excluded.rate,
           rate_period = excluded.rate_period,
           -- A new rate starts with a full bucket; an unchanged one keeps its tokens.
           tokens = CASE WHEN (l.rate, l.rate_period) IS NOT DISTINCT FROM (excluded.rate, excluded.rate_period)
                         THEN l.tokens END,
           tokens_at = CASE WHEN (l.rate, l.rate_period) IS NOT DISTINCT FROM (excluded.rate, excluded.rate_period)
                            THEN l.tokens_at END,
           updated_at = now()
    RETURNING * INTO saved;
    RETURN saved;
END;
$$;
COMMENT ON FUNCTION pgsched.limit_set(text, text, integer, integer, text) IS 'Set (or replace) the limits of one task type or tenant: max_processing tasks PROCESSING at once across all workers, and/or rate claims per second or minute (a token bucket). A bad field is refused with 22023 naming it.';
REVOKE ALL ON FUNCTION pgsched.limit_set(text, text, integer, integer, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.limit_set(text, text, integer, integer, text) TO pgsched_admin;

-- Remove the limits of one task type or tenant; false when it had none.
CREATE OR REPLACE FUNCTION pgsched.limit_clear(scope text, key text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF limit_clear.scope IS NULL OR limit_clear.scope NOT IN ('task_type', 'tenant') THEN
        RAISE EXCEPTION 'scope must be task_type or tenant, got %', coalesce(limit_clear.scope, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM pgsched.task_limits AS l WHERE l.scope = limit_clear.scope AND l.key = limit_clear.key;
    RETURN FOUND;
END;
$$;
COMMENT ON FUNCTION pgsched.limit_clear(text, text) IS 'Remove the limits of one task type or tenant; false when it had none.';
REVOKE ALL ON FUNCTION pgsched.limit_clear(text, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.limit_clear(text, text) TO pgsched_admin;

-- Every limit, with what is PROCESSING under it now.
CREATE OR REPLACE FUNCTION pgsched.limit_list()
RETURNS TABLE (
    scope text, key text, max_processing integer, rate integer, per text, processing integer,
    updated_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.scope, l.key, l.max_processing, l.rate,
           CASE l.rate_period WHEN INTERVAL '1 second' THEN 'second' WHEN INTERVAL '1 minute' THEN 'minute' END,
           (SELECT count(*)::integer
              FROM pgsched.tasks AS tk
             WHERE tk.status = 'PROCESSING'
               AND CASE l.scope WHEN 'task_type' THEN tk.task_type ELSE tk.tenant_id END = l.key),
           l.updated_at
      FROM pgsched.task_limits AS l
     ORDER BY l.scope, l.key
$$;
COMMENT ON FUNCTION pgsched.limit_list() IS 'Every limit, with what is PROCESSING under it now.';
REVOKE ALL ON FUNCTION pgsched.limit_list() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.limit_list() TO pgsched_worker, pgsched_admin;

-- Turn fair claims on or off for one lane (on by default).
CREATE OR REPLACE FUNCTION pgsched.lane_set_fairness(lane pgsched.task_lane, fair boolean) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lane_set_fairness.lane IS NULL OR lane_set_fairness.fair IS NULL THEN
        RAISE EXCEPTION 'lane and fair must be given' USING ERRCODE = '22023';
    END IF;
    UPDATE pgsched.settings AS s
       SET fairness_off_lanes = CASE WHEN lane_set_fairness.fair
           THEN array_remove(s.fairness_off_lanes, lane_set_fairness.lane)
           ELSE array_append(array_remove(s.fairness_off_lanes, lane_set_fairness.lane), lane_set_fairness.lane)
           END;
    RETURN lane_set_fairness.fair;
END;
$$;
COMMENT ON FUNCTION pgsched.lane_set_fairness(pgsched.task_lane, boolean) IS 'Turn fair claims on or off for one lane (on by default): on, a claim shares its batch between the tenants with work queued.';
REVOKE ALL ON FUNCTION pgsched.lane_set_fairness(pgsched.task_lane, boolean) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lane_set_fairness(pgsched.task_lane, boolean) TO pgsched_admin;
