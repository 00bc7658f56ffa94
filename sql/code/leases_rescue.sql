-- sql/code/leases_rescue.sql — leases and rescue.
--
-- lease renewal (task_heartbeat_many), the rescue of expired leases (lease_rescue_expired)
-- and overdue wake-ups (task_wake_overdue).
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

CREATE OR REPLACE FUNCTION pgsched.task_heartbeat_many(
    task_ids bigint[],
    lease_tokens uuid[],
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL,
    -- The tasks' tenant, or NULL (any): given, the statements stay on its shard.
    tenant text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
SET jit = off
AS $$
DECLARE
    held bigint[];
    renewed bigint[];
    until timestamptz;
BEGIN
    IF task_heartbeat_many.lease IS NULL OR task_heartbeat_many.lease <= INTERVAL '0'
       OR task_heartbeat_many.lease > INTERVAL '100 years' THEN
        RAISE EXCEPTION 'pgsched: lease must be a positive interval (at most 100 years), got %',
            quote_nullable(task_heartbeat_many.lease) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Each leased row found by its primary key whatever the statistics (see the top of
    -- this file), matched to its token by hashing.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE),
            set_config('enable_nestloop', 'off', TRUE), set_config('enable_hashjoin', 'on', TRUE);
    IF pgsched.distributed_mode() THEN
        -- No row lock across shards (sql/code/distribution.sql): the compare-and-set alone,
        -- waiting for a row a finish holds (and then leaving it, its lease gone).
        -- The new expiry, a value: Citus refuses now() in a COALESCE in an UPDATE.
        until := coalesce(as_of, now()) + lease;
        RETURN QUERY
        UPDATE pgsched.tasks AS tk
           SET lease_expires_at = until
          FROM unnest(task_ids, lease_tokens) AS u (id, token)
         WHERE tk.id = u.id AND tk.lease_token = u.token
           AND tk.id = ANY (task_ids)
           AND (task_heartbeat_many.tenant IS NULL OR tk.tenant_id = task_heartbeat_many.tenant)
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status <> 'QUEUED'
        RETURNING tk.id;
        RETURN;
    END IF;
    FOR attempt IN 1..5 LOOP
        BEGIN
            SELECT coalesce(array_agg(l.id), '{}')
              INTO held
              FROM (
                SELECT tk.id
                  FROM pgsched.tasks AS tk
                 INNER JOIN unnest(task_ids, lease_tokens) AS u (id, token)
                    ON tk.id = u.id AND tk.lease_token = u.token
                 WHERE tk.id = ANY (task_ids)
                   AND (task_heartbeat_many.tenant IS NULL OR tk.tenant_id = task_heartbeat_many.tenant)
                   -- The hot tier only (pruning), in words no partial index's predicate follows from.
                   AND tk.status IN ('QUEUED', 'PROCESSING')
                   AND tk.status::text = 'PROCESSING'
                   FOR UPDATE OF tk SKIP LOCKED
            ) AS l;
            WITH extended AS (
                UPDATE pgsched.tasks AS tk
                   SET lease_expires_at = coalesce(as_of, now()) + lease
                 WHERE tk.id = ANY (held)
                   AND tk.status IN ('QUEUED', 'PROCESSING')
                   AND tk.status::text = 'PROCESSING'
                RETURNING tk.id
            )
            SELECT coalesce(array_agg(e.id), '{}') INTO renewed FROM extended AS e;
            RETURN QUERY SELECT unnest(renewed);
            RETURN;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions mid-lock: try again, it will be gone
        END;
    END LOOP;
    RETURN;
END;
$$;
COMMENT ON FUNCTION pgsched.task_heartbeat_many(bigint[], uuid[], interval, timestamp with time zone, text) IS 'A worker renews the leases of its running tasks (a compare-and-set on the lease token); returns the ids renewed. An id missing from the result is no longer this worker''s. tenant (NULL: any): the tasks'' tenant, so that in distributed mode the statements run on its shard alone.';
REVOKE ALL ON FUNCTION pgsched.task_heartbeat_many(bigint[], uuid[], interval, timestamptz, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_heartbeat_many(bigint[], uuid[], interval, timestamptz, text) TO pgsched_worker, pgsched_admin;

-- Rescue, as 0012, with the cancel: a task asked to stop whose worker was lost is
-- CANCELLED, not queued again.
--
-- not_before, a floor (0047): the scan reads the leases that expired from then on. Every
-- claimed or renewed lease leaves an entry in tasks_hot_lease_idx, and while a session
-- holds an old snapshot neither vacuum nor a passing scan removes the dead ones: a scan
-- from the start stepped over all of them (200,000 claims under a held snapshot: 9,032
-- buffers, 34 ms, against 0.2 ms). The caller (pgsched/worker/rescue_floor.py) raises it
-- to the time of its last sweep that left nothing expired behind, and sweeps without one
-- every minute; NULL is no floor.
CREATE OR REPLACE FUNCTION pgsched.lease_rescue_expired(
    lane pgsched.task_lane DEFAULT NULL,
    max_tasks integer DEFAULT 1000,
    as_of timestamptz DEFAULT NULL,
    not_before timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    rescued integer := 0;
    ended bigint[];
    ended_as pgsched.task_status[];
    wake pgsched.task_lane[];
    picked bigint[];
BEGIN
    IF pgsched.distributed_mode() THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
    END IF;
    IF lease_rescue_expired.max_tasks IS NULL OR lease_rescue_expired.max_tasks < 1 THEN
        RAISE EXCEPTION 'pgsched: max_tasks must be at least 1, got %', quote_nullable(lease_rescue_expired.max_tasks)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    FOR attempt IN 1..5 LOOP
        BEGIN
            IF pgsched.distributed_mode() THEN
                -- No row lock across shards (sql/code/distribution.sql): picked without
                -- locks; the UPDATE's compare-and-set below leaves a row that moved on.
                SELECT coalesce(array_agg(x.id), '{}') INTO picked
                  FROM (
                    SELECT tk.id
                      FROM pgsched.tasks AS tk
                     WHERE tk.status = 'PROCESSING'
                       AND tk.lease_expires_at < t
                       AND tk.lease_expires_at >= coalesce(lease_rescue_expired.not_before, '-infinity')
                       AND (lease_rescue_expired.lane IS NULL OR tk.lane = lease_rescue_expired.lane)
                     ORDER BY tk.lease_expires_at
                     LIMIT lease_rescue_expired.max_tasks
                  ) AS x;
            ELSE
                SELECT coalesce(array_agg(x.id), '{}') INTO picked
                  FROM (
                    SELECT tk.id
                      FROM pgsched.tasks AS tk
                     WHERE tk.status = 'PROCESSING'
                       AND tk.lease_expires_at < t
                       AND tk.lease_expires_at >= coalesce(lease_rescue_expired.not_before, '-infinity')
                       AND (lease_rescue_expired.lane IS NULL OR tk.lane = lease_rescue_expired.lane)
                     ORDER BY tk.lease_expires_at
                     LIMIT lease_rescue_expired.max_tasks
                       FOR UPDATE SKIP LOCKED
                  ) AS x;
            END IF;
            WITH moved AS (
                UPDATE pgsched.tasks AS tk
                   SET status = CASE
                           WHEN tk.cancel_requested_at IS NOT NULL THEN 'CANCELLED'::pgsched.task_status
                           WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                           ELSE pgsched.tier_status(pgsched.tier_of(tk.next_run_at, h.immediate_until, h.hot_until))
                       END,
                       -- Concatenation, not format (STABLE: refused by Citus in an UPDATE).
                       status_reason = CASE
                           WHEN tk.cancel_requested_at IS NOT NULL
                               THEN 'cancelled by ' || coalesce(tk.cancel_requested_by, '') || ': '
                                    || coalesce(tk.cancel_reason, '') || '; worker lost (lease expired) before it stopped'
                           WHEN tk.attempts >= tk.max_attempts
                               THEN 'worker lost: lease expired, attempts exhausted (' || tk.attempts::text
                                    || ' of ' || tk.max_attempts::text || ')'
                           ELSE 'worker lost: lease expired; queued again'
                       END,
                       last_error = CASE
                           WHEN tk.cancel_requested_at IS NULL AND tk.attempts >= tk.max_attempts THEN 'worker lost'
                           ELSE tk.last_error
                       END,
                       lease_token = NULL,
                       lease_expires_at = NULL,
                       updated_at = t
                 WHERE tk.id = ANY (picked) AND tk.status = 'PROCESSING' AND tk.lease_expires_at < t
                RETURNING tk.id, tk.tenant_id, tk.task_type, tk.lane, tk.status, tk.next_run_at,
                          tk.attempts, tk.locked_by, tk.status_reason, tk.updated_at
            ),
            -- The rescues' events when the functions write them (sql/code/transitions.sql).
            ev AS (
                INSERT INTO pgsched.task_events (
                    task_id, tenant_id, task_type, from_status, to_status,
                    occurred_at, scheduled_for, attempt, worker, detail
                )
                SELECT m.id, m.tenant_id, m.task_type, 'PROCESSING', m.status,
                       m.updated_at, m.next_run_at, m.attempts, m.locked_by, m.status_reason
                  FROM moved AS m
                 WHERE pgsched.events_by_functions()
            )
            SELECT count(*),
                   coalesce(array_agg(DISTINCT m.lane) FILTER (
                       WHERE m.status = 'QUEUED'
                         AND pgsched.tier_of(m.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}'),
                   array_agg(m.id) FILTER (WHERE m.status IN ('FAILED', 'CANCELLED')),
                   array_agg(m.status) FILTER (WHERE m.status IN ('FAILED', 'CANCELLED'))
              INTO rescued, wake, ended, ended_as
              FROM moved AS m;
            IF pgsched.events_by_functions() THEN
                -- What waits for the tasks that ended (the trigger's work in trigger mode).
                PERFORM pgsched.task_settle_finished(ended, ended_as);
            END IF;
            PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
            RETURN rescued;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions mid-lock (it finished after all): try again
        END;
    END LOOP;
    RETURN rescued;
END;
$$;
COMMENT ON FUNCTION pgsched.lease_rescue_expired(pgsched.task_lane, integer, timestamp with time zone, timestamp with time zone) IS 'The rescue sweep: PROCESSING tasks of a lane (NULL: every lane) whose lease expired (from not_before on; NULL: any time) go back to the tier of their due time, or to FAILED with worker lost when their attempts are used up; one asked to stop is CANCELLED. At most max_tasks; returns how many were rescued.';
REVOKE ALL ON FUNCTION pgsched.lease_rescue_expired(pgsched.task_lane, integer, timestamptz, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lease_rescue_expired(pgsched.task_lane, integer, timestamptz, timestamptz) TO pgsched_worker, pgsched_admin;

-- The safety net for due work nobody claimed: wake the lanes that have it. Returns the
-- lanes and how many due tasks have waited longer than `older_than`.
CREATE OR REPLACE FUNCTION pgsched.task_wake_overdue(
    older_than interval DEFAULT '1 minute',
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (lane pgsched.task_lane, overdue bigint)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    r record;
BEGIN
    IF pgsched.distributed_mode() THEN
        -- One grouped read across the shards (Citus pushes no aggregate down a lateral
        -- join), uncapped.
        FOR r IN
            SELECT tk.lane, count(*) AS n
              FROM pgsched.tasks AS tk
             WHERE tk.status = 'QUEUED' AND tk.next_run_at < coalesce(as_of, now()) - older_than
             GROUP BY tk.lane
        LOOP
            lane := r.lane;
            overdue := r.n;
            RETURN NEXT;
            PERFORM pg_notify('pgsched_' || lower(r.lane::text), '');
        END LOOP;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT l.lane, c.n
      FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l(lane)
     CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM pgsched.tasks AS tk
             WHERE tk.status = 'QUEUED' AND tk.lane = l.lane
               AND tk.next_run_at < coalesce(as_of, now()) - older_than
             LIMIT 10000) AS x
     ) AS c
     WHERE c.n > 0;
    PERFORM pg_notify('pgsched_' || lower(o.lane::text), '')
       FROM (SELECT l.lane FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l(lane)
              WHERE EXISTS (SELECT 1 FROM pgsched.tasks AS tk
                             WHERE tk.status = 'QUEUED' AND tk.lane = l.lane
                               AND tk.next_run_at < coalesce(as_of, now()) - older_than)) AS o;
END;
$$;
ALTER FUNCTION pgsched.task_wake_overdue(interval, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION pgsched.task_wake_overdue(interval, timestamp with time zone) IS 'The rescue sweep''s safety net: wakes the lanes with due work nobody claimed for longer than older_than. Returns the lanes and their overdue counts.';
REVOKE ALL ON FUNCTION pgsched.task_wake_overdue(interval, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_wake_overdue(interval, timestamptz) TO pgsched_worker, pgsched_admin;
