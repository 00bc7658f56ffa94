-- sql/code/claim.sql — the claim.
--
-- task_claim_many (fair, under limits, planned once per connection), task_claim_ids (the
-- Redis hot tier's claim by id), lane_priorities, lane_next_due.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- "The top of this file", which comments inside the functions below point to, is what the
-- migrations that made them said (0028, 0029, 0031 of earlier releases, in tests/fixtures/sql_v33/):
--
-- 0028 — a claim reads its candidates in index order, whatever the statistics.
--
-- The fair claim first finds each tenant's head: a skip scan that should read one entry of
-- tasks_hot_tenant_idx per tenant. With tasks_hot's statistics taken while it was empty
-- (a quiet night, then a burst scheduled ahead) the planner believed the lane held a row
-- or so, and preferred reading every row of the lane through the claim index and sorting
-- them, once for each tenant: seen at 10,000 tasks/s offered, with 50,000 tasks scheduled
-- a few seconds ahead, that query took 30 ms a claim instead of 0.45 ms, the claims fell
-- behind, and the lateness grew to a second before autovacuum's ANALYZE caught up. Which
-- of two near-equal costs won depended on the indexes' sizes, so the same burst was fast
-- in one database and slow in another.
--
-- Every read of candidates has an index that returns them in the order asked for (the
-- tenant index for the heads and the per-tenant shares, the claim index for the plain
-- order), so the claim now plans them with sorting, sequential and bitmap scans off, for
-- those statements only: work in proportion to the rows claimed, whatever the planner
-- believes. Admission and the final UPDATE are planned as before (0026). The function's
-- own SET of each setting ends what set_config(..., true) changed with the call.
--
-- 0029 — a claim's statements are planned once per connection, not at every call.
--
-- Planning was most of a small claim's cost. Measured with pg_stat_statements (track =
-- all, track_planning = on) on a claim of one row, fair lane, statistics fresh: of about
-- 1.2 ms of server time in its statements, 0.8 ms was planning them (the per-tenant
-- shares 0.30 ms, the UPDATE 0.25 ms, the head search 0.21 ms), because the function
-- plans every statement afresh (plan_cache_mode = force_custom_plan, sql/0004). At a
-- steady rate a claim takes a few dozen rows, so that fixed cost is paid per few dozen
-- tasks, and it sets how often a worker can claim, hence how late a due task starts.
--
-- Custom plans were there so that no cached plan outlives the statistics it was made
-- for. The candidate reads (sql/0028) and the final UPDATE (sql/0026) no longer depend on
-- the statistics: every access path but the one wanted is off for them. So their plans
-- are the same whatever the planner believes, and a generic plan, made once per
-- connection, is that plan. The settings and limits lookups are single-row reads. What
-- still depends on data, the admission under limits (sql/0017), is planned each call as
-- before. Only the planning changed: the plans and the rows they handle are as they were
-- (tests/test_claim_stale_statistics.py, tests/test_claim_path_explain.py).
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
-- 0046 — a claim may start its ranges at a floor (not_before), past the dead entries.
--
-- Every claim leaves its rows' entries in the claim and tenant indexes (QUEUED ->
-- PROCESSING is not a HOT update), at the start of the ranges the next claims read. Vacuum
-- removes them, and a scan marks them dead as it passes, only once no snapshot can still
-- see the rows: while a session holds an old snapshot (a REPEATABLE READ transaction left
-- open, a replica's hot_standby_feedback) they stay, and every claim visits the heap for
-- each of them. Measured with a snapshot held while 200,000 tasks were claimed and
-- finished, then 50 queued (EXPLAIN ANALYZE, BUFFERS): the head search read 3,648 buffers,
-- 200,001 heap fetches, 54 ms; a priority's range of the plain claim 3,649 buffers, 50 ms;
-- lane_next_due 46 ms. With next_run_at >= the floor, the same ranges start past the dead
-- entries: 4 buffers, 0.1 ms for the plain claim; the head search, whose tenant step cannot
-- seek on next_run_at, tests it on the index entries and fetches no dead row: 162 buffers,
-- one heap fetch, 0.4 ms.
--
-- The floor is the caller's promise that no QUEUED row of the lane is due before it: the
-- worker keeps it per lane from its own short claims (a claim that got fewer rows than it
-- asked for took every due row it could see) and lowers it when a NOTIFY says a row was
-- queued earlier (the scheduling paths send the earliest due time they queued; a wake-up
-- without one, or a reconnected listener, means unbounded), and claims unbounded now and
-- then (pgsched/worker/claim_floor.py). NULL is no floor: the claim as before. Under task
-- limits the floor is not used (rows a limit holds back stay QUEUED behind it).
--
-- The tenant step. The head search's step to the next tenant cannot seek on next_run_at, so
-- it tested the floor on every index entry of the tenant before the floor: every claim that
-- tenant had made since the oldest snapshot began (entries due at the same moment share an
-- index tuple, so it grows with the distinct due times). Measured with a snapshot held while
-- two tenants' 30,000 tasks, each due at its own time, were claimed: the claim's reads of
-- the tenant index took 232 buffers from the floor. A tenant's dead entries lie at the
-- front of each of its priorities' ranges (the earliest due, claimed first), so the step
-- now walks backward: it enters the next tenant at its last entry, live while the tenant
-- has queued work at its lowest priority in use. The head is then sought per priority from
-- the floor, in the lane's order, one descent each until one has work. The same claim: 40
-- buffers (tests/integration/test_claim_floor.py). What is left: a tenant whose lowest
-- priority in use has no queued work (gone idle, or moved to a higher priority) while the
-- snapshot is held still has its dead entries there tested one by one (index entries only,
-- no heap fetch) by each claim's step.
--
-- JIT off. While a snapshot is held, tasks_hot and its indexes grow (2 million dead
-- tuples after 18 minutes at 1,000 tasks/s), and an ANALYZE (autovacuum's, every minute
-- there) can leave statistics that price a claim's generic plans past jit_above_cost
-- (estimated 830,000 for the head search): then every call JIT-compiled them, 70 to 180 ms
-- a claim of 100 rows whose statements ran in 10 ms; the worker fell behind for the minute
-- until the next ANALYZE, and its lateness p99 reached 10 s. Nothing the hot path runs
-- reads enough rows to repay a compile: task_claim_many, task_claim_ids, lane_next_due and
-- the other hot-path functions (finish, heartbeat, rescue, promotion, insert, the
-- transitions trigger, progress) run with jit = off.

-- The priorities of a lane, highest first.
CREATE OR REPLACE FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) RETURNS integer[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE lane
        WHEN 'HIGH' THEN ARRAY[10, 9, 8]
        WHEN 'NORMAL' THEN ARRAY[7, 6, 5, 4]
        WHEN 'LOW' THEN ARRAY[3, 2, 1, 0]
        ELSE ARRAY[10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    END
$$;
COMMENT ON FUNCTION pgsched.lane_priorities(pgsched.task_lane) IS 'The priorities of a lane, highest first (the claim reads one index range per priority).';
REVOKE ALL ON FUNCTION pgsched.lane_priorities(pgsched.task_lane) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lane_priorities(pgsched.task_lane) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.task_claim_many(
    lane pgsched.task_lane,
    max_tasks integer,
    worker text,
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL,
    not_before timestamptz DEFAULT NULL
) RETURNS SETOF pgsched.tasks
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_hashjoin = FALSE
SET enable_mergejoin = FALSE
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_sort = TRUE
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    prios integer[] := pgsched.lane_priorities(task_claim_many.lane);
    fair boolean;
    limited boolean;
    -- Where every candidate range starts (see the top of this file, 0046).
    lo timestamptz;
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
    IF task_claim_many.max_tasks IS NULL OR task_claim_many.max_tasks < 0 THEN
        RAISE EXCEPTION 'pgsched: max_tasks must be 0 or more, got %', quote_nullable(task_claim_many.max_tasks)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_claim_many.lease IS NULL OR task_claim_many.lease <= INTERVAL '0'
       OR task_claim_many.lease > INTERVAL '100 years' THEN
        RAISE EXCEPTION 'pgsched: lease must be a positive interval (at most 100 years), got %',
            quote_nullable(task_claim_many.lease) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Planned once per connection (see the top of this file).
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', TRUE);
    SELECT NOT (task_claim_many.lane = ANY (s.fairness_off_lanes)) INTO fair FROM pgsched.settings AS s;
    limited := EXISTS (SELECT 1 FROM pgsched.task_limits);
    lo := CASE WHEN limited THEN '-infinity' ELSE coalesce(task_claim_many.not_before, '-infinity') END;

    IF NOT fair AND NOT limited THEN
        -- The lane's order, as 0004 claimed: one range per priority, read lazily.
        -- In index order, whatever the statistics (see the top of this file).
        PERFORM set_config('enable_sort', 'off', TRUE), set_config('enable_seqscan', 'off', TRUE),
                set_config('enable_bitmapscan', 'off', TRUE);
        SELECT coalesce(array_agg(c.id), '{}')
          INTO admitted
          FROM (
            SELECT x.id
              FROM unnest(prios) AS p (priority)
             CROSS JOIN LATERAL (
                SELECT tk.id
                  FROM pgsched.tasks AS tk
                 WHERE tk.status = 'QUEUED'
                   AND tk.lane = task_claim_many.lane
                   AND tk.priority = p.priority
                   AND tk.next_run_at <= t
                   AND tk.next_run_at >= lo
                 ORDER BY tk.next_run_at
                 LIMIT task_claim_many.max_tasks
                   FOR UPDATE SKIP LOCKED
             ) AS x
             LIMIT task_claim_many.max_tasks
        ) AS c;
    ELSE
        IF limited THEN
            -- 1. Keys with no room now are skipped by the scans below (read without locks).
            -- A tenant's room also caps its share (what it cannot take goes to the others).
            -- Planned for the limits there are, each call (sql/0017).
            PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
            SELECT coalesce(array_agg(r.key) FILTER (WHERE r.scope = 'task_type' AND r.room <= 0), '{}'),
                   coalesce(array_agg(r.key) FILTER (WHERE r.scope = 'tenant' AND r.room <= 0), '{}'),
                   coalesce(array_agg(r.key) FILTER (WHERE r.scope = 'tenant' AND r.room > 0), '{}'),
                   coalesce(array_agg(r.room) FILTER (WHERE r.scope = 'tenant' AND r.room > 0), '{}')
              INTO blocked_types, blocked_tenants, room_tenants, room_left
              FROM pgsched.limit_room(task_claim_many.max_tasks, t) AS r;
            PERFORM set_config('plan_cache_mode', 'force_generic_plan', TRUE);
        END IF;

        -- The candidates are read in index order, whatever the statistics (see the top of
        -- this file): no sort, no sequential or bitmap scan of the tier, until they are locked.
        PERFORM set_config('enable_sort', 'off', TRUE), set_config('enable_seqscan', 'off', TRUE),
                set_config('enable_bitmapscan', 'off', TRUE);

        -- 2. The candidates, locked.
        IF fair THEN
            -- The lane's tenants with queued work, the longest waiting first. The skip scan
            -- steps backward from tenant to tenant, and each tenant's head is then sought
            -- per priority from the floor (see the top of this file, "The tenant step"). A tenant whose
            -- head is not due yet may still have due work at a lower priority: it is visited
            -- last; a share it cannot use goes to the others in round two.
            WITH RECURSIVE tenants AS (
                (SELECT tk.tenant_id
                   FROM pgsched.tasks_hot AS tk
                  WHERE tk.status = 'QUEUED' AND tk.lane = task_claim_many.lane
                    -- Tested on the index entries: no heap fetch for those before it.
                    AND tk.next_run_at >= lo
                  ORDER BY tk.tenant_id DESC, tk.priority ASC, tk.next_run_at DESC
                  LIMIT 1)
                UNION ALL
                SELECT n.tenant_id
                  FROM tenants AS s
                 CROSS JOIN LATERAL (
                    SELECT tk.tenant_id
                      FROM pgsched.tasks_hot AS tk
                     WHERE tk.status = 'QUEUED' AND tk.lane = task_claim_many.lane
                       AND tk.tenant_id < s.tenant_id
                       AND tk.next_run_at >= lo
                     ORDER BY tk.tenant_id DESC, tk.priority ASC, tk.next_run_at DESC
                     LIMIT 1
                 ) AS n
            ),
            heads AS (
                SELECT s.tenant_id, hd.priority, hd.next_run_at
                  FROM tenants AS s
                 CROSS JOIN LATERAL (
                    -- The highest priority with queued work, in the lane's order.
                    SELECT x.priority, x.next_run_at
                      FROM unnest(prios) AS p (priority)
                     CROSS JOIN LATERAL (
                        SELECT tk.priority, tk.next_run_at
                          FROM pgsched.tasks_hot AS tk
                         WHERE tk.status = 'QUEUED' AND tk.lane = task_claim_many.lane
                           AND tk.tenant_id = s.tenant_id
                           AND tk.priority = p.priority
                           AND tk.next_run_at >= lo
                         ORDER BY tk.next_run_at
                         LIMIT 1
                     ) AS x
                     LIMIT 1
                 ) AS hd
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
                                                              THEN hd.due ELSE lo END
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

        -- Admission below sorts small arrays and reads the limits table: planned freely,
        -- each call.
        PERFORM set_config('enable_sort', 'on', TRUE), set_config('enable_seqscan', 'on', TRUE),
                set_config('enable_bitmapscan', 'on', TRUE),
                set_config('plan_cache_mode', 'force_custom_plan', TRUE);
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
    END IF;

    -- 5. Mark them claimed: a primary-key descent per id (see the top of this file),
    -- returned in the order admitted (the batch's round-robin), matched up by hashing.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE),
            set_config('enable_hashjoin', 'on', TRUE), set_config('enable_nestloop', 'off', TRUE),
            set_config('enable_sort', 'on', TRUE), set_config('plan_cache_mode', 'force_generic_plan', TRUE);
    RETURN QUERY
    WITH claimed AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'PROCESSING',
               attempts = tk.attempts + 1,
               locked_by = task_claim_many.worker,
               lease_token = gen_random_uuid(),
               lease_expires_at = t + task_claim_many.lease,
               last_run_at = t,
               updated_at = t,
               status_reason = NULL
         WHERE tk.id = ANY (admitted)
           -- The hot tier only (pruning), in words no partial index's predicate follows from.
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'QUEUED'
        RETURNING tk.*
    ),
    -- The claim's events when the functions write them (sql/code/transitions.sql).
    ev AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT c.id, c.tenant_id, c.task_type, 'QUEUED', 'PROCESSING',
               c.updated_at, c.next_run_at, c.attempts, c.locked_by, c.status_reason
          FROM claimed AS c
         WHERE pgsched.events_by_functions()
    )
    SELECT c.*
      FROM claimed AS c
     INNER JOIN unnest(admitted) WITH ORDINALITY AS a (id, pos) ON a.id = c.id
     ORDER BY a.pos;
END;
$$;
COMMENT ON FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamp with time zone, timestamp with time zone) IS 'A worker claims up to max_tasks due tasks of a lane: QUEUED, due by the database clock, higher priority first then earliest due, shared between tenants when the lane is fair, within the task limits; FOR UPDATE SKIP LOCKED. Each becomes PROCESSING with a lease (worker, lease token, expiry) and its attempt counted; keyed tasks whose work the ledger already holds come back with done_by set. not_before (NULL: none) is the caller''s word that no QUEUED row of the lane is due before it: the claim reads from there, past the index entries of rows claimed before (ignored while task limits exist).';
REVOKE ALL ON FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz, timestamptz) TO pgsched_worker, pgsched_admin;

-- The claim of distributed mode (sql/code/distribution.sql): one tenant's due tasks of a
-- lane, so every statement stays on the tenant's shard. Citus refuses a row lock across
-- shards (task_claim_many's walk over every tenant) and a VOLATILE function in an UPDATE
-- (the lease tokens are drawn with the lock, before it). The worker visits the lane's
-- tenants with due work in turn (pgsched/worker/tenant_rotation.py): fairness between
-- tenants holds per worker pass, not per statement. Returns the columns of the
-- task_claim_many query (sql/queries.sql), done_by included: a query wrapping this one
-- would be sent whole to the shard's node.
CREATE OR REPLACE FUNCTION pgsched.task_claim_tenant(
    tenant text,
    claim_lane pgsched.task_lane,
    max_tasks integer,
    worker text,
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (
    id bigint, task_type text, tenant_id text, payload_json text, metadata_json text,
    attempt bigint, max_attempts bigint, scheduled_for timestamptz, lane pgsched.task_lane,
    priority integer, idempotency_key text, lease_token uuid, schedule_id bigint, scope text,
    done_by bigint, traceparent text, retry_delays interval[], snoozes integer
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    picked bigint[];
    tokens uuid[];
    ev_ids bigint[];
    ev_types text[];
    ev_due timestamptz[];
    ev_attempts bigint[];
BEGIN
    IF task_claim_tenant.max_tasks IS NULL OR task_claim_tenant.max_tasks < 0 THEN
        RAISE EXCEPTION 'pgsched: max_tasks must be 0 or more, got %', quote_nullable(task_claim_tenant.max_tasks)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_claim_tenant.lease IS NULL OR task_claim_tenant.lease <= INTERVAL '0'
       OR task_claim_tenant.lease > INTERVAL '100 years' THEN
        RAISE EXCEPTION 'pgsched: lease must be a positive interval (at most 100 years), got %',
            quote_nullable(task_claim_tenant.lease) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM pgsched.task_limits) THEN
        RAISE EXCEPTION 'pgsched: task limits are not supported in distributed mode yet (docs/scaling.md); remove them with pgsched limits'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    SELECT coalesce(array_agg(x.id), '{}'), coalesce(array_agg(gen_random_uuid()), '{}')
      INTO picked, tokens
      FROM (
        SELECT tk.id
          FROM pgsched.tasks_hot AS tk
         WHERE tk.tenant_id = task_claim_tenant.tenant
           AND tk.status = 'QUEUED'
           AND tk.lane = task_claim_tenant.claim_lane
           AND tk.next_run_at <= t
         ORDER BY tk.priority DESC, tk.next_run_at
         LIMIT task_claim_tenant.max_tasks
           FOR UPDATE SKIP LOCKED
      ) AS x;
    IF cardinality(picked) = 0 THEN
        RETURN;
    END IF;
    WITH claimed AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'PROCESSING',
               attempts = tk.attempts + 1,
               locked_by = task_claim_tenant.worker,
               lease_token = c.token,
               lease_expires_at = t + task_claim_tenant.lease,
               last_run_at = t,
               updated_at = t,
               status_reason = NULL
          FROM unnest(picked, tokens) AS c (id, token)
         WHERE tk.tenant_id = task_claim_tenant.tenant
           AND tk.id = c.id
           AND tk.status = 'QUEUED'
        RETURNING tk.id, tk.task_type, tk.next_run_at, tk.attempts
    )
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.task_type), '{}'),
           coalesce(array_agg(c.next_run_at), '{}'), coalesce(array_agg(c.attempts), '{}')
      INTO ev_ids, ev_types, ev_due, ev_attempts
      FROM claimed AS c;
    -- The claim's events (this mode's audit is written by the functions), inserted as
    -- values: Citus sends them to the tenant's shard alone (an INSERT ... SELECT from
    -- tasks would be run on every shard, and fail while any worker node is down).
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT e.id, task_claim_tenant.tenant, e.task_type, 'QUEUED', 'PROCESSING',
           t, e.due, e.attempt, task_claim_tenant.worker, NULL
      FROM unnest(ev_ids, ev_types, ev_due, ev_attempts) AS e (id, task_type, due, attempt);
    RETURN QUERY
    SELECT tk.id, tk.task_type, tk.tenant_id, tk.payload::text, tk.metadata::text, tk.attempts,
           tk.max_attempts, tk.next_run_at, tk.lane, tk.priority, tk.idempotency_key, tk.lease_token,
           tk.schedule_id, tk.scope, cw.task_id, tk.traceparent, tk.retry_delays, coalesce(tk.snoozes, 0)
      FROM pgsched.tasks AS tk
      LEFT JOIN pgsched.completed_work AS cw
        ON cw.tenant_id = tk.tenant_id AND cw.task_type = tk.task_type
       AND cw.idempotency_key = tk.idempotency_key
     WHERE tk.tenant_id = task_claim_tenant.tenant AND tk.id = ANY (picked)
       AND tk.status = 'PROCESSING' AND tk.lease_token = ANY (tokens)
     ORDER BY tk.priority DESC, tk.next_run_at;
END;
$$;
COMMENT ON FUNCTION pgsched.task_claim_tenant(text, pgsched.task_lane, integer, text, interval, timestamp with time zone) IS 'Distributed mode''s claim: up to max_tasks due tasks of one tenant and lane (higher priority first, then earliest due; FOR UPDATE SKIP LOCKED), each made PROCESSING with a lease and its event written, every statement on the tenant''s shard. Returns the columns of the task_claim_many query, done_by included. Task limits are refused (not supported in distributed mode yet).';
REVOKE ALL ON FUNCTION pgsched.task_claim_tenant(text, pgsched.task_lane, integer, text, interval, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_claim_tenant(text, pgsched.task_lane, integer, text, interval, timestamptz) TO pgsched_worker, pgsched_admin;

-- The tenants of a lane with due work, read without locks (across every shard in
-- distributed mode): whom a worker's pass visits (pgsched/worker/tenant_rotation.py).
CREATE OR REPLACE FUNCTION pgsched.lane_due_tenants(lane pgsched.task_lane, max_tenants integer DEFAULT 1000)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    SELECT DISTINCT tk.tenant_id
      FROM pgsched.tasks_hot AS tk
     WHERE tk.status = 'QUEUED' AND tk.lane = lane_due_tenants.lane AND tk.next_run_at <= now()
     ORDER BY tk.tenant_id
     LIMIT lane_due_tenants.max_tenants;
END;
$$;
COMMENT ON FUNCTION pgsched.lane_due_tenants(pgsched.task_lane, integer) IS 'The tenants with due QUEUED tasks in a lane (at most max_tenants, by name), read without locks: the tenants a distributed-mode worker visits in turn.';
REVOKE ALL ON FUNCTION pgsched.lane_due_tenants(pgsched.task_lane, integer) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lane_due_tenants(pgsched.task_lane, integer) TO pgsched_worker, pgsched_admin;

-- lane_due_tenants shard by shard, for when a worker node does not answer: Citus fails a
-- read across shards when one is unreachable, and the tenants of the other nodes must
-- still be found (docs/scaling.md, "a worker node stopped"). Each shard of tasks_hot is
-- asked on its own (run_command_on_shards); the shards that answer are merged. Slower
-- than lane_due_tenants (a connection and a text result per shard): the worker calls it
-- only after lane_due_tenants failed.
CREATE OR REPLACE FUNCTION pgsched.lane_due_tenants_by_shard(lane pgsched.task_lane, max_tenants integer DEFAULT 1000)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    per_shard text := format(
        'SELECT json_agg(DISTINCT tenant_id) FROM %%s WHERE status = %L AND lane = %L AND next_run_at <= now()',
        'QUEUED', lane_due_tenants_by_shard.lane);
BEGIN
    IF NOT pgsched.distributed_mode() THEN
        RETURN QUERY SELECT * FROM pgsched.lane_due_tenants(lane_due_tenants_by_shard.lane, lane_due_tenants_by_shard.max_tenants);
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT DISTINCT t FROM run_command_on_shards($1, $2) AS r, jsonb_array_elements_text(r.result::jsonb) AS t'
        ' WHERE r.success AND r.result <> $3 ORDER BY t LIMIT $4'
        USING 'pgsched.tasks_hot', per_shard, '', lane_due_tenants_by_shard.max_tenants;
END;
$$;
COMMENT ON FUNCTION pgsched.lane_due_tenants_by_shard(pgsched.task_lane, integer) IS 'lane_due_tenants read shard by shard: the tenants of the shards that answer, when a worker node does not (distributed mode; elsewhere the same as lane_due_tenants).';
REVOKE ALL ON FUNCTION pgsched.lane_due_tenants_by_shard(pgsched.task_lane, integer) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lane_due_tenants_by_shard(pgsched.task_lane, integer) TO pgsched_worker, pgsched_admin;

-- When a lane next has work, by the database clock: the worker sleeps exactly that long.
CREATE OR REPLACE FUNCTION pgsched.lane_next_due(lane pgsched.task_lane, not_before timestamptz DEFAULT NULL)
RETURNS TABLE (next_due timestamptz, db_now timestamptz)
LANGUAGE sql STABLE
-- Not inlined into the caller (it has SET clauses), its body is planned at each call with
-- the arguments as parameters, so it is held to the claim index's order, whatever the
-- statistics: on a held horizon's statistics (few QUEUED rows, 2 million dead tuples) the
-- planner read tasks_hot's whole heap through a bitmap scan, 400 ms a call.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
    SELECT min(c.next_run_at), clock_timestamp()
      FROM unnest(pgsched.lane_priorities(lane_next_due.lane)) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT tk.next_run_at
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'QUEUED' AND tk.lane = lane_next_due.lane AND tk.priority = p.priority
           -- The claim's floor, when the caller has one (see the top of this file, 0046).
           AND tk.next_run_at >= coalesce(lane_next_due.not_before, '-infinity')
         ORDER BY tk.next_run_at
         LIMIT 1
     ) AS c
$$;
COMMENT ON FUNCTION pgsched.lane_next_due(pgsched.task_lane, timestamp with time zone) IS 'When a lane next has work, and the database''s now: the worker sleeps exactly until then. not_before (NULL: none): as task_claim_many''s, the earliest due time looked at.';
REVOKE ALL ON FUNCTION pgsched.lane_next_due(pgsched.task_lane, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.lane_next_due(pgsched.task_lane, timestamptz) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.task_claim_ids(
    lane pgsched.task_lane,
    ids bigint[],
    worker text,
    lease interval DEFAULT '30 seconds',
    as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgsched.tasks
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = TRUE
SET enable_bitmapscan = TRUE
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    locked bigint[];
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'ids must be an array of task ids, got NULL' USING ERRCODE = '22023';
    END IF;
    IF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'ids holds % ids; at most 10000 per claim', cardinality(ids)
            USING ERRCODE = '22023';
    END IF;
    IF worker IS NULL OR worker = '' THEN
        RAISE EXCEPTION 'worker must name the claiming worker' USING ERRCODE = '22023';
    END IF;
    IF lease IS NULL OR lease <= INTERVAL '0' THEN
        RAISE EXCEPTION 'lease must be a positive interval, got %', lease USING ERRCODE = '22023';
    END IF;
    IF NOT pgsched.hot_tier_lane_usable(task_claim_ids.lane) THEN
        -- Fair or limited: only task_claim_many claims here.
        RETURN;
    END IF;
    -- The ids, each found by its primary key whatever the statistics (see the top of this
    -- file), locked in the lane's order.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE);
    SELECT coalesce(array_agg(d.id), '{}')
      INTO locked
      FROM (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.id = ANY (task_claim_ids.ids)
           -- The hot tier only (pruning), in words no partial index's predicate follows from.
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'QUEUED'
           AND tk.lane = task_claim_ids.lane
           AND tk.next_run_at <= t
         ORDER BY tk.priority DESC, tk.next_run_at
           FOR UPDATE SKIP LOCKED
    ) AS d;
    -- Marked claimed the same way, returned in that order, matched up by hashing.
    PERFORM set_config('enable_nestloop', 'off', TRUE);
    RETURN QUERY
    WITH claimed AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'PROCESSING',
               attempts = tk.attempts + 1,
               locked_by = task_claim_ids.worker,
               lease_token = gen_random_uuid(),
               lease_expires_at = t + task_claim_ids.lease,
               last_run_at = t,
               updated_at = t,
               status_reason = NULL
         WHERE tk.id = ANY (locked)
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'QUEUED'
        RETURNING tk.*
    ),
    -- The claim's events when the functions write them (sql/code/transitions.sql).
    ev AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT c.id, c.tenant_id, c.task_type, 'QUEUED', 'PROCESSING',
               c.updated_at, c.next_run_at, c.attempts, c.locked_by, c.status_reason
          FROM claimed AS c
         WHERE pgsched.events_by_functions()
    )
    SELECT c.*
      FROM claimed AS c
     INNER JOIN unnest(locked) WITH ORDINALITY AS a (id, pos) ON a.id = c.id
     ORDER BY a.pos;
END;
$$;
COMMENT ON FUNCTION pgsched.task_claim_ids(pgsched.task_lane, bigint[], text, interval, timestamp with time zone) IS 'A worker claims these ids of a lane (popped from the Redis hot tier): as task_claim_many, only rows still QUEUED in that lane and due. Claims nothing on a lane where hot_tier_lane_usable is false.';
REVOKE ALL ON FUNCTION pgsched.task_claim_ids(pgsched.task_lane, bigint[], text, interval, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_claim_ids(pgsched.task_lane, bigint[], text, interval, timestamptz) TO pgsched_worker, pgsched_admin;
