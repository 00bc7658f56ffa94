-- 0006 — identity and tenancy: the completed-work ledger, tenants, per-tenant fan-out,
-- and least-privilege roles.
--
-- At least once is the guarantee; identity makes a second run harmless. The ledger
-- (pgsched.completed_work, 0004) keeps one row per completed (tenant, task type,
-- idempotency key); a task claimed again whose key is there is a recorded no-op.
--
-- A task's scope is one tenant (the default), every active tenant of one product, or
-- global (every active tenant). A product or global task fans out when it runs: one child
-- task per tenant (BATCH lane: parallel and throttled), each with its own attempts,
-- retries, DEAD-lane entry and outcome, so 2 failing tenants out of 100 are retried alone.

CREATE TABLE pgsched.tenants (
    tenant_id text PRIMARY KEY CHECK (tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'),
    product text NOT NULL CHECK (product ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$'),
    active boolean NOT NULL DEFAULT TRUE,
    metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX tenants_product_active_idx ON pgsched.tenants (product) WHERE active;

-- A fan-out parent's tenant_id: a reserved name no tenant can take (tenants start with a
-- letter or digit).
CREATE FUNCTION pgsched.all_tenants_id() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '_all' $$;

-- Tenants --------------------------------------------------------------------------------

CREATE FUNCTION pgsched.tenant_add(
    tenant_id text, product text, metadata jsonb DEFAULT '{}'
) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    IF tenant_add.tenant_id IS NULL OR tenant_add.tenant_id !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$' THEN
        RAISE EXCEPTION 'pgsched: tenant_id % is not a plain identifier (letters, digits, _, . and -, starting with a letter or digit)',
            quote_nullable(tenant_add.tenant_id) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tenant_add.product IS NULL OR tenant_add.product !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$' THEN
        RAISE EXCEPTION 'pgsched: product % is not a plain identifier', quote_nullable(tenant_add.product)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tenant_add.metadata IS NULL OR jsonb_typeof(tenant_add.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pgsched: tenant metadata must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.tenants AS t (tenant_id, product, metadata)
    VALUES (tenant_add.tenant_id, tenant_add.product, tenant_add.metadata)
    ON CONFLICT ON CONSTRAINT tenants_pkey DO UPDATE
        SET product = excluded.product, metadata = excluded.metadata, active = TRUE, updated_at = now();
    RETURN tenant_add.tenant_id;
END;
$$;

CREATE FUNCTION pgsched.tenant_set_active(tenant_id text, active boolean) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE pgsched.tenants AS t
       SET active = tenant_set_active.active, updated_at = now()
     WHERE t.tenant_id = tenant_set_active.tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no tenant %', tenant_set_active.tenant_id USING ERRCODE = 'no_data_found';
    END IF;
    RETURN tenant_set_active.tenant_id;
END;
$$;

-- Fan a claimed product/global task out: one child task per active tenant (BATCH lane,
-- tenant-scoped idempotency keys, so a retried fan-out creates no duplicates), and the
-- parent completes as "fanned out to N tenants" in the same transaction. Returns N.
CREATE FUNCTION pgsched.task_fan_out(
    task_id bigint, lease_token uuid, as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    p pgsched.tasks;
    tenant_list text[];
    n integer;
    child_ids bigint[];
    applied boolean;
BEGIN
    SELECT * INTO p FROM pgsched.tasks AS tk
     WHERE tk.id = task_fan_out.task_id AND tk.status = 'PROCESSING' AND tk.lease_token = task_fan_out.lease_token;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(array_agg(t.tenant_id ORDER BY t.tenant_id), '{}') INTO tenant_list
      FROM pgsched.tenants AS t
     WHERE t.active AND (p.scope = 'global' OR t.product = p.product);
    n := cardinality(tenant_list);

    -- Children carry an engine-reserved key per tenant ('pgsched:' keys are refused from
    -- users), so a fan-out that runs again after a crash finds its children, not copies.
    SELECT coalesce(array_agg(s.task_id), '{}') INTO child_ids
      FROM pgsched.task_insert_many(
          array_fill(p.task_type, ARRAY[n]),
          array_fill(p.payload, ARRAY[n]),
          array_fill(coalesce(as_of, now()), ARRAY[n]),
          tenant_list,
          array_fill(p.priority, ARRAY[n]),
          array_fill('pgsched:fanout:' || p.id::text, ARRAY[n]),
          array_fill(p.max_attempts, ARRAY[n]),
          array_fill('BATCH'::text, ARRAY[n]),
          array_fill(p.metadata || jsonb_build_object('parent_id', p.id), ARRAY[n]),
          array_fill('tenant'::text, ARRAY[n]),
          array_fill(NULL::text, ARRAY[n]),
          coalesce(as_of, now())
      ) AS s;
    -- A statement of its own: the children were inserted by the one above.
    UPDATE pgsched.tasks AS tk SET parent_id = p.id WHERE tk.id = ANY(child_ids) AND tk.parent_id IS NULL;
    n := cardinality(child_ids);

    -- The parent's own outcome: done fanning out. Each tenant's outcome is its child's.
    SELECT f.applied INTO applied FROM pgsched.task_finish_many(
        ARRAY[p.id], ARRAY[p.lease_token], ARRAY['COMPLETED'],
        ARRAY[format('fanned out to %s tenants', n)], NULL, as_of) AS f;
    RETURN n;
END;
$$;

-- Per-tenant outcomes of a fan-out: one row per child (tenant) and a summary per parent.
CREATE VIEW pgsched.tenant_outcomes AS
SELECT
    c.parent_id,
    c.id AS task_id,
    c.tenant_id,
    c.task_type,
    c.status,
    c.attempts,
    c.max_attempts,
    c.last_error,
    c.updated_at
FROM pgsched.tasks AS c
WHERE c.parent_id IS NOT NULL;

CREATE VIEW pgsched.fan_out_summary AS
SELECT
    c.parent_id,
    c.task_type,
    count(*) AS tenants,
    count(*) FILTER (WHERE c.status = 'COMPLETED') AS completed,
    count(*) FILTER (WHERE c.status = 'FAILED') AS failed,
    count(*) FILTER (WHERE c.status IN ('PENDING', 'QUEUED', 'PROCESSING')) AS unfinished,
    count(*) FILTER (WHERE c.status = 'CANCELLED') AS cancelled
FROM pgsched.tasks AS c
WHERE c.parent_id IS NOT NULL
GROUP BY c.parent_id, c.task_type;

-- The ledger ------------------------------------------------------------------------------

-- Record that a keyed task's work is done, right after execute returned and before the
-- (batched) completion: if the worker dies in between, the retry finds the key and is a
-- recorded no-op instead of a second effect. Only the lease holder may record.
CREATE FUNCTION pgsched.work_record_done(task_id bigint, lease_token uuid) RETURNS boolean
LANGUAGE sql
AS $$
    WITH held AS (
        SELECT tk.tenant_id, tk.task_type, tk.idempotency_key, tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.id = work_record_done.task_id AND tk.status = 'PROCESSING'
           AND tk.lease_token = work_record_done.lease_token AND tk.idempotency_key IS NOT NULL
    ),
    ins AS (
        INSERT INTO pgsched.completed_work AS w (tenant_id, task_type, idempotency_key, task_id)
        SELECT h.tenant_id, h.task_type, h.idempotency_key, h.id FROM held AS h
        ON CONFLICT DO NOTHING
        RETURNING w.task_id
    )
    SELECT EXISTS (SELECT 1 FROM ins)
$$;

-- ctx.once(key): true the first time a (tenant, task type, key) is claimed, false after.
CREATE FUNCTION pgsched.work_once(
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

-- Least privilege -------------------------------------------------------------------------
--
--   pgsched_producer  may only schedule (and cancel), through SECURITY DEFINER functions;
--                     it cannot read or change task rows. A producer login listed in
--                     pgsched.producer_tenants may schedule only for its tenant(s).
--   pgsched_worker    runs tasks and the sweeps: claims, outcomes, heartbeats, rescue,
--                     the ledger, arming, promotion, retention -- through functions only.
--   pgsched_admin     everything, including the DEAD lane, tenants and settings.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_producer') THEN
        CREATE ROLE pgsched_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_worker') THEN
        CREATE ROLE pgsched_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_admin') THEN
        CREATE ROLE pgsched_admin NOLOGIN;
    END IF;
END;
$$;

-- The producer's entry points run as their owner, with a fixed search path, so a role
-- that can read no table can still schedule through them, and only through them. jit is
-- off for the bulk path: the planner overestimates unnest() rows and would JIT each batch.
ALTER FUNCTION pgsched.schedule_tasks(
    text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], timestamptz,
    text[], text[]
) SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off;
ALTER FUNCTION pgsched.schedule_task(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text
) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.schedule_recurring(
    text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamptz, timestamptz,
    text, text
) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.cancel_task(bigint, text, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON ALL TABLES IN SCHEMA pgsched FROM public;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgsched FROM public;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched FROM public;

GRANT USAGE ON SCHEMA pgsched TO pgsched_producer, pgsched_worker, pgsched_admin;

GRANT EXECUTE ON FUNCTION
pgsched.schedule_task(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text
),
pgsched.schedule_tasks(
    text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], timestamptz,
    text[], text[]
),
pgsched.schedule_recurring(
    text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamptz, timestamptz,
    text, text
),
pgsched.cancel_task(bigint, text, timestamptz),
pgsched.route(timestamptz, timestamptz),
pgsched.timezone_problem(text),
pgsched.cron_problem(text)
TO pgsched_producer, pgsched_worker, pgsched_admin;

-- The worker changes rows only through these functions (run as their owner); it may read
-- every table but write none, so it cannot, say, revive a DEAD task by hand.
ALTER FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.task_heartbeat_many(bigint[], uuid[], interval, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.lease_rescue_expired(pgsched.task_lane, integer, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.task_fan_out(bigint, uuid, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.work_record_done(bigint, uuid)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.work_once(text, text, text, bigint)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.schedule_arm(bigint, bigint, timestamptz, timestamptz[], timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.schedule_quarantine(bigint, text, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.task_promote_due(integer, timestamptz, interval)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.task_wake_overdue(interval, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgsched.retention_prune(interval, integer, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

GRANT SELECT ON ALL TABLES IN SCHEMA pgsched TO pgsched_worker;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched TO pgsched_worker;
REVOKE EXECUTE ON FUNCTION
pgsched.task_insert_many(
    text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], text[],
    text[], timestamptz
),
pgsched.dead_retry(bigint, text, boolean, text, timestamptz),
pgsched.dead_discard(bigint, text, timestamptz),
pgsched.tenant_add(text, text, jsonb),
pgsched.tenant_set_active(text, boolean),
pgsched.schedule_enable(bigint, boolean, timestamptz)
FROM pgsched_worker;

GRANT ALL ON ALL TABLES IN SCHEMA pgsched TO pgsched_admin;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pgsched TO pgsched_admin;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgsched TO pgsched_admin;
