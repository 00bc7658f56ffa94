-- sql/code/scheduling.sql — scheduling.
--
-- input checks (task_identity_problem, task_content_problem, task_input_problem,
-- task_options_problem, run_at_problem), unique windows and debounce (task_insert_windowed)
-- and the producer's entry points schedule_task, schedule_task_ex, schedule_tasks.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

CREATE OR REPLACE FUNCTION pgsched.task_identity_problem(
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
        WHEN max_attempts > 1000 THEN format('max_attempts %s is over the limit of 1000', max_attempts)
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
COMMENT ON FUNCTION pgsched.task_identity_problem(text, text, integer, bigint, text, text, text) IS 'Why a task''s identity is refused, or NULL: task type and tenant as plain identifiers (tenants starting with _ are the engine''s), priority 0 to 10, max_attempts 1 to 1000, lane, scope and product.';
REVOKE ALL ON FUNCTION pgsched.task_identity_problem(text, text, integer, bigint, text, text, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_identity_problem(text, text, integer, bigint, text, text, text) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.task_content_problem(
    payload jsonb,
    metadata jsonb,
    idempotency_key text,
    max_payload_bytes bigint
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN payload IS NULL THEN 'payload must be JSON, got NULL'
        WHEN metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN format(
            'metadata must be a JSON object, got %s', coalesce(jsonb_typeof(metadata), 'NULL'))
        -- The cap is on the JSON text. Its stored size can be at most ~6x smaller (escapes),
        -- so only values that could be near the cap pay for rendering the text.
        WHEN pg_column_size(payload) * 6 >= max_payload_bytes
             AND octet_length(payload::text) > max_payload_bytes THEN format(
            'payload is %s bytes, over the cap of %s bytes (pgsched.settings.max_payload_bytes)',
            octet_length(payload::text), max_payload_bytes)
        WHEN pg_column_size(metadata) * 6 >= max_payload_bytes
             AND octet_length(metadata::text) > max_payload_bytes THEN format(
            'metadata is %s bytes, over the cap of %s bytes (pgsched.settings.max_payload_bytes)',
            octet_length(metadata::text), max_payload_bytes)
        WHEN idempotency_key IS NOT NULL AND (idempotency_key = '' OR length(idempotency_key) > 200)
            THEN 'idempotency_key must be 1 to 200 characters'
        WHEN idempotency_key LIKE 'pgsched:%' THEN
            'idempotency keys starting with pgsched: are reserved for the engine'
    END
$$;
COMMENT ON FUNCTION pgsched.task_content_problem(jsonb, jsonb, text, bigint) IS 'Why a task''s content is refused, or NULL: the payload as JSON text at most max_payload_bytes, metadata a JSON object under the same cap, an idempotency key of 1 to 200 characters.';
REVOKE ALL ON FUNCTION pgsched.task_content_problem(jsonb, jsonb, text, bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_content_problem(jsonb, jsonb, text, bigint) TO pgsched_worker, pgsched_admin;

-- Both halves, for one task (the recurring path uses it).
CREATE OR REPLACE FUNCTION pgsched.task_input_problem(
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
COMMENT ON FUNCTION pgsched.task_input_problem(text, jsonb, text, integer, bigint, text, jsonb, text, bigint, text, text) IS 'Why one task''s input is refused, or NULL: task_identity_problem and task_content_problem together.';
REVOKE ALL ON FUNCTION pgsched.task_input_problem(text, jsonb, text, integer, bigint, text, jsonb, text, bigint, text, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_input_problem(text, jsonb, text, integer, bigint, text, jsonb, text, bigint, text, text) TO pgsched_worker, pgsched_admin;

-- The options beyond a task's identity and content: a window for its key (unique_for or
-- debounce), the trace context it was scheduled in, its own retry schedule.
CREATE OR REPLACE FUNCTION pgsched.task_options_problem(
    idempotency_key text,
    run_at timestamptz,
    unique_for interval,
    debounce interval,
    traceparent text,
    retry_delays interval[]
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN unique_for IS NOT NULL AND debounce IS NOT NULL THEN
            'unique_for and debounce cannot be combined: a key has one window'
        WHEN unique_for IS NOT NULL AND NOT (unique_for > INTERVAL '0' AND unique_for <= INTERVAL '365 days')
            THEN format('unique_for %s is out of range (more than 0, at most 365 days)', unique_for)
        WHEN debounce IS NOT NULL AND NOT (debounce > INTERVAL '0' AND debounce <= INTERVAL '365 days')
            THEN format('debounce %s is out of range (more than 0, at most 365 days)', debounce)
        WHEN (unique_for IS NOT NULL OR debounce IS NOT NULL) AND idempotency_key IS NULL THEN format(
            '%s needs an idempotency_key: the key the window is for',
            CASE WHEN unique_for IS NOT NULL THEN 'unique_for' ELSE 'debounce' END)
        WHEN debounce IS NOT NULL AND run_at IS NOT NULL THEN
            'debounce sets the due time (debounce after the last call): give no run_at'
        WHEN traceparent IS NOT NULL
             AND (traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                  OR left(traceparent, 2) = 'ff'
                  OR substr(traceparent, 4, 32) = repeat('0', 32)
                  OR substr(traceparent, 37, 16) = repeat('0', 16)) THEN format(
            'traceparent %L is not a W3C trace context (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, '
            'lowercase, ids not all zero)', left(traceparent, 100))
        WHEN retry_delays IS NOT NULL AND array_ndims(retry_delays) IS DISTINCT FROM 1 THEN
            'retry_delays must be a one-dimensional list of at least one delay'
        WHEN cardinality(retry_delays) > 100 THEN format(
            'retry_delays holds %s delays; at most 100', cardinality(retry_delays))
        WHEN retry_delays IS NOT NULL THEN (
            SELECT format('retry_delays[%s] %s is out of range (0 to 30 days)', d.ord, coalesce(d.delay::text, 'NULL'))
              FROM unnest(retry_delays) WITH ORDINALITY AS d(delay, ord)
             WHERE d.delay IS NULL OR d.delay < INTERVAL '0' OR d.delay > INTERVAL '30 days'
             ORDER BY d.ord
             LIMIT 1)
    END
$$;
COMMENT ON FUNCTION pgsched.task_options_problem(text, timestamp with time zone, interval, interval, text, interval[]) IS 'Why a task''s options are refused, or NULL: unique_for or debounce (not both) more than 0 and at most 365 days, each with an idempotency_key, debounce without run_at; traceparent a W3C trace context; retry_delays a list of 1 to 100 delays of 0 to 30 days.';
REVOKE ALL ON FUNCTION pgsched.task_options_problem(text, timestamptz, interval, interval, text, interval[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_options_problem(text, timestamptz, interval, interval, text, interval[]) TO pgsched_worker, pgsched_admin;

-- One task whose key has a window (checked already by the caller). The key's row in
-- task_windows is the lock every call with the same tenant and key queues on, so concurrent
-- producers see one another's tasks: a unique window's task is returned while the window
-- lasts; a debounced task not yet started takes the latest call's payload, metadata and due
-- time (an event says so), and once it has started the next call makes a new one.
CREATE OR REPLACE FUNCTION pgsched.task_insert_windowed(
    task_type text,
    payload jsonb,
    run_at timestamptz,
    tenant_id text,
    priority integer,
    window_key text,
    max_attempts bigint,
    lane text,
    metadata jsonb,
    scope text,
    product text,
    unique_for interval,
    debounce interval,
    traceparent text,
    retry_delays interval[],
    as_of timestamptz
) RETURNS TABLE (task_id bigint, created boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    t timestamptz := as_of;
    w_kind text := CASE WHEN debounce IS NOT NULL THEN 'debounce' ELSE 'unique' END;
    due timestamptz := CASE WHEN debounce IS NOT NULL THEN as_of + debounce ELSE coalesce(run_at, as_of) END;
    ends timestamptz := CASE WHEN debounce IS NOT NULL THEN as_of + debounce ELSE as_of + unique_for END;
    new_id bigint := nextval('pgsched.task_id_seq');
    w record;
    h record;
    r record;
    replaced boolean := FALSE;
    was pgsched.task_status;
    tier text;
    task_lane pgsched.task_lane := pgsched.lane_for(priority, lane);
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    LOOP
        -- A key taken by a concurrent transaction makes this wait for it to end.
        INSERT INTO pgsched.task_windows AS k (tenant_id, window_key, task_id, kind, opened_at, ends_at)
        VALUES (task_insert_windowed.tenant_id, task_insert_windowed.window_key, new_id, w_kind, t, ends)
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;
        SELECT * INTO w FROM pgsched.task_windows AS k
         WHERE k.tenant_id = task_insert_windowed.tenant_id AND k.window_key = task_insert_windowed.window_key
           FOR UPDATE;
        IF NOT FOUND THEN
            -- Pruned between the two statements: take it again.
            CONTINUE;
        END IF;
        IF w.ends_at > t AND (w_kind = 'unique' OR w.kind = 'unique') THEN
            -- Inside a unique window: its task, unchanged.
            RETURN QUERY SELECT w.task_id, FALSE;
            RETURN;
        END IF;
        IF w_kind = 'debounce' AND w.kind = 'debounce' THEN
            BEGIN
                -- Replaced only while not started: a claim holding the row makes this wait,
                -- and then finds it PROCESSING. Locked first, so its status before is known.
                SELECT tk.status INTO was
                  FROM pgsched.tasks AS tk
                 WHERE tk.id = w.task_id AND tk.status IN ('PENDING', 'QUEUED')
                   FOR UPDATE;
                replaced := FOUND;
                IF replaced THEN
                    UPDATE pgsched.tasks AS tk
                       SET payload = task_insert_windowed.payload,
                           metadata = task_insert_windowed.metadata,
                           traceparent = coalesce(task_insert_windowed.traceparent, tk.traceparent),
                           next_run_at = due,
                           status = CASE
                               WHEN tk.status = 'PENDING'
                                   THEN pgsched.tier_status(pgsched.tier_of(due, h.immediate_until, h.hot_until))
                               ELSE tk.status
                           END,
                           status_reason = format('debounced: replaced by a later call, due %s', due),
                           updated_at = t
                     WHERE tk.id = w.task_id AND tk.status = was
                    RETURNING tk.id, tk.tenant_id, tk.task_type, tk.status, tk.attempts, tk.status_reason,
                              tk.locked_by INTO r;
                END IF;
            EXCEPTION WHEN serialization_failure THEN
                -- Promoted from the cold tier meanwhile (a move between partitions): again.
                CONTINUE;
            END;
            IF replaced THEN
                -- The same status, so the transition trigger wrote nothing: the event is
                -- ours. (A PENDING task now due within the hot window moved to QUEUED, and
                -- the trigger recorded that move with this detail, or, when the functions
                -- write the events, this does: sql/code/transitions.sql.)
                IF r.status = was OR pgsched.events_by_functions() THEN
                    INSERT INTO pgsched.task_events (
                        task_id, tenant_id, task_type, from_status, to_status,
                        occurred_at, scheduled_for, attempt, worker, detail
                    ) VALUES (r.id, r.tenant_id, r.task_type, was, r.status, t, due, r.attempts,
                              CASE WHEN r.status <> was THEN r.locked_by END, r.status_reason);
                END IF;
                UPDATE pgsched.task_windows AS k SET ends_at = ends
                 WHERE k.tenant_id = w.tenant_id AND k.window_key = w.window_key;
                RETURN QUERY SELECT w.task_id, FALSE;
                RETURN;
            END IF;
        END IF;
        -- The window is over (or its debounced task has started): a new task owns the key.
        UPDATE pgsched.task_windows AS k
           SET task_id = new_id, kind = w_kind, opened_at = t, ends_at = ends
         WHERE k.tenant_id = w.tenant_id AND k.window_key = w.window_key;
        EXIT;
    END LOOP;
    tier := pgsched.tier_of(due, h.immediate_until, h.hot_until);
    INSERT INTO pgsched.tasks (
        id, tenant_id, task_type, next_run_at, payload, metadata, priority, lane, status,
        max_attempts, scope, product, created_at, updated_at, traceparent, retry_delays
    ) VALUES (
        new_id, task_insert_windowed.tenant_id, task_insert_windowed.task_type, due, task_insert_windowed.payload,
        task_insert_windowed.metadata, task_insert_windowed.priority, task_lane, pgsched.tier_status(tier),
        task_insert_windowed.max_attempts, task_insert_windowed.scope, task_insert_windowed.product, t, t,
        task_insert_windowed.traceparent, task_insert_windowed.retry_delays
    );
    IF tier = 'IMMEDIATE' THEN
        -- The due time: a worker's claim floor goes down to it (sql/code/claim.sql, 0046).
        PERFORM pg_notify('pgsched_' || lower(task_lane::text), extract(EPOCH FROM due)::text);
    END IF;
    RETURN QUERY SELECT new_id, TRUE;
END;
$$;
COMMENT ON FUNCTION pgsched.task_insert_windowed(text, jsonb, timestamp with time zone, text, integer, text, bigint, text, jsonb, text, text, interval, interval, text, interval[], timestamp with time zone) IS 'The insert behind unique_for and debounce, after the checks: serialized per (tenant, key) on its task_windows row. unique_for: the window''s task comes back (created false) until the window ends. debounce: a task not started yet takes this call''s payload, metadata and due time (an event records each replacement; created false); otherwise a new task. Returns (task_id, created).';
REVOKE ALL ON FUNCTION pgsched.task_insert_windowed(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, text, text, interval, interval, text, interval[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_insert_windowed(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, text, text, interval, interval, text, interval[], timestamptz) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.schedule_tasks(
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
    products text[] DEFAULT NULL,
    unique_fors interval[] DEFAULT NULL,
    debounces interval[] DEFAULT NULL,
    traceparents text[] DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT NULL
) RETURNS TABLE (ordinal bigint, task_id bigint, created boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    cfg pgsched.settings;
    n integer := coalesce(cardinality(task_types), 0);
    t timestamptz := coalesce(as_of, now());
    bad record;
    bad_text text;
    one record;
    dep_ids bigint[];
    dep_met boolean[];
    dep_status pgsched.task_status[];
    waiting integer;
    made_ordinals bigint[];
    made_ids bigint[];
    made_created boolean[];
BEGIN
    SELECT a.argument, a.dimensions INTO bad
      FROM (VALUES
          (1, 'task_types', array_ndims(task_types)), (2, 'payloads', array_ndims(payloads)),
          (3, 'run_ats', array_ndims(run_ats)), (4, 'tenant_ids', array_ndims(tenant_ids)),
          (5, 'priorities', array_ndims(priorities)),
          (6, 'idempotency_keys', array_ndims(idempotency_keys)),
          (7, 'max_attempts', array_ndims(max_attempts)), (8, 'lanes', array_ndims(lanes)),
          (9, 'metadatas', array_ndims(metadatas)), (10, 'scopes', array_ndims(scopes)),
          (11, 'products', array_ndims(products)), (12, 'unique_fors', array_ndims(unique_fors)),
          (13, 'debounces', array_ndims(debounces)), (14, 'traceparents', array_ndims(traceparents))
      ) AS a(position, argument, dimensions)
     WHERE a.dimensions > 1
     ORDER BY a.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: % must be a one-dimensional array (one element per task), got % dimensions',
            bad.argument, bad.dimensions
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(payloads), n) <> n OR coalesce(cardinality(run_ats), n) <> n
       OR coalesce(cardinality(tenant_ids), n) <> n OR coalesce(cardinality(priorities), n) <> n
       OR coalesce(cardinality(idempotency_keys), n) <> n OR coalesce(cardinality(max_attempts), n) <> n
       OR coalesce(cardinality(lanes), n) <> n OR coalesce(cardinality(metadatas), n) <> n
       OR coalesce(cardinality(scopes), n) <> n OR coalesce(cardinality(products), n) <> n
       OR coalesce(cardinality(unique_fors), n) <> n OR coalesce(cardinality(debounces), n) <> n
       OR coalesce(cardinality(traceparents), n) <> n THEN
        RAISE EXCEPTION 'pgsched: every array passed to schedule_tasks must have % elements, like task_types', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pgsched.run_at_problem(t) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: as_of % is out of range (1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)', t
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

    -- Once for the batch; only a refused batch pays for finding its first refused row.
    IF pgsched.producer_tenant_problem(coalesce(tenant_ids, ARRAY['default'])) IS NOT NULL THEN
        SELECT u.ord, pgsched.producer_tenant_problem(ARRAY[u.tenant_id]) AS problem INTO bad
          FROM unnest(coalesce(tenant_ids, array_fill('default'::text, ARRAY[n])))
               WITH ORDINALITY AS u(tenant_id, ord)
         WHERE pgsched.producer_tenant_problem(ARRAY[u.tenant_id]) IS NOT NULL
         ORDER BY u.ord
         LIMIT 1;
        IF n = 1 THEN
            RAISE EXCEPTION 'pgsched: %', bad.problem USING ERRCODE = 'insufficient_privilege';
        END IF;
        RAISE EXCEPTION 'pgsched: row % of the batch: %', bad.ord, bad.problem
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    -- Identity checks once per distinct combination (MATERIALIZED keeps the planner from
    -- pushing the check below the grouping, back to once per row); content and due time
    -- once per row.
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
        UNION ALL
        SELECT d.ord, pgsched.run_at_problem(d.run_at)
          FROM unnest(run_ats) WITH ORDINALITY AS d(run_at, ord)
        UNION ALL
        -- Only a batch that uses the options pays for checking them.
        SELECT o.ord, pgsched.task_options_problem(o.idempotency_key, o.run_at, o.unique_for, o.debounce,
                                                   o.traceparent, NULL)
          FROM unnest(idempotency_keys, run_ats, unique_fors, debounces, traceparents)
               WITH ORDINALITY AS o(idempotency_key, run_at, unique_for, debounce, traceparent, ord)
         WHERE unique_fors IS NOT NULL OR debounces IS NOT NULL OR traceparents IS NOT NULL
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

    IF depends_on IS NOT NULL OR on_parent_failure IS NOT NULL THEN
        IF unique_fors IS NOT NULL OR debounces IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: depends_on cannot be combined with unique_fors or debounces'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Every row waits for the same parents.
        SELECT coalesce(array_agg(p.parent_id), '{}'), coalesce(array_agg(p.met), '{}'),
               coalesce(array_agg(p.parent_status), '{}')
          INTO dep_ids, dep_met, dep_status
          FROM pgsched.task_parents_lock(
              ARRAY(SELECT DISTINCT coalesce(u, 'default') FROM unnest(coalesce(tenant_ids, ARRAY['default'])) AS u),
              coalesce(depends_on, '{}'), on_parent_failure) AS p;
        waiting := (SELECT count(*) FROM unnest(dep_met) AS m WHERE NOT m);
        SELECT array_agg(m.ordinal ORDER BY m.ordinal), array_agg(m.task_id ORDER BY m.ordinal),
               array_agg(m.created ORDER BY m.ordinal)
          INTO made_ordinals, made_ids, made_created
          FROM pgsched.task_insert_many(
              task_types, payloads, run_ats, tenant_ids, priorities, idempotency_keys,
              max_attempts, lanes, metadatas, scopes, products, t, traceparents, NULL, waiting,
              on_parent_failure) AS m;
        PERFORM pgsched.task_dependencies_link(
            ARRAY(SELECT m.id FROM unnest(made_ids, made_created) AS m(id, created) WHERE m.created),
            dep_ids, dep_met, dep_status, t);
        RETURN QUERY SELECT m.ordinal, m.id, m.created
                       FROM unnest(made_ordinals, made_ids, made_created) AS m(ordinal, id, created);
        RETURN;
    END IF;
    IF unique_fors IS NULL AND debounces IS NULL THEN
        RETURN QUERY
        SELECT * FROM pgsched.task_insert_many(
            task_types, payloads, run_ats, tenant_ids, priorities, idempotency_keys,
            max_attempts, lanes, metadatas, scopes, products, t, traceparents);
        RETURN;
    END IF;
    -- A batch with windows goes row by row, in order: a key may recur within the batch, and
    -- each call sees the ones before it.
    FOR one IN
        SELECT u.*
          FROM unnest(task_types, payloads, run_ats, tenant_ids, priorities, idempotency_keys, max_attempts,
                      lanes, metadatas, scopes, products, unique_fors, debounces, traceparents)
               WITH ORDINALITY AS u(task_type, payload, run_at, tenant_id, priority, idempotency_key, max_attempts,
                                    lane, metadata, scope, product, unique_for, debounce, traceparent, ord)
         ORDER BY u.ord
    LOOP
        IF one.unique_for IS NULL AND one.debounce IS NULL THEN
            RETURN QUERY
            SELECT one.ord, i.task_id, i.created
              FROM pgsched.task_insert_many(
                  ARRAY[one.task_type], ARRAY[one.payload], ARRAY[one.run_at], ARRAY[one.tenant_id],
                  ARRAY[one.priority], ARRAY[one.idempotency_key], ARRAY[one.max_attempts], ARRAY[one.lane],
                  ARRAY[one.metadata], ARRAY[one.scope], ARRAY[one.product], t, ARRAY[one.traceparent]) AS i;
        ELSE
            RETURN QUERY
            SELECT one.ord, i.task_id, i.created
              FROM pgsched.task_insert_windowed(
                  one.task_type, coalesce(one.payload, '{}'), one.run_at, coalesce(one.tenant_id, 'default'),
                  coalesce(one.priority, 5), one.idempotency_key, coalesce(one.max_attempts, 3), one.lane,
                  coalesce(one.metadata, '{}'), coalesce(one.scope, 'tenant'), one.product, one.unique_for,
                  one.debounce, one.traceparent, NULL, t) AS i;
        END IF;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION pgsched.schedule_tasks(text[], jsonb[], timestamp with time zone[], text[], integer[], text[], bigint[], text[], jsonb[], timestamp with time zone, text[], text[], interval[], interval[], text[], bigint[], text) IS 'Schedule many tasks in one statement: parallel arrays, one element per task (every array one-dimensional), with the checks, routing, idempotency, windows (unique_fors, debounces), trace contexts and dependencies of schedule_task; depends_on (with on_parent_failure) makes every row wait for the same parents. Returns (ordinal, task_id, created) per input row, ordinal 1-based. One bad row refuses the whole batch, naming it: row N of the batch. A batch with windows is scheduled row by row, in order.';
REVOKE ALL ON FUNCTION pgsched.schedule_tasks(text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], timestamptz, text[], text[], interval[], interval[], text[], bigint[], text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_tasks(text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], timestamptz, text[], text[], interval[], interval[], text[], bigint[], text) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Why a task's deadline is refused, or NULL (schedule_task's complete_by, deadline_callback).
CREATE OR REPLACE FUNCTION pgsched.deadline_problem(
    complete_by timestamptz, due timestamptz, deadline_callback text, windowed boolean, scope text
) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN complete_by IS NULL AND deadline_callback IS NOT NULL THEN
            'deadline_callback needs complete_by: the deadline whose miss it answers'
        WHEN NOT isfinite(complete_by) OR complete_by < '1970-01-01 00:00:00+00'
            OR complete_by >= '9999-01-01 00:00:00+00' THEN format(
            'complete_by %s is out of range (1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)', complete_by)
        WHEN complete_by <= due THEN format(
            'complete_by %s must be after the task is due (%s)', complete_by, due)
        WHEN windowed THEN 'complete_by cannot be combined with unique_for or debounce'
        WHEN coalesce(scope, 'tenant') <> 'tenant' THEN format(
            'complete_by is for a tenant''s task, not scope %s (each tenant''s child has its own run)', scope)
        WHEN deadline_callback IS NOT NULL AND deadline_callback !~ '^[A-Za-z_][A-Za-z0-9_.]{0,99}$' THEN format(
            'deadline_callback %L is not a plain identifier (a task type: letters, digits, _ and ., '
            'starting with a letter or _, at most 100 characters)', deadline_callback)
    END
$$;
COMMENT ON FUNCTION pgsched.deadline_problem(timestamp with time zone, timestamp with time zone, text, boolean, text) IS 'Why a task''s deadline is refused, or NULL: complete_by a finite time after the task is due, on a tenant''s task without unique_for or debounce; deadline_callback a task type, only with complete_by.';
REVOKE ALL ON FUNCTION pgsched.deadline_problem(timestamptz, timestamptz, text, boolean, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.deadline_problem(timestamptz, timestamptz, text, boolean, text) TO pgsched_worker, pgsched_admin;

-- Schedule one task; returns its id and whether this call created it (false: the tenant
-- already used this idempotency key, and that task's id comes back, unchanged). Same
-- arguments as schedule_task.
CREATE OR REPLACE FUNCTION pgsched.schedule_task_ex(
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
    product text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    debounce interval DEFAULT NULL,
    traceparent text DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT NULL,
    complete_by timestamptz DEFAULT NULL,
    deadline_callback text DEFAULT NULL
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
    dep_ids bigint[];
    dep_met boolean[];
    dep_status pgsched.task_status[];
    waiting integer := 0;
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
    -- The insert trigger's check, made here too: in 'functions' mode there is no trigger.
    problem := pgsched.run_at_problem(due);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: % (task_type %, tenant_id %)', problem, schedule_task_ex.task_type, owner
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF schedule_task_ex.complete_by IS NOT NULL OR schedule_task_ex.deadline_callback IS NOT NULL THEN
        problem := pgsched.deadline_problem(
            schedule_task_ex.complete_by, due, schedule_task_ex.deadline_callback,
            schedule_task_ex.unique_for IS NOT NULL OR schedule_task_ex.debounce IS NOT NULL,
            schedule_task_ex.scope);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF schedule_task_ex.depends_on IS NOT NULL OR schedule_task_ex.on_parent_failure IS NOT NULL THEN
        IF schedule_task_ex.unique_for IS NOT NULL OR schedule_task_ex.debounce IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: depends_on cannot be combined with unique_for or debounce'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT coalesce(array_agg(p.parent_id), '{}'), coalesce(array_agg(p.met), '{}'),
               coalesce(array_agg(p.parent_status), '{}')
          INTO dep_ids, dep_met, dep_status
          FROM pgsched.task_parents_lock(
              ARRAY[owner], coalesce(schedule_task_ex.depends_on, '{}'), schedule_task_ex.on_parent_failure) AS p;
        waiting := (SELECT count(*) FROM unnest(dep_met) AS m WHERE NOT m);
    END IF;
    IF schedule_task_ex.unique_for IS NOT NULL OR schedule_task_ex.debounce IS NOT NULL
       OR schedule_task_ex.traceparent IS NOT NULL OR schedule_task_ex.retry_delays IS NOT NULL THEN
        problem := pgsched.task_options_problem(
            schedule_task_ex.idempotency_key, schedule_task_ex.run_at, schedule_task_ex.unique_for,
            schedule_task_ex.debounce, schedule_task_ex.traceparent, schedule_task_ex.retry_delays);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF schedule_task_ex.unique_for IS NOT NULL OR schedule_task_ex.debounce IS NOT NULL THEN
            RETURN QUERY
            SELECT * FROM pgsched.task_insert_windowed(
                schedule_task_ex.task_type, coalesce(schedule_task_ex.payload, '{}'), schedule_task_ex.run_at,
                owner, coalesce(schedule_task_ex.priority, 5), schedule_task_ex.idempotency_key,
                coalesce(schedule_task_ex.max_attempts, 3), schedule_task_ex.lane,
                coalesce(schedule_task_ex.metadata, '{}'), coalesce(schedule_task_ex.scope, 'tenant'),
                schedule_task_ex.product, schedule_task_ex.unique_for, schedule_task_ex.debounce,
                schedule_task_ex.traceparent, schedule_task_ex.retry_delays, t);
            RETURN;
        END IF;
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
        max_attempts, idempotency_key, scope, product, created_at, updated_at, traceparent, retry_delays,
        waiting_for, on_parent_failure, complete_by, deadline_callback
    ) VALUES (
        new_id, owner, schedule_task_ex.task_type, due, coalesce(schedule_task_ex.payload, '{}'),
        coalesce(schedule_task_ex.metadata, '{}'), coalesce(schedule_task_ex.priority, 5), task_lane,
        -- Waiting for parents: the cold tier, whatever the due time.
        CASE WHEN waiting > 0 THEN 'PENDING'::pgsched.task_status ELSE pgsched.tier_status(tier) END,
        coalesce(schedule_task_ex.max_attempts, 3), schedule_task_ex.idempotency_key,
        coalesce(schedule_task_ex.scope, 'tenant'), schedule_task_ex.product, t, t,
        schedule_task_ex.traceparent, schedule_task_ex.retry_delays,
        nullif(waiting, 0), schedule_task_ex.on_parent_failure,
        schedule_task_ex.complete_by, schedule_task_ex.deadline_callback
    );
    IF dep_ids IS NOT NULL THEN
        PERFORM pgsched.task_dependencies_link(ARRAY[new_id], dep_ids, dep_met, dep_status, t);
    END IF;
    IF tier = 'IMMEDIATE' AND waiting = 0 THEN
        -- The due time: a worker's claim floor goes down to it (sql/code/claim.sql, 0046).
        PERFORM pg_notify('pgsched_' || lower(task_lane::text), extract(EPOCH FROM due)::text);
    END IF;
    RETURN QUERY SELECT new_id, TRUE;
END;
$$;
COMMENT ON FUNCTION pgsched.schedule_task_ex(text, jsonb, timestamp with time zone, text, integer, text, bigint, text, jsonb, timestamp with time zone, text, text, interval, interval, text, interval[], bigint[], text, timestamp with time zone, text) IS 'Schedule one task, as schedule_task with the same arguments; returns its id and created: false when the tenant already used this idempotency key, or the key''s unique window or debounced task is still open (that task''s id comes back; a debounced one with this call''s payload and due time).';
REVOKE ALL ON FUNCTION pgsched.schedule_task_ex(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text, interval, interval, text, interval[], bigint[], text, timestamptz, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_task_ex(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text, interval, interval, text, interval[], bigint[], text, timestamptz, text) TO pgsched_producer, pgsched_worker, pgsched_admin;

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
    product text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    debounce interval DEFAULT NULL,
    traceparent text DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT NULL,
    complete_by timestamptz DEFAULT NULL,
    deadline_callback text DEFAULT NULL
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
          schedule_task.product, schedule_task.unique_for, schedule_task.debounce, schedule_task.traceparent,
          schedule_task.retry_delays, schedule_task.depends_on, schedule_task.on_parent_failure,
          schedule_task.complete_by, schedule_task.deadline_callback) AS e
$$;
COMMENT ON FUNCTION pgsched.schedule_task(text, jsonb, timestamp with time zone, text, integer, text, bigint, text, jsonb, timestamp with time zone, text, text, interval, interval, text, interval[], bigint[], text, timestamp with time zone, text) IS 'Schedule one task; returns its id. Checks every argument (SQLSTATE 22023 naming it), routes the task by its due time (IMMEDIATE and HOT: QUEUED in the hot tier, with a NOTIFY for IMMEDIATE; COLD: PENDING in the cold tier), and honours the idempotency key per tenant: a key the tenant already used returns that task''s id and changes nothing (schedule_task_ex says which). priority 0 to 10 picks the lane (8+ HIGH, 4-7 NORMAL, 0-3 LOW); lane => ''BATCH'' asks for the BATCH lane; scope => ''product'' or ''global'' fans out to tenants when it runs. With idempotency_key, unique_for => interval makes the key name its task only for that long (a new task after), and debounce => interval makes a burst of calls one task, due debounce after the last call, with the last call''s payload. traceparent (a W3C trace context) and retry_delays (the waits after failed attempts 1, 2, ...; the last repeats) are stored with the task and handed to its worker. depends_on => ARRAY[parent ids] makes it wait, PENDING in the cold tier, until every parent completed (released exactly once, routed as if scheduled then); on_parent_failure => ''hold'' (default), ''cancel'' or ''run'' says what a parent going DEAD or CANCELLED does to it. complete_by => a time is the task''s deadline: not COMPLETED by then, the sweeper records a missed deadline (an event, pgsched_deadline_missed_total) and schedules deadline_callback, a task type, if given.';
REVOKE ALL ON FUNCTION pgsched.schedule_task(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text, interval, interval, text, interval[], bigint[], text, timestamptz, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_task(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text, interval, interval, text, interval[], bigint[], text, timestamptz, text) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Why a due time is refused, or NULL. The margins keep every reading of the value, in any
-- session time zone, inside what clients can represent (Python: years 1 to 9999).
CREATE OR REPLACE FUNCTION pgsched.run_at_problem(run_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN run_at < '1970-01-01 00:00:00+00' OR run_at >= '9999-01-01 00:00:00+00'
            OR NOT isfinite(run_at) THEN format(
            'run_at %s is out of range (1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)',
            run_at::text)
    END
$$;
COMMENT ON FUNCTION pgsched.run_at_problem(timestamp with time zone) IS 'Why a due time is refused, or NULL: it must lie in [1970-01-01, 9999-01-01) UTC, so that every reading of it, in any zone, fits a client''s datetime.';
REVOKE ALL ON FUNCTION pgsched.run_at_problem(timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.run_at_problem(timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;
