-- sql/code/hot_tier.sql — the hot tier.
--
-- promotion of cold tasks coming due (task_promote_due) and what the optional Redis hot
-- tier reads (hot_tier_window, hot_tier_due_by_ids, hot_tier_lane_usable).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- "The top of this file", which comments inside the functions below point to, is what the
-- migrations that made them said (0031 of earlier releases, in tests/fixtures/sql_v33/):
--
-- 0031 — claims by id, completions, lease renewals and promotion: work in proportion to
-- the rows they act on, whatever the statistics.
--
-- Counted with auto_explain (analyze, every plan node's rows over all its loops) for calls
-- acting on 300 rows, with tasks_hot analyzed while empty and autovacuum off on it, then a
-- burst: 20,000 tasks due, or 50,000 scheduled 100 s ahead and a few hundred due; 5,000
-- other tasks held by other workers (tests/test_hot_path_stale_statistics.py):
--
--   task_claim_ids       filtered the lane's claim index over every due row for the ids
--                        asked for, as task_claim_many's UPDATE did before 0026: 21,800
--                        rows with 20,000 due (the same with statistics taken after them).
--   task_finish_many     read the lease index (its predicate, status = 'PROCESSING', was
--                        the statement's own condition) whole, every worker's leases, to
--                        find the flush's: 17,401 rows. A flush with a stale report (a
--                        lease lost) joined the reports to every partition of
--                        pgsched.tasks by sequential scans and hashing: 40,930 rows with
--                        20,000 due, 111,530 with 50,000 ahead.
--   task_heartbeat_many  read the lease index whole the same way: 18,301 rows.
--   task_promote_due     with tasks_cold also analyzed empty, then 50,000 tasks scheduled a
--                        month ahead, read the whole cold tier and sorted it to promote the
--                        300 due within the hot window: 52,701 rows.
--
-- Now each statement has one way open to it, as 0026 did for the claim: rows looked up by
-- `tk.id = ANY (...)` in the primary key, with a status condition that names the hot tier
-- (partition pruning) in words no partial index's predicate follows from, sequential and
-- bitmap scans off for that statement, and the rows matched to their ids or reports by
-- hashing (nested loops off: an array rescanned per row is quadratic). A stale report's
-- task may be in any tier by then: it is looked up by id in each tier's primary key.
-- Promotion reads the cold tier's due index in order (sorting off) as far as it promotes,
-- then moves those rows by id. set_config(..., true) inside a function with its own SET of
-- each of those settings ends with the call. After, the heaviest statement of each call
-- handles 2,100, 2,101 (1,981 with stale reports), 1,801 and 1,800 rows. The lease rescue (its range of the lease index ends at
-- the expired leases: 3,001 rows) and a lane's next due time (one row a priority of the
-- claim index) were measured the same way and are left as they were.

CREATE OR REPLACE FUNCTION pgsched.task_promote_due(
    max_tasks integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL,
    within interval DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_sort = TRUE
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    horizon timestamptz;
    due bigint[];
    promoted integer;
    wake pgsched.task_lane[];
BEGIN
    IF task_promote_due.max_tasks IS NULL OR task_promote_due.max_tasks < 1 THEN
        RAISE EXCEPTION 'pgsched: max_tasks must be at least 1, got %', quote_nullable(task_promote_due.max_tasks)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_promote_due.within < INTERVAL '0' OR task_promote_due.within > INTERVAL '100 years' THEN
        RAISE EXCEPTION 'pgsched: within must be 0 or more (at most 100 years), got %', task_promote_due.within
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    horizon := coalesce(t + extract(epoch FROM task_promote_due.within) * INTERVAL '1 second', h.hot_until);
    -- The cold tier read in due order, as far as it promotes, whatever the statistics (see
    -- the top of this file); then each row found by its primary key.
    PERFORM set_config('enable_sort', 'off', TRUE), set_config('enable_seqscan', 'off', TRUE),
            set_config('enable_bitmapscan', 'off', TRUE);
    IF pgsched.distributed_mode() THEN
        -- No row lock across shards (sql/code/distribution.sql): picked without locks; the
        -- UPDATE's compare-and-set below leaves a row that moved on meanwhile.
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
        SELECT coalesce(array_agg(d.id), '{}')
          INTO due
          FROM (
            SELECT tk.id
              FROM pgsched.tasks AS tk
             WHERE tk.status = 'PENDING' AND tk.next_run_at < horizon AND tk.waiting_for IS NULL
             ORDER BY tk.next_run_at
             LIMIT task_promote_due.max_tasks
        ) AS d;
    ELSE
        SELECT coalesce(array_agg(d.id), '{}')
          INTO due
          FROM (
            SELECT tk.id
              FROM pgsched.tasks AS tk
             -- A task waiting for its parents is released by them, never promoted.
             WHERE tk.status = 'PENDING' AND tk.next_run_at < horizon AND tk.waiting_for IS NULL
             ORDER BY tk.next_run_at
             LIMIT task_promote_due.max_tasks
               FOR UPDATE SKIP LOCKED
        ) AS d;
    END IF;
    PERFORM set_config('enable_sort', 'on', TRUE);
    WITH moved AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED',
               status_reason = CASE
                   WHEN tk.next_run_at <= t THEN 'promoted late: already due (overdue sweep)'
                   ELSE 'promoted into the hot window'
               END,
               updated_at = t
         -- Not "AND waiting_for IS NULL": the rows are locked as found, so nothing changed
         -- it, and with that predicate stale statistics pick the promotable index over the
         -- primary key and read the whole cold tier.
         WHERE tk.id = ANY (due) AND tk.status = 'PENDING'
        RETURNING tk.id, tk.tenant_id, tk.task_type, tk.lane, tk.next_run_at,
                  tk.attempts, tk.locked_by, tk.status_reason, tk.updated_at
    ),
    -- The promotions' events when the functions write them (sql/code/transitions.sql).
    ev AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT m.id, m.tenant_id, m.task_type, 'PENDING', 'QUEUED',
               m.updated_at, m.next_run_at, m.attempts, m.locked_by, m.status_reason
          FROM moved AS m
         WHERE pgsched.events_by_functions()
    )
    SELECT count(*),
           coalesce(array_agg(DISTINCT m.lane) FILTER (
               WHERE pgsched.tier_of(m.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
      INTO promoted, wake
      FROM moved AS m;
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    RETURN promoted;
END;
$$;
COMMENT ON FUNCTION pgsched.task_promote_due(integer, timestamp with time zone, interval) IS 'The promotion sweep: moves up to max_tasks cold (PENDING) tasks due within the hot window into the hot tier, reading only the slice coming due. Returns how many moved.';
REVOKE ALL ON FUNCTION pgsched.task_promote_due(integer, timestamptz, interval) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_promote_due(integer, timestamptz, interval) TO pgsched_worker, pgsched_admin;

-- The ids a mirror of the lane holds: QUEUED, due before the immediate window's end, at
-- most max_tasks of them in claim order (higher priority first, then earliest due). One
-- range scan of tasks_hot_claim_idx per priority, as task_claim_many reads it.
CREATE OR REPLACE FUNCTION pgsched.hot_tier_window(
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
COMMENT ON FUNCTION pgsched.hot_tier_window(pgsched.task_lane, integer, timestamp with time zone) IS 'The Redis mirror''s pass: the ids of a lane QUEUED and due within the immediate window, at most max_tasks, in claim order, with the database''s now.';
REVOKE ALL ON FUNCTION pgsched.hot_tier_window(pgsched.task_lane, integer, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.hot_tier_window(pgsched.task_lane, integer, timestamptz) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT hot_tier_lane_usable.lane = ANY (s.fairness_off_lanes)
           AND NOT EXISTS (SELECT 1 FROM pgsched.task_limits)
      FROM pgsched.settings AS s
$$;
COMMENT ON FUNCTION pgsched.hot_tier_lane_usable(pgsched.task_lane) IS 'Whether claims by id (the Redis hot tier) may serve a lane: fairness off and no task limits.';
REVOKE ALL ON FUNCTION pgsched.hot_tier_lane_usable(pgsched.task_lane) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.hot_tier_lane_usable(pgsched.task_lane) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.hot_tier_due_by_ids(
    ids bigint[],
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (id bigint, lane text, priority integer, next_run_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
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
COMMENT ON FUNCTION pgsched.hot_tier_due_by_ids(bigint[], timestamp with time zone) IS 'Which of these ids the Redis mirror holds: QUEUED, due within the immediate window, on a lane it serves; a producer''s login learns only of its own tenants'' tasks.';
REVOKE ALL ON FUNCTION pgsched.hot_tier_due_by_ids(bigint[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.hot_tier_due_by_ids(bigint[], timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;
