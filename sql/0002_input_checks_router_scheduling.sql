-- 0002 — the time router and the scheduling API.
--
-- Any language schedules work by calling these functions:
--
--   SELECT pgsched.schedule_task(task_type => 'send_email', payload => '{"to": 1}');
--   SELECT * FROM pgsched.schedule_tasks(task_types => ARRAY[...], run_ats => ARRAY[...]);
--   SELECT pgsched.cancel_task(42, 'customer left');
--
-- Routing, by how far the due time is from now (boundaries in pgsched.settings):
--   IMMEDIATE  run_at - now <  immediate_window (15 min)  hot partition, QUEUED, NOTIFY the lane
--   HOT        run_at - now <  hot_window (24 h)          hot partition, QUEUED
--   COLD       otherwise                                  cold partition, PENDING
-- Every time check takes an optional as_of (defaults to now()) so tests control the clock.

-- Why a task's input is refused, or NULL when it is fine, in two halves so the bulk path
-- can check the identity half once per distinct value (a batch of a million rows usually
-- has one task type and a handful of tenants) and the content half once per row. Both are
-- STABLE SQL (like format() inside them), so the planner inlines them into the query.
CREATE FUNCTION pgsched.task_identity_problem(
    task_type text,
    tenant_id text,
    priority integer,
    max_attempts bigint,
    lane text,
    scope text DEFAULT 'tenant',
    product text DEFAULT NULL
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN task_type IS NULL THEN 'task_type is required'
        -- A bounded repeat ({0,99}) costs the regex engine ~20x a plain star: length apart.
        WHEN task_type !~ '^[A-Za-z_][A-Za-z0-9_.]*$' OR length(task_type) > 100 THEN format(
            'task_type %L is not a plain identifier '
            '(letters, digits, _ and ., starting with a letter or _, at most 100 characters)',
            task_type)
        WHEN scope IS NULL OR scope NOT IN ('tenant', 'product', 'global') THEN format(
            'unknown scope %L (tenant, product or global)', scope)
        WHEN scope = 'product'
             AND (product IS NULL OR product !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]*$' OR length(product) > 100)
            THEN format('scope product needs a plain product name, got %L', product)
        WHEN scope <> 'product' AND product IS NOT NULL THEN
            'product is only given with scope product'
        -- Tenant ids start with a letter or digit; names starting with _ are the engine's.
        WHEN scope = 'tenant'
             AND (tenant_id IS NULL OR tenant_id !~ '^[A-Za-z0-9][A-Za-z0-9_.-]*$' OR length(tenant_id) > 100)
            THEN format(
                'tenant_id %L is not a plain identifier '
                '(letters, digits, _, . and -, starting with a letter or digit, at most 100 characters)',
                tenant_id)
        WHEN priority IS NULL OR priority NOT BETWEEN 0 AND 10 THEN format(
            'priority %s is out of range (0 to 10)', coalesce(priority::text, 'NULL'))
        WHEN max_attempts IS NULL OR max_attempts < 1 THEN format(
            'max_attempts %s must be at least 1', coalesce(max_attempts::text, 'NULL'))
        WHEN lane IS NOT NULL AND upper(lane) = 'DEAD' THEN
            'lane DEAD cannot be scheduled into: tasks reach it only by failing'
        WHEN lane IS NOT NULL AND upper(lane) NOT IN ('HIGH', 'NORMAL', 'LOW', 'BATCH') THEN format(
            'unknown lane %L (one of HIGH, NORMAL, LOW, BATCH)', lane)
        WHEN upper(lane) = 'HIGH' AND priority < 8 THEN format(
            'lane HIGH needs priority 8 or more, got %s', priority)
        WHEN upper(lane) = 'NORMAL' AND priority NOT BETWEEN 4 AND 7 THEN format(
            'lane NORMAL needs priority 4 to 7, got %s', priority)
        WHEN upper(lane) = 'LOW' AND priority > 3 THEN format(
            'lane LOW needs priority 3 or less, got %s', priority)
    END
$$;

CREATE FUNCTION pgsched.task_content_problem(
    payload jsonb,
    metadata jsonb,
    idempotency_key text,
    max_payload_bytes bigint
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN payload IS NULL THEN 'payload must be JSON, got NULL'
        WHEN metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
            'metadata must be a JSON object'
        -- The cap is on the JSON text. Its stored size can be at most ~6x smaller (escapes),
        -- so only payloads that could be near the cap pay for rendering the text.
        WHEN pg_column_size(payload) * 6 >= max_payload_bytes
             AND octet_length(payload::text) > max_payload_bytes THEN format(
            'payload is %s bytes, over the cap of %s bytes (pgsched.settings.max_payload_bytes)',
            octet_length(payload::text), max_payload_bytes)
        WHEN idempotency_key IS NOT NULL AND (idempotency_key = '' OR length(idempotency_key) > 200)
            THEN 'idempotency_key must be 1 to 200 characters'
        WHEN idempotency_key LIKE 'pgsched:%' THEN
            'idempotency keys starting with pgsched: are reserved for the engine'
    END
$$;

-- Both halves, for one task (the recurring path uses it).
CREATE FUNCTION pgsched.task_input_problem(
    task_type text,
    payload jsonb,
    tenant_id text,
    priority integer,
    max_attempts bigint,
    lane text,
    metadata jsonb,
    idempotency_key text,
    max_payload_bytes bigint,
    scope text DEFAULT 'tenant',
    product text DEFAULT NULL
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(
        pgsched.task_identity_problem(task_type, tenant_id, priority, max_attempts, lane, scope, product),
        pgsched.task_content_problem(payload, metadata, idempotency_key, max_payload_bytes)
    )
$$;

-- The lane a priority belongs to; BATCH only when asked for.
CREATE FUNCTION pgsched.lane_for(priority integer, lane text DEFAULT NULL)
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

-- The tier a due time routes to: IMMEDIATE, HOT or COLD.
CREATE FUNCTION pgsched.route(run_at timestamptz, as_of timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN run_at - coalesce(as_of, now()) < s.immediate_window THEN 'IMMEDIATE'
        WHEN run_at - coalesce(as_of, now()) < s.hot_window THEN 'HOT'
        ELSE 'COLD'
    END
    FROM pgsched.settings AS s
$$;

-- Why a time zone name is refused, or NULL. Only IANA Area/Location names and UTC are
-- accepted: abbreviations (PST, EST) and legacy names are ambiguous about the rules.
CREATE FUNCTION pgsched.timezone_problem(timezone text) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN timezone IS NULL OR btrim(timezone) = '' THEN 'time zone is required (an IANA name such as Europe/Berlin)'
        WHEN timezone IN ('UTC', 'Etc/UTC') THEN NULL
        WHEN timezone !~ '^[A-Z][A-Za-z_+-]+(/[A-Za-z0-9_+-]+)+$'
            OR timezone ~ '^(posix|right|Etc|SystemV)/'
            OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names AS z WHERE z.name = timezone)
            THEN format('unknown time zone %L (use an IANA Area/Location name such as America/New_York)', timezone)
    END
$$;

-- Refuses tenants that a bound producer login may not schedule for; unbound logins pass.
CREATE FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT format(
        'role %s may only schedule for tenant(s) %s, not %s',
        session_user,
        (SELECT string_agg(b.tenant_id, ', ' ORDER BY b.tenant_id)
           FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user),
        u.t)
      FROM unnest(tenant_ids) AS u(t)
     WHERE EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user)
       AND NOT EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b
                        WHERE b.role_name = session_user AND b.tenant_id = coalesce(u.t, 'default'))
     LIMIT 1
$$;

-- The engine's insert: ids, tenant-scoped idempotency keys, routing, NOTIFY. Takes input
-- that is already checked (NULL elements mean the defaults); callers are schedule_tasks
-- (for everyone) and the engine itself (fan-out). Not granted to producers or workers.
CREATE FUNCTION pgsched.task_insert_many(
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
    cfg pgsched.settings;
    n integer := coalesce(cardinality(task_types), 0);
    ids bigint[];
    created_ids bigint[];
    wake_lanes pgsched.task_lane[];
BEGIN
    SELECT * INTO cfg FROM pgsched.settings;
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
               (CASE WHEN i.run_at - as_of < cfg.hot_window THEN 'QUEUED' ELSE 'PENDING' END)::pgsched.task_status,
               i.max_attempts, i.idempotency_key, i.scope, i.product, as_of, as_of
          FROM input AS i
         WHERE i.idempotency_key IS NULL OR i.id IN (SELECT kd.task_id FROM keyed AS kd)
        RETURNING tk.id, tk.lane, tk.next_run_at
    )
    SELECT coalesce(array_agg(x.id), '{}'),
           coalesce(array_agg(DISTINCT x.lane) FILTER (WHERE x.next_run_at - as_of < cfg.immediate_window), '{}')
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

-- The bulk path, and the way in for every task. Arrays are parallel (one element per
-- task); any array but task_types may be NULL for "all defaults". Every row is checked
-- first and one bad row refuses the whole batch. Returns, per input row, the task id and
-- whether this call created it (false: its idempotency key already named a task).
CREATE FUNCTION pgsched.schedule_tasks(
    task_types text[],
    payloads jsonb[] DEFAULT NULL,
    run_ats timestamptz[] DEFAULT NULL,
    tenant_ids text[] DEFAULT NULL,
    priorities integer[] DEFAULT NULL,
    idempotency_keys text[] DEFAULT NULL,
    max_attempts bigint[] DEFAULT NULL,
    lanes text[] DEFAULT NULL,
    metadatas jsonb[] DEFAULT NULL,
    as_of timestamptz DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    products text[] DEFAULT NULL
) RETURNS TABLE (ordinal bigint, task_id bigint, created boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    cfg pgsched.settings;
    n integer := coalesce(cardinality(task_types), 0);
    t timestamptz := coalesce(as_of, now());
    bad record;
    bad_text text;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(payloads), n) <> n OR coalesce(cardinality(run_ats), n) <> n
       OR coalesce(cardinality(tenant_ids), n) <> n OR coalesce(cardinality(priorities), n) <> n
       OR coalesce(cardinality(idempotency_keys), n) <> n OR coalesce(cardinality(max_attempts), n) <> n
       OR coalesce(cardinality(lanes), n) <> n OR coalesce(cardinality(metadatas), n) <> n
       OR coalesce(cardinality(scopes), n) <> n OR coalesce(cardinality(products), n) <> n THEN
        RAISE EXCEPTION 'pgsched: every array passed to schedule_tasks must have % elements, like task_types', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO cfg FROM pgsched.settings;

    -- A product or global task belongs to no single tenant: it runs as the reserved '_all'.
    IF scopes IS NOT NULL THEN
        tenant_ids := ARRAY(
            SELECT CASE WHEN coalesce(u.scope, 'tenant') = 'tenant' THEN u.tenant_id ELSE '_all' END
              FROM unnest(coalesce(tenant_ids, array_fill(NULL::text, ARRAY[n])), scopes)
                   WITH ORDINALITY AS u(tenant_id, scope, ord)
             ORDER BY u.ord);
    END IF;

    bad_text := pgsched.producer_tenant_problem(coalesce(tenant_ids, ARRAY['default']));
    IF bad_text IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', bad_text USING ERRCODE = 'insufficient_privilege';
    END IF;

    -- Identity checks once per distinct combination (MATERIALIZED keeps the planner from
    -- pushing the check below the grouping, back to once per row); content once per row.
    WITH combos AS MATERIALIZED (
        SELECT min(x.ord) AS ord, x.task_type, x.tenant_id, x.priority, x.max_attempts, x.lane,
               x.scope, x.product
          FROM (
            SELECT i.ord, i.task_type, coalesce(i.tenant_id, 'default') AS tenant_id,
                   coalesce(i.priority, 5) AS priority, coalesce(i.max_attempts, 3) AS max_attempts,
                   i.lane, coalesce(i.scope, 'tenant') AS scope, i.product
              FROM unnest(task_types, tenant_ids, priorities, max_attempts, lanes, scopes, products)
                   WITH ORDINALITY AS i(task_type, tenant_id, priority, max_attempts, lane, scope, product, ord)
          ) AS x
         GROUP BY x.task_type, x.tenant_id, x.priority, x.max_attempts, x.lane, x.scope, x.product
    ),
    problems AS (
        SELECT c.ord, pgsched.task_identity_problem(
                   c.task_type, c.tenant_id, c.priority, c.max_attempts, c.lane, c.scope, c.product) AS problem
          FROM combos AS c
        UNION ALL
        SELECT r.ord, pgsched.task_content_problem(
                   coalesce(r.payload, '{}'), coalesce(r.metadata, '{}'), r.idempotency_key, cfg.max_payload_bytes)
          FROM unnest(payloads, metadatas, idempotency_keys) WITH ORDINALITY AS r(payload, metadata, idempotency_key, ord)
    )
    SELECT p.ord, p.problem INTO bad
      FROM problems AS p
     WHERE p.problem IS NOT NULL
     ORDER BY p.ord
     LIMIT 1;
    IF FOUND THEN
        IF n = 1 THEN
            RAISE EXCEPTION 'pgsched: %', bad.problem USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RAISE EXCEPTION 'pgsched: row % of the batch: %', bad.ord, bad.problem
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    RETURN QUERY
    SELECT * FROM pgsched.task_insert_many(
        task_types, payloads, run_ats, tenant_ids, priorities, idempotency_keys,
        max_attempts, lanes, metadatas, scopes, products, t);
END;
$$;

-- Schedule one task; returns its id (the existing task's id when the tenant already
-- used this idempotency key). scope => 'product' (with product => 'crm') or 'global'
-- makes it run once for every active tenant of that product, or of all products.
CREATE FUNCTION pgsched.schedule_task(
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
LANGUAGE plpgsql
AS $$
DECLARE
    cfg pgsched.settings;
    t timestamptz := coalesce(as_of, now());
    due timestamptz := coalesce(run_at, t);
    owner text := CASE WHEN coalesce(scope, 'tenant') = 'tenant' THEN coalesce(tenant_id, 'default') ELSE '_all' END;
    problem text;
    new_id bigint;
    existing bigint;
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
        schedule_task.task_type, coalesce(schedule_task.payload, '{}'), owner,
        coalesce(schedule_task.priority, 5), coalesce(schedule_task.max_attempts, 3),
        schedule_task.lane, coalesce(schedule_task.metadata, '{}'), schedule_task.idempotency_key,
        cfg.max_payload_bytes, coalesce(schedule_task.scope, 'tenant'), schedule_task.product);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    new_id := nextval('pgsched.task_id_seq');
    IF schedule_task.idempotency_key IS NOT NULL THEN
        INSERT INTO pgsched.idempotency_keys AS k (tenant_id, idempotency_key, task_id, created_at)
        VALUES (owner, schedule_task.idempotency_key, new_id, t)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT k.task_id INTO existing FROM pgsched.idempotency_keys AS k
             WHERE k.tenant_id = owner AND k.idempotency_key = schedule_task.idempotency_key;
            RETURN existing;
        END IF;
    END IF;
    task_lane := pgsched.lane_for(coalesce(schedule_task.priority, 5), schedule_task.lane);
    INSERT INTO pgsched.tasks (
        id, tenant_id, task_type, next_run_at, payload, metadata, priority, lane, status,
        max_attempts, idempotency_key, scope, product, created_at, updated_at
    ) VALUES (
        new_id, owner, schedule_task.task_type, due, coalesce(schedule_task.payload, '{}'),
        coalesce(schedule_task.metadata, '{}'), coalesce(schedule_task.priority, 5), task_lane,
        (CASE WHEN due - t < cfg.hot_window THEN 'QUEUED' ELSE 'PENDING' END)::pgsched.task_status,
        coalesce(schedule_task.max_attempts, 3), schedule_task.idempotency_key,
        coalesce(schedule_task.scope, 'tenant'), schedule_task.product, t, t
    );
    IF due - t < cfg.immediate_window THEN
        PERFORM pg_notify('pgsched_' || lower(task_lane::text), '');
    END IF;
    RETURN new_id;
END;
$$;

-- Cancel a task that has not started. Anything else is a clear error that changes nothing.
CREATE FUNCTION pgsched.cancel_task(
    task_id bigint,
    reason text DEFAULT 'cancelled',
    as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    current pgsched.task_status;
    problem text;
BEGIN
    SELECT pgsched.producer_tenant_problem(ARRAY[tk.tenant_id]) INTO problem
      FROM pgsched.tasks AS tk WHERE tk.id = cancel_task.task_id;
    IF problem IS NOT NULL THEN
        -- Say no without naming the other tenant.
        RAISE EXCEPTION 'pgsched: role % may not cancel task %: it belongs to another tenant',
            session_user, cancel_task.task_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = coalesce(cancel_task.reason, 'cancelled'),
           enabled = FALSE, updated_at = coalesce(cancel_task.as_of, now())
     WHERE tk.id = cancel_task.task_id AND tk.status IN ('PENDING', 'QUEUED');
    IF FOUND THEN
        RETURN cancel_task.task_id;
    END IF;
    SELECT tk.status INTO current FROM pgsched.tasks AS tk WHERE tk.id = cancel_task.task_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no task with id %', cancel_task.task_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RAISE EXCEPTION 'pgsched: task % is % and cannot be cancelled; only a task that has not started (PENDING or QUEUED) can be',
        cancel_task.task_id, current
        USING ERRCODE = 'object_not_in_prerequisite_state';
END;
$$;
