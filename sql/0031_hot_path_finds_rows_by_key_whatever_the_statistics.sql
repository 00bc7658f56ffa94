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
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    locked bigint[];
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
    -- The ids, each found by its primary key whatever the statistics (see the top of this
    -- file), locked in the lane's order.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE);
    SELECT coalesce(array_agg(d.id), '{}')
      INTO locked
      FROM (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.id = ANY (task_claim_ids.ids)
           -- The hot tier only (pruning), in words no partial index's predicate follows from.
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'QUEUED'
           AND tk.lane = task_claim_ids.lane
           AND tk.next_run_at <= t
         ORDER BY tk.priority DESC, tk.next_run_at
           FOR UPDATE SKIP LOCKED
    ) AS d;
    -- Marked claimed the same way, returned in that order, matched up by hashing.
    PERFORM set_config('enable_nestloop', 'off', TRUE);
    RETURN QUERY
    WITH claimed AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'PROCESSING',
               attempts = tk.attempts + 1,
               locked_by = task_claim_ids.worker,
               lease_token = gen_random_uuid(),
               lease_expires_at = t + task_claim_ids.lease,
               last_run_at = t,
               updated_at = t,
               status_reason = NULL
         WHERE tk.id = ANY (locked)
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'QUEUED'
        RETURNING tk.*
    )
    SELECT c.*
      FROM claimed AS c
     INNER JOIN unnest(locked) WITH ORDINALITY AS a (id, pos) ON a.id = c.id
     ORDER BY a.pos;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.task_finish_many(
    task_ids bigint[],
    lease_tokens uuid[],
    outcomes text[],
    errors text[] DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (task_id bigint, applied boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET plan_cache_mode = force_custom_plan
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
AS $$
DECLARE
    -- The statement's own clock: in a handler's transaction now() is when the work began.
    t timestamptz := coalesce(as_of, clock_timestamp());
    h record;
    bad text;
    done bigint[];
    stale bigint[];
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    SELECT u.outcome INTO bad
      FROM unnest(outcomes) AS u(outcome)
     WHERE u.outcome IS NULL OR u.outcome NOT IN ('COMPLETED', 'RETRY', 'FAILED', 'RELEASED', 'CANCELLED')
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: unknown outcome % (COMPLETED, RETRY, FAILED, RELEASED or CANCELLED)', bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The reported rows, each found by its primary key whatever the statistics (see the
    -- top of this file), matched to its report by hashing.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE),
            set_config('enable_nestloop', 'off', TRUE), set_config('enable_hashjoin', 'on', TRUE);
    WITH finished AS (
        UPDATE pgsched.tasks AS tk
           SET status = (CASE
                   WHEN u.outcome = 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                   WHEN tk.cancel_requested_at IS NOT NULL THEN 'CANCELLED'::pgsched.task_status
                   WHEN u.outcome = 'FAILED' THEN 'FAILED'::pgsched.task_status
                   WHEN u.outcome = 'RELEASED'
                       THEN pgsched.tier_status(pgsched.tier_of(tk.next_run_at, h.immediate_until, h.hot_until))
                   -- CANCELLED with no request (not a report this worker makes): a failed attempt.
                   WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                   ELSE pgsched.tier_status(
                       pgsched.tier_of(t + coalesce(u.delay, '0'), h.immediate_until, h.hot_until))
               END),
               attempts = CASE
                   WHEN u.outcome = 'RELEASED' AND tk.cancel_requested_at IS NULL THEN tk.attempts - 1
                   ELSE tk.attempts
               END,
               next_run_at = CASE
                   WHEN u.outcome IN ('RETRY', 'CANCELLED') AND tk.cancel_requested_at IS NULL
                        AND tk.attempts < tk.max_attempts
                       THEN t + coalesce(u.delay, '0')
                   ELSE tk.next_run_at
               END,
               last_error = CASE
                   WHEN u.outcome IN ('RETRY', 'FAILED', 'CANCELLED') THEN u.error
                   ELSE tk.last_error
               END,
               status_reason = CASE
                   WHEN u.outcome = 'COMPLETED' AND tk.cancel_requested_at IS NOT NULL
                       THEN format('completed: the handler finished before the cancel requested by %s (%s) took effect',
                                   tk.cancel_requested_by, tk.cancel_reason)
                            || coalesce('; ' || u.error, '')
                   WHEN u.outcome = 'COMPLETED' THEN u.error
                   WHEN tk.cancel_requested_at IS NOT NULL
                       THEN format('cancelled by %s: %s; %s', tk.cancel_requested_by, tk.cancel_reason,
                                   coalesce(split_part(u.error, E'\n', 1), lower(u.outcome)))
                   WHEN u.outcome = 'RELEASED' THEN coalesce(u.error, 'released unfinished at worker shutdown')
                   WHEN u.outcome IN ('RETRY', 'CANCELLED') AND tk.attempts >= tk.max_attempts
                       THEN format('attempts exhausted (%s of %s): %s', tk.attempts, tk.max_attempts, u.error)
                   ELSE u.error
               END,
               lease_token = NULL,
               lease_expires_at = NULL,
               updated_at = t
          FROM unnest(task_ids, lease_tokens, outcomes, errors, retry_delays)
               AS u(id, token, outcome, error, delay)
         WHERE tk.id = u.id AND tk.lease_token = u.token
           AND tk.id = ANY (task_ids)
           -- The hot tier only (pruning), in words no partial index's predicate follows from.
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'PROCESSING'
        RETURNING tk.id, tk.status, tk.tenant_id, tk.task_type, tk.idempotency_key, tk.lane, tk.next_run_at
    ),
    ledger AS (
        INSERT INTO pgsched.completed_work (tenant_id, task_type, idempotency_key, task_id, completed_at)
        SELECT f.tenant_id, f.task_type, f.idempotency_key, f.id, t
          FROM finished AS f
         WHERE f.status = 'COMPLETED' AND f.idempotency_key IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT coalesce(array_agg(f.id), '{}'),
           coalesce(array_agg(DISTINCT f.lane) FILTER (
               WHERE f.status = 'QUEUED'
                 AND pgsched.tier_of(f.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
      INTO done, wake
      FROM finished AS f;
    -- A retry due soon wakes its lane, so it runs when due and not at the next backup poll.
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;

    IF cardinality(done) = cardinality(task_ids) THEN
        -- Every report applied (the usual flush): no stale report to record, and no
        -- statement to plan for it (planning a join against every partition of
        -- pgsched.tasks was the largest fixed cost of a flush).
        RETURN QUERY SELECT u.id, TRUE FROM unnest(task_ids) AS u(id);
        RETURN;
    END IF;

    -- Reports that lost their lease change nothing; say so on the task's record. The task
    -- may be in any tier by now: each id is looked up in each tier's primary key.
    SELECT coalesce(array_agg(u.id), '{}') INTO stale
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id
     WHERE d.id IS NULL;
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at, tk.attempts,
           tk.locked_by,
           format('stale %s report ignored: the lease was lost (the task had moved on)', u.outcome)
      FROM unnest(task_ids, outcomes) AS u(id, outcome)
      JOIN pgsched.tasks AS tk ON tk.id = u.id
     WHERE tk.id = ANY (stale);

    RETURN QUERY
    SELECT u.id, d.id IS NOT NULL
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id;
END;
$$;

CREATE OR REPLACE FUNCTION pgsched.task_heartbeat_many(
    task_ids bigint[],
    lease_tokens uuid[],
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
AS $$
DECLARE
    held bigint[];
    renewed bigint[];
BEGIN
    -- Each leased row found by its primary key whatever the statistics (see the top of
    -- this file), matched to its token by hashing.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE),
            set_config('enable_nestloop', 'off', TRUE), set_config('enable_hashjoin', 'on', TRUE);
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
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    horizon timestamptz;
    due bigint[];
    promoted integer;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    horizon := coalesce(t + extract(epoch FROM task_promote_due.within) * INTERVAL '1 second', h.hot_until);
    -- The cold tier read in due order, as far as it promotes, whatever the statistics (see
    -- the top of this file); then each row found by its primary key.
    PERFORM set_config('enable_sort', 'off', TRUE), set_config('enable_seqscan', 'off', TRUE),
            set_config('enable_bitmapscan', 'off', TRUE);
    SELECT coalesce(array_agg(d.id), '{}')
      INTO due
      FROM (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PENDING' AND tk.next_run_at < horizon
         ORDER BY tk.next_run_at
         LIMIT task_promote_due.max_tasks
           FOR UPDATE SKIP LOCKED
    ) AS d;
    PERFORM set_config('enable_sort', 'on', TRUE);
    WITH moved AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED',
               status_reason = CASE
                   WHEN tk.next_run_at <= t THEN 'promoted late: already due (overdue sweep)'
                   ELSE 'promoted into the hot window'
               END,
               updated_at = t
         WHERE tk.id = ANY (due) AND tk.status = 'PENDING'
        RETURNING tk.lane, tk.next_run_at
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
