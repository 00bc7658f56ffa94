-- 0004 — dispatch: claims, leases, completions, retries, rescue and the DEAD lane.
--
-- A worker claims due QUEUED rows of one lane (QUEUED -> PROCESSING, attempts + 1, a fresh
-- lease token), renews the lease by heartbeat, and reports outcomes in batches. Every
-- outcome is a compare-and-set on (status = PROCESSING, lease_token): a worker whose lease
-- was lost cannot overwrite what happened since; its stale report is recorded instead.

-- The ledger of completed work: one row per completed (tenant, task type, idempotency key).
-- A task claimed again whose key is here is completed as a recorded no-op.
CREATE TABLE pgsched.completed_work (
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    idempotency_key text NOT NULL,
    task_id bigint NOT NULL,
    completed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, task_type, idempotency_key)
);

-- The priorities of a lane, highest first.
CREATE FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) RETURNS integer[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE lane
        WHEN 'HIGH' THEN ARRAY[10, 9, 8]
        WHEN 'NORMAL' THEN ARRAY[7, 6, 5, 4]
        WHEN 'LOW' THEN ARRAY[3, 2, 1, 0]
        ELSE ARRAY[10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    END
$$;

-- Claim up to max_tasks due tasks of a lane: higher priority first, then earliest due.
-- One exact index range scan per priority (tasks_hot_claim_idx), read lazily: the outer
-- LIMIT stops pulling as soon as it has enough, so no row beyond max_tasks is locked.
-- The MATERIALIZED CTE is a planner fence: the UPDATE joins exactly the locked ids.
CREATE FUNCTION pgsched.task_claim_many(
    lane pgsched.task_lane,
    max_tasks integer,
    worker text,
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgsched.tasks
LANGUAGE plpgsql
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
BEGIN
    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT c.id
          FROM unnest(pgsched.lane_priorities(task_claim_many.lane)) AS p(priority)
         CROSS JOIN LATERAL (
            SELECT tk.id
              FROM pgsched.tasks AS tk
             WHERE tk.status = 'QUEUED'
               AND tk.lane = task_claim_many.lane
               AND tk.priority = p.priority
               AND tk.next_run_at <= t
             ORDER BY tk.next_run_at
             LIMIT task_claim_many.max_tasks
               FOR UPDATE SKIP LOCKED
         ) AS c
         LIMIT task_claim_many.max_tasks
    )
    UPDATE pgsched.tasks AS tk
       SET status = 'PROCESSING',
           attempts = tk.attempts + 1,
           locked_by = task_claim_many.worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = t + task_claim_many.lease,
           last_run_at = t,
           updated_at = t,
           status_reason = NULL
      FROM due
     WHERE tk.id = due.id AND tk.status = 'QUEUED'
    RETURNING tk.*;
END;
$$;

-- When a lane next has work, by the database clock: the worker sleeps exactly that long.
CREATE FUNCTION pgsched.lane_next_due(lane pgsched.task_lane)
RETURNS TABLE (next_due timestamptz, db_now timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT min(c.next_run_at), clock_timestamp()
      FROM unnest(pgsched.lane_priorities(lane_next_due.lane)) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT tk.next_run_at
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'QUEUED' AND tk.lane = lane_next_due.lane AND tk.priority = p.priority
         ORDER BY tk.next_run_at
         LIMIT 1
     ) AS c
$$;

-- Extend the leases a worker still holds; returns the ids renewed. Rows locked by a
-- concurrent outcome write are skipped (they are finishing), and should one move to the
-- done partition under our feet (SQLSTATE 40001) the renewal is simply tried again.
CREATE FUNCTION pgsched.task_heartbeat_many(
    task_ids bigint[],
    lease_tokens uuid[],
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
DECLARE
    renewed bigint[];
BEGIN
    FOR attempt IN 1..5 LOOP
        BEGIN
            WITH held AS MATERIALIZED (
                SELECT tk.id
                  FROM pgsched.tasks AS tk
                  JOIN unnest(task_ids, lease_tokens) AS u(id, token)
                    ON tk.id = u.id AND tk.lease_token = u.token
                 WHERE tk.status = 'PROCESSING'
                   FOR UPDATE OF tk SKIP LOCKED
            ),
            extended AS (
                UPDATE pgsched.tasks AS tk
                   SET lease_expires_at = coalesce(as_of, now()) + lease
                  FROM held
                 WHERE tk.id = held.id AND tk.status = 'PROCESSING'
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

-- Report outcomes, one row per task, in one statement:
--   COMPLETED  done
--   RETRY      a failed attempt: back to QUEUED (or PENDING, beyond the hot window) at
--              now + retry_delay, or FAILED when the attempts are used up
--   FAILED     a failure that no retry can fix (validate refused): straight to DEAD
--   RELEASED   not run (graceful shutdown): back to QUEUED, the attempt given back
-- Returns each task's id and whether this report was applied (false: the lease was lost,
-- and the stale report is recorded as an event on the task instead).
CREATE FUNCTION pgsched.task_finish_many(
    task_ids bigint[],
    lease_tokens uuid[],
    outcomes text[],
    errors text[] DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (task_id bigint, applied boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    -- The statement's own clock: in a handler's transaction now() is when the work began.
    t timestamptz := coalesce(as_of, clock_timestamp());
    cfg pgsched.settings;
    bad text;
    done bigint[];
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO cfg FROM pgsched.settings;
    SELECT u.outcome INTO bad
      FROM unnest(outcomes) AS u(outcome)
     WHERE u.outcome IS NULL OR u.outcome NOT IN ('COMPLETED', 'RETRY', 'FAILED', 'RELEASED')
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: unknown outcome % (COMPLETED, RETRY, FAILED or RELEASED)', bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    WITH finished AS (
        UPDATE pgsched.tasks AS tk
           SET status = (CASE
                   WHEN u.outcome = 'COMPLETED' THEN 'COMPLETED'
                   WHEN u.outcome = 'FAILED' THEN 'FAILED'
                   WHEN u.outcome = 'RELEASED' THEN 'QUEUED'
                   WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'
                   WHEN coalesce(u.delay, '0') >= cfg.hot_window THEN 'PENDING'
                   ELSE 'QUEUED'
               END)::pgsched.task_status,
               attempts = CASE WHEN u.outcome = 'RELEASED' THEN tk.attempts - 1 ELSE tk.attempts END,
               next_run_at = CASE
                   WHEN u.outcome = 'RETRY' AND tk.attempts < tk.max_attempts
                       THEN t + coalesce(u.delay, '0')
                   ELSE tk.next_run_at
               END,
               last_error = CASE WHEN u.outcome IN ('RETRY', 'FAILED') THEN u.error ELSE tk.last_error END,
               status_reason = CASE
                   WHEN u.outcome = 'RELEASED' THEN coalesce(u.error, 'released unfinished at worker shutdown')
                   WHEN u.outcome = 'RETRY' AND tk.attempts >= tk.max_attempts
                       THEN format('attempts exhausted (%s of %s): %s', tk.attempts, tk.max_attempts, u.error)
                   WHEN u.outcome IN ('RETRY', 'FAILED') THEN u.error
                   ELSE u.error
               END,
               lease_token = NULL,
               lease_expires_at = NULL,
               updated_at = t
          FROM unnest(task_ids, lease_tokens, outcomes, errors, retry_delays)
               AS u(id, token, outcome, error, delay)
         WHERE tk.id = u.id AND tk.status = 'PROCESSING' AND tk.lease_token = u.token
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
               WHERE f.status = 'QUEUED' AND f.next_run_at - t < cfg.immediate_window), '{}')
      INTO done, wake
      FROM finished AS f;
    -- A retry due soon wakes its lane, so it runs when due and not at the next backup poll.
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;

    -- Reports that lost their lease change nothing; say so on the task's record.
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at, tk.attempts,
           tk.locked_by,
           format('stale %s report ignored: the lease was lost (the task had moved on)', u.outcome)
      FROM unnest(task_ids, outcomes) AS u(id, outcome)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id
      JOIN pgsched.tasks AS tk ON tk.id = u.id
     WHERE d.id IS NULL;

    RETURN QUERY
    SELECT u.id, d.id IS NOT NULL
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id;
END;
$$;

-- Tasks whose lease expired (worker killed, machine lost) go back to be claimed again
-- at once, or to DEAD when their attempts are used up. Bounded: call until it returns less
-- than max_tasks. Their lanes are woken.
CREATE FUNCTION pgsched.lease_rescue_expired(
    lane pgsched.task_lane DEFAULT NULL,
    max_tasks integer DEFAULT 1000,
    as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    rescued integer := 0;
    wake pgsched.task_lane[];
BEGIN
    FOR attempt IN 1..5 LOOP
        BEGIN
            WITH expired AS MATERIALIZED (
                SELECT tk.id
                  FROM pgsched.tasks AS tk
                 WHERE tk.status = 'PROCESSING'
                   AND tk.lease_expires_at < t
                   AND (lease_rescue_expired.lane IS NULL OR tk.lane = lease_rescue_expired.lane)
                 ORDER BY tk.lease_expires_at
                 LIMIT lease_rescue_expired.max_tasks
                   FOR UPDATE SKIP LOCKED
            ),
            moved AS (
                UPDATE pgsched.tasks AS tk
                   SET status = (CASE WHEN tk.attempts >= tk.max_attempts THEN 'FAILED' ELSE 'QUEUED' END
                       )::pgsched.task_status,
                       status_reason = CASE
                           WHEN tk.attempts >= tk.max_attempts
                               THEN format('worker lost: lease expired, attempts exhausted (%s of %s)',
                                           tk.attempts, tk.max_attempts)
                           ELSE 'worker lost: lease expired; queued again'
                       END,
                       last_error = CASE WHEN tk.attempts >= tk.max_attempts THEN 'worker lost' ELSE tk.last_error END,
                       lease_token = NULL,
                       lease_expires_at = NULL,
                       updated_at = t
                  FROM expired
                 WHERE tk.id = expired.id AND tk.status = 'PROCESSING'
                RETURNING tk.lane, tk.status
            )
            SELECT count(*), coalesce(array_agg(DISTINCT m.lane) FILTER (WHERE m.status = 'QUEUED'), '{}')
              INTO rescued, wake
              FROM moved AS m;
            PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
            RETURN rescued;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions mid-lock (it finished after all): try again
        END;
    END LOOP;
    RETURN rescued;
END;
$$;

-- The DEAD lane, for people: bring failed tasks back (attempts start over) or discard them.
CREATE FUNCTION pgsched.dead_retry(
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
    RETURN QUERY
    WITH retried AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED', attempts = 0, next_run_at = t, status_reason = dead_retry.reason,
               enabled = TRUE, updated_at = t
         WHERE tk.status = 'FAILED'
           AND (dead_retry.all_tasks
                OR tk.id = dead_retry.task_id
                OR tk.task_type = dead_retry.task_type)
        RETURNING tk.id, tk.lane
    ),
    woken AS (
        SELECT pg_notify('pgsched_' || lower(l.lane::text), '')
          FROM (SELECT DISTINCT r.lane FROM retried AS r) AS l
    )
    SELECT r.id FROM retried AS r LEFT JOIN (SELECT count(*) AS n FROM woken) AS w ON TRUE;
END;
$$;

CREATE FUNCTION pgsched.dead_discard(
    task_id bigint,
    reason text DEFAULT 'discarded from the DEAD lane',
    as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = dead_discard.reason, enabled = FALSE,
           updated_at = coalesce(dead_discard.as_of, now())
     WHERE tk.id = dead_discard.task_id AND tk.status = 'FAILED';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: task % is not in the DEAD lane', dead_discard.task_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN dead_discard.task_id;
END;
$$;

-- The hot path's statements join arrays of a batch's size against the hot partition. A
-- cached generic plan guesses a few rows and picks nested loops whose cost grows with
-- (tasks in flight x batch size); a plan made for each call's real arrays stays linear.
ALTER FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz)
SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamptz)
SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION pgsched.task_heartbeat_many(bigint[], uuid[], interval, timestamptz)
SET plan_cache_mode = force_custom_plan;
