-- sql/code/workflows.sql — workflows: dependencies, failure policy, results, workflows in
-- one call and batches.
--
-- task_parents_lock (a new task's parents checked and held still while it is written),
-- task_dependencies_link (its edges and hold events), task_dependencies_settle (what a
-- parent finishing does to what waits for it: release, hold, cascade), the statement
-- trigger that calls it in the parent's own transaction, task_result and the outcome a
-- waiting App.result reads (task_outcome, task_result_unwait); schedule_workflow (named steps
-- in one transaction) and schedule_batch (members and a callback, batch_status).
--
-- Exactly once: each edge is met once (an UPDATE of the edge row where NOT met), and the
-- child's waiting_for is decremented by an UPDATE of the child's row, under its row lock,
-- in the transaction that finishes the parent. Two parents finishing at once in different
-- transactions serialize on that row; the one that takes waiting_for to zero releases the
-- child, and no other can (a later one finds no unmet edge of its own).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Workflows (depends_on, schedule_workflow, schedule_batch) are not built for distributed
-- mode: their edges live on the coordinator and their checks lock and join tasks by id
-- across tenants, which Citus refuses. Refused at once, with nothing written, in words.
CREATE OR REPLACE FUNCTION pgsched.workflows_refuse_when_distributed() RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF pgsched.distributed_mode() THEN
        RAISE EXCEPTION 'pgsched: depends_on, workflows and batches are not supported on a distributed database yet (docs/scaling.md)'
            USING ERRCODE = 'feature_not_supported';
    END IF;
END;
$$;
COMMENT ON FUNCTION pgsched.workflows_refuse_when_distributed() IS 'Raises feature_not_supported (0A000) on a distributed database: depends_on, schedule_workflow and schedule_batch are not supported there yet.';
REVOKE ALL ON FUNCTION pgsched.workflows_refuse_when_distributed() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.workflows_refuse_when_distributed() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- A new task's parents: each must exist, belong to the new task's tenant (or be global),
-- not be CANCELLED, and not be DEAD for a child that would be cancelled. Each is locked
-- (FOR SHARE) until the caller commits, so a parent cannot finish between this check and
-- the edge being written. Returns each parent once with whether its edge is met already
-- (COMPLETED, or DEAD for a child that runs anyway) and its status.
CREATE OR REPLACE FUNCTION pgsched.task_parents_lock(
    owners text[], depends_on bigint[], on_parent_failure text
) RETURNS TABLE (parent_id bigint, met boolean, parent_status pgsched.task_status)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wanted bigint[];
    ids bigint[];
    statuses pgsched.task_status[];
    tenants text[];
    scopes text[];
    owner_tenants text[];
    bad record;
BEGIN
    PERFORM pgsched.workflows_refuse_when_distributed();
    IF array_ndims(depends_on) > 1 THEN
        RAISE EXCEPTION 'pgsched: depends_on must be a one-dimensional array of task ids'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(depends_on, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: depends_on holds a NULL task id' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_parent_failure IS NOT NULL AND on_parent_failure NOT IN ('hold', 'cancel', 'run') THEN
        RAISE EXCEPTION 'pgsched: %', format('on_parent_failure %L is not one of hold, cancel, run', on_parent_failure)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    wanted := ARRAY(SELECT DISTINCT d FROM unnest(depends_on) AS d ORDER BY d);
    IF cardinality(wanted) > 100000 THEN
        RAISE EXCEPTION 'pgsched: depends_on names % tasks, over the limit of 100000 (use schedule_batch)',
            cardinality(wanted) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR attempt IN 1..5 LOOP
        BEGIN
            SELECT coalesce(array_agg(x.id ORDER BY x.id), '{}'), array_agg(x.status ORDER BY x.id),
                   array_agg(x.tenant_id ORDER BY x.id), array_agg(x.scope ORDER BY x.id)
              INTO ids, statuses, tenants, scopes
              FROM (SELECT tk.id, tk.status, tk.tenant_id, tk.scope
                      FROM pgsched.tasks AS tk
                     WHERE tk.id = ANY (wanted)
                     ORDER BY tk.id
                       FOR SHARE) AS x;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            -- A parent moved partitions (it finished) while we waited: read it again.
            IF attempt = 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
    -- Both checks are joins, not a comparison of every parent with every other: once the
    -- session's plan for them is generic, `<> ALL (array)` is not hashed, and 30,000
    -- parents took 21 s.
    IF cardinality(ids) < cardinality(wanted) THEN
        SELECT w.id INTO bad
          FROM unnest(wanted) AS w(id)
          LEFT JOIN unnest(ids) AS found(id) ON found.id = w.id
         WHERE found.id IS NULL
         ORDER BY w.id
         LIMIT 1;
        RAISE EXCEPTION 'pgsched: depends_on: task % does not exist', bad.id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    owner_tenants := ARRAY(SELECT DISTINCT o.tenant_id FROM unnest(owners) AS o(tenant_id));
    SELECT p.id, p.status, p.tenant_id INTO bad
      FROM unnest(ids, statuses, tenants, scopes) AS p(id, status, tenant_id, scope)
     WHERE (p.scope <> 'global'
            AND (cardinality(owner_tenants) > 1
                 OR (cardinality(owner_tenants) = 1 AND p.tenant_id <> owner_tenants[1])))
        OR p.status = 'CANCELLED'
        OR (p.status = 'FAILED' AND on_parent_failure = 'cancel')
     ORDER BY p.id
     LIMIT 1;
    IF FOUND THEN
        IF bad.status = 'CANCELLED' THEN
            RAISE EXCEPTION 'pgsched: depends_on: task % was cancelled; nothing can wait for it', bad.id
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF bad.status = 'FAILED' AND on_parent_failure = 'cancel' THEN
            RAISE EXCEPTION 'pgsched: depends_on: task % is DEAD, and on_parent_failure cancel would cancel this task at once', bad.id
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Say no without naming the other tenant.
        RAISE EXCEPTION 'pgsched: depends_on: task % belongs to another tenant (a parent is of the same tenant, or global)', bad.id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    SELECT p.id, p.status = 'COMPLETED' OR (p.status = 'FAILED' AND on_parent_failure = 'run'), p.status
      FROM unnest(ids, statuses) AS p(id, status);
END;
$$;
COMMENT ON FUNCTION pgsched.task_parents_lock(text[], bigint[], text) IS 'A new task''s parents (depends_on) checked and locked FOR SHARE until the caller commits: each exists, is of the new task''s tenant or global, is not CANCELLED (nor DEAD for on_parent_failure cancel). Returns (parent_id, met, parent_status), each parent once.';
REVOKE ALL ON FUNCTION pgsched.task_parents_lock(text[], bigint[], text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_parents_lock(text[], bigint[], text) TO pgsched_admin;

-- The edges of new children to their (locked) parents, and a hold event for each child
-- whose parent is DEAD already.
CREATE OR REPLACE FUNCTION pgsched.task_dependencies_link(
    child_ids bigint[], parent_ids bigint[], parent_met boolean[], parent_statuses pgsched.task_status[],
    as_of timestamptz
) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pgsched.task_dependencies (parent_id, child_id, met, created_at)
    SELECT p.id, c.id, p.met, as_of
      FROM unnest(child_ids) AS c(id)
     CROSS JOIN unnest(parent_ids, parent_met) AS p(id, met);
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, as_of, tk.next_run_at, tk.attempts,
           NULL, format('held: parent task %s is DEAD', p.id)
      FROM unnest(parent_ids, parent_met, parent_statuses) AS p(id, met, status)
      JOIN pgsched.tasks AS tk ON tk.id = ANY (child_ids) AND tk.status = 'PENDING'
     WHERE p.status = 'FAILED' AND NOT p.met;
$$;
COMMENT ON FUNCTION pgsched.task_dependencies_link(bigint[], bigint[], boolean[], pgsched.task_status[], timestamp with time zone) IS 'Writes the edges of new child tasks to their parents (checked by task_parents_lock) and a hold event on each child for a parent already DEAD.';
REVOKE ALL ON FUNCTION pgsched.task_dependencies_link(bigint[], bigint[], boolean[], pgsched.task_status[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_dependencies_link(bigint[], bigint[], boolean[], pgsched.task_status[], timestamptz) TO pgsched_admin;

-- What parents finishing (COMPLETED, FAILED = DEAD, CANCELLED) do to the tasks waiting for
-- them, by each child's on_parent_failure: a completed parent's edge is met (so is a failed
-- one's for `run`); a child whose last edge is met is released, routed as if scheduled now
-- (its own run_at if later); `hold` leaves the child waiting with an event saying why;
-- `cancel` cancels it, and what waits for it in turn, a generation a round (no recursion,
-- however deep the graph). Children are locked in id order. Returns how many were released.
--
-- Every read here starts from the parents just finished (a few hundred for a worker's
-- flush) and goes by key: their edges by task_dependencies' key, a parent at a time, then
-- their children by id. Left to the statistics, a table the planner believes empty (just
-- truncated, or a million-member batch written since the last ANALYZE) made it start from
-- the PENDING children instead and read every edge of the callback for each parent: 75 s
-- for one flush of 250 members of a 300,000-member batch, every other finish queued
-- behind it on the callback's row lock. Hence the LATERAL ... OFFSET 0 (the order kept)
-- and enable_seqscan off (a key read even where a scan looks cheaper).
CREATE OR REPLACE FUNCTION pgsched.task_dependencies_settle(
    parent_ids bigint[], parent_statuses pgsched.task_status[], as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
SET enable_mergejoin = TRUE
SET enable_seqscan = FALSE
SET enable_bitmapscan = TRUE
SET enable_sort = TRUE
-- With sequential scans off, a read of a one-row table (pgsched.settings) is costed past
-- jit_above_cost: JIT compiled it at every call, 150 ms a finish of a chain's link.
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, clock_timestamp());
    h record;
    ids bigint[] := parent_ids;
    statuses pgsched.task_status[] := parent_statuses;
    l_child bigint[];
    l_policy text[];
    e_tid tid[];
    e_parent bigint[];
    e_child bigint[];
    e_status pgsched.task_status[];
    e_policy text[];
    cancelled_ids bigint[];
    released bigint := 0;
    n bigint;
    wake pgsched.task_lane[];
    all_wake pgsched.task_lane[] := '{}';
BEGIN
    -- The children's own updates fire the trigger again: this loop handles them instead.
    PERFORM set_config('pgsched.settling', 'on', TRUE);
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    WHILE cardinality(ids) > 0 LOOP
        -- The parents' unmet edges, a parent at a time by the edges' key.
        SELECT coalesce(array_agg(d.parent_id), '{}'), coalesce(array_agg(d.child_id), '{}'),
               coalesce(array_agg(p.status), '{}'), coalesce(array_agg(d.tid), '{}')
          INTO e_parent, e_child, e_status, e_tid
          FROM unnest(ids, statuses) AS p(id, status)
         CROSS JOIN LATERAL (SELECT d1.parent_id, d1.child_id, d1.ctid AS tid FROM pgsched.task_dependencies AS d1
                              WHERE d1.parent_id = p.id AND NOT d1.met
                             OFFSET 0) AS d;
        EXIT WHEN cardinality(e_child) = 0;
        -- Their children still PENDING, locked in id order (re-checked once locked).
        SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}'),
               coalesce(array_agg(coalesce(c.on_parent_failure, 'hold') ORDER BY c.id), '{}')
          INTO l_child, l_policy
          FROM (SELECT tk.id, tk.on_parent_failure FROM pgsched.tasks AS tk
                 WHERE tk.id = ANY (ARRAY(SELECT DISTINCT u.id FROM unnest(e_child) AS u(id)))
                   AND tk.status = 'PENDING'
                 ORDER BY tk.id
                   FOR UPDATE) AS c;
        SELECT coalesce(array_agg(e.parent_id ORDER BY e.child_id, e.parent_id), '{}'),
               coalesce(array_agg(e.child_id ORDER BY e.child_id, e.parent_id), '{}'),
               coalesce(array_agg(e.status ORDER BY e.child_id, e.parent_id), '{}'),
               coalesce(array_agg(l.policy ORDER BY e.child_id, e.parent_id), '{}'),
               coalesce(array_agg(e.tid ORDER BY e.child_id, e.parent_id), '{}')
          INTO e_parent, e_child, e_status, e_policy, e_tid
          FROM unnest(e_parent, e_child, e_status, e_tid) AS e(parent_id, child_id, status, tid)
          JOIN unnest(l_child, l_policy) AS l(id, policy) ON l.id = e.child_id;
        EXIT WHEN cardinality(e_child) = 0;

        -- Met: a completed parent, or a failed one of a child that runs anyway. By the rows'
        -- addresses read above (only this transaction, which holds the parents, changes
        -- their edges): an index of the child would read the whole batch for each edge.
        UPDATE pgsched.task_dependencies AS d
           SET met = TRUE
         WHERE d.ctid = ANY (ARRAY(
                   SELECT e.tid FROM unnest(e_tid, e_status, e_policy) AS e(tid, status, policy)
                    WHERE e.status = 'COMPLETED' OR e.policy = 'run'))
           AND NOT d.met;

        WITH counted AS (
            SELECT e.child_id, count(*) AS k, max(e.parent_id) AS last_parent,
                   count(*) FILTER (WHERE e.status = 'COMPLETED') AS k_completed,
                   count(*) FILTER (WHERE e.status = 'FAILED') AS k_dead,
                   count(*) FILTER (WHERE e.status = 'CANCELLED') AS k_cancelled,
                   bool_and(e.status = 'COMPLETED') AS all_completed,
                   (array_agg(e.status ORDER BY e.parent_id DESC))[1] AS last_status
              FROM unnest(e_parent, e_child, e_status, e_policy) AS e(parent_id, child_id, status, policy)
             WHERE e.status = 'COMPLETED' OR e.policy = 'run'
             GROUP BY e.child_id
        ),
        changed AS (
            UPDATE pgsched.tasks AS tk
               SET waiting_for = nullif(greatest(tk.waiting_for - c.k, 0), 0),
                   -- By outcome, for a batch's progress (the dashboard): on this row, in
                   -- this UPDATE, so a finishing parent writes nothing more.
                   parents_completed = nullif(coalesce(tk.parents_completed, 0) + c.k_completed, 0),
                   parents_dead = nullif(coalesce(tk.parents_dead, 0) + c.k_dead, 0),
                   parents_cancelled = nullif(coalesce(tk.parents_cancelled, 0) + c.k_cancelled, 0),
                   status = CASE WHEN tk.waiting_for - c.k > 0 THEN tk.status
                                 ELSE pgsched.tier_status(pgsched.tier_of(
                                     greatest(tk.next_run_at, t), h.immediate_until, h.hot_until)) END,
                   next_run_at = CASE WHEN tk.waiting_for - c.k > 0 THEN tk.next_run_at
                                      ELSE greatest(tk.next_run_at, t) END,
                   status_reason = CASE WHEN tk.waiting_for - c.k > 0 THEN tk.status_reason
                                        WHEN c.all_completed
                                            THEN format('released: parent task %s completed', c.last_parent)
                                        ELSE format('released: parent task %s is %s (on_parent_failure run)',
                                                    c.last_parent,
                                                    CASE WHEN c.last_status = 'FAILED' THEN 'DEAD'
                                                         ELSE c.last_status::text END) END,
                   updated_at = CASE WHEN tk.waiting_for - c.k > 0 THEN tk.updated_at ELSE t END
              FROM counted AS c
             WHERE tk.id = c.child_id AND tk.status = 'PENDING'
            RETURNING tk.id, tk.tenant_id, tk.task_type, tk.status, tk.next_run_at, tk.attempts, tk.lane,
                      tk.waiting_for, tk.status_reason, tk.locked_by
        ),
        -- Released into the cold tier (its run_at is beyond the hot window): no status
        -- changes, so the release is recorded here; released into the hot tier, the
        -- trigger records the move, or this does when the functions write the events
        -- (sql/code/transitions.sql).
        cold AS (
            INSERT INTO pgsched.task_events (
                task_id, tenant_id, task_type, from_status, to_status,
                occurred_at, scheduled_for, attempt, worker, detail
            )
            SELECT x.id, x.tenant_id, x.task_type, 'PENDING', x.status, t, x.next_run_at, x.attempts,
                   CASE WHEN x.status <> 'PENDING' THEN x.locked_by END, x.status_reason
              FROM changed AS x
             WHERE x.waiting_for IS NULL AND (x.status = 'PENDING' OR pgsched.events_by_functions())
        )
        SELECT count(*) FILTER (WHERE x.waiting_for IS NULL),
               coalesce(array_agg(DISTINCT x.lane) FILTER (
                   WHERE x.waiting_for IS NULL AND x.status = 'QUEUED'
                     AND pgsched.tier_of(x.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
          INTO n, wake
          FROM changed AS x;
        released := released + n;
        all_wake := all_wake || wake;

        -- Held: the child waits on (for the parent's retry from the DEAD lane).
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at, tk.attempts, NULL,
               format('held: parent task %s is %s', e.parent_id,
                      CASE WHEN e.status = 'FAILED' THEN 'DEAD' ELSE e.status::text END)
          FROM unnest(e_parent, e_child, e_status, e_policy) AS e(parent_id, child_id, status, policy)
          JOIN pgsched.tasks AS tk ON tk.id = e.child_id AND tk.status = 'PENDING'
         WHERE e.status <> 'COMPLETED' AND e.policy = 'hold';

        -- Cancelled: the next round applies their children's policies in turn.
        WITH gone AS (
            UPDATE pgsched.tasks AS tk
               SET status = 'CANCELLED', updated_at = t,
                   status_reason = format('cancelled: parent task %s is %s (on_parent_failure cancel)',
                                          e.parent_id,
                                          CASE WHEN e.status = 'FAILED' THEN 'DEAD' ELSE e.status::text END)
              FROM (SELECT u.child_id, min(u.parent_id) AS parent_id, min(u.status) AS status
                      FROM unnest(e_parent, e_child, e_status, e_policy) AS u(parent_id, child_id, status, policy)
                     WHERE u.status <> 'COMPLETED' AND u.policy = 'cancel'
                     GROUP BY u.child_id) AS e
             WHERE tk.id = e.child_id AND tk.status = 'PENDING'
            RETURNING tk.id, tk.tenant_id, tk.task_type, tk.updated_at, tk.next_run_at, tk.attempts,
                      tk.locked_by, tk.status_reason
        ),
        -- The cancels' events when the functions write them (sql/code/transitions.sql).
        ev AS (
            INSERT INTO pgsched.task_events (
                task_id, tenant_id, task_type, from_status, to_status,
                occurred_at, scheduled_for, attempt, worker, detail
            )
            SELECT g.id, g.tenant_id, g.task_type, 'PENDING', 'CANCELLED',
                   g.updated_at, g.next_run_at, g.attempts, g.locked_by, g.status_reason
              FROM gone AS g
             WHERE pgsched.events_by_functions()
        )
        SELECT coalesce(array_agg(g.id), '{}') INTO cancelled_ids FROM gone AS g;
        ids := cancelled_ids;
        statuses := array_fill('CANCELLED'::pgsched.task_status, ARRAY[cardinality(cancelled_ids)]);
    END LOOP;
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM (SELECT DISTINCT u AS w FROM unnest(all_wake) AS u) AS x;
    PERFORM set_config('pgsched.settling', '', TRUE);
    RETURN released;
END;
$$;
COMMENT ON FUNCTION pgsched.task_dependencies_settle(bigint[], pgsched.task_status[], timestamp with time zone) IS 'What parents finishing (COMPLETED, FAILED, CANCELLED) do to the tasks waiting for them, in the parents'' transaction: meets their edges, releases each child whose last edge is met (routed as if scheduled now), holds (an event) or cancels (and cascades) by the child''s on_parent_failure. Returns how many children were released.';
REVOKE ALL ON FUNCTION pgsched.task_dependencies_settle(bigint[], pgsched.task_status[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_dependencies_settle(bigint[], pgsched.task_status[], timestamptz) TO pgsched_admin;

-- What tasks that just finished (COMPLETED, FAILED, CANCELLED) owe those waiting for them:
-- a NOTIFY for a waiting App.result, and the settling of their children. Called by the
-- statement trigger below, or, when the functions write the events (sql/code/
-- transitions.sql), by each function that finishes tasks. While no App.result waits and
-- task_dependencies holds no edge (an install that runs no workflows), that is two index
-- probes a statement, whatever its tasks; otherwise one lookup a task in each table that
-- has rows (benchmarks/RESULTS.md, "Finishing with nobody waiting").
CREATE OR REPLACE FUNCTION pgsched.task_settle_finished(
    ids bigint[], statuses pgsched.task_status[]
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_nestloop = TRUE
SET enable_hashjoin = TRUE
SET enable_seqscan = FALSE
SET enable_bitmapscan = TRUE
SET jit = off  -- see task_dependencies_settle
AS $$
BEGIN
    -- A cascade's own cancels are settled by the loop that makes them.
    IF ids IS NULL OR cardinality(ids) = 0 OR current_setting('pgsched.settling', TRUE) = 'on' THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM pgsched.task_result_waiters) THEN
        PERFORM pg_notify('pgsched_result', w.task_id::text)
           FROM (SELECT DISTINCT r.task_id FROM pgsched.task_result_waiters AS r WHERE r.task_id = ANY (ids)) AS w;
    END IF;
    -- One probe of the edges' key per finished task, whatever the statistics say (a
    -- sequential scan looking for the first match read every waiting edge at each finish),
    -- and only where there are edges at all: met ones stay until retention, so an install
    -- that runs workflows always pays these probes, one that does not never does.
    IF EXISTS (SELECT 1 FROM pgsched.task_dependencies)
       AND EXISTS (SELECT 1
                     FROM unnest(ids) AS p(id)
                     CROSS JOIN LATERAL (SELECT 1 FROM pgsched.task_dependencies AS d
                                          WHERE d.parent_id = p.id AND NOT d.met LIMIT 1) AS e) THEN
        PERFORM pgsched.task_dependencies_settle(ids, statuses);
    END IF;
END;
$$;
COMMENT ON FUNCTION pgsched.task_settle_finished(bigint[], pgsched.task_status[]) IS 'For tasks that just finished (COMPLETED, FAILED, CANCELLED; ids with their statuses): notifies a waiting App.result (pgsched_result) and settles what waits for them (task_dependencies_settle), in the same transaction.';
REVOKE ALL ON FUNCTION pgsched.task_settle_finished(bigint[], pgsched.task_status[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_settle_finished(bigint[], pgsched.task_status[]) TO pgsched_worker, pgsched_admin;

-- The statement trigger (trigger mode: sql/code/transitions.sql) that calls it for the
-- tasks a statement finished. While nothing waits (task_settle_finished), a statement
-- costs its two probes and no look at its rows; otherwise a statement that finishes none
-- costs one scan of its new rows.
CREATE OR REPLACE FUNCTION pgsched.task_settle_dependents() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = FALSE  -- the probes below read the indexes, however few the rows
SET jit = off  -- see task_dependencies_settle
AS $$
DECLARE
    ids bigint[];
    statuses pgsched.task_status[];
BEGIN
    IF current_setting('pgsched.settling', TRUE) = 'on' THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgsched.task_result_waiters)
       AND NOT EXISTS (SELECT 1 FROM pgsched.task_dependencies) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM new_rows AS n WHERE n.status IN ('COMPLETED', 'FAILED', 'CANCELLED')) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id), array_agg(n.status) INTO ids, statuses
      FROM new_rows AS n
      JOIN old_rows AS o ON o.id = n.id
     WHERE n.status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND o.status IS DISTINCT FROM n.status;
    PERFORM pgsched.task_settle_finished(ids, statuses);
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION pgsched.task_settle_dependents() IS 'Statement trigger on pgsched.tasks (trigger mode): for tasks that just finished (COMPLETED, FAILED, CANCELLED), task_settle_finished, in the same transaction.';
REVOKE ALL ON FUNCTION pgsched.task_settle_dependents() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_settle_dependents() TO pgsched_worker, pgsched_admin;

-- The trigger is there in trigger mode only: audit_writer_apply (sql/code/transitions.sql)
-- makes it.
SELECT pgsched.audit_writer_apply();

-- Results --------------------------------------------------------------------------------

-- A task's stored result; NULL until it completes (or when its handler returned nothing).
CREATE OR REPLACE FUNCTION pgsched.task_result(task_id bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tk record;
BEGIN
    SELECT x.tenant_id, x.status, x.result INTO tk FROM pgsched.tasks AS x WHERE x.id = task_result.task_id;
    IF NOT FOUND OR pgsched.producer_tenant_problem(ARRAY[tk.tenant_id]) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: no task with id %', task_result.task_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN CASE WHEN tk.status = 'COMPLETED' THEN tk.result END;
END;
$$;
COMMENT ON FUNCTION pgsched.task_result(bigint) IS 'A task''s result: its handler''s return value (JSON) once it COMPLETED, NULL before (or when the handler returned nothing). Expires with the task under retention.';
REVOKE ALL ON FUNCTION pgsched.task_result(bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_result(bigint) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Where a task stands, for a caller waiting for its result; with a token, the caller is
-- registered as waiting (task_result_waiters) when the task has not finished, so that its
-- finishing sends NOTIFY pgsched_result with its id. LISTEN before calling.
CREATE OR REPLACE FUNCTION pgsched.task_outcome(task_id bigint, wait_token uuid DEFAULT NULL)
RETURNS TABLE (status pgsched.task_status, result jsonb, reason text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tk record;
BEGIN
    SELECT x.tenant_id, x.status, x.result, coalesce(x.status_reason, x.last_error) AS reason INTO tk
      FROM pgsched.tasks AS x WHERE x.id = task_outcome.task_id;
    IF NOT FOUND OR pgsched.producer_tenant_problem(ARRAY[tk.tenant_id]) IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: no task with id %', task_outcome.task_id
            USING ERRCODE = 'no_data_found';
    END IF;
    IF wait_token IS NOT NULL AND tk.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
        INSERT INTO pgsched.task_result_waiters (task_id, token)
        VALUES (task_outcome.task_id, wait_token)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN QUERY SELECT tk.status, CASE WHEN tk.status = 'COMPLETED' THEN tk.result END, tk.reason;
END;
$$;
COMMENT ON FUNCTION pgsched.task_outcome(bigint, uuid) IS 'Where a task stands for a caller awaiting its result: (status, result once COMPLETED, reason). With wait_token, registers the caller (until task_result_unwait) so the task finishing sends NOTIFY pgsched_result with its id.';
REVOKE ALL ON FUNCTION pgsched.task_outcome(bigint, uuid) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_outcome(bigint, uuid) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.task_result_unwait(wait_token uuid) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM pgsched.task_result_waiters AS w WHERE w.token = task_result_unwait.wait_token;
$$;
COMMENT ON FUNCTION pgsched.task_result_unwait(uuid) IS 'The caller no longer waits for a result (the rows task_outcome registered under wait_token go).';
REVOKE ALL ON FUNCTION pgsched.task_result_unwait(uuid) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_result_unwait(uuid) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- The parents of a task with their results: what ctx.parent_results reads.
CREATE OR REPLACE FUNCTION pgsched.task_parent_results(task_id bigint)
RETURNS TABLE (parent_id bigint, step text, status pgsched.task_status, result jsonb)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.id, p.metadata ->> 'pgsched_step', p.status, CASE WHEN p.status = 'COMPLETED' THEN p.result END
      FROM pgsched.task_dependencies AS d
      JOIN pgsched.tasks AS p ON p.id = d.parent_id
     WHERE d.child_id = task_parent_results.task_id
     ORDER BY p.id
$$;
COMMENT ON FUNCTION pgsched.task_parent_results(bigint) IS 'A task''s parents (depends_on) with their step names (workflows), statuses and results: ctx.parent_results.';
REVOKE ALL ON FUNCTION pgsched.task_parent_results(bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_parent_results(bigint) TO pgsched_worker, pgsched_admin;

-- The graph around a task: its parents and children with their statuses (pgsched show).
CREATE OR REPLACE FUNCTION pgsched.task_graph(task_id bigint)
RETURNS TABLE (relation text, id bigint, task_type text, status pgsched.task_status, met boolean, step text)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'parent', p.id, p.task_type, p.status, d.met, p.metadata ->> 'pgsched_step'
      FROM pgsched.task_dependencies AS d
      JOIN pgsched.tasks AS p ON p.id = d.parent_id
     WHERE d.child_id = task_graph.task_id
    UNION ALL
    SELECT 'child', c.id, c.task_type, c.status, d.met, c.metadata ->> 'pgsched_step'
      FROM pgsched.task_dependencies AS d
      JOIN pgsched.tasks AS c ON c.id = d.child_id
     WHERE d.parent_id = task_graph.task_id
     ORDER BY 1 DESC, 2
$$;
COMMENT ON FUNCTION pgsched.task_graph(bigint) IS 'The tasks a task waits for (parent) and that wait for it (child), with their type, status, whether the edge is met and their step name.';
REVOKE ALL ON FUNCTION pgsched.task_graph(bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_graph(bigint) TO pgsched_worker, pgsched_admin;

-- Workflows in one call -------------------------------------------------------------------

-- Why one step of a workflow is refused, or NULL: a JSON object with a plain unique name,
-- its task's fields (as schedule_task checks them) and `after`, names of other steps.
CREATE OR REPLACE FUNCTION pgsched.workflow_step_problem(step jsonb, owner text, max_payload_bytes bigint)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    extra text;
    run_at timestamptz;
BEGIN
    IF jsonb_typeof(step) IS DISTINCT FROM 'object' THEN
        RETURN 'a step is a JSON object';
    END IF;
    SELECT k INTO extra FROM jsonb_object_keys(step) AS k
     WHERE k NOT IN ('name', 'task_type', 'payload', 'run_at', 'priority', 'max_attempts', 'lane',
                     'metadata', 'after', 'on_parent_failure')
     ORDER BY k LIMIT 1;
    IF FOUND THEN
        RETURN format('unknown key %L (name, task_type, payload, run_at, priority, max_attempts, lane, '
                      'metadata, after, on_parent_failure)', extra);
    END IF;
    IF jsonb_typeof(step -> 'name') IS DISTINCT FROM 'string'
       OR step ->> 'name' !~ '^[A-Za-z_][A-Za-z0-9_.-]*$' OR length(step ->> 'name') > 100 THEN
        RETURN 'name must be a plain identifier (letters, digits, _, . and -, starting with a letter or _, '
               'at most 100 characters)';
    END IF;
    IF jsonb_typeof(step -> 'task_type') IS DISTINCT FROM 'string' THEN
        RETURN 'task_type is required (a string)';
    END IF;
    IF step ? 'priority' AND jsonb_typeof(step -> 'priority') <> 'number' THEN
        RETURN 'priority must be a number';
    END IF;
    IF step ? 'max_attempts' AND jsonb_typeof(step -> 'max_attempts') <> 'number' THEN
        RETURN 'max_attempts must be a number';
    END IF;
    IF step ? 'after' AND (jsonb_typeof(step -> 'after') <> 'array' OR EXISTS (
        SELECT 1 FROM jsonb_array_elements(step -> 'after') AS a WHERE jsonb_typeof(a) <> 'string')) THEN
        RETURN 'after must be an array of step names';
    END IF;
    IF step ? 'on_parent_failure' AND coalesce(step ->> 'on_parent_failure', '') NOT IN ('hold', 'cancel', 'run') THEN
        RETURN format('on_parent_failure %L is not one of hold, cancel, run', step ->> 'on_parent_failure');
    END IF;
    IF step ? 'run_at' THEN
        BEGIN
            run_at := (step ->> 'run_at')::timestamptz;
        EXCEPTION WHEN OTHERS THEN
            RETURN format('run_at %L is not a time', step ->> 'run_at');
        END;
        IF pgsched.run_at_problem(run_at) IS NOT NULL THEN
            RETURN pgsched.run_at_problem(run_at);
        END IF;
    END IF;
    RETURN pgsched.task_input_problem(
        step ->> 'task_type', coalesce(step -> 'payload', '{}'), owner,
        coalesce((step ->> 'priority')::numeric, 5)::integer, coalesce((step ->> 'max_attempts')::numeric, 3)::bigint,
        step ->> 'lane', coalesce(step -> 'metadata', '{}'), NULL, max_payload_bytes);
END;
$$;
COMMENT ON FUNCTION pgsched.workflow_step_problem(jsonb, text, bigint) IS 'Why one step of schedule_workflow is refused, or NULL: a JSON object with a plain name, its task''s fields as schedule_task checks them, after (names of other steps) and on_parent_failure.';
REVOKE ALL ON FUNCTION pgsched.workflow_step_problem(jsonb, text, bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.workflow_step_problem(jsonb, text, bigint) TO pgsched_admin;

-- A workflow in one call and one transaction: named steps, each a task waiting for the
-- steps it names in `after`. Under a workflow_key a second call returns the same ids
-- (created false) and changes nothing; each step's idempotency key is the engine's
-- (pgsched:workflow:KEY:NAME). The whole workflow belongs to one tenant.
CREATE OR REPLACE FUNCTION pgsched.schedule_workflow(
    steps jsonb,
    workflow_key text DEFAULT NULL,
    tenant_id text DEFAULT 'default',
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (step text, task_id bigint, created boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    owner text := coalesce(schedule_workflow.tenant_id, 'default');
    cfg pgsched.settings;
    problem text;
    s record;
    bad record;
    done text[] := '{}';
    done_ids bigint[] := '{}';
    done_created boolean[] := '{}';
    progress boolean;
    parents bigint[];
    made record;
BEGIN
    PERFORM pgsched.workflows_refuse_when_distributed();
    IF jsonb_typeof(steps) IS DISTINCT FROM 'array' OR jsonb_array_length(steps) = 0 THEN
        RAISE EXCEPTION 'pgsched: steps must be a non-empty JSON array of step objects'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_array_length(steps) > 10000 THEN
        RAISE EXCEPTION 'pgsched: steps holds % steps, over the limit of 10000 (use schedule_batch)',
            jsonb_array_length(steps) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF workflow_key IS NOT NULL AND (workflow_key = '' OR length(workflow_key) > 150) THEN
        RAISE EXCEPTION 'pgsched: workflow_key must be 1 to 150 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    problem := pgsched.producer_tenant_problem(ARRAY[owner]);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO cfg FROM pgsched.settings;
    SELECT e.ord, e.value ->> 'name' AS name, pgsched.workflow_step_problem(e.value, owner, cfg.max_payload_bytes) AS problem
      INTO bad
      FROM jsonb_array_elements(steps) WITH ORDINALITY AS e(value, ord)
     WHERE pgsched.workflow_step_problem(e.value, owner, cfg.max_payload_bytes) IS NOT NULL
     ORDER BY e.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: steps[%]%: %', bad.ord - 1, CASE WHEN bad.name IS NOT NULL THEN format(' (%s)', bad.name) ELSE '' END, bad.problem
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT e.value ->> 'name' AS name INTO bad
      FROM jsonb_array_elements(steps) AS e(value)
     GROUP BY e.value ->> 'name' HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: steps: the step name % is used twice', bad.name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT e.ord, e.value ->> 'name' AS name, a.name AS after INTO bad
      FROM jsonb_array_elements(steps) WITH ORDINALITY AS e(value, ord)
     CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(e.value -> 'after', '[]')) AS a(name)
     WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(steps) AS o(value) WHERE o.value ->> 'name' = a.name)
     ORDER BY e.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: steps[%] (%): after names %, which is no step of this workflow',
            bad.ord - 1, bad.name, bad.after USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Each step once its `after` steps are made: parents always exist before a child.
    WHILE cardinality(done) < jsonb_array_length(steps) LOOP
        progress := FALSE;
        FOR s IN
            SELECT e.value AS v, e.ord
              FROM jsonb_array_elements(steps) WITH ORDINALITY AS e(value, ord)
             WHERE (e.value ->> 'name') <> ALL (done)
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(coalesce(e.value -> 'after', '[]')) AS a(name)
                                WHERE a.name <> ALL (done))
             ORDER BY e.ord
        LOOP
            parents := ARRAY(SELECT DISTINCT done_ids[array_position(done, a.name)]
                               FROM jsonb_array_elements_text(coalesce(s.v -> 'after', '[]')) AS a(name));
            SELECT m.task_id, m.created INTO made
              FROM pgsched.task_insert_many(
                  ARRAY[s.v ->> 'task_type'], ARRAY[coalesce(s.v -> 'payload', '{}')],
                  ARRAY[(s.v ->> 'run_at')::timestamptz], ARRAY[owner],
                  ARRAY[coalesce((s.v ->> 'priority')::numeric, 5)::integer],
                  CASE WHEN workflow_key IS NOT NULL
                       THEN ARRAY[format('pgsched:workflow:%s:%s', workflow_key, s.v ->> 'name')] END,
                  ARRAY[coalesce((s.v ->> 'max_attempts')::numeric, 3)::bigint], ARRAY[s.v ->> 'lane'],
                  ARRAY[coalesce(s.v -> 'metadata', '{}')
                        || jsonb_build_object('pgsched_step', s.v ->> 'name')
                        || coalesce(jsonb_build_object('pgsched_workflow', workflow_key), '{}')],
                  NULL, NULL, t, NULL, NULL,
                  -- Parents made in this call cannot have finished yet.
                  cardinality(parents), s.v ->> 'on_parent_failure') AS m;
            IF made.created AND cardinality(parents) > 0 THEN
                PERFORM pgsched.task_dependencies_link(
                    ARRAY[made.task_id], parents, array_fill(FALSE, ARRAY[cardinality(parents)]),
                    array_fill('PENDING'::pgsched.task_status, ARRAY[cardinality(parents)]), t);
            END IF;
            done := done || (s.v ->> 'name');
            done_ids := done_ids || made.task_id;
            done_created := done_created || made.created;
            progress := TRUE;
        END LOOP;
        IF NOT progress THEN
            RAISE EXCEPTION 'pgsched: steps: the after names of % form a cycle',
                (SELECT string_agg(e.value ->> 'name', ', ' ORDER BY e.ord)
                   FROM jsonb_array_elements(steps) WITH ORDINALITY AS e(value, ord)
                  WHERE (e.value ->> 'name') <> ALL (done))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT e.value ->> 'name', done_ids[array_position(done, e.value ->> 'name')],
           done_created[array_position(done, e.value ->> 'name')]
      FROM jsonb_array_elements(steps) WITH ORDINALITY AS e(value, ord)
     ORDER BY e.ord;
END;
$$;
COMMENT ON FUNCTION pgsched.schedule_workflow(jsonb, text, text, timestamp with time zone) IS 'Schedule a workflow in one transaction: steps is a JSON array of {name, task_type, payload, run_at, priority, max_attempts, lane, metadata, after: [step names], on_parent_failure}; each step waits for those it names in after (a cycle is refused). One tenant for the whole workflow. Under workflow_key a second call returns the same ids with created false. Returns (step, task_id, created) per step, in the order given.';
REVOKE ALL ON FUNCTION pgsched.schedule_workflow(jsonb, text, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_workflow(jsonb, text, text, timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Batches ---------------------------------------------------------------------------------

-- Members and a callback that runs once every member finished (COMPLETED, DEAD or
-- CANCELLED): the callback waits for every member with on_parent_failure run, so its wait
-- is the counter waiting_for, decremented as members finish, never a scan of the batch.
CREATE OR REPLACE FUNCTION pgsched.schedule_batch(
    task_types text[],
    payloads jsonb[] DEFAULT NULL,
    on_complete_type text DEFAULT NULL,
    on_complete_payload jsonb DEFAULT '{}',
    tenant_id text DEFAULT 'default',
    priorities integer[] DEFAULT NULL,
    max_attempts bigint[] DEFAULT NULL,
    lanes text[] DEFAULT NULL,
    metadatas jsonb[] DEFAULT NULL,
    on_complete_priority integer DEFAULT 5,
    on_complete_max_attempts bigint DEFAULT 3,
    on_complete_lane text DEFAULT NULL,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (callback_id bigint, member_ids bigint[])
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    owner text := coalesce(schedule_batch.tenant_id, 'default');
    n integer := coalesce(cardinality(task_types), 0);
    members bigint[];
    callback bigint;
    problem text;
BEGIN
    PERFORM pgsched.workflows_refuse_when_distributed();
    IF on_complete_type IS NULL THEN
        RAISE EXCEPTION 'pgsched: on_complete_type is required (the callback''s task type)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 THEN
        RAISE EXCEPTION 'pgsched: task_types must name at least one member' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    problem := pgsched.task_input_problem(
        on_complete_type, coalesce(on_complete_payload, '{}'), owner, coalesce(on_complete_priority, 5),
        coalesce(on_complete_max_attempts, 3), on_complete_lane, '{}', NULL,
        (SELECT s.max_payload_bytes FROM pgsched.settings AS s));
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: on_complete: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The members through schedule_tasks: its checks (a bad row named), its routing.
    members := ARRAY(
        SELECT s.task_id FROM pgsched.schedule_tasks(
            task_types, payloads, NULL, array_fill(owner, ARRAY[n]), priorities, NULL, schedule_batch.max_attempts,
            lanes, metadatas, t) AS s
         ORDER BY s.ordinal);
    SELECT m.task_id INTO callback
      FROM pgsched.task_insert_many(
          ARRAY[on_complete_type], ARRAY[coalesce(on_complete_payload, '{}')], NULL, ARRAY[owner],
          ARRAY[coalesce(on_complete_priority, 5)], NULL, ARRAY[coalesce(on_complete_max_attempts, 3)],
          ARRAY[on_complete_lane], ARRAY[jsonb_build_object('pgsched_batch_size', n)], NULL, NULL, t,
          NULL, NULL, n, 'run') AS m;
    -- The members were made in this transaction: none can have finished.
    INSERT INTO pgsched.task_dependencies (parent_id, child_id, met, created_at)
    SELECT m, callback, FALSE, t FROM unnest(members) AS m;
    RETURN QUERY SELECT callback, members;
END;
$$;
COMMENT ON FUNCTION pgsched.schedule_batch(text[], jsonb[], text, jsonb, text, integer[], bigint[], text[], jsonb[], integer, bigint, text, timestamp with time zone) IS 'Schedule a batch: members (task_types, payloads, priorities, max_attempts, lanes, metadatas: parallel arrays as schedule_tasks takes them) and a callback task (on_complete_type, on_complete_payload, on_complete_priority, on_complete_max_attempts, on_complete_lane) that runs exactly once when every member has finished, COMPLETED, DEAD or CANCELLED; its wait is a counter, not a scan. One tenant. Returns (callback_id, member_ids); pgsched.batch_status(callback_id) counts the members by outcome.';
REVOKE ALL ON FUNCTION pgsched.schedule_batch(text[], jsonb[], text, jsonb, text, integer[], bigint[], text[], jsonb[], integer, bigint, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_batch(text[], jsonb[], text, jsonb, text, integer[], bigint[], text[], jsonb[], integer, bigint, text, timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- A batch's members by outcome (what its callback's ctx.batch reads).
CREATE OR REPLACE FUNCTION pgsched.batch_status(callback_id bigint)
RETURNS TABLE (total bigint, completed bigint, dead bigint, cancelled bigint, unfinished bigint, member_ids bigint[])
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*), count(*) FILTER (WHERE m.status = 'COMPLETED'), count(*) FILTER (WHERE m.status = 'FAILED'),
           count(*) FILTER (WHERE m.status = 'CANCELLED'),
           count(*) FILTER (WHERE m.status IN ('PENDING', 'QUEUED', 'PROCESSING')),
           coalesce(array_agg(m.id ORDER BY m.id), '{}')
      FROM pgsched.task_dependencies AS d
      JOIN pgsched.tasks AS m ON m.id = d.parent_id
     WHERE d.child_id = batch_status.callback_id
$$;
COMMENT ON FUNCTION pgsched.batch_status(bigint) IS 'A batch (or any task with parents) by its callback''s id: how many members, how many COMPLETED, DEAD, CANCELLED and unfinished, and their ids.';
REVOKE ALL ON FUNCTION pgsched.batch_status(bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.batch_status(bigint) TO pgsched_producer, pgsched_worker, pgsched_admin;
