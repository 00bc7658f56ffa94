-- sql/code/transitions.sql — transitions and events.
--
-- the state machine (transition_is_legal), the statement triggers on pgsched.tasks that
-- check every transition and write its event (task_record_transitions) and refuse bad due
-- times (task_refuse_bad_due_times); who writes the events (audit_writer_apply,
-- events_by_functions); the task_timeline and task_runs views.
--
-- Who writes the events. In single-node mode (settings.audit_writer = 'trigger', the
-- default) the statement trigger below writes one task_events row per status change,
-- whatever statement made it, a hand-written UPDATE included. Citus refuses that trigger on
-- a distributed table (docs/scaling.md), so in 'functions' mode the trigger is dropped and
-- every state-changing function writes its own events, in the same statement as the
-- change, from the rows it changed (a data-modifying CTE: "ev" in each of them), with the
-- same time, worker, attempt and detail the trigger would write. Each of those CTEs is
-- guarded by events_by_functions(), a constant the planner folds: in trigger mode they are
-- planned away. What 'functions' mode gives up: a status changed by hand is neither checked
-- nor recorded (only the functions change a task's status there).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- The state machine. Anything not listed here is refused by the trigger below.
CREATE OR REPLACE FUNCTION pgsched.transition_is_legal(
    from_status pgsched.task_status, to_status pgsched.task_status
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (from_status, to_status) IN (
        ('PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status),
        ('PENDING', 'CANCELLED'),
        ('QUEUED', 'PROCESSING'),
        ('QUEUED', 'CANCELLED'),
        ('PROCESSING', 'COMPLETED'),
        ('PROCESSING', 'FAILED'),
        ('PROCESSING', 'QUEUED'),
        ('PROCESSING', 'PENDING'),
        ('FAILED', 'QUEUED'),
        ('FAILED', 'PENDING'),
        ('FAILED', 'CANCELLED')
    )
$$;
COMMENT ON FUNCTION pgsched.transition_is_legal(pgsched.task_status, pgsched.task_status) IS 'The state machine: whether a task may go from one status to another. The transition trigger refuses any other change.';
REVOKE ALL ON FUNCTION pgsched.transition_is_legal(pgsched.task_status, pgsched.task_status) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.transition_is_legal(pgsched.task_status, pgsched.task_status) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.task_record_transitions() RETURNS trigger
LANGUAGE plpgsql
SET enable_nestloop = FALSE
SET enable_mergejoin = FALSE
SET enable_hashjoin = TRUE
SET jit = off
AS $$
DECLARE
    bad record;
BEGIN
    WITH moved AS MATERIALIZED (
        SELECT n.id, n.tenant_id, n.task_type, o.status AS from_status, n.status AS to_status,
               -- A hand-written UPDATE that forgets updated_at still gets a true time.
               CASE WHEN n.updated_at IS DISTINCT FROM o.updated_at THEN n.updated_at ELSE now() END
                   AS occurred_at,
               n.next_run_at, n.attempts, coalesce(n.locked_by, o.locked_by) AS worker,
               n.status_reason,
               (pgsched.transition_is_legal(o.status, n.status)
                OR (o.status = 'PROCESSING' AND n.status = 'CANCELLED'
                    AND o.cancel_requested_at IS NOT NULL)) IS NOT FALSE AS legal
          FROM old_rows AS o
         INNER JOIN new_rows AS n ON n.id = o.id
         WHERE n.status IS DISTINCT FROM o.status
    ),

    recorded AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT m.id, m.tenant_id, m.task_type, m.from_status, m.to_status,
               m.occurred_at, m.next_run_at, m.attempts, m.worker, m.status_reason
          FROM moved AS m
         WHERE m.legal
    )

    SELECT m.id, m.from_status, m.to_status INTO bad
      FROM moved AS m
     WHERE NOT m.legal
     ORDER BY m.id
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: illegal transition % -> % for task %',
            bad.from_status, bad.to_status, bad.id
            USING ERRCODE = 'check_violation',
                  HINT = CASE WHEN bad.from_status = 'PROCESSING' AND bad.to_status = 'CANCELLED'
                      THEN 'A running task is cancelled with pgsched.cancel_task: its worker stops it.'
                      ELSE 'See the state diagram in the README for the legal transitions.' END;
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION pgsched.task_record_transitions() IS 'Statement trigger on pgsched.tasks: refuses an illegal status change (transition_is_legal) and writes one task_events row per transition, in the same statement.';
REVOKE ALL ON FUNCTION pgsched.task_record_transitions() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_record_transitions() TO pgsched_worker, pgsched_admin;

-- One transition's event, from the task row after the change, as the trigger writes it:
-- for the single-row changes of the functions that write their own (events_by_functions).
-- PL/pgSQL, inserting values: Citus plans no SQL function with parameters on a
-- distributed table, and values go to the tenant's shard alone.
CREATE OR REPLACE FUNCTION pgsched.task_event_write(
    changed pgsched.tasks, from_status pgsched.task_status
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF task_event_write.from_status IS DISTINCT FROM changed.status THEN
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        ) VALUES (
            changed.id, changed.tenant_id, changed.task_type, task_event_write.from_status,
            changed.status, changed.updated_at, changed.next_run_at, changed.attempts,
            changed.locked_by, changed.status_reason
        );
    END IF;
END;
$$;
COMMENT ON FUNCTION pgsched.task_event_write(pgsched.tasks, pgsched.task_status) IS 'Writes the event of one status change (from from_status to the row''s status; nothing when they are the same), as the transition trigger would: for functions that write their own events (events_by_functions).';
REVOKE ALL ON FUNCTION pgsched.task_event_write(pgsched.tasks, pgsched.task_status) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_event_write(pgsched.tasks, pgsched.task_status) TO pgsched_worker, pgsched_admin;

-- Statement level, on INSERT only: a row moved between partitions by an UPDATE is not
-- seen, so rows written before this check can still be finished, promoted and pruned.
CREATE OR REPLACE FUNCTION pgsched.task_refuse_bad_due_times() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.id, n.task_type, n.tenant_id, pgsched.run_at_problem(n.next_run_at) AS problem
      INTO bad
      FROM new_rows AS n
     WHERE n.next_run_at < '1970-01-01 00:00:00+00' OR n.next_run_at >= '9999-01-01 00:00:00+00'
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: % (task_type %, tenant_id %)', bad.problem, bad.task_type, bad.tenant_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION pgsched.task_refuse_bad_due_times() IS 'Statement trigger on inserts into pgsched.tasks: refuses a due time run_at_problem refuses, whichever path wrote the row, naming the task type and tenant.';
REVOKE ALL ON FUNCTION pgsched.task_refuse_bad_due_times() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_refuse_bad_due_times() TO pgsched_worker, pgsched_admin;

-- The views read the table by name when made: point them at the new one (same definitions
-- as 0003 and 0020).
CREATE OR REPLACE VIEW pgsched.task_timeline AS
SELECT
    t.id AS task_id,
    t.tenant_id,
    t.task_type,
    0::bigint AS event_id,
    t.created_at AS occurred_at,
    NULL::pgsched.task_status AS from_status,
    'scheduled' AS what,
    NULL::bigint AS attempt,
    NULL::text AS worker,
    format('due %s', t.next_run_at) AS detail
FROM pgsched.tasks AS t
UNION ALL
SELECT
    e.task_id,
    e.tenant_id,
    e.task_type,
    e.id AS event_id,
    e.occurred_at,
    e.from_status,
    e.to_status::text AS what,
    e.attempt,
    e.worker,
    e.detail
FROM pgsched.task_events AS e;
COMMENT ON VIEW pgsched.task_timeline IS 'Every event of every task with its time, transition, worker, attempt and detail: what happened to task 123.';
REVOKE ALL ON pgsched.task_timeline FROM public;
GRANT SELECT ON pgsched.task_timeline TO pgsched_worker;
GRANT ALL ON pgsched.task_timeline TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.task_runs AS
SELECT
    s.task_id,
    s.tenant_id,
    s.task_type,
    s.attempt,
    s.worker,
    s.scheduled_for,
    s.occurred_at AS started_at,
    f.occurred_at AS finished_at,
    s.occurred_at - s.scheduled_for AS lateness,
    coalesce(f.to_status::text, 'RUNNING') AS outcome,
    f.detail
FROM pgsched.task_events AS s
LEFT JOIN LATERAL (
    SELECT
        e.occurred_at,
        e.to_status,
        e.detail
    FROM pgsched.task_events AS e
    WHERE
        e.task_id = s.task_id
        -- The tenant too: on a distributed database the join stays on the tenant's shard.
        AND e.tenant_id = s.tenant_id
        AND e.id > s.id
        AND e.from_status = 'PROCESSING'
        AND e.to_status <> 'PROCESSING'
    ORDER BY e.id
    LIMIT 1
) AS f ON TRUE
WHERE s.to_status = 'PROCESSING' AND s.from_status <> 'PROCESSING';
COMMENT ON VIEW pgsched.task_runs IS 'One row per attempt: task, tenant, type, attempt, worker, due time, start, finish, lateness, outcome and detail.';
REVOKE ALL ON pgsched.task_runs FROM public;
GRANT SELECT ON pgsched.task_runs TO pgsched_worker;
GRANT ALL ON pgsched.task_runs TO pgsched_admin;

-- Who writes the events (see the top of this file), made to match settings.audit_writer:
-- events_by_functions() as a constant, and the two statement triggers on updates there or
-- not. In trigger mode every change of pgsched.tasks is checked and recorded by the
-- statement that makes it (task_record_transitions above, once per statement over its old
-- and new rows), and what waits for a finished task is settled
-- (task_settle_dependents, sql/code/workflows.sql, which calls this again once it is
-- made). In functions mode the functions call task_settle_finished themselves.
CREATE OR REPLACE FUNCTION pgsched.audit_writer_apply() RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    writer text := (SELECT s.audit_writer FROM pgsched.settings AS s);
    old_trigger name;
BEGIN
    -- Replacing the function invalidates every cached plan that folded the old constant.
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION pgsched.events_by_functions() RETURNS boolean '
        'LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        CASE WHEN writer = 'functions' THEN 'SELECT true' ELSE 'SELECT false' END);
    -- Only the triggers there are: Citus refuses even DROP TRIGGER IF EXISTS on a
    -- distributed table (distributed mode has none).
    FOR old_trigger IN
        SELECT t.tgname FROM pg_trigger AS t
         WHERE t.tgrelid = 'pgsched.tasks'::regclass AND NOT t.tgisinternal
           AND t.tgname IN ('tasks_record_transitions', 'tasks_settle_dependents', 'tasks_refuse_bad_due_times')
    LOOP
        EXECUTE format('DROP TRIGGER %I ON pgsched.tasks', old_trigger);
    END LOOP;
    IF writer = 'trigger' THEN
        -- Every insert's due times are checked, whichever path wrote the rows. In
        -- 'functions' mode the inserting functions check them (schedule_task_ex,
        -- task_insert_many): Citus refuses this trigger as it refuses the others.
        CREATE TRIGGER tasks_refuse_bad_due_times
        AFTER INSERT ON pgsched.tasks
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_refuse_bad_due_times();
        CREATE TRIGGER tasks_record_transitions
        AFTER UPDATE ON pgsched.tasks
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_record_transitions();
        IF to_regprocedure('pgsched.task_settle_dependents()') IS NOT NULL THEN
            CREATE TRIGGER tasks_settle_dependents
            AFTER UPDATE ON pgsched.tasks
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_settle_dependents();
        END IF;
    END IF;
    RETURN writer;
END;
$$;
COMMENT ON FUNCTION pgsched.audit_writer_apply() IS 'Makes events_by_functions() and the triggers on pgsched.tasks (transitions, settling dependents, refusing bad due times) match settings.audit_writer; returns it. Run when sql/code/transitions.sql is applied and by audit_writer_set.';
REVOKE ALL ON FUNCTION pgsched.audit_writer_apply() FROM public;

SELECT pgsched.audit_writer_apply();
COMMENT ON FUNCTION pgsched.events_by_functions() IS 'Whether the state-changing functions write their own task_events rows (settings.audit_writer = ''functions'') rather than the transition trigger: a constant, remade by audit_writer_apply.';
REVOKE ALL ON FUNCTION pgsched.events_by_functions() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.events_by_functions() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Switch who writes the events. Waits for statements running on pgsched.tasks (dropping
-- or making the trigger locks the table against writes), so no change falls between the
-- two writers.
CREATE OR REPLACE FUNCTION pgsched.audit_writer_set(writer text) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    IF writer IS NULL OR writer NOT IN ('trigger', 'functions') THEN
        RAISE EXCEPTION 'pgsched: audit writer must be ''trigger'' or ''functions'', got %', quote_nullable(writer)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgsched.settings SET audit_writer = audit_writer_set.writer;
    RETURN pgsched.audit_writer_apply();
END;
$$;
COMMENT ON FUNCTION pgsched.audit_writer_set(text) IS 'Who writes task_events: ''trigger'' (single-node mode, the default: a status changed by any statement is checked and recorded) or ''functions'' (distributed mode: the state-changing functions write their own events). Returns the writer now in force.';
REVOKE ALL ON FUNCTION pgsched.audit_writer_set(text) FROM public;
