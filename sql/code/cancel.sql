-- sql/code/cancel.sql — cancelling.
--
-- cancel_task_ex / cancel_task (a running task is asked to stop, NOTIFY pgsched_cancel),
-- cancel_tasks by filter, task_request_cancel, task_cancel_requested.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Who cancels: the actor a caller names (a dashboard user), with the database role that
-- made the call, so a named actor cannot hide who really acted.
CREATE OR REPLACE FUNCTION pgsched.cancel_actor(actor text) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN nullif(btrim(actor), '') IS NULL OR actor = session_user THEN session_user::text
        ELSE format('%s (role %s)', btrim(actor), session_user)
    END
$$;
COMMENT ON FUNCTION pgsched.cancel_actor(text) IS 'Who cancels, as recorded: the actor a caller names (a dashboard user) together with the database role that made the call.';
REVOKE ALL ON FUNCTION pgsched.cancel_actor(text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cancel_actor(text) TO pgsched_admin;

-- What a cancel's text arguments may be: the reason and the actor end up on the record.
CREATE OR REPLACE FUNCTION pgsched.cancel_input_problem(reason text, actor text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN length(reason) > 1000 THEN format('reason: at most 1000 characters (got %s)', length(reason))
        WHEN length(actor) > 200 THEN format('actor: at most 200 characters (got %s)', length(actor))
    END
$$;
COMMENT ON FUNCTION pgsched.cancel_input_problem(text, text) IS 'Why a cancel''s reason or actor is refused, or NULL (they end up on the record; at most 1000 characters).';
REVOKE ALL ON FUNCTION pgsched.cancel_input_problem(text, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cancel_input_problem(text, text) TO pgsched_admin;

-- Lock these tasks' rows while they are unfinished, in an order every caller shares, and
-- say what each is now. On one node, one statement in id order; in distributed mode Citus
-- locks the rows of one shard per statement, so tenant by tenant (tenant, then id).
CREATE OR REPLACE FUNCTION pgsched.tasks_lock_unfinished(task_ids bigint[])
RETURNS TABLE (id bigint, tenant_id text, status pgsched.task_status)
LANGUAGE plpgsql
AS $$
DECLARE
    owner text;
BEGIN
    IF NOT pgsched.distributed_mode() THEN
        RETURN QUERY
        SELECT tk.id, tk.tenant_id, tk.status
          FROM pgsched.tasks AS tk
         WHERE tk.id = ANY(tasks_lock_unfinished.task_ids)
           AND tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
         ORDER BY tk.id
           FOR UPDATE OF tk;
        RETURN;
    END IF;
    FOR owner IN
        SELECT DISTINCT tk.tenant_id FROM pgsched.tasks AS tk
         WHERE tk.id = ANY(tasks_lock_unfinished.task_ids) ORDER BY 1
    LOOP
        RETURN QUERY
        SELECT tk.id, tk.tenant_id, tk.status
          FROM pgsched.tasks AS tk
         WHERE tk.tenant_id = owner
           AND tk.id = ANY(tasks_lock_unfinished.task_ids)
           AND tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
         ORDER BY tk.id
           FOR UPDATE OF tk;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION pgsched.tasks_lock_unfinished(bigint[]) IS 'Locks the rows of those of these tasks that are unfinished and returns each with its tenant and status: in id order on one node, tenant by tenant in distributed mode (Citus locks one shard''s rows per statement). The caller retries on serialization_failure (a row moved partitions while it waited).';
REVOKE ALL ON FUNCTION pgsched.tasks_lock_unfinished(bigint[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.tasks_lock_unfinished(bigint[]) TO pgsched_admin;

-- Ask the workers holding these PROCESSING tasks to stop them: the request on each row
-- (the first request wins; a second changes nothing), an event per row, a NOTIFY per row.
-- The caller holds the rows locked. Returns the ids newly asked.
CREATE OR REPLACE FUNCTION pgsched.task_request_cancel(
    task_ids bigint[], reason text, actor text, t timestamptz
) RETURNS bigint[]
LANGUAGE plpgsql
AS $$
DECLARE
    asked bigint[];
BEGIN
    WITH marked AS (
        UPDATE pgsched.tasks AS tk
           SET cancel_requested_at = task_request_cancel.t,
               cancel_requested_by = task_request_cancel.actor,
               cancel_reason = task_request_cancel.reason
         WHERE tk.id = ANY(task_request_cancel.task_ids)
           AND tk.status = 'PROCESSING'
           AND tk.cancel_requested_at IS NULL
        RETURNING tk.id, tk.tenant_id, tk.task_type, tk.next_run_at, tk.attempts, tk.locked_by
    ),
    recorded AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT m.id, m.tenant_id, m.task_type, 'PROCESSING', 'PROCESSING', task_request_cancel.t,
               m.next_run_at, m.attempts, m.locked_by,
               format('cancel requested by %s: %s; worker %s told to stop it',
                      task_request_cancel.actor, task_request_cancel.reason, m.locked_by)
          FROM marked AS m
        RETURNING task_id
    )
    SELECT coalesce(array_agg(r.task_id), '{}') INTO asked FROM recorded AS r;
    -- Delivered at commit; the worker's heartbeat thread asks every second in case not.
    PERFORM pg_notify('pgsched_cancel', a::text) FROM unnest(asked) AS a;
    RETURN asked;
END;
$$;
COMMENT ON FUNCTION pgsched.task_request_cancel(bigint[], text, text, timestamp with time zone) IS 'Ask the workers holding these PROCESSING tasks to stop them: the request on each row (the first wins), an event and a NOTIFY pgsched_cancel per row. Returns the ids newly asked.';
REVOKE ALL ON FUNCTION pgsched.task_request_cancel(bigint[], text, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_request_cancel(bigint[], text, text, timestamptz) TO pgsched_admin;

-- Cancel one task; returns what happened:
--   CANCELLED          it had not started: CANCELLED now
--   CANCEL_REQUESTED   it is running: its worker is asked to stop it (see above)
--   FAN_OUT_CANCELLED  a fan-out that has fanned out: its unfinished tenants' tasks are
--                      cancelled or asked to stop; the detail names who completed
-- A finished task, an unknown id, or another tenant's task (for a tenant-bound login) is
-- refused and nothing changes.
CREATE OR REPLACE FUNCTION pgsched.cancel_task_ex(
    task_id bigint,
    reason text DEFAULT 'cancelled',
    actor text DEFAULT NULL,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (outcome text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    why text := coalesce(nullif(btrim(reason), ''), 'cancelled');
    who text;
    problem text;
    tk pgsched.tasks;
    changed pgsched.tasks;
    gone bigint[];
    kids record;
    asked bigint[];
    owner text;
    said text;
    names_limit constant integer := 20;
BEGIN
    problem := pgsched.cancel_input_problem(reason, actor);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    who := pgsched.cancel_actor(actor);
    -- The tenant first, then the row by tenant and id: in distributed mode a lock must name
    -- the shard, and nothing may query the tables from inside a statement on a shard.
    SELECT x.tenant_id INTO owner FROM pgsched.tasks AS x WHERE x.id = cancel_task_ex.task_id;
    IF owner IS NOT NULL THEN
        problem := pgsched.producer_tenant_problem(ARRAY[owner]);
    END IF;
    IF problem IS NOT NULL THEN
        -- Say no without naming the other tenant.
        RAISE EXCEPTION 'pgsched: role % may not cancel task %: it belongs to another tenant',
            session_user, cancel_task_ex.task_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    FOR attempt IN 1..5 LOOP
        BEGIN
            -- Locked: a worker's outcome (or a fan-out) waits for this decision, or this
            -- waits for theirs and sees the row they left.
            SELECT * INTO tk FROM pgsched.tasks AS x
             WHERE x.tenant_id = owner AND x.id = cancel_task_ex.task_id FOR UPDATE;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- the row moved partitions while we waited (it finished): read it again
        END;
    END LOOP;
    IF tk.id IS NULL THEN
        RAISE EXCEPTION 'pgsched: no task with id %', cancel_task_ex.task_id
            USING ERRCODE = 'no_data_found';
    END IF;

    IF tk.status IN ('PENDING', 'QUEUED') THEN
        said := format('cancelled by %s: %s', who, why);
        UPDATE pgsched.tasks AS x
           SET status = 'CANCELLED', status_reason = said, updated_at = t
         WHERE x.tenant_id = tk.tenant_id AND x.id = tk.id AND x.status = tk.status
        RETURNING x.* INTO changed;
        IF FOUND AND pgsched.events_by_functions() THEN
            PERFORM pgsched.task_event_write(changed, tk.status);
            PERFORM pgsched.task_settle_finished(ARRAY[tk.id], ARRAY['CANCELLED'::pgsched.task_status]);
        END IF;
        RETURN QUERY SELECT 'CANCELLED'::text, format('cancelled by %s: %s', who, why);
        RETURN;
    END IF;

    IF tk.status = 'PROCESSING' THEN
        IF tk.cancel_requested_at IS NOT NULL THEN
            RETURN QUERY SELECT 'CANCEL_REQUESTED'::text,
                format('already requested by %s at %s: %s', tk.cancel_requested_by,
                       tk.cancel_requested_at, tk.cancel_reason);
            RETURN;
        END IF;
        PERFORM pgsched.task_request_cancel(ARRAY[tk.id], why, who, t);
        RETURN QUERY SELECT 'CANCEL_REQUESTED'::text,
            format('cancel requested by %s: %s; worker %s told to stop it', who, why, tk.locked_by);
        RETURN;
    END IF;

    IF tk.status = 'COMPLETED' AND EXISTS (
        SELECT 1 FROM pgsched.tasks AS c
         WHERE c.parent_id = tk.id AND c.status IN ('PENDING', 'QUEUED', 'PROCESSING')
    ) THEN
        -- A fan-out: stop what its tenants have not finished, locked in the shared order.
        PERFORM pgsched.tasks_lock_unfinished(ARRAY(
            SELECT c.id FROM pgsched.tasks AS c
             WHERE c.parent_id = tk.id AND c.status IN ('PENDING', 'QUEUED', 'PROCESSING')));
        said := format('cancelled by %s with its fan-out %s: %s', who, tk.id, why);
        WITH was AS (
            SELECT c.id, c.status
              FROM pgsched.tasks AS c
             WHERE c.parent_id = tk.id AND c.status IN ('PENDING', 'QUEUED')
        ),
        cancelled AS (
            UPDATE pgsched.tasks AS c
               SET status = 'CANCELLED', updated_at = t, status_reason = said
              FROM was
             WHERE c.id = was.id AND c.parent_id = tk.id AND c.status IN ('PENDING', 'QUEUED')
            RETURNING c.id, c.tenant_id, c.task_type, was.status AS from_status, c.updated_at,
                      c.next_run_at, c.attempts, c.locked_by, c.status_reason
        ),
        -- The cancels' events when the functions write them (sql/code/transitions.sql).
        ev AS (
            INSERT INTO pgsched.task_events (
                task_id, tenant_id, task_type, from_status, to_status,
                occurred_at, scheduled_for, attempt, worker, detail
            )
            SELECT x.id, x.tenant_id, x.task_type, x.from_status, 'CANCELLED',
                   x.updated_at, x.next_run_at, x.attempts, x.locked_by, x.status_reason
              FROM cancelled AS x
             WHERE pgsched.events_by_functions()
        )
        SELECT array_agg(x.id) INTO gone FROM cancelled AS x;
        IF pgsched.events_by_functions() THEN
            PERFORM pgsched.task_settle_finished(
                gone, array_fill('CANCELLED'::pgsched.task_status, ARRAY[coalesce(cardinality(gone), 0)]));
        END IF;
        asked := pgsched.task_request_cancel(
            ARRAY(SELECT c.id FROM pgsched.tasks AS c WHERE c.parent_id = tk.id AND c.status = 'PROCESSING'),
            format('with its fan-out %s: %s', tk.id, why), who, t);
        SELECT
            count(*) FILTER (WHERE c.status = 'COMPLETED') AS completed,
            (array_agg(c.tenant_id ORDER BY c.tenant_id) FILTER (WHERE c.status = 'COMPLETED'))[1:names_limit]
                AS completed_names,
            count(*) FILTER (WHERE c.status = 'CANCELLED') AS cancelled,
            count(*) FILTER (WHERE c.status = 'PROCESSING') AS running,
            (array_agg(c.tenant_id ORDER BY c.tenant_id) FILTER (WHERE c.status = 'PROCESSING'))[1:names_limit]
                AS running_names,
            count(*) FILTER (WHERE c.status = 'FAILED') AS failed
          INTO kids
          FROM pgsched.tasks AS c WHERE c.parent_id = tk.id;
        detail := format(
            'fan-out cancelled by %s: %s; tenants completed: %s%s; cancelled: %s; running, asked to stop: %s%s; failed: %s',
            who, why,
            kids.completed,
            CASE WHEN kids.completed > 0 THEN format(' (%s%s)', array_to_string(kids.completed_names, ', '),
                 CASE WHEN kids.completed > names_limit THEN ', ...' ELSE '' END) ELSE '' END,
            kids.cancelled,
            kids.running,
            CASE WHEN kids.running > 0 THEN format(' (%s%s)', array_to_string(kids.running_names, ', '),
                 CASE WHEN kids.running > names_limit THEN ', ...' ELSE '' END) ELSE '' END,
            kids.failed);
        -- The parent stays COMPLETED (it did fan out); its record says what the cancel did.
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        ) VALUES (tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at,
                  tk.attempts, tk.locked_by, detail);
        RETURN QUERY SELECT 'FAN_OUT_CANCELLED'::text, detail;
        RETURN;
    END IF;

    RAISE EXCEPTION 'pgsched: task % is % and cannot be cancelled: it has finished', tk.id, tk.status
        USING ERRCODE = 'object_not_in_prerequisite_state';
END;
$$;
COMMENT ON FUNCTION pgsched.cancel_task_ex(bigint, text, text, timestamp with time zone) IS 'Cancel one task; returns outcome and detail: CANCELLED (it had not started), CANCEL_REQUESTED (running: its worker is asked to stop it, NOTIFY pgsched_cancel), FAN_OUT_CANCELLED (a fan-out''s unfinished tenants cancelled or asked to stop). actor is recorded together with the database role. Refusals as cancel_task.';
REVOKE ALL ON FUNCTION pgsched.cancel_task_ex(bigint, text, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cancel_task_ex(bigint, text, text, timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.cancel_task(
    task_id bigint,
    reason text DEFAULT 'cancelled',
    as_of timestamptz DEFAULT NULL,
    actor text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT cancel_task.task_id
      FROM pgsched.cancel_task_ex(cancel_task.task_id, cancel_task.reason, cancel_task.actor, cancel_task.as_of)
$$;
COMMENT ON FUNCTION pgsched.cancel_task(bigint, text, timestamp with time zone, text) IS 'Cancel one task; returns its id. Not started: CANCELLED now; running: its worker is asked to stop it (cancel_task_ex says which). A finished task is refused (55000), an unknown id (P0002), another tenant''s task for a tenant-bound login (42501).';
REVOKE ALL ON FUNCTION pgsched.cancel_task(bigint, text, timestamptz, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cancel_task(bigint, text, timestamptz, text) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Cancel every unfinished task matching the filters (at least one): its type, tenant,
-- idempotency key, and due time in [due_from, due_until). Not started: CANCELLED; running:
-- asked to stop. dry_run counts without changing anything. A tenant-bound login acts on
-- its own tenants' tasks only (naming another tenant is refused).
CREATE OR REPLACE FUNCTION pgsched.cancel_tasks(
    task_type text DEFAULT NULL,
    tenant_id text DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    due_from timestamptz DEFAULT NULL,
    due_until timestamptz DEFAULT NULL,
    reason text DEFAULT 'cancelled',
    actor text DEFAULT NULL,
    dry_run boolean DEFAULT FALSE,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (cancelled bigint, cancel_requested bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    why text := coalesce(nullif(btrim(reason), ''), 'cancelled');
    who text;
    problem text;
    every_tenant boolean := pgsched.login_acts_for_all_tenants();
    idle bigint[];
    busy bigint[];
    n_cancelled bigint;
    gone bigint[];
    said text;
BEGIN
    problem := CASE
        WHEN num_nonnulls(cancel_tasks.task_type, cancel_tasks.tenant_id, cancel_tasks.idempotency_key,
                          cancel_tasks.due_from, cancel_tasks.due_until) = 0
            THEN 'cancel_tasks needs at least one filter: task_type, tenant_id, idempotency_key, due_from or due_until'
        WHEN cancel_tasks.task_type = '' THEN 'task_type: must not be empty'
        WHEN cancel_tasks.tenant_id = '' THEN 'tenant_id: must not be empty'
        WHEN cancel_tasks.idempotency_key = '' THEN 'idempotency_key: must not be empty'
        WHEN NOT isfinite(cancel_tasks.due_from) THEN 'due_from: must be a finite time'
        WHEN NOT isfinite(cancel_tasks.due_until) THEN 'due_until: must be a finite time'
        WHEN cancel_tasks.due_from >= cancel_tasks.due_until
            THEN format('due_from (%s) must be before due_until (%s)', cancel_tasks.due_from, cancel_tasks.due_until)
        ELSE pgsched.cancel_input_problem(reason, actor)
    END;
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT every_tenant THEN
        problem := pgsched.producer_tenant_problem(ARRAY[coalesce(cancel_tasks.tenant_id, 'default')]);
        IF problem IS NOT NULL AND (
            cancel_tasks.tenant_id IS NOT NULL
            OR NOT EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user)
        ) THEN
            RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    who := pgsched.cancel_actor(actor);
    said := format('cancelled by %s: %s', who, why);

    -- Matched without locks (a dry run, the count a confirmation shows, must not hold up
    -- the workers), then locked by id and status for the real run.
    SELECT coalesce(array_agg(tk.id) FILTER (WHERE tk.status <> 'PROCESSING'), '{}'),
           coalesce(array_agg(tk.id) FILTER (WHERE tk.status = 'PROCESSING' AND tk.cancel_requested_at IS NULL), '{}')
      INTO idle, busy
      FROM pgsched.tasks AS tk
     WHERE tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
       AND (cancel_tasks.task_type IS NULL OR tk.task_type = cancel_tasks.task_type)
       AND (cancel_tasks.tenant_id IS NULL OR tk.tenant_id = cancel_tasks.tenant_id)
       AND (cancel_tasks.idempotency_key IS NULL OR tk.idempotency_key = cancel_tasks.idempotency_key)
       AND (cancel_tasks.due_from IS NULL OR tk.next_run_at >= cancel_tasks.due_from)
       AND (cancel_tasks.due_until IS NULL OR tk.next_run_at < cancel_tasks.due_until)
       AND (every_tenant OR tk.tenant_id IN (
            SELECT b.tenant_id FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user));
    IF coalesce(dry_run, FALSE) THEN
        RETURN QUERY SELECT cardinality(idle)::bigint, cardinality(busy)::bigint;
        RETURN;
    END IF;

    FOR attempt IN 1..5 LOOP
        BEGIN
            -- A task claimed since it was matched is asked to stop; one finished is left alone.
            SELECT coalesce(array_agg(l.id) FILTER (WHERE l.status <> 'PROCESSING'), '{}'),
                   coalesce(array_agg(l.id) FILTER (WHERE l.status = 'PROCESSING'), '{}')
              INTO idle, busy
              FROM pgsched.tasks_lock_unfinished(idle || busy) AS l;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions while we waited for it: lock again
        END;
    END LOOP;

    WITH was AS (
        SELECT tk.id, tk.status
          FROM pgsched.tasks AS tk
         WHERE tk.id = ANY(idle) AND tk.status IN ('PENDING', 'QUEUED')
    ),
    cancelled AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'CANCELLED', status_reason = said, updated_at = t
          FROM was
         WHERE tk.id = was.id AND tk.id = ANY(idle) AND tk.status IN ('PENDING', 'QUEUED')
        RETURNING tk.id, tk.tenant_id, tk.task_type, was.status AS from_status, tk.updated_at,
                  tk.next_run_at, tk.attempts, tk.locked_by, tk.status_reason
    ),
    -- The cancels' events when the functions write them (sql/code/transitions.sql).
    ev AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT x.id, x.tenant_id, x.task_type, x.from_status, 'CANCELLED',
               x.updated_at, x.next_run_at, x.attempts, x.locked_by, x.status_reason
          FROM cancelled AS x
         WHERE pgsched.events_by_functions()
    )
    SELECT count(*), array_agg(x.id) INTO n_cancelled, gone FROM cancelled AS x;
    IF pgsched.events_by_functions() THEN
        PERFORM pgsched.task_settle_finished(
            gone, array_fill('CANCELLED'::pgsched.task_status, ARRAY[coalesce(cardinality(gone), 0)]));
    END IF;
    RETURN QUERY SELECT n_cancelled, cardinality(pgsched.task_request_cancel(busy, why, who, t))::bigint;
END;
$$;
COMMENT ON FUNCTION pgsched.cancel_tasks(text, text, text, timestamp with time zone, timestamp with time zone, text, text, boolean, timestamp with time zone) IS 'Cancel every unfinished task matching the filters (at least one): task type, tenant, idempotency key, due time in [due_from, due_until). Not started: CANCELLED; running: asked to stop. dry_run counts without changing anything. Returns the counts; a tenant-bound login acts on its own tenants'' tasks only.';
REVOKE ALL ON FUNCTION pgsched.cancel_tasks(text, text, text, timestamptz, timestamptz, text, text, boolean, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cancel_tasks(text, text, text, timestamptz, timestamptz, text, text, boolean, timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Which of these tasks (a worker's running ones) were asked to stop: the heartbeat
-- thread's backstop for a lost notification.
-- PL/pgSQL, not SQL: Citus refuses a SQL function that reads a distributed table with a
-- parameter (distributed mode, sql/code/distribution.sql).
CREATE OR REPLACE FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT tk.id
      FROM pgsched.tasks AS tk
     WHERE tk.status = 'PROCESSING'
       AND tk.id = ANY(task_cancel_requested.task_ids)
       AND tk.cancel_requested_at IS NOT NULL;
END;
$$;
COMMENT ON FUNCTION pgsched.task_cancel_requested(bigint[]) IS 'Which of these tasks (a worker''s running ones) were asked to stop: the heartbeat''s backstop for a lost NOTIFY pgsched_cancel.';
REVOKE ALL ON FUNCTION pgsched.task_cancel_requested(bigint[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_cancel_requested(bigint[]) TO pgsched_worker, pgsched_admin;
