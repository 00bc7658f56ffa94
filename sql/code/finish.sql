-- sql/code/finish.sql — finish and outcomes.
--
-- task_finish_many (a batch of outcomes, each a compare-and-set on the lease), the
-- completed-work ledger (work_record_done_many) and ctx.once (work_once).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- "The top of this file", which comments inside the functions below point to, is what the
-- migrations that made them said (0031, 0032 of earlier releases, in tests/fixtures/sql_v33/):
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
--
-- 0032 — a flush of outcomes is planned once per connection, not at every call.
--
-- Like the claim before 0029, task_finish_many planned its statements at every call
-- (plan_cache_mode = force_custom_plan). With pg_stat_statements (track = all,
-- track_planning = on), two worker processes, 3,000 no-op tasks/s due, flushes of ~13
-- outcomes: planning the completion's UPDATE took 52.8 µs a task of its 164.8, and the
-- call reading the tiers' horizons 13.9 µs of its 15.2; Postgres spent 365 µs a task in all.
--
-- Since sql/0031 the UPDATE has one access path open whatever the statistics (the reported
-- ids probed in the primary key, matched to their reports by hashing), so its generic
-- plan, made once per connection, is the plan a custom one would be. The horizons, the
-- outcome check and the wake-up NOTIFY read no table whose statistics matter. The rare
-- path, reports that lost their lease (looked up in every tier), is still planned when it
-- happens, for the partitions there are then.

CREATE OR REPLACE FUNCTION pgsched.task_finish_many(
    task_ids bigint[],
    lease_tokens uuid[],
    outcomes text[],
    errors text[] DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    as_of timestamptz DEFAULT NULL,
    results jsonb[] DEFAULT NULL,
    -- The tasks' tenant, or NULL (any): given, every statement stays on its shard.
    tenant text DEFAULT NULL
) RETURNS TABLE (task_id bigint, applied boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET plan_cache_mode = force_custom_plan
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
SET jit = off
AS $$
DECLARE
    -- The statement's own clock: in a handler's transaction now() is when the work began.
    t timestamptz := coalesce(as_of, clock_timestamp());
    h record;
    bad text;
    done bigint[];
    ended bigint[];
    ended_as pgsched.task_status[];
    stale bigint[];
    wake pgsched.task_lane[];
    dues timestamptz[];
    keyed_ids bigint[];
    keyed_tenants text[];
    keyed_types text[];
    keyed_keys text[];
    finished_rows jsonb;
    stale_rows jsonb;
BEGIN
    -- The usual flush is planned once per connection (see the top of this file); in
    -- distributed mode at each call (sql/code/distribution.sql).
    IF NOT pgsched.distributed_mode() THEN
        PERFORM set_config('plan_cache_mode', 'force_generic_plan', TRUE);
    END IF;
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    SELECT u.outcome INTO bad
      FROM unnest(outcomes) AS u(outcome)
     WHERE u.outcome IS NULL
        OR u.outcome NOT IN ('COMPLETED', 'RETRY', 'FAILED', 'RELEASED', 'CANCELLED', 'SNOOZED')
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: unknown outcome % (COMPLETED, RETRY, FAILED, RELEASED, CANCELLED or SNOOZED)', bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_finish_many.retry_delays IS NOT NULL AND EXISTS (
        SELECT 1 FROM unnest(task_finish_many.retry_delays) AS d(delay)
         WHERE d.delay < INTERVAL '0' OR d.delay > INTERVAL '100 years') THEN
        RAISE EXCEPTION 'pgsched: retry_delays must be 0 or more (at most 100 years) each'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- A result over the cap is refused: the attempt fails, saying why (only a flush that
    -- carries results pays for the check).
    IF results IS NOT NULL THEN
        SELECT array_agg(CASE WHEN r.too_big THEN 'RETRY' ELSE r.outcome END ORDER BY r.ord),
               array_agg(CASE WHEN r.too_big
                              THEN format('result is %s bytes, over the cap of %s bytes (pgsched.settings.max_result_bytes)',
                                          r.size, r.cap)
                              ELSE r.error END ORDER BY r.ord),
               array_agg(CASE WHEN r.too_big THEN NULL ELSE r.result END ORDER BY r.ord)
          INTO outcomes, errors, results
          FROM (SELECT u.ord, u.outcome, u.error, u.result, s.max_result_bytes AS cap,
                       octet_length(u.result::text) AS size,
                       coalesce(pg_column_size(u.result) * 6 >= s.max_result_bytes
                                AND octet_length(u.result::text) > s.max_result_bytes, FALSE) AS too_big
                  FROM unnest(outcomes, errors, results) WITH ORDINALITY AS u(outcome, error, result, ord)
                 CROSS JOIN pgsched.settings AS s) AS r;
    END IF;

    -- Each report's next due time if it is retried or snoozed. Computed here, not in the
    -- UPDATE: Citus refuses a STABLE function of a column there (timestamptz + interval is
    -- one, so is format), so the UPDATE below uses neither.
    dues := ARRAY(SELECT t + coalesce(d.delay, '0')
                    FROM unnest(coalesce(task_finish_many.retry_delays,
                                         array_fill(NULL::interval, ARRAY[cardinality(task_ids)])))
                         WITH ORDINALITY AS d (delay, ord)
                   ORDER BY d.ord);

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
                   WHEN u.outcome = 'SNOOZED'
                       THEN pgsched.tier_status(
                           pgsched.tier_of(u.due, h.immediate_until, h.hot_until))
                   -- CANCELLED with no request (not a report this worker makes): a failed attempt.
                   WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                   ELSE pgsched.tier_status(
                       pgsched.tier_of(u.due, h.immediate_until, h.hot_until))
               END),
               attempts = CASE
                   WHEN u.outcome IN ('RELEASED', 'SNOOZED') AND tk.cancel_requested_at IS NULL
                       THEN tk.attempts - 1
                   ELSE tk.attempts
               END,
               -- A snooze spends no attempt: due again after its delay, counted apart.
               snoozes = CASE
                   WHEN u.outcome = 'SNOOZED' AND tk.cancel_requested_at IS NULL THEN coalesce(tk.snoozes, 0) + 1
                   ELSE tk.snoozes
               END,
               next_run_at = CASE
                   WHEN u.outcome = 'SNOOZED' AND tk.cancel_requested_at IS NULL
                       THEN u.due
                   WHEN u.outcome IN ('RETRY', 'CANCELLED') AND tk.cancel_requested_at IS NULL
                        AND tk.attempts < tk.max_attempts
                       THEN u.due
                   ELSE tk.next_run_at
               END,
               last_error = CASE
                   WHEN u.outcome IN ('RETRY', 'FAILED', 'CANCELLED') THEN u.error
                   ELSE tk.last_error
               END,
               status_reason = CASE
                   WHEN u.outcome = 'COMPLETED' AND tk.cancel_requested_at IS NOT NULL
                       THEN 'completed: the handler finished before the cancel requested by '
                            || coalesce(tk.cancel_requested_by, '') || ' (' || coalesce(tk.cancel_reason, '')
                            || ') took effect' || coalesce('; ' || u.error, '')
                   WHEN u.outcome = 'COMPLETED' THEN u.error
                   WHEN tk.cancel_requested_at IS NOT NULL
                       THEN 'cancelled by ' || coalesce(tk.cancel_requested_by, '') || ': '
                            || coalesce(tk.cancel_reason, '') || '; '
                            || coalesce(split_part(u.error, E'\n', 1), lower(u.outcome))
                   WHEN u.outcome = 'RELEASED' THEN coalesce(u.error, 'released unfinished at worker shutdown')
                   WHEN u.outcome = 'SNOOZED' THEN coalesce(u.error, 'snoozed')
                   WHEN u.outcome IN ('RETRY', 'CANCELLED') AND tk.attempts >= tk.max_attempts
                       THEN 'attempts exhausted (' || tk.attempts::text || ' of ' || tk.max_attempts::text
                            || '): ' || coalesce(u.error, '')
                   ELSE u.error
               END,
               result = CASE WHEN u.outcome = 'COMPLETED' THEN u.result ELSE tk.result END,
               lease_token = NULL,
               lease_expires_at = NULL,
               updated_at = t
          FROM unnest(task_ids, lease_tokens, outcomes, errors, dues, results)
               AS u(id, token, outcome, error, due, result)
         WHERE tk.id = u.id AND tk.lease_token = u.token
           AND tk.id = ANY (task_ids)
           AND (task_finish_many.tenant IS NULL OR tk.tenant_id = task_finish_many.tenant)
           -- The hot tier only (pruning), in words no partial index's predicate follows from
           -- (and no enum-to-text cast, STABLE: refused by Citus, as above).
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status <> 'QUEUED'
        RETURNING tk.id, tk.status, tk.tenant_id, tk.task_type, tk.idempotency_key, tk.lane, tk.next_run_at,
                  tk.attempts, tk.locked_by, tk.status_reason, tk.updated_at
    )
    SELECT coalesce(array_agg(f.id), '{}'),
           coalesce(array_agg(DISTINCT f.lane) FILTER (
               WHERE f.status = 'QUEUED'
                 AND pgsched.tier_of(f.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}'),
           array_agg(f.id) FILTER (WHERE f.status IN ('COMPLETED', 'FAILED', 'CANCELLED')),
           array_agg(f.status) FILTER (WHERE f.status IN ('COMPLETED', 'FAILED', 'CANCELLED')),
           array_agg(f.id) FILTER (WHERE f.status = 'COMPLETED' AND f.idempotency_key IS NOT NULL),
           array_agg(f.tenant_id) FILTER (WHERE f.status = 'COMPLETED' AND f.idempotency_key IS NOT NULL),
           array_agg(f.task_type) FILTER (WHERE f.status = 'COMPLETED' AND f.idempotency_key IS NOT NULL),
           array_agg(f.idempotency_key) FILTER (WHERE f.status = 'COMPLETED' AND f.idempotency_key IS NOT NULL),
           jsonb_agg(to_jsonb(f)) FILTER (WHERE pgsched.events_by_functions())
      INTO done, wake, ended, ended_as, keyed_ids, keyed_tenants, keyed_types, keyed_keys, finished_rows
      FROM finished AS f;
    -- The ledger's rows and (when the functions write them, sql/code/transitions.sql) the
    -- events, inserted as values in statements of their own: on a distributed database an
    -- INSERT from the UPDATE's rows in its statement runs on every shard, and fails while
    -- any worker node is down; values go to the tenants' shards alone.
    IF keyed_ids IS NOT NULL THEN
        INSERT INTO pgsched.completed_work (tenant_id, task_type, idempotency_key, task_id, completed_at)
        SELECT k.tenant_id, k.task_type, k.idempotency_key, k.id, t
          FROM unnest(keyed_tenants, keyed_types, keyed_keys, keyed_ids) AS k (tenant_id, task_type, idempotency_key, id)
        ON CONFLICT DO NOTHING;
    END IF;
    IF finished_rows IS NOT NULL THEN
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT f.id, f.tenant_id, f.task_type, 'PROCESSING', f.status,
               f.updated_at, f.next_run_at, f.attempts, f.locked_by, f.status_reason
          FROM jsonb_to_recordset(finished_rows) AS f (
              id bigint, tenant_id text, task_type text, status pgsched.task_status,
              updated_at timestamptz, next_run_at timestamptz, attempts bigint, locked_by text,
              status_reason text);
    END IF;
    IF pgsched.events_by_functions() THEN
        -- What waits for the tasks that ended (the trigger's work in trigger mode).
        PERFORM pgsched.task_settle_finished(ended, ended_as);
    END IF;
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
    -- Read, then inserted as values (on a distributed database an INSERT ... SELECT from
    -- tasks runs on every shard).
    SELECT jsonb_agg(jsonb_build_object(
               'id', tk.id, 'tenant_id', tk.tenant_id, 'task_type', tk.task_type, 'status', tk.status,
               'next_run_at', tk.next_run_at, 'attempts', tk.attempts, 'locked_by', tk.locked_by,
               'outcome', u.outcome))
      INTO stale_rows
      FROM unnest(task_ids, outcomes) AS u(id, outcome)
      JOIN pgsched.tasks AS tk ON tk.id = u.id
     WHERE tk.id = ANY (stale)
       AND (task_finish_many.tenant IS NULL OR tk.tenant_id = task_finish_many.tenant);
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT r.id, r.tenant_id, r.task_type, r.status, r.status, t, r.next_run_at, r.attempts,
           r.locked_by,
           format('stale %s report ignored: the lease was lost (the task had moved on)', r.outcome)
      FROM jsonb_to_recordset(coalesce(stale_rows, '[]')) AS r (
          id bigint, tenant_id text, task_type text, status pgsched.task_status,
          next_run_at timestamptz, attempts bigint, locked_by text, outcome text);

    RETURN QUERY
    SELECT u.id, d.id IS NOT NULL
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id;
END;
$$;
COMMENT ON FUNCTION pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamp with time zone, jsonb[], text) IS 'A worker writes a batch of outcomes (COMPLETED, RETRY, FAILED, RELEASED, CANCELLED, SNOOZED), each a compare-and-set on status and lease token: a report whose lease is gone is not applied and is recorded as a stale-report event instead. A retry is routed by its new due time; SNOOZED is due again after its delay with the attempt given back and tasks.snoozes counted. results holds each completed task''s return value (JSON; over settings.max_result_bytes the attempt fails instead). Tasks waiting for those that finish are settled in the same transaction (task_settle_dependents). Returns (task_id, applied) per report. tenant (NULL: any): the tasks'' tenant, so that in distributed mode the statements run on its shard alone.';
REVOKE ALL ON FUNCTION pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamptz, jsonb[], text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamptz, jsonb[], text) TO pgsched_worker, pgsched_admin;

-- ctx.once(key): true the first time a (tenant, task type, key) is claimed, false after.
CREATE OR REPLACE FUNCTION pgsched.work_once(
    tenant_id text, task_type text, key text, task_id bigint
) RETURNS boolean
LANGUAGE plpgsql
-- PL/pgSQL, not SQL: Citus refuses a SQL function that writes a distributed table with a
-- parameter (distributed mode, sql/code/distribution.sql).
AS $$
DECLARE
    first_time boolean;
BEGIN
    WITH ins AS (
        INSERT INTO pgsched.completed_work AS w (tenant_id, task_type, idempotency_key, task_id)
        -- '#once' cannot occur in a task type, so once-keys never meet idempotency keys.
        VALUES (work_once.tenant_id, work_once.task_type || '#once', work_once.key, work_once.task_id)
        ON CONFLICT DO NOTHING
        RETURNING w.task_id
    )
    SELECT EXISTS (SELECT 1 FROM ins) INTO first_time;
    RETURN first_time;
END;
$$;
ALTER FUNCTION pgsched.work_once(text, text, text, bigint)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION pgsched.work_once(text, text, text, bigint) IS 'ctx.once(key): true the first time a (tenant, task type, key) is asked for, false ever after.';
REVOKE ALL ON FUNCTION pgsched.work_once(text, text, text, bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.work_once(text, text, text, bigint) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.work_record_done_many(
    task_ids bigint[], lease_tokens uuid[]
) RETURNS TABLE (task_id bigint, recorded boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
-- PL/pgSQL, not SQL: as work_once.
AS $$
BEGIN
    RETURN QUERY
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
     ORDER BY g.ord;
END;
$$;
COMMENT ON FUNCTION pgsched.work_record_done_many(bigint[], uuid[]) IS 'Record in the completed-work ledger that these keyed tasks'' work is done, right after execute returned and before the batched completion; only the lease holder may record. Returns (task_id, recorded) per task.';
REVOKE ALL ON FUNCTION pgsched.work_record_done_many(bigint[], uuid[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.work_record_done_many(bigint[], uuid[]) TO pgsched_worker, pgsched_admin;
