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
    -- The usual flush is planned once per connection (see the top of this file).
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', TRUE);
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
    -- may be in any tier by now: each id is looked up in each tier's primary key. Rare:
    -- planned when it happens, for the partitions there are then.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
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
COMMENT ON FUNCTION pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamp with time zone) IS 'A worker writes a batch of outcomes (COMPLETED, RETRY, FAILED, RELEASED, CANCELLED), each a compare-and-set on status and lease token: a report whose lease is gone is not applied and is recorded as a stale-report event instead. A retry is routed by its new due time. Returns (task_id, applied) per report.';
REVOKE ALL ON FUNCTION pgsched.task_finish_many(bigint[],uuid[],text[],text[],interval[],timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.task_finish_many(bigint[],uuid[],text[],text[],interval[],timestamptz) TO pgsched_worker, pgsched_admin;

-- ctx.once(key): true the first time a (tenant, task type, key) is claimed, false after.
CREATE OR REPLACE FUNCTION pgsched.work_once(
    tenant_id text, task_type text, key text, task_id bigint
) RETURNS boolean
LANGUAGE sql
AS $$
    WITH ins AS (
        INSERT INTO pgsched.completed_work AS w (tenant_id, task_type, idempotency_key, task_id)
        -- '#once' cannot occur in a task type, so once-keys never meet idempotency keys.
        VALUES (work_once.tenant_id, work_once.task_type || '#once', work_once.key, work_once.task_id)
        ON CONFLICT DO NOTHING
        RETURNING w.task_id
    )
    SELECT EXISTS (SELECT 1 FROM ins)
$$;
ALTER FUNCTION pgsched.work_once(text, text, text, bigint)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION pgsched.work_once(text, text, text, bigint) IS 'ctx.once(key): true the first time a (tenant, task type, key) is asked for, false ever after.';
REVOKE ALL ON FUNCTION pgsched.work_once(text,text,text,bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.work_once(text,text,text,bigint) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.work_record_done_many(
    task_ids bigint[], lease_tokens uuid[]
) RETURNS TABLE (task_id bigint, recorded boolean)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH given AS (
        SELECT g.task_id, g.lease_token, g.ord
          FROM unnest(work_record_done_many.task_ids, work_record_done_many.lease_tokens)
               WITH ORDINALITY AS g (task_id, lease_token, ord)
    ),
    held AS (
        SELECT tk.tenant_id, tk.task_type, tk.idempotency_key, tk.id, g.lease_token
          FROM given AS g
          JOIN pgsched.tasks AS tk
            ON tk.id = g.task_id AND tk.status = 'PROCESSING' AND tk.lease_token = g.lease_token
         WHERE tk.idempotency_key IS NOT NULL
    ),
    ins AS (
        INSERT INTO pgsched.completed_work AS w (tenant_id, task_type, idempotency_key, task_id)
        SELECT h.tenant_id, h.task_type, h.idempotency_key, h.id FROM held AS h
        ON CONFLICT DO NOTHING
        RETURNING w.task_id
    )
    SELECT g.task_id,
           EXISTS (SELECT 1
                     FROM ins JOIN held AS h ON h.id = ins.task_id
                    WHERE ins.task_id = g.task_id AND h.lease_token = g.lease_token)
      FROM given AS g
     ORDER BY g.ord
$$;
COMMENT ON FUNCTION pgsched.work_record_done_many(bigint[], uuid[]) IS 'Record in the completed-work ledger that these keyed tasks'' work is done, right after execute returned and before the batched completion; only the lease holder may record. Returns (task_id, recorded) per task.';
REVOKE ALL ON FUNCTION pgsched.work_record_done_many(bigint[],uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.work_record_done_many(bigint[],uuid[]) TO pgsched_worker, pgsched_admin;
