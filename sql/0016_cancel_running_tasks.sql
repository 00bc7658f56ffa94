-- 0016 — cancelling running tasks.
--
-- A task not yet claimed (PENDING, QUEUED) is cancelled at once. A PROCESSING task runs in
-- a worker, which the database cannot stop, so its cancel is a request written on the row
-- (cancel_requested_at / _by / cancel_reason) with an event of its own, and a NOTIFY on
-- pgsched_cancel tells the worker holding it; the worker's heartbeat thread also asks
-- (task_cancel_requested) in case the notice was lost. The worker stops the handler and
-- reports CANCELLED. Once requested, the request decides the attempt's outcome:
--
--   COMPLETED        the handler finished first: it wins, and its event says so
--   anything else    CANCELLED: a report of CANCELLED, a failure, a release at shutdown,
--                    a lost worker (expired lease) -- a cancelled task is never retried
--
-- PROCESSING -> CANCELLED is legal only for a row whose cancel was requested, so only this
-- path reaches it. A fan-out parent that has fanned out (COMPLETED) is cancelled through
-- its children: the unfinished ones are cancelled (or asked to stop), and the parent's
-- event names the tenants that completed.
--
--   SELECT * FROM pgsched.cancel_task_ex(42, 'customer left');   -- outcome, detail
--   SELECT pgsched.cancel_task(42, 'customer left');             -- the id
--   SELECT * FROM pgsched.cancel_tasks(task_type => 'report', dry_run => TRUE);

ALTER TABLE pgsched.tasks
ADD COLUMN cancel_requested_at timestamptz,
ADD COLUMN cancel_requested_by text,
ADD COLUMN cancel_reason text;

-- Who cancels: the actor a caller names (a dashboard user), with the database role that
-- made the call, so a named actor cannot hide who really acted.
CREATE FUNCTION pgsched.cancel_actor(actor text) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN nullif(btrim(actor), '') IS NULL OR actor = session_user THEN session_user::text
        ELSE format('%s (role %s)', btrim(actor), session_user)
    END
$$;

-- What a cancel's text arguments may be: the reason and the actor end up on the record.
CREATE FUNCTION pgsched.cancel_input_problem(reason text, actor text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN length(reason) > 1000 THEN format('reason: at most 1000 characters (got %s)', length(reason))
        WHEN length(actor) > 200 THEN format('actor: at most 200 characters (got %s)', length(actor))
    END
$$;

-- The state machine, as 0001 with one conditional transition: PROCESSING -> CANCELLED
-- only for a row whose cancel was requested (cancel_task), never by a bare UPDATE.
CREATE OR REPLACE FUNCTION pgsched.task_record_transitions() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
SET enable_hashjoin = TRUE
SET enable_mergejoin = TRUE
AS $$
DECLARE
    bad_id bigint;
    bad record;
BEGIN
    -- An aggregate, not LIMIT 1: with a LIMIT the planner bets on finding a bad row early
    -- and nests the loops, which costs n^2 when (as always) there is none.
    SELECT min(o.id) FILTER (WHERE NOT (
               pgsched.transition_is_legal(o.status, n.status)
               OR (o.status = 'PROCESSING' AND n.status = 'CANCELLED' AND o.cancel_requested_at IS NOT NULL)))
      INTO bad_id
      FROM old_rows o
      JOIN new_rows n ON n.id = o.id
     WHERE n.status IS DISTINCT FROM o.status;
    IF bad_id IS NOT NULL THEN
        SELECT o.status AS from_status, n.status AS to_status INTO bad
          FROM old_rows o JOIN new_rows n ON n.id = o.id
         WHERE o.id = bad_id;
        RAISE EXCEPTION 'pgsched: illegal transition % -> % for task %',
            bad.from_status, bad.to_status, bad_id
            USING ERRCODE = 'check_violation',
                  HINT = CASE WHEN bad.from_status = 'PROCESSING' AND bad.to_status = 'CANCELLED'
                      THEN 'A running task is cancelled with pgsched.cancel_task: its worker stops it.'
                      ELSE 'See the state diagram in the README for the legal transitions.' END;
    END IF;

    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT n.id, n.tenant_id, n.task_type, o.status, n.status,
           -- A hand-written UPDATE that forgets updated_at still gets a true time.
           CASE WHEN n.updated_at IS DISTINCT FROM o.updated_at THEN n.updated_at ELSE now() END,
           n.next_run_at, n.attempts,
           coalesce(n.locked_by, o.locked_by), n.status_reason
      FROM old_rows o
      JOIN new_rows n ON n.id = o.id
     WHERE n.status IS DISTINCT FROM o.status;
    RETURN NULL;
END;
$$;

-- Ask the workers holding these PROCESSING tasks to stop them: the request on each row
-- (the first request wins; a second changes nothing), an event per row, a NOTIFY per row.
-- The caller holds the rows locked. Returns the ids newly asked.
CREATE FUNCTION pgsched.task_request_cancel(
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

-- Cancel one task; returns what happened:
--   CANCELLED          it had not started: CANCELLED now
--   CANCEL_REQUESTED   it is running: its worker is asked to stop it (see above)
--   FAN_OUT_CANCELLED  a fan-out that has fanned out: its unfinished tenants' tasks are
--                      cancelled or asked to stop; the detail names who completed
-- A finished task, an unknown id, or another tenant's task (for a tenant-bound login) is
-- refused and nothing changes.
CREATE FUNCTION pgsched.cancel_task_ex(
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
    kids record;
    asked bigint[];
    names_limit constant integer := 20;
BEGIN
    problem := pgsched.cancel_input_problem(reason, actor);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    who := pgsched.cancel_actor(actor);
    SELECT pgsched.producer_tenant_problem(ARRAY[x.tenant_id]) INTO problem
      FROM pgsched.tasks AS x WHERE x.id = cancel_task_ex.task_id;
    IF problem IS NOT NULL THEN
        -- Say no without naming the other tenant.
        RAISE EXCEPTION 'pgsched: role % may not cancel task %: it belongs to another tenant',
            session_user, cancel_task_ex.task_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    FOR attempt IN 1..5 LOOP
        BEGIN
            -- Locked: a worker's outcome (or a fan-out) waits for this decision, or this
            -- waits for theirs and sees the row they left.
            SELECT * INTO tk FROM pgsched.tasks AS x WHERE x.id = cancel_task_ex.task_id FOR UPDATE;
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
        UPDATE pgsched.tasks AS x
           SET status = 'CANCELLED', status_reason = format('cancelled by %s: %s', who, why), updated_at = t
         WHERE x.id = tk.id AND x.status = tk.status;
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
        -- A fan-out: stop what its tenants have not finished, in a stable order (id).
        PERFORM 1 FROM pgsched.tasks AS c
         WHERE c.parent_id = tk.id AND c.status IN ('PENDING', 'QUEUED', 'PROCESSING')
         ORDER BY c.id FOR UPDATE;
        UPDATE pgsched.tasks AS c
           SET status = 'CANCELLED', updated_at = t,
               status_reason = format('cancelled by %s with its fan-out %s: %s', who, tk.id, why)
         WHERE c.parent_id = tk.id AND c.status IN ('PENDING', 'QUEUED');
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

-- The SQL API's cancel, as before: returns the task's id (cancel_task_ex says what happened).
DROP FUNCTION pgsched.cancel_task(bigint, text, timestamptz);
CREATE FUNCTION pgsched.cancel_task(
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

-- Cancel every unfinished task matching the filters (at least one): its type, tenant,
-- idempotency key, and due time in [due_from, due_until). Not started: CANCELLED; running:
-- asked to stop. dry_run counts without changing anything. A tenant-bound login acts on
-- its own tenants' tasks only (naming another tenant is refused).
CREATE FUNCTION pgsched.cancel_tasks(
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
            WITH locked AS (
                SELECT tk.id, tk.status
                  FROM pgsched.tasks AS tk
                 WHERE tk.id = ANY(idle || busy) AND tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
                 ORDER BY tk.id
                   FOR UPDATE OF tk
            )
            -- A task claimed since it was matched is asked to stop; one finished is left alone.
            SELECT coalesce(array_agg(l.id) FILTER (WHERE l.status <> 'PROCESSING'), '{}'),
                   coalesce(array_agg(l.id) FILTER (WHERE l.status = 'PROCESSING'), '{}')
              INTO idle, busy
              FROM locked AS l;
            EXIT;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions while we waited for it: lock again
        END;
    END LOOP;

    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = format('cancelled by %s: %s', who, why), updated_at = t
     WHERE tk.id = ANY(idle) AND tk.status IN ('PENDING', 'QUEUED');
    GET DIAGNOSTICS n_cancelled = ROW_COUNT;
    RETURN QUERY SELECT n_cancelled, cardinality(pgsched.task_request_cancel(busy, why, who, t))::bigint;
END;
$$;

-- Which of these tasks (a worker's running ones) were asked to stop: the heartbeat
-- thread's backstop for a lost notification.
CREATE FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT tk.id
      FROM pgsched.tasks AS tk
     WHERE tk.status = 'PROCESSING'
       AND tk.id = ANY(task_cancel_requested.task_ids)
       AND tk.cancel_requested_at IS NOT NULL
$$;

-- Outcomes, as 0012 with the cancel: a report of CANCELLED, and every outcome but
-- COMPLETED of a task asked to stop, end it CANCELLED (reason and actor from the request,
-- how it stopped from the report); COMPLETED wins the race and says so.
CREATE OR REPLACE FUNCTION pgsched.task_finish_many(
    task_ids bigint[],
    lease_tokens uuid[],
    outcomes text[],
    errors text[] DEFAULT NULL,
    retry_delays interval[] DEFAULT NULL,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (task_id bigint, applied boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET plan_cache_mode = force_custom_plan
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- The statement's own clock: in a handler's transaction now() is when the work began.
    t timestamptz := coalesce(as_of, clock_timestamp());
    h record;
    bad text;
    done bigint[];
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    SELECT u.outcome INTO bad
      FROM unnest(outcomes) AS u(outcome)
     WHERE u.outcome IS NULL OR u.outcome NOT IN ('COMPLETED', 'RETRY', 'FAILED', 'RELEASED', 'CANCELLED')
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: unknown outcome % (COMPLETED, RETRY, FAILED, RELEASED or CANCELLED)', bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    WITH finished AS (
        UPDATE pgsched.tasks AS tk
           SET status = (CASE
                   WHEN u.outcome = 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                   WHEN tk.cancel_requested_at IS NOT NULL THEN 'CANCELLED'::pgsched.task_status
                   WHEN u.outcome = 'FAILED' THEN 'FAILED'::pgsched.task_status
                   WHEN u.outcome = 'RELEASED'
                       THEN pgsched.tier_status(pgsched.tier_of(tk.next_run_at, h.immediate_until, h.hot_until))
                   -- CANCELLED with no request (not a report this worker makes): a failed attempt.
                   WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                   ELSE pgsched.tier_status(
                       pgsched.tier_of(t + coalesce(u.delay, '0'), h.immediate_until, h.hot_until))
               END),
               attempts = CASE
                   WHEN u.outcome = 'RELEASED' AND tk.cancel_requested_at IS NULL THEN tk.attempts - 1
                   ELSE tk.attempts
               END,
               next_run_at = CASE
                   WHEN u.outcome IN ('RETRY', 'CANCELLED') AND tk.cancel_requested_at IS NULL
                        AND tk.attempts < tk.max_attempts
                       THEN t + coalesce(u.delay, '0')
                   ELSE tk.next_run_at
               END,
               last_error = CASE
                   WHEN u.outcome IN ('RETRY', 'FAILED', 'CANCELLED') THEN u.error
                   ELSE tk.last_error
               END,
               status_reason = CASE
                   WHEN u.outcome = 'COMPLETED' AND tk.cancel_requested_at IS NOT NULL
                       THEN format('completed: the handler finished before the cancel requested by %s (%s) took effect',
                                   tk.cancel_requested_by, tk.cancel_reason)
                            || coalesce('; ' || u.error, '')
                   WHEN u.outcome = 'COMPLETED' THEN u.error
                   WHEN tk.cancel_requested_at IS NOT NULL
                       THEN format('cancelled by %s: %s; %s', tk.cancel_requested_by, tk.cancel_reason,
                                   coalesce(split_part(u.error, E'\n', 1), lower(u.outcome)))
                   WHEN u.outcome = 'RELEASED' THEN coalesce(u.error, 'released unfinished at worker shutdown')
                   WHEN u.outcome IN ('RETRY', 'CANCELLED') AND tk.attempts >= tk.max_attempts
                       THEN format('attempts exhausted (%s of %s): %s', tk.attempts, tk.max_attempts, u.error)
                   ELSE u.error
               END,
               lease_token = NULL,
               lease_expires_at = NULL,
               updated_at = t
          FROM unnest(task_ids, lease_tokens, outcomes, errors, retry_delays)
               AS u(id, token, outcome, error, delay)
         WHERE tk.id = u.id AND tk.status = 'PROCESSING' AND tk.lease_token = u.token
        RETURNING tk.id, tk.status, tk.tenant_id, tk.task_type, tk.idempotency_key, tk.lane, tk.next_run_at
    ),
    ledger AS (
        INSERT INTO pgsched.completed_work (tenant_id, task_type, idempotency_key, task_id, completed_at)
        SELECT f.tenant_id, f.task_type, f.idempotency_key, f.id, t
          FROM finished AS f
         WHERE f.status = 'COMPLETED' AND f.idempotency_key IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT coalesce(array_agg(f.id), '{}'),
           coalesce(array_agg(DISTINCT f.lane) FILTER (
               WHERE f.status = 'QUEUED'
                 AND pgsched.tier_of(f.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
      INTO done, wake
      FROM finished AS f;
    -- A retry due soon wakes its lane, so it runs when due and not at the next backup poll.
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;

    -- Reports that lost their lease change nothing; say so on the task's record.
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at, tk.attempts,
           tk.locked_by,
           format('stale %s report ignored: the lease was lost (the task had moved on)', u.outcome)
      FROM unnest(task_ids, outcomes) AS u(id, outcome)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id
      JOIN pgsched.tasks AS tk ON tk.id = u.id
     WHERE d.id IS NULL;

    RETURN QUERY
    SELECT u.id, d.id IS NOT NULL
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id;
END;
$$;

-- Rescue, as 0012, with the cancel: a task asked to stop whose worker was lost is
-- CANCELLED, not queued again.
CREATE OR REPLACE FUNCTION pgsched.lease_rescue_expired(
    lane pgsched.task_lane DEFAULT NULL,
    max_tasks integer DEFAULT 1000,
    as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    rescued integer := 0;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    FOR attempt IN 1..5 LOOP
        BEGIN
            WITH expired AS MATERIALIZED (
                SELECT tk.id
                  FROM pgsched.tasks AS tk
                 WHERE tk.status = 'PROCESSING'
                   AND tk.lease_expires_at < t
                   AND (lease_rescue_expired.lane IS NULL OR tk.lane = lease_rescue_expired.lane)
                 ORDER BY tk.lease_expires_at
                 LIMIT lease_rescue_expired.max_tasks
                   FOR UPDATE SKIP LOCKED
            ),
            moved AS (
                UPDATE pgsched.tasks AS tk
                   SET status = CASE
                           WHEN tk.cancel_requested_at IS NOT NULL THEN 'CANCELLED'::pgsched.task_status
                           WHEN tk.attempts >= tk.max_attempts THEN 'FAILED'::pgsched.task_status
                           ELSE pgsched.tier_status(pgsched.tier_of(tk.next_run_at, h.immediate_until, h.hot_until))
                       END,
                       status_reason = CASE
                           WHEN tk.cancel_requested_at IS NOT NULL
                               THEN format('cancelled by %s: %s; worker lost (lease expired) before it stopped',
                                           tk.cancel_requested_by, tk.cancel_reason)
                           WHEN tk.attempts >= tk.max_attempts
                               THEN format('worker lost: lease expired, attempts exhausted (%s of %s)',
                                           tk.attempts, tk.max_attempts)
                           ELSE 'worker lost: lease expired; queued again'
                       END,
                       last_error = CASE
                           WHEN tk.cancel_requested_at IS NULL AND tk.attempts >= tk.max_attempts THEN 'worker lost'
                           ELSE tk.last_error
                       END,
                       lease_token = NULL,
                       lease_expires_at = NULL,
                       updated_at = t
                  FROM expired
                 WHERE tk.id = expired.id AND tk.status = 'PROCESSING'
                RETURNING tk.lane, tk.status, tk.next_run_at
            )
            SELECT count(*),
                   coalesce(array_agg(DISTINCT m.lane) FILTER (
                       WHERE m.status = 'QUEUED'
                         AND pgsched.tier_of(m.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
              INTO rescued, wake
              FROM moved AS m;
            PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
            RETURN rescued;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions mid-lock (it finished after all): try again
        END;
    END LOOP;
    RETURN rescued;
END;
$$;

-- Fan-out, as 0006, with the cancel: a parent asked to stop does not fan out.
CREATE OR REPLACE FUNCTION pgsched.task_fan_out(
    task_id bigint, lease_token uuid, as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p pgsched.tasks;
    tenant_list text[];
    n integer;
    child_ids bigint[];
    applied boolean;
BEGIN
    SELECT * INTO p FROM pgsched.tasks AS tk
     WHERE tk.id = task_fan_out.task_id AND tk.status = 'PROCESSING' AND tk.lease_token = task_fan_out.lease_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Locked: a cancel either came first (no tenant is started) or waits for the children
    -- to exist and cancels them.
    IF p.cancel_requested_at IS NOT NULL THEN
        PERFORM pgsched.task_finish_many(
            ARRAY[p.id], ARRAY[p.lease_token], ARRAY['CANCELLED'], ARRAY['stopped before fanning out'],
            NULL, as_of);
        RETURN 0;
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


REVOKE EXECUTE ON FUNCTION
pgsched.cancel_actor(text),
pgsched.cancel_input_problem(text, text),
pgsched.task_request_cancel(bigint[], text, text, timestamptz),
pgsched.cancel_task_ex(bigint, text, text, timestamptz),
pgsched.cancel_task(bigint, text, timestamptz, text),
pgsched.cancel_tasks(text, text, text, timestamptz, timestamptz, text, text, boolean, timestamptz),
pgsched.task_cancel_requested(bigint[])
FROM public;

-- Whoever may cancel (a producer for its tenants, the admin, a worker login as before).
GRANT EXECUTE ON FUNCTION
pgsched.cancel_task_ex(bigint, text, text, timestamptz),
pgsched.cancel_task(bigint, text, timestamptz, text),
pgsched.cancel_tasks(text, text, text, timestamptz, timestamptz, text, text, boolean, timestamptz)
TO pgsched_producer, pgsched_worker, pgsched_admin;
GRANT EXECUTE ON FUNCTION pgsched.task_cancel_requested(bigint[])
TO pgsched_worker, pgsched_admin;
GRANT EXECUTE ON FUNCTION
pgsched.cancel_actor(text),
pgsched.cancel_input_problem(text, text),
pgsched.task_request_cancel(bigint[], text, text, timestamptz)
TO pgsched_admin;
