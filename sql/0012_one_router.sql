-- 0012 — one router: the IMMEDIATE / HOT / COLD decision is written once.
--
-- Until now each path that put a task in a tier wrote the test itself: schedule_task and
-- task_insert_many (`run_at - now < hot_window`), the retry in task_finish_many
-- (`delay >= hot_window`), promotion (`next_run_at < now + hot_window`), and the NOTIFY
-- of each (`< immediate_window`). pgsched.route() existed but no path called it. Now:
--
--   tier_horizons(as_of)                where the windows end, read from pgsched.settings once
--   tier_of(run_at, immediate_until, hot_until)   the decision, per row (inlined: no call cost)
--   tier_status(tier)                   COLD -> PENDING (cold partition), else QUEUED (hot)
--   route(run_at, as_of)                the same decision for one due time (public)
--
-- Every path that inserts or reschedules uses them: schedule_task (and schedule_arm, which
-- calls it), task_insert_many (schedule_tasks, fan-out), task_finish_many (retry and
-- release), lease_rescue_expired, dead_retry, task_promote_due. Promotion compares with
-- hot_until directly, the boundary tier_of uses, so the test stays a range on the due index.
--
-- A window ends at as_of plus its length in seconds, as 0007 counted: a '1 day' window is
-- 24 hours even across a DST change in the session's time zone.
--
-- schedule_task_ex is schedule_task that also says whether the call created the task
-- (false: the tenant's idempotency key already named one, which is returned unchanged).

CREATE FUNCTION pgsched.tier_horizons(as_of timestamptz DEFAULT NULL)
RETURNS TABLE (immediate_until timestamptz, hot_until timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(as_of, now()) + extract(epoch FROM s.immediate_window) * INTERVAL '1 second',
           coalesce(as_of, now()) + extract(epoch FROM s.hot_window) * INTERVAL '1 second'
      FROM pgsched.settings AS s
$$;

CREATE FUNCTION pgsched.tier_of(run_at timestamptz, immediate_until timestamptz, hot_until timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN run_at < immediate_until THEN 'IMMEDIATE'
        WHEN run_at < hot_until THEN 'HOT'
        ELSE 'COLD'
    END
$$;

CREATE FUNCTION pgsched.tier_status(tier text) RETURNS pgsched.task_status
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Enum constants, not a text-to-enum cast (only STABLE): keeps it inlinable.
    SELECT CASE WHEN tier = 'COLD' THEN 'PENDING'::pgsched.task_status ELSE 'QUEUED'::pgsched.task_status END
$$;

CREATE OR REPLACE FUNCTION pgsched.route(run_at timestamptz, as_of timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT pgsched.tier_of(route.run_at, h.immediate_until, h.hot_until)
      FROM pgsched.tier_horizons(route.as_of) AS h
$$;

-- The engine's insert (0002), routed by tier_of.
CREATE OR REPLACE FUNCTION pgsched.task_insert_many(
    task_types text[],
    payloads jsonb[],
    run_ats timestamptz[],
    tenant_ids text[],
    priorities integer[],
    idempotency_keys text[],
    max_attempts bigint[],
    lanes text[],
    metadatas jsonb[],
    scopes text[],
    products text[],
    as_of timestamptz
) RETURNS TABLE (ordinal bigint, task_id bigint, created boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    h record;
    n integer := coalesce(cardinality(task_types), 0);
    ids bigint[];
    created_ids bigint[];
    wake_lanes pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(as_of);
    -- Ids are drawn up front so each input row knows its would-be id.
    ids := ARRAY(SELECT nextval('pgsched.task_id_seq') FROM generate_series(1, n));

    WITH input AS (
        SELECT i.id, i.task_type,
               coalesce(i.payload, '{}') AS payload,
               coalesce(i.run_at, as_of) AS run_at,
               coalesce(i.tenant_id, 'default') AS tenant_id,
               coalesce(i.priority, 5) AS priority,
               i.idempotency_key,
               coalesce(i.max_attempts, 3) AS max_attempts,
               pgsched.lane_for(coalesce(i.priority, 5), i.lane) AS lane,
               coalesce(i.metadata, '{}') AS metadata,
               coalesce(i.scope, 'tenant') AS scope,
               i.product
          FROM unnest(ids, task_types, payloads, run_ats, tenant_ids, priorities,
                      idempotency_keys, max_attempts, lanes, metadatas, scopes, products)
               AS i(id, task_type, payload, run_at, tenant_id, priority,
                    idempotency_key, max_attempts, lane, metadata, scope, product)
    ),
    -- A key taken by a concurrent transaction makes this insert wait for it: if it
    -- commits the key is a conflict (nothing inserted), if it rolls back the key is ours.
    keyed AS (
        INSERT INTO pgsched.idempotency_keys AS k (tenant_id, idempotency_key, task_id, created_at)
        SELECT i.tenant_id, i.idempotency_key, i.id, as_of
          FROM input AS i
         WHERE i.idempotency_key IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING k.task_id
    ),
    inserted AS (
        INSERT INTO pgsched.tasks AS tk (
            id, tenant_id, task_type, next_run_at, payload, metadata, priority, lane,
            status, max_attempts, idempotency_key, scope, product, created_at, updated_at
        )
        SELECT i.id, i.tenant_id, i.task_type, i.run_at, i.payload, i.metadata, i.priority, i.lane,
               pgsched.tier_status(pgsched.tier_of(i.run_at, h.immediate_until, h.hot_until)),
               i.max_attempts, i.idempotency_key, i.scope, i.product, as_of, as_of
          FROM input AS i
         WHERE i.idempotency_key IS NULL OR i.id IN (SELECT kd.task_id FROM keyed AS kd)
        RETURNING tk.id, tk.lane, tk.next_run_at
    )
    SELECT coalesce(array_agg(x.id), '{}'),
           coalesce(array_agg(DISTINCT x.lane) FILTER (
               WHERE pgsched.tier_of(x.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
      INTO created_ids, wake_lanes
      FROM inserted AS x;

    -- A tiny wake-up per lane; Postgres folds identical notifications in one transaction.
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake_lanes) AS w;

    IF idempotency_keys IS NULL THEN
        -- No keys, no duplicates: every row was created with its drawn id.
        RETURN QUERY SELECT i.ord, i.id, TRUE FROM unnest(ids) WITH ORDINALITY AS i(id, ord);
        RETURN;
    END IF;
    -- A new statement, so keys committed by others while we waited are visible here.
    RETURN QUERY
    SELECT i.ord, coalesce(c.id, k.task_id), c.id IS NOT NULL
      FROM unnest(ids, tenant_ids, idempotency_keys) WITH ORDINALITY AS i(id, tenant_id, idempotency_key, ord)
      LEFT JOIN unnest(created_ids) AS c(id) ON c.id = i.id
      LEFT JOIN pgsched.idempotency_keys AS k
        ON c.id IS NULL
       AND k.tenant_id = coalesce(i.tenant_id, 'default')
       AND k.idempotency_key = i.idempotency_key
     ORDER BY i.ord;
END;
$$;

-- Schedule one task; returns its id and whether this call created it (false: the tenant
-- already used this idempotency key, and that task's id comes back, unchanged). Same
-- arguments as schedule_task.
CREATE FUNCTION pgsched.schedule_task_ex(
    task_type text,
    payload jsonb DEFAULT '{}',
    run_at timestamptz DEFAULT NULL,
    tenant_id text DEFAULT 'default',
    priority integer DEFAULT 5,
    idempotency_key text DEFAULT NULL,
    max_attempts bigint DEFAULT 3,
    lane text DEFAULT NULL,
    metadata jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT NULL,
    scope text DEFAULT 'tenant',
    product text DEFAULT NULL
) RETURNS TABLE (task_id bigint, created boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cfg pgsched.settings;
    h record;
    t timestamptz := coalesce(as_of, now());
    due timestamptz := coalesce(run_at, t);
    owner text := CASE WHEN coalesce(scope, 'tenant') = 'tenant' THEN coalesce(tenant_id, 'default') ELSE '_all' END;
    problem text;
    new_id bigint;
    tier text;
    task_lane pgsched.task_lane;
BEGIN
    -- The single path: the same checks, routing and key rules as schedule_tasks, in three
    -- statements instead of a batch's machinery (one call per task must stay cheap).
    SELECT * INTO cfg FROM pgsched.settings;
    problem := pgsched.producer_tenant_problem(ARRAY[owner]);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'insufficient_privilege';
    END IF;
    problem := pgsched.task_input_problem(
        schedule_task_ex.task_type, coalesce(schedule_task_ex.payload, '{}'), owner,
        coalesce(schedule_task_ex.priority, 5), coalesce(schedule_task_ex.max_attempts, 3),
        schedule_task_ex.lane, coalesce(schedule_task_ex.metadata, '{}'), schedule_task_ex.idempotency_key,
        cfg.max_payload_bytes, coalesce(schedule_task_ex.scope, 'tenant'), schedule_task_ex.product);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    new_id := nextval('pgsched.task_id_seq');
    IF schedule_task_ex.idempotency_key IS NOT NULL THEN
        INSERT INTO pgsched.idempotency_keys AS k (tenant_id, idempotency_key, task_id, created_at)
        VALUES (owner, schedule_task_ex.idempotency_key, new_id, t)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN QUERY
            SELECT k.task_id, FALSE FROM pgsched.idempotency_keys AS k
             WHERE k.tenant_id = owner AND k.idempotency_key = schedule_task_ex.idempotency_key;
            RETURN;
        END IF;
    END IF;
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    tier := pgsched.tier_of(due, h.immediate_until, h.hot_until);
    task_lane := pgsched.lane_for(coalesce(schedule_task_ex.priority, 5), schedule_task_ex.lane);
    INSERT INTO pgsched.tasks (
        id, tenant_id, task_type, next_run_at, payload, metadata, priority, lane, status,
        max_attempts, idempotency_key, scope, product, created_at, updated_at
    ) VALUES (
        new_id, owner, schedule_task_ex.task_type, due, coalesce(schedule_task_ex.payload, '{}'),
        coalesce(schedule_task_ex.metadata, '{}'), coalesce(schedule_task_ex.priority, 5), task_lane,
        pgsched.tier_status(tier),
        coalesce(schedule_task_ex.max_attempts, 3), schedule_task_ex.idempotency_key,
        coalesce(schedule_task_ex.scope, 'tenant'), schedule_task_ex.product, t, t
    );
    IF tier = 'IMMEDIATE' THEN
        PERFORM pg_notify('pgsched_' || lower(task_lane::text), '');
    END IF;
    RETURN QUERY SELECT new_id, TRUE;
END;
$$;

-- Schedule one task; returns its id (the existing task's id when the tenant already used
-- this idempotency key: schedule_task_ex says which).
CREATE OR REPLACE FUNCTION pgsched.schedule_task(
    task_type text,
    payload jsonb DEFAULT '{}',
    run_at timestamptz DEFAULT NULL,
    tenant_id text DEFAULT 'default',
    priority integer DEFAULT 5,
    idempotency_key text DEFAULT NULL,
    max_attempts bigint DEFAULT 3,
    lane text DEFAULT NULL,
    metadata jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT NULL,
    scope text DEFAULT 'tenant',
    product text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.task_id
      FROM pgsched.schedule_task_ex(
          schedule_task.task_type, schedule_task.payload, schedule_task.run_at, schedule_task.tenant_id,
          schedule_task.priority, schedule_task.idempotency_key, schedule_task.max_attempts,
          schedule_task.lane, schedule_task.metadata, schedule_task.as_of, schedule_task.scope,
          schedule_task.product) AS e
$$;

-- Outcomes (0004): a retry and a release are routed by their new due time.
CREATE OR REPLACE FUNCTION pgsched.task_finish_many(
    task_ids bigint[],
    lease_tokens uuid[],
    outcomes text[],
    errors text[] DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (task_id bigint, applied boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET plan_cache_mode = force_custom_plan
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- The statement's own clock: in a handler's transaction now() is when the work began.
    t timestamptz := coalesce(as_of, clock_timestamp());
    h record;
    bad text;
    done bigint[];
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
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
                   WHEN u.outcome = 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                   WHEN u.outcome = 'FAILED' THEN 'FAILED'::pgsched.task_status
                   WHEN u.outcome = 'RELEASED'
                       THEN pgsched.tier_status(pgsched.tier_of(tk.next_run_at, h.immediate_until, h.hot_until))
                   WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                   ELSE pgsched.tier_status(
                       pgsched.tier_of(t + coalesce(u.delay, '0'), h.immediate_until, h.hot_until))
               END),
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
               WHERE f.status = 'QUEUED'
                 AND pgsched.tier_of(f.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
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

-- Lease rescue (0004): a task whose attempts remain goes where its due time routes it
-- (it was claimed, so it is due: the hot tier).
CREATE OR REPLACE FUNCTION pgsched.lease_rescue_expired(
    lane pgsched.task_lane DEFAULT NULL,
    max_tasks integer DEFAULT 1000,
    as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    rescued integer := 0;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
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
                   SET status = CASE
                           WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                           ELSE pgsched.tier_status(pgsched.tier_of(tk.next_run_at, h.immediate_until, h.hot_until))
                       END,
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
                RETURNING tk.lane, tk.status, tk.next_run_at
            )
            SELECT count(*),
                   coalesce(array_agg(DISTINCT m.lane) FILTER (
                       WHERE m.status = 'QUEUED'
                         AND pgsched.tier_of(m.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
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

-- The DEAD lane's retry (0010): due now, routed like any new task. 0004 and 0010 meant to wake
-- the lanes from a CTE that the planner dropped (nothing read its rows), so no lane was woken
-- and a retried task waited for a worker's backup poll: the lanes are woken here.
CREATE OR REPLACE FUNCTION pgsched.dead_retry(
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
    h record;
    tier text;
    retried_ids bigint[];
    wake pgsched.task_lane[];
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
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    tier := pgsched.tier_of(t, h.immediate_until, h.hot_until);
    WITH retried AS (
        UPDATE pgsched.tasks AS tk
           SET status = pgsched.tier_status(tier), attempts = 0, next_run_at = t,
               status_reason = dead_retry.reason, updated_at = t
         WHERE tk.status = 'FAILED'
           AND (dead_retry.all_tasks
                OR tk.id = dead_retry.task_id
                OR tk.task_type = dead_retry.task_type)
        RETURNING tk.id, tk.lane
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}'), coalesce(array_agg(DISTINCT r.lane), '{}')
      INTO retried_ids, wake
      FROM retried AS r;
    IF tier = 'IMMEDIATE' THEN
        PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(retried_ids) AS u(id);
END;
$$;

-- Promotion (0007): a cold task whose due time no longer routes COLD moves to the hot
-- tier. `next_run_at < hot_until` is tier_of's COLD boundary, written as a range the due
-- index serves (with `within`, a caller's own horizon).
CREATE OR REPLACE FUNCTION pgsched.task_promote_due(
    max_tasks integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL,
    within interval DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    horizon timestamptz;
    promoted integer;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    horizon := coalesce(t + extract(epoch FROM task_promote_due.within) * INTERVAL '1 second', h.hot_until);
    WITH due AS MATERIALIZED (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PENDING' AND tk.next_run_at < horizon
         ORDER BY tk.next_run_at
         LIMIT task_promote_due.max_tasks
           FOR UPDATE SKIP LOCKED
    ),
    moved AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED',
               status_reason = CASE
                   WHEN tk.next_run_at <= t THEN 'promoted late: already due (overdue sweep)'
                   ELSE 'promoted into the hot window'
               END,
               updated_at = t
          FROM due
         WHERE tk.id = due.id AND tk.status = 'PENDING'
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

-- New functions are not everyone's: only the roles of 0006, as for the rest of the API.
REVOKE EXECUTE ON FUNCTION
pgsched.tier_horizons(timestamptz),
pgsched.tier_of(timestamptz, timestamptz, timestamptz),
pgsched.tier_status(text),
pgsched.schedule_task_ex(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text
)
FROM public;
GRANT EXECUTE ON FUNCTION
pgsched.tier_horizons(timestamptz),
pgsched.tier_of(timestamptz, timestamptz, timestamptz),
pgsched.tier_status(text),
pgsched.schedule_task_ex(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text
)
TO pgsched_producer, pgsched_worker, pgsched_admin;
