-- 0017 — claims are fair across tenants within a lane; limits per task type and per tenant.
--
-- Fairness. Before, a claim took a lane's due rows by priority then due time, so a tenant
-- with a million due rows delayed every other tenant in the lane until its backlog drained.
-- Now a claim visits the lane's tenants that have queued work (a skip scan of
-- tasks_hot_tenant_idx, one probe per tenant), orders them by their head (due first,
-- then highest priority, then earliest due), and takes up to ceil(max_tasks / tenants)
-- rows from each, each tenant's rows by priority then due time as before, locked with
-- SKIP LOCKED inside the ordered scan (claims never queue behind each other). What the
-- shares leave unused goes to the tenants that filled theirs (a second round). The batch
-- is returned round-robin: every tenant's first row, then every second row... One tenant
-- (the common case) claims exactly as before. Priority orders a tenant's own work; between
-- tenants a lane's claim shares. pgsched.settings.fairness_off_lanes lists lanes that keep
-- the old order (lane_set_fairness).
--
-- Limits (pgsched.task_limits, one row per task type or tenant): at most max_processing
-- tasks PROCESSING at once, and/or at most `rate` claims per second or minute (a token
-- bucket, bursts of a tenth of the rate, at least one). A task over a limit stays QUEUED
-- with its due time unchanged: it is claimed when the limit allows, and its lateness shows.
-- Enforced across every worker by the claim itself:
--   1. without locks, read each limit's remaining room; keys with none are skipped by the
--      claim's scans (a tenant is not visited, a type is filtered);
--   2. lock the candidate rows (SKIP LOCKED);
--   3. lock the limit rows those candidates touch (FOR NO KEY UPDATE, in key order, so two
--      claims cannot deadlock) and, in a new statement (so a fresh snapshot that sees every
--      claim committed before the lock was granted), count what is PROCESSING and refill
--      the tokens;
--   4. admit candidates in order while each of their limits has room; take the tokens.
-- Claims touching the same limited key serialize on step 3 for the length of one claim;
-- claims touching no limited key take no limit lock. Limits are read on every claim:
-- a change applies to the next claim of every worker, no restart.
-- A limited type with a large due backlog in a tenant's lane is read past (filtered) by
-- that tenant's scans while the type is at its limit: give such a type its own lane or
-- tenant when its backlog is large.

ALTER TABLE pgsched.settings
ADD COLUMN fairness_off_lanes pgsched.task_lane[] NOT NULL DEFAULT '{}';

-- The per-tenant skip scan and each tenant's ordered range (priority, then due time).
-- Priority descending: a tenant's first entry is its head (highest priority, earliest due),
-- so the skip scan that finds the next tenant also reads how long it has waited.
CREATE INDEX tasks_hot_tenant_idx ON pgsched.tasks_hot (lane, tenant_id, priority DESC, next_run_at)
WHERE status = 'QUEUED';

CREATE TABLE pgsched.task_limits (
    scope text NOT NULL,
    key text NOT NULL,
    max_processing integer,
    rate integer,
    rate_period interval,
    -- The token bucket: tokens left at tokens_at (NULL: full).
    tokens double precision,
    tokens_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key),
    CONSTRAINT task_limits_scope_known CHECK (scope IN ('task_type', 'tenant')),
    CONSTRAINT task_limits_limit_something CHECK (max_processing IS NOT NULL OR rate IS NOT NULL),
    CONSTRAINT task_limits_max_processing_range CHECK (max_processing >= 0),
    CONSTRAINT task_limits_rate_range CHECK (rate >= 1),
    CONSTRAINT task_limits_rate_period_known CHECK (
        (rate IS NULL AND rate_period IS NULL)
        OR (rate IS NOT NULL AND rate_period IN ('1 second'::interval, '1 minute'::interval))
    )
);

-- Tokens a limit holds at t: refilled at rate per rate_period up to its burst.
CREATE FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamptz)
RETURNS double precision
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN l.rate IS NULL THEN NULL ELSE least(
        greatest(l.rate / 10.0, 1.0),
        coalesce(l.tokens, greatest(l.rate / 10.0, 1.0))
        + greatest(extract(EPOCH FROM t - coalesce(l.tokens_at, t)), 0)
        * l.rate / extract(EPOCH FROM l.rate_period)
    ) END
$$;

-- Each limit's room now: how many more tasks it lets a claim take (at most max_tasks).
-- Counts PROCESSING rows (tasks_hot_lease_idx covers exactly those) per limited key.
-- VOLATILE: called in its own statement, it sees what committed before that statement.
CREATE FUNCTION pgsched.limit_room(max_tasks integer, t timestamptz)
RETURNS TABLE (scope text, key text, room integer)
LANGUAGE sql
AS $$
    SELECT l.scope, l.key, least(
        max_tasks,
        -- (greatest ignores NULLs: a limit without max_processing says so explicitly)
        CASE WHEN l.max_processing IS NULL THEN max_tasks ELSE greatest(l.max_processing - r.processing, 0) END,
        coalesce(floor(pgsched.limit_tokens(l, t))::integer, max_tasks)
    )
      FROM pgsched.task_limits AS l
      LEFT JOIN LATERAL (
        SELECT count(*)::integer AS processing
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PROCESSING'
           AND CASE l.scope WHEN 'task_type' THEN tk.task_type ELSE tk.tenant_id END = l.key
      ) AS r ON l.max_processing IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION pgsched.task_claim_many(
    lane pgsched.task_lane,
    max_tasks integer,
    worker text,
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgsched.tasks
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_hashjoin = FALSE
SET enable_mergejoin = FALSE
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    prios integer[] := pgsched.lane_priorities(task_claim_many.lane);
    fair boolean;
    limited boolean;
    blocked_types text[] := '{}';
    blocked_tenants text[] := '{}';
    room_tenants text[] := '{}';
    room_left integer[] := '{}';
    tenant_order text[];
    head_priority integer[];
    head_due timestamptz[];
    quota integer;
    full_tenants text[];
    need integer;
    c_id bigint[] := '{}';
    c_type text[] := '{}';
    c_tenant text[] := '{}';
    admitted bigint[];
BEGIN
    SELECT NOT (task_claim_many.lane = ANY (s.fairness_off_lanes)) INTO fair FROM pgsched.settings AS s;
    limited := EXISTS (SELECT 1 FROM pgsched.task_limits);

    IF NOT fair AND NOT limited THEN
        -- The lane's order, as 0004 claimed: one range per priority, read lazily.
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT c.id
              FROM unnest(prios) AS p (priority)
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
        RETURN;
    END IF;

    IF limited THEN
        -- 1. Keys with no room now are skipped by the scans below (read without locks).
        -- A tenant's room also caps its share (what it cannot take goes to the others).
        SELECT coalesce(array_agg(r.key) FILTER (WHERE r.scope = 'task_type' AND r.room <= 0), '{}'),
               coalesce(array_agg(r.key) FILTER (WHERE r.scope = 'tenant' AND r.room <= 0), '{}'),
               coalesce(array_agg(r.key) FILTER (WHERE r.scope = 'tenant' AND r.room > 0), '{}'),
               coalesce(array_agg(r.room) FILTER (WHERE r.scope = 'tenant' AND r.room > 0), '{}')
          INTO blocked_types, blocked_tenants, room_tenants, room_left
          FROM pgsched.limit_room(task_claim_many.max_tasks, t) AS r;
    END IF;

    -- 2. The candidates, locked.
    IF fair THEN
        -- The lane's tenants with queued work, the longest waiting first: each step of the
        -- skip scan reads the next tenant's head. A tenant whose head is not due yet may
        -- still have due work at a lower priority: it is visited last; a share it cannot
        -- use goes to the others in round two.
        WITH RECURSIVE heads AS (
            (SELECT tk.tenant_id, tk.priority, tk.next_run_at
               FROM pgsched.tasks_hot AS tk
              WHERE tk.status = 'QUEUED' AND tk.lane = task_claim_many.lane
              ORDER BY tk.tenant_id, tk.priority DESC, tk.next_run_at
              LIMIT 1)
            UNION ALL
            SELECT n.tenant_id, n.priority, n.next_run_at
              FROM heads AS h
             CROSS JOIN LATERAL (
                SELECT tk.tenant_id, tk.priority, tk.next_run_at
                  FROM pgsched.tasks_hot AS tk
                 WHERE tk.status = 'QUEUED' AND tk.lane = task_claim_many.lane
                   AND tk.tenant_id > h.tenant_id
                 ORDER BY tk.tenant_id, tk.priority DESC, tk.next_run_at
                 LIMIT 1
             ) AS n
        )
        SELECT coalesce(array_agg(h.tenant_id ORDER BY h.next_run_at > t, h.priority DESC, h.next_run_at), '{}'),
               coalesce(array_agg(h.priority ORDER BY h.next_run_at > t, h.priority DESC, h.next_run_at), '{}'),
               coalesce(array_agg(h.next_run_at ORDER BY h.next_run_at > t, h.priority DESC, h.next_run_at), '{}')
          INTO tenant_order, head_priority, head_due
          FROM heads AS h
         WHERE h.tenant_id <> ALL (blocked_tenants);
        IF cardinality(tenant_order) = 0 THEN
            RETURN;
        END IF;

        quota := ceil(task_claim_many.max_tasks::numeric / cardinality(tenant_order));
        full_tenants := tenant_order;
        -- Round one: each tenant its share. Round two: what is left, shared by the tenants
        -- that filled their share (rows already taken are ours: skipped by id).
        FOR claim_round IN 1..2 LOOP
            WITH taken AS (
                SELECT c.id, c.task_type, c.tenant_id, c.rank, q.ord
                  FROM unnest(full_tenants) WITH ORDINALITY AS q (tenant_id, ord)
                 INNER JOIN unnest(tenant_order, head_priority, head_due) AS hd (tenant_id, priority, due)
                    ON hd.tenant_id = q.tenant_id
                  LEFT JOIN unnest(room_tenants, room_left) AS r (tenant_id, room)
                    ON r.tenant_id = q.tenant_id
                 CROSS JOIN LATERAL (
                    SELECT least(quota, r.room - cardinality(array_positions(c_tenant, q.tenant_id))) AS n
                 ) AS share
                 CROSS JOIN LATERAL (
                    SELECT y.*, row_number() OVER () AS rank
                      FROM (
                        SELECT x.id, x.task_type, x.tenant_id
                          FROM unnest(prios) AS p (priority)
                         CROSS JOIN LATERAL (
                            SELECT tk.id, tk.task_type, tk.tenant_id
                              FROM pgsched.tasks_hot AS tk
                             WHERE tk.status = 'QUEUED'
                               AND tk.lane = task_claim_many.lane
                               AND tk.tenant_id = q.tenant_id
                               AND tk.priority = p.priority
                               AND tk.next_run_at <= t
                               -- Entries before the head are dead or taken: start at it.
                               AND tk.next_run_at >= CASE WHEN p.priority = hd.priority
                                                          THEN hd.due ELSE '-infinity' END
                               AND tk.task_type <> ALL (blocked_types)
                               AND tk.id <> ALL (c_id)
                             ORDER BY tk.next_run_at
                             LIMIT share.n
                               FOR UPDATE SKIP LOCKED
                         ) AS x
                         LIMIT share.n
                    ) AS y
                 ) AS c
            )
            SELECT c_id || coalesce(array_agg(k.id ORDER BY k.rank, k.ord), '{}'),
                   c_type || coalesce(array_agg(k.task_type ORDER BY k.rank, k.ord), '{}'),
                   c_tenant || coalesce(array_agg(k.tenant_id ORDER BY k.rank, k.ord), '{}'),
                   coalesce(array_agg(DISTINCT k.tenant_id) FILTER (WHERE k.rank = quota), '{}')
              INTO c_id, c_type, c_tenant, full_tenants
              FROM taken AS k;
            need := task_claim_many.max_tasks - cardinality(c_id);
            EXIT WHEN need <= 0 OR cardinality(full_tenants) = 0;
            quota := ceil(need::numeric / cardinality(full_tenants));
        END LOOP;
    ELSE
        -- The lane's order, skipping keys with no room.
        SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.task_type), '{}'),
               coalesce(array_agg(c.tenant_id), '{}')
          INTO c_id, c_type, c_tenant
          FROM (
            SELECT x.id, x.task_type, x.tenant_id
              FROM unnest(prios) AS p (priority)
             CROSS JOIN LATERAL (
                SELECT tk.id, tk.task_type, tk.tenant_id
                  FROM pgsched.tasks_hot AS tk
                 WHERE tk.status = 'QUEUED'
                   AND tk.lane = task_claim_many.lane
                   AND tk.priority = p.priority
                   AND tk.next_run_at <= t
                   AND tk.task_type <> ALL (blocked_types)
                   AND tk.tenant_id <> ALL (blocked_tenants)
                 ORDER BY tk.next_run_at
                 LIMIT task_claim_many.max_tasks
                   FOR UPDATE SKIP LOCKED
             ) AS x
             LIMIT task_claim_many.max_tasks
        ) AS c;
    END IF;

    IF limited AND cardinality(c_id) > 0 THEN
        -- 3. Serialize with every claim touching the same limited keys; then their room.
        PERFORM 1
           FROM pgsched.task_limits AS l
          WHERE (l.scope = 'task_type' AND l.key = ANY (c_type))
             OR (l.scope = 'tenant' AND l.key = ANY (c_tenant))
          ORDER BY l.scope, l.key
            FOR NO KEY UPDATE;
        -- 4. Admit in order while each limit has room.
        SELECT coalesce(array_agg(c.id ORDER BY c.pos), '{}')
          INTO admitted
          FROM (
            SELECT c.id, c.pos, c.task_type, c.tenant_id,
                   row_number() OVER (PARTITION BY c.task_type ORDER BY c.pos) AS type_rank,
                   row_number() OVER (PARTITION BY c.tenant_id ORDER BY c.pos) AS tenant_rank
              FROM unnest(c_id, c_type, c_tenant) WITH ORDINALITY AS c (id, task_type, tenant_id, pos)
          ) AS c
          LEFT JOIN pgsched.limit_room(task_claim_many.max_tasks, t) AS rt
            ON rt.scope = 'task_type' AND rt.key = c.task_type
          LEFT JOIN pgsched.limit_room(task_claim_many.max_tasks, t) AS rn
            ON rn.scope = 'tenant' AND rn.key = c.tenant_id
         WHERE c.type_rank <= coalesce(rt.room, task_claim_many.max_tasks)
           AND c.tenant_rank <= coalesce(rn.room, task_claim_many.max_tasks)
           AND c.pos <= task_claim_many.max_tasks;
        UPDATE pgsched.task_limits AS l
           SET tokens = pgsched.limit_tokens(l, t) - a.n,
               tokens_at = greatest(t, l.tokens_at)
          FROM (
            SELECT s.scope, s.key, count(*) AS n
              FROM unnest(c_id, c_type, c_tenant) AS c (id, task_type, tenant_id)
             CROSS JOIN LATERAL (VALUES ('task_type', c.task_type), ('tenant', c.tenant_id)) AS s (scope, key)
             WHERE c.id = ANY (admitted)
             GROUP BY s.scope, s.key
          ) AS a
         WHERE l.scope = a.scope AND l.key = a.key AND l.rate IS NOT NULL;
    ELSE
        admitted := c_id[1:task_claim_many.max_tasks];
    END IF;

    RETURN QUERY
    UPDATE pgsched.tasks AS tk
       SET status = 'PROCESSING',
           attempts = tk.attempts + 1,
           locked_by = task_claim_many.worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = t + task_claim_many.lease,
           last_run_at = t,
           updated_at = t,
           status_reason = NULL
      FROM unnest(admitted) AS a (id)
     WHERE tk.id = a.id AND tk.status = 'QUEUED'
    RETURNING tk.*;
END;
$$;

-- Set (or replace) the limits of one task type or tenant. A field is refused with 22023
-- naming it, and nothing is written.
CREATE FUNCTION pgsched.limit_set(
    scope text,
    key text,
    max_processing integer DEFAULT NULL,
    rate integer DEFAULT NULL,
    per text DEFAULT 'second'
) RETURNS pgsched.task_limits
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved pgsched.task_limits;
    period interval;
BEGIN
    IF limit_set.scope IS NULL OR limit_set.scope NOT IN ('task_type', 'tenant') THEN
        RAISE EXCEPTION 'scope must be task_type or tenant, got %', coalesce(limit_set.scope, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.key IS NULL OR limit_set.key = '' OR length(limit_set.key) > 200 THEN
        RAISE EXCEPTION 'key must be 1 to 200 characters (the % it limits)', limit_set.scope
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.max_processing IS NULL AND limit_set.rate IS NULL THEN
        RAISE EXCEPTION 'max_processing or rate must be given (limit_clear removes a limit)'
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.max_processing < 0 OR limit_set.max_processing > 1000000 THEN
        RAISE EXCEPTION 'max_processing must be 0 to 1000000, got %', limit_set.max_processing
            USING ERRCODE = '22023';
    END IF;
    IF limit_set.rate < 1 OR limit_set.rate > 1000000 THEN
        RAISE EXCEPTION 'rate must be 1 to 1000000, got %', limit_set.rate
            USING ERRCODE = '22023';
    END IF;
    period := CASE limit_set.per WHEN 'second' THEN INTERVAL '1 second' WHEN 'minute' THEN INTERVAL '1 minute' END;
    IF limit_set.rate IS NOT NULL AND period IS NULL THEN
        RAISE EXCEPTION 'per must be second or minute, got %', coalesce(limit_set.per, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgsched.task_limits AS l (scope, key, max_processing, rate, rate_period)
    VALUES (
        limit_set.scope, limit_set.key, limit_set.max_processing, limit_set.rate,
        CASE WHEN limit_set.rate IS NOT NULL THEN period END
    )
    ON CONFLICT ON CONSTRAINT task_limits_pkey DO UPDATE
       SET max_processing = excluded.max_processing,
           rate = excluded.rate,
           rate_period = excluded.rate_period,
           -- A new rate starts with a full bucket; an unchanged one keeps its tokens.
           tokens = CASE WHEN (l.rate, l.rate_period) IS NOT DISTINCT FROM (excluded.rate, excluded.rate_period)
                         THEN l.tokens END,
           tokens_at = CASE WHEN (l.rate, l.rate_period) IS NOT DISTINCT FROM (excluded.rate, excluded.rate_period)
                            THEN l.tokens_at END,
           updated_at = now()
    RETURNING * INTO saved;
    RETURN saved;
END;
$$;

-- Remove the limits of one task type or tenant; false when it had none.
CREATE FUNCTION pgsched.limit_clear(scope text, key text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF limit_clear.scope IS NULL OR limit_clear.scope NOT IN ('task_type', 'tenant') THEN
        RAISE EXCEPTION 'scope must be task_type or tenant, got %', coalesce(limit_clear.scope, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM pgsched.task_limits AS l WHERE l.scope = limit_clear.scope AND l.key = limit_clear.key;
    RETURN FOUND;
END;
$$;

-- Every limit, with what is PROCESSING under it now.
CREATE FUNCTION pgsched.limit_list()
RETURNS TABLE (
    scope text, key text, max_processing integer, rate integer, per text, processing integer,
    updated_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.scope, l.key, l.max_processing, l.rate,
           CASE l.rate_period WHEN INTERVAL '1 second' THEN 'second' WHEN INTERVAL '1 minute' THEN 'minute' END,
           (SELECT count(*)::integer
              FROM pgsched.tasks AS tk
             WHERE tk.status = 'PROCESSING'
               AND CASE l.scope WHEN 'task_type' THEN tk.task_type ELSE tk.tenant_id END = l.key),
           l.updated_at
      FROM pgsched.task_limits AS l
     ORDER BY l.scope, l.key
$$;

-- Turn fair claims on or off for one lane (on by default).
CREATE FUNCTION pgsched.lane_set_fairness(lane pgsched.task_lane, fair boolean) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lane_set_fairness.lane IS NULL OR lane_set_fairness.fair IS NULL THEN
        RAISE EXCEPTION 'lane and fair must be given' USING ERRCODE = '22023';
    END IF;
    UPDATE pgsched.settings AS s
       SET fairness_off_lanes = CASE WHEN lane_set_fairness.fair
           THEN array_remove(s.fairness_off_lanes, lane_set_fairness.lane)
           ELSE array_append(array_remove(s.fairness_off_lanes, lane_set_fairness.lane), lane_set_fairness.lane)
           END;
    RETURN lane_set_fairness.fair;
END;
$$;

REVOKE ALL ON TABLE pgsched.task_limits FROM public;
GRANT SELECT ON TABLE pgsched.task_limits TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_limits TO pgsched_admin;
REVOKE EXECUTE ON FUNCTION
pgsched.limit_tokens(pgsched.task_limits, timestamptz),
pgsched.limit_room(integer, timestamptz),
pgsched.limit_set(text, text, integer, integer, text),
pgsched.limit_clear(text, text),
pgsched.limit_list(),
pgsched.lane_set_fairness(pgsched.task_lane, boolean)
FROM public;
GRANT EXECUTE ON FUNCTION
pgsched.limit_tokens(pgsched.task_limits, timestamptz),
pgsched.limit_room(integer, timestamptz),
pgsched.limit_list()
TO pgsched_worker, pgsched_admin;
GRANT EXECUTE ON FUNCTION
pgsched.limit_set(text, text, integer, integer, text),
pgsched.limit_clear(text, text),
pgsched.lane_set_fairness(pgsched.task_lane, boolean)
TO pgsched_admin;
