-- 0014 — the bulk path names the row it refuses, and takes one-dimensional arrays only.
--
-- * A due time out of range (run_at_problem) is refused naming its row, before anything is
--   written. The insert trigger of 0011 still refuses it on every path, but it sees inserted
--   rows, not input rows, and a row whose idempotency key already existed is never
--   inserted, so a bad due time beside a duplicate key went through unnoticed.
-- * as_of, the due time of every row without a run_at, is checked the same way.
-- * A tenant the login may not act for is named by its row too.
-- * Arrays: unnest() reads a multi-dimensional array flat, so ARRAY[['a', 'b'], ['c', 'd']]
--   scheduled four tasks and the cardinality check compared element counts across shapes.
--   Every array argument must have one dimension (or none: empty or NULL), checked first.

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
    products text[] DEFAULT NULL
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
BEGIN
    SELECT a.argument, a.dimensions INTO bad
      FROM (VALUES
          (1, 'task_types', array_ndims(task_types)), (2, 'payloads', array_ndims(payloads)),
          (3, 'run_ats', array_ndims(run_ats)), (4, 'tenant_ids', array_ndims(tenant_ids)),
          (5, 'priorities', array_ndims(priorities)),
          (6, 'idempotency_keys', array_ndims(idempotency_keys)),
          (7, 'max_attempts', array_ndims(max_attempts)), (8, 'lanes', array_ndims(lanes)),
          (9, 'metadatas', array_ndims(metadatas)), (10, 'scopes', array_ndims(scopes)),
          (11, 'products', array_ndims(products))
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
       OR coalesce(cardinality(scopes), n) <> n OR coalesce(cardinality(products), n) <> n THEN
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
