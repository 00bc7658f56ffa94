-- sql/code/router.sql — the time router.
--
-- the time router written once: tier_horizons, tier_of, tier_status, route; lane_for;
-- task_insert_many, the insert every scheduling path goes through.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- The lane a priority belongs to; BATCH only when asked for.
CREATE OR REPLACE FUNCTION pgsched.lane_for(priority integer, lane text DEFAULT NULL)
RETURNS pgsched.task_lane
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Enum constants, not a text-to-enum cast (only STABLE): keeps it inlinable.
    SELECT CASE
        WHEN upper(lane) = 'BATCH' THEN 'BATCH'::pgsched.task_lane
        WHEN priority >= 8 THEN 'HIGH'::pgsched.task_lane
        WHEN priority >= 4 THEN 'NORMAL'::pgsched.task_lane
        ELSE 'LOW'::pgsched.task_lane
    END
$$;
COMMENT ON FUNCTION pgsched.lane_for(integer, text) IS 'The lane of a task: BATCH when asked for, else from the priority (8+ HIGH, 4-7 NORMAL, 0-3 LOW).';
REVOKE ALL ON FUNCTION pgsched.lane_for(integer, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lane_for(integer, text) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.tier_horizons(as_of timestamptz DEFAULT NULL)
RETURNS TABLE (immediate_until timestamptz, hot_until timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    -- PL/pgSQL, not SQL: in distributed mode settings is a Citus reference table, and Citus
    -- refuses a SQL function that reads one with a parameter (as every caller passes).
    RETURN QUERY
    SELECT coalesce(as_of, now()) + extract(epoch FROM s.immediate_window) * INTERVAL '1 second',
           coalesce(as_of, now()) + extract(epoch FROM s.hot_window) * INTERVAL '1 second'
      FROM pgsched.settings AS s;
END;
$$;
COMMENT ON FUNCTION pgsched.tier_horizons(timestamp with time zone) IS 'Where the IMMEDIATE and HOT routes end as of as_of (default now), from pgsched.settings.';
REVOKE ALL ON FUNCTION pgsched.tier_horizons(timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.tier_horizons(timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.tier_of(run_at timestamptz, immediate_until timestamptz, hot_until timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN run_at < immediate_until THEN 'IMMEDIATE'
        WHEN run_at < hot_until THEN 'HOT'
        ELSE 'COLD'
    END
$$;
COMMENT ON FUNCTION pgsched.tier_of(timestamp with time zone, timestamp with time zone, timestamp with time zone) IS 'The route of a due time given the horizons of tier_horizons: IMMEDIATE, HOT or COLD. Every path that puts a task in a tier uses it.';
REVOKE ALL ON FUNCTION pgsched.tier_of(timestamptz, timestamptz, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.tier_of(timestamptz, timestamptz, timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.route(run_at timestamptz, as_of timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT pgsched.tier_of(route.run_at, h.immediate_until, h.hot_until)
      FROM pgsched.tier_horizons(route.as_of) AS h
$$;
COMMENT ON FUNCTION pgsched.route(timestamp with time zone, timestamp with time zone) IS 'The route a due time takes as of as_of (default now): IMMEDIATE (within settings.immediate_window), HOT (within settings.hot_window) or COLD.';
REVOKE ALL ON FUNCTION pgsched.route(timestamptz, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.route(timestamptz, timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

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
    as_of timestamptz,
    traceparents text[] DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    waiting_for integer DEFAULT NULL,
    on_parent_failure text DEFAULT NULL
) RETURNS TABLE (ordinal bigint, task_id bigint, created boolean)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    h record;
    n integer := coalesce(cardinality(task_types), 0);
    ids bigint[];
    created_ids bigint[];
    wake_lanes pgsched.task_lane[];
    wake_due timestamptz[];
    bad record;
BEGIN
    -- In 'functions' mode no trigger refuses a bad due time (sql/code/transitions.sql):
    -- it is refused here, in the trigger's words, before anything is written.
    IF pgsched.events_by_functions() THEN
        SELECT d.task_type, coalesce(d.tenant_id, 'default') AS tenant_id,
               pgsched.run_at_problem(coalesce(d.run_at, as_of)) AS problem
          INTO bad
          FROM unnest(task_types, run_ats, tenant_ids) AS d (task_type, run_at, tenant_id)
         WHERE pgsched.run_at_problem(coalesce(d.run_at, as_of)) IS NOT NULL
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: % (task_type %, tenant_id %)', bad.problem, bad.task_type, bad.tenant_id
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
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
               i.product,
               i.traceparent
          FROM unnest(ids, task_types, payloads, run_ats, tenant_ids, priorities,
                      idempotency_keys, max_attempts, lanes, metadatas, scopes, products, traceparents)
               AS i(id, task_type, payload, run_at, tenant_id, priority,
                    idempotency_key, max_attempts, lane, metadata, scope, product, traceparent)
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
            status, max_attempts, idempotency_key, scope, product, created_at, updated_at,
            traceparent, retry_delays, waiting_for, on_parent_failure
        )
        SELECT i.id, i.tenant_id, i.task_type, i.run_at, i.payload, i.metadata, i.priority, i.lane,
               -- Waiting for parents: the cold tier, whatever the due time.
               CASE WHEN task_insert_many.waiting_for > 0 THEN 'PENDING'::pgsched.task_status
                    ELSE pgsched.tier_status(pgsched.tier_of(i.run_at, h.immediate_until, h.hot_until)) END,
               i.max_attempts, i.idempotency_key, i.scope, i.product, as_of, as_of,
               i.traceparent, task_insert_many.retry_delays,
               nullif(task_insert_many.waiting_for, 0), task_insert_many.on_parent_failure
          FROM input AS i
         WHERE i.idempotency_key IS NULL OR i.id IN (SELECT kd.task_id FROM keyed AS kd)
        RETURNING tk.id, tk.lane, tk.next_run_at, tk.status
    )
    SELECT coalesce(array_agg(x.id), '{}'),
           coalesce(array_agg(x.lane) FILTER (WHERE x.wake), '{}'),
           coalesce(array_agg(x.next_run_at) FILTER (WHERE x.wake), '{}')
      INTO created_ids, wake_lanes, wake_due
      FROM (
        SELECT i.id, i.lane, i.next_run_at,
               i.status = 'QUEUED'
               AND pgsched.tier_of(i.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE' AS wake
          FROM inserted AS i
      ) AS x;

    -- A tiny wake-up per lane, its payload the earliest due time queued (epoch seconds): a
    -- worker whose claims start at a floor (sql/code/claim.sql, 0046) lowers it to that.
    PERFORM pg_notify('pgsched_' || lower(w.lane::text), extract(EPOCH FROM min(w.due))::text)
       FROM unnest(wake_lanes, wake_due) AS w (lane, due)
      GROUP BY w.lane;

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
COMMENT ON FUNCTION pgsched.task_insert_many(text[], jsonb[], timestamp with time zone[], text[], integer[], text[], bigint[], text[], jsonb[], text[], text[], timestamp with time zone, text[], interval[], integer, text) IS 'The engine''s insert behind schedule_task and schedule_tasks, after their checks: routes each row by tier_of (or, waiting_for > 0, PENDING in the cold tier until its parents finish) and honours idempotency keys; traceparents per row, retry_delays, waiting_for and on_parent_failure for every row. Returns (ordinal, task_id, created).';
REVOKE ALL ON FUNCTION pgsched.task_insert_many(text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], text[], text[], timestamptz, text[], interval[], integer, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_insert_many(text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], text[], text[], timestamptz, text[], interval[], integer, text) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.tier_status(tier text) RETURNS pgsched.task_status
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Enum constants, not a text-to-enum cast (only STABLE): keeps it inlinable.
    SELECT CASE WHEN tier = 'COLD' THEN 'PENDING'::pgsched.task_status ELSE 'QUEUED'::pgsched.task_status END
$$;
COMMENT ON FUNCTION pgsched.tier_status(text) IS 'The status a route gives a task: QUEUED (hot tier) for IMMEDIATE and HOT, PENDING (cold tier) for COLD.';
REVOKE ALL ON FUNCTION pgsched.tier_status(text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.tier_status(text) TO pgsched_producer, pgsched_worker, pgsched_admin;
