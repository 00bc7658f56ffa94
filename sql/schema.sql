-- sql/schema.sql: generated; regenerate with `python -m pgsched.schema_dump`; do not edit.

--
-- PostgreSQL database dump
--

--
-- Name: pgsched; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA pgsched;

--
-- Name: misfire_policy; Type: TYPE; Schema: pgsched; Owner: -
--

CREATE TYPE pgsched.misfire_policy AS ENUM (
    'run_once',
    'skip',
    'catch_up'
);

--
-- Name: schedule_type; Type: TYPE; Schema: pgsched; Owner: -
--

CREATE TYPE pgsched.schedule_type AS ENUM (
    'ONE_TIME',
    'RECURRING'
);

--
-- Name: task_lane; Type: TYPE; Schema: pgsched; Owner: -
--

CREATE TYPE pgsched.task_lane AS ENUM (
    'HIGH',
    'NORMAL',
    'LOW',
    'BATCH'
);

--
-- Name: task_status; Type: TYPE; Schema: pgsched; Owner: -
--

CREATE TYPE pgsched.task_status AS ENUM (
    'PENDING',
    'QUEUED',
    'PROCESSING',
    'COMPLETED',
    'FAILED',
    'CANCELLED'
);

--
-- Name: cancel_actor(text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cancel_actor(actor text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE
        WHEN nullif(btrim(actor), '') IS NULL OR actor = session_user THEN session_user::text
        ELSE format('%s (role %s)', btrim(actor), session_user)
    END
$$;

--
-- Name: FUNCTION cancel_actor(actor text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cancel_actor(actor text) IS 'Who cancels, as recorded: the actor a caller names (a dashboard user) together with the database role that made the call.';

--
-- Name: cancel_input_problem(text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cancel_input_problem(reason text, actor text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN length(reason) > 1000 THEN format('reason: at most 1000 characters (got %s)', length(reason))
        WHEN length(actor) > 200 THEN format('actor: at most 200 characters (got %s)', length(actor))
    END
$$;

--
-- Name: FUNCTION cancel_input_problem(reason text, actor text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cancel_input_problem(reason text, actor text) IS 'Why a cancel''s reason or actor is refused, or NULL (they end up on the record; at most 1000 characters).';

--
-- Name: cancel_task(bigint, text, timestamp with time zone, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cancel_task(task_id bigint, reason text DEFAULT 'cancelled'::text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, actor text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT cancel_task.task_id
      FROM pgsched.cancel_task_ex(cancel_task.task_id, cancel_task.reason, cancel_task.actor, cancel_task.as_of)
$$;

--
-- Name: FUNCTION cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text) IS 'Cancel one task; returns its id. Not started: CANCELLED now; running: its worker is asked to stop it (cancel_task_ex says which). A finished task is refused (55000), an unknown id (P0002), another tenant''s task for a tenant-bound login (42501).';

--
-- Name: cancel_task_ex(bigint, text, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cancel_task_ex(task_id bigint, reason text DEFAULT 'cancelled'::text, actor text DEFAULT NULL::text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(outcome text, detail text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone) IS 'Cancel one task; returns outcome and detail: CANCELLED (it had not started), CANCEL_REQUESTED (running: its worker is asked to stop it, NOTIFY pgsched_cancel), FAN_OUT_CANCELLED (a fan-out''s unfinished tenants cancelled or asked to stop). actor is recorded together with the database role. Refusals as cancel_task.';

--
-- Name: cancel_tasks(text, text, text, timestamp with time zone, timestamp with time zone, text, text, boolean, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cancel_tasks(task_type text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, due_from timestamp with time zone DEFAULT NULL::timestamp with time zone, due_until timestamp with time zone DEFAULT NULL::timestamp with time zone, reason text DEFAULT 'cancelled'::text, actor text DEFAULT NULL::text, dry_run boolean DEFAULT false, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(cancelled bigint, cancel_requested bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone) IS 'Cancel every unfinished task matching the filters (at least one): task type, tenant, idempotency key, due time in [due_from, due_until). Not started: CANCELLED; running: asked to stop. dry_run counts without changing anything. Returns the counts; a tenant-bound login acts on its own tenants'' tasks only.';

--
-- Name: cron_field_values(text, text, integer); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
DECLARE
    field_name text := (ARRAY['minute', 'hour', 'day of month', 'month', 'day of week'])[field_no];
    lo integer := (ARRAY[0, 0, 1, 1, 0])[field_no];
    hi integer := (ARRAY[59, 23, 31, 12, 7])[field_no];
    -- The number of distinct values a field has (day of week: 7, though 7 names Sunday).
    span integer := (ARRAY[60, 24, 31, 12, 7])[field_no];
    names text[] := CASE field_no
        WHEN 4 THEN ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC']
        WHEN 5 THEN ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']
    END;
    name_base integer := CASE field_no WHEN 4 THEN 1 ELSE 0 END;
    prefix text := format('invalid cron expression %L: ', cron_expression);
    item text;
    parts text[];
    bounds text[];
    token text;
    numbers integer[];
    first_value integer;
    last_value integer;
    step integer;
BEGIN
    field_values := '{}';
    IF upper(field) ~ '(^|[^A-Z])[RH]([^A-Z]|$)' THEN
        problem := prefix || format(
            'the %s field uses R or H (random / hashed), which pgsched refuses: '
            'each process would pick a different time', field_name);
        RETURN;
    END IF;
    IF field ~ '#' OR upper(field) ~ '(^|[^A-Z])(L|W|LW)([^A-Z]|$)' OR upper(field) ~ '[0-9](L|W)' THEN
        problem := format(
            'cron expression %L: the %s field uses L, W or # (last / nearest weekday / nth weekday), '
            'which pgsched does not support', cron_expression, field_name);
        RETURN;
    END IF;
    IF field = '?' AND field_no IN (3, 5) THEN
        field := '*';
    END IF;
    FOREACH item IN ARRAY string_to_array(field, ',') LOOP
        parts := regexp_match(item, '^([^/]+)(/([0-9]+))?$');
        IF parts IS NULL THEN
            problem := prefix || format('%L in the %s field is not a value, range or step', item, field_name);
            RETURN;
        END IF;
        IF parts[1] = '*' THEN
            first_value := lo;
            last_value := CASE WHEN field_no = 5 THEN 6 ELSE hi END;
        ELSE
            bounds := regexp_match(parts[1], '^([0-9A-Za-z]+)(-([0-9A-Za-z]+))?$');
            IF bounds IS NULL THEN
                problem := prefix || format('%L in the %s field is not a value, range or step', item, field_name);
                RETURN;
            END IF;
            numbers := '{}';
            FOREACH token IN ARRAY ARRAY[bounds[1], bounds[3]] LOOP
                CONTINUE WHEN token IS NULL;
                IF token ~ '^[0-9]{1,6}$' THEN
                    numbers := numbers || token::integer;
                ELSIF array_position(names, upper(token)) IS NOT NULL THEN
                    numbers := numbers || (array_position(names, upper(token)) - 1 + name_base);
                ELSE
                    problem := prefix || format('%L in the %s field is not a value, range or step', item, field_name);
                    RETURN;
                END IF;
                IF numbers[cardinality(numbers)] NOT BETWEEN lo AND hi THEN
                    problem := prefix || format(
                        '%s in the %s field is out of range (%s to %s)', token, field_name, lo, hi);
                    RETURN;
                END IF;
            END LOOP;
            first_value := numbers[1];
            -- 'a/step' means from a to the end of the field.
            last_value := CASE
                WHEN cardinality(numbers) = 2 THEN numbers[2]
                WHEN parts[3] IS NOT NULL THEN CASE WHEN field_no = 5 THEN 6 ELSE hi END
                ELSE numbers[1]
            END;
            IF last_value < first_value THEN
                problem := prefix || format('the range %s in the %s field runs backwards', parts[1], field_name);
                RETURN;
            END IF;
        END IF;
        step := 1;
        IF parts[3] IS NOT NULL THEN
            IF length(parts[3]) > 6 OR parts[3]::integer NOT BETWEEN 1 AND span THEN
                problem := prefix || format(
                    'step %s in the %s field is out of range (1 to %s)', parts[3], field_name, span);
                RETURN;
            END IF;
            step := parts[3]::integer;
        END IF;
        field_values := field_values || ARRAY(
            SELECT CASE WHEN field_no = 5 THEN v % 7 ELSE v END
              FROM generate_series(first_value, last_value, step) AS v);
    END LOOP;
END;
$_$;

--
-- Name: FUNCTION cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]) IS 'One field of a cron expression: why it is refused (problem), or the values it lists. Used by cron_problem.';

--
-- Name: cron_problem(text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.cron_problem(cron_expression text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    fields text[];
    checked record;
    days integer[];
    months integer[];
BEGIN
    IF cron_expression IS NULL OR btrim(cron_expression) = '' THEN
        RETURN 'cron_expression is required (five fields: minute hour day month weekday)';
    END IF;
    fields := regexp_split_to_array(btrim(cron_expression), '\s+');
    IF cardinality(fields) <> 5 THEN
        RETURN format('cron expression %L must have five fields: minute hour day month weekday', cron_expression);
    END IF;
    FOR i IN 1..5 LOOP
        checked := pgsched.cron_field_values(cron_expression, fields[i], i);
        IF checked.problem IS NOT NULL THEN
            RETURN checked.problem;
        END IF;
        IF i = 3 THEN
            days := checked.field_values;
        ELSIF i = 4 THEN
            months := checked.field_values;
        END IF;
    END LOOP;
    -- With the weekday unrestricted, a day of month that none of the months has (31
    -- February, 31 April) never comes. (With both restricted either may match.)
    IF fields[3] NOT IN ('*', '?') AND fields[5] IN ('*', '?') AND NOT EXISTS (
        SELECT 1
          FROM unnest(days) AS d, unnest(months) AS m
         WHERE d <= CASE WHEN m = 2 THEN 29 WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END
    ) THEN
        RETURN format(
            'cron expression %L never fires (none of its months has that day of month)', cron_expression);
    END IF;
    RETURN NULL;
END;
$$;

--
-- Name: FUNCTION cron_problem(cron_expression text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.cron_problem(cron_expression text) IS 'Why a cron expression is refused, or NULL. One grammar with pgsched/cron.py: five fields, ranges, steps, lists, month and weekday names, ? for a day field, 7 for Sunday; refused: R, H, L, W, #, a step larger than its field, a backward range, an expression that never fires.';

--
-- Name: dead_discard(bigint, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.dead_discard(task_id bigint, reason text DEFAULT 'discarded from the DEAD lane'::text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = dead_discard.reason,
           updated_at = coalesce(dead_discard.as_of, now())
     WHERE tk.id = dead_discard.task_id AND tk.status = 'FAILED';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: task % is not in the DEAD lane', dead_discard.task_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN dead_discard.task_id;
END;
$$;

--
-- Name: FUNCTION dead_discard(task_id bigint, reason text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.dead_discard(task_id bigint, reason text, as_of timestamp with time zone) IS 'Discard a DEAD task: CANCELLED, recorded with the reason. Returns its id.';

--
-- Name: dead_retry(bigint, text, boolean, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.dead_retry(task_id bigint DEFAULT NULL::bigint, task_type text DEFAULT NULL::text, all_tasks boolean DEFAULT false, reason text DEFAULT 'retried from the DEAD lane'::text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    tier text;
    retried_ids bigint[];
    wake pgsched.task_lane[];
BEGIN
    IF num_nonnulls(dead_retry.task_id, dead_retry.task_type) + (CASE WHEN all_tasks THEN 1 ELSE 0 END) <> 1 THEN
        RAISE EXCEPTION 'pgsched: dead_retry needs exactly one of task_id, task_type or all_tasks'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF dead_retry.task_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = dead_retry.task_id AND tk.status = 'FAILED') THEN
        RAISE EXCEPTION 'pgsched: task % is not in the DEAD lane', dead_retry.task_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    tier := pgsched.tier_of(t, h.immediate_until, h.hot_until);
    WITH retried AS (
        UPDATE pgsched.tasks AS tk
           SET status = pgsched.tier_status(tier), attempts = 0, next_run_at = t,
               status_reason = dead_retry.reason, updated_at = t
         WHERE tk.status = 'FAILED'
           AND (dead_retry.all_tasks
                OR tk.id = dead_retry.task_id
                OR tk.task_type = dead_retry.task_type)
        RETURNING tk.id, tk.lane
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}'), coalesce(array_agg(DISTINCT r.lane), '{}')
      INTO retried_ids, wake
      FROM retried AS r;
    IF tier = 'IMMEDIATE' THEN
        PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(retried_ids) AS u(id);
END;
$$;

--
-- Name: FUNCTION dead_retry(task_id bigint, task_type text, all_tasks boolean, reason text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.dead_retry(task_id bigint, task_type text, all_tasks boolean, reason text, as_of timestamp with time zone) IS 'Retry DEAD (FAILED) tasks: one id, a task type, or all_tasks; due now and routed as a new task (QUEUED), attempts starting over, recorded with the reason; the lanes are woken. Returns the ids retried.';

--
-- Name: event_partitions(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.event_partitions() RETURNS TABLE(partition_name text, lower_bound timestamp with time zone, upper_bound timestamp with time zone, is_default boolean, approx_rows bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET "TimeZone" TO 'UTC'
    SET "DateStyle" TO 'ISO, YMD'
    AS $_$
    SELECT c.relname::text,
           CASE WHEN b.m[1] <> 'MINVALUE' THEN btrim(b.m[1], '''')::timestamptz END,
           CASE WHEN b.m[2] <> 'MAXVALUE' THEN btrim(b.m[2], '''')::timestamptz END,
           b.m IS NULL,
           CASE WHEN b.m IS NULL
                THEN (SELECT count(*) FROM (SELECT 1 FROM pgsched.task_events_default LIMIT 100000) AS d)
                ELSE greatest(c.reltuples, 0)::bigint END
      FROM pg_catalog.pg_inherits AS i
      JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL (
        SELECT regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                            '^FOR VALUES FROM \((.+)\) TO \((.+)\)$') AS m
     ) AS b
     WHERE i.inhparent = 'pgsched.task_events'::regclass
     ORDER BY b.m IS NULL, 2 NULLS FIRST
$_$;

--
-- Name: FUNCTION event_partitions(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.event_partitions() IS 'task_events'' partitions and their bounds (lower_bound NULL: the archive; both NULL: the default partition, whose rows are counted up to 100,000; others: the planner''s estimate).';

--
-- Name: event_partitions_status(timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.event_partitions_status(as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(period interval, current_covered boolean, periods_ahead integer, default_rows bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH s AS (
        SELECT st.event_partition_period AS period, coalesce(as_of, now()) AS t
          FROM pgsched.settings AS st
    )
    SELECT s.period,
           EXISTS (SELECT 1 FROM pgsched.event_partitions() AS p
                    WHERE NOT p.is_default AND s.t < p.upper_bound
                      AND (p.lower_bound IS NULL OR p.lower_bound <= s.t)),
           (SELECT count(*)::integer FROM pgsched.event_partitions() AS p
             WHERE p.lower_bound >= pgsched.event_period_start(s.t, s.period) + s.period),
           (SELECT p.approx_rows FROM pgsched.event_partitions() AS p WHERE p.is_default)
      FROM s
$$;

--
-- Name: FUNCTION event_partitions_status(as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.event_partitions_status(as_of timestamp with time zone) IS 'How far ahead task_events is covered as of as_of: the period, whether the current period has a partition, how many whole periods after it do, and the default partition''s rows. pgsched doctor reads it.';

--
-- Name: event_period_start(timestamp with time zone, interval); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.event_period_start(t timestamp with time zone, period interval) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN period = INTERVAL '7 days' THEN date_trunc('week', t, 'UTC')
                ELSE to_timestamp(floor(extract(EPOCH FROM t) / extract(EPOCH FROM period))
                                  * extract(EPOCH FROM period)) END
$$;

--
-- Name: FUNCTION event_period_start(t timestamp with time zone, period interval); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.event_period_start(t timestamp with time zone, period interval) IS 'The first instant of the partition period holding t: a week from Monday (UTC), or a UTC day or a part of one that divides it.';

--
-- Name: finished_partitions(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.finished_partitions() RETURNS TABLE(partition_name text, lower_bound timestamp with time zone, upper_bound timestamp with time zone, is_default boolean, approx_rows bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET "TimeZone" TO 'UTC'
    SET "DateStyle" TO 'ISO, YMD'
    AS $_$
    SELECT c.relname::text,
           CASE WHEN b.m[1] <> 'MINVALUE' THEN btrim(b.m[1], '''')::timestamptz END,
           CASE WHEN b.m[2] <> 'MAXVALUE' THEN btrim(b.m[2], '''')::timestamptz END,
           b.m IS NULL,
           CASE WHEN b.m IS NULL
                THEN (SELECT count(*) FROM (SELECT 1 FROM pgsched.tasks_finished_default LIMIT 100000) AS d)
                ELSE greatest(c.reltuples, 0)::bigint END
      FROM pg_catalog.pg_inherits AS i
      JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL (
        SELECT regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                            '^FOR VALUES FROM \((.+)\) TO \((.+)\)$') AS m
     ) AS b
     WHERE i.inhparent = 'pgsched.tasks_finished'::regclass
     ORDER BY b.m IS NULL, 2 NULLS FIRST
$_$;

--
-- Name: FUNCTION finished_partitions(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.finished_partitions() IS 'tasks_finished''s partitions and their bounds, as event_partitions lists task_events''.';

--
-- Name: finished_partitions_maintain(integer, interval, timestamp with time zone, interval); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.finished_partitions_maintain(ahead integer DEFAULT 3, keep interval DEFAULT '30 days'::interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, lock_wait interval DEFAULT '00:00:01'::interval) RETURNS TABLE(partition_name text, action text, task_rows bigint)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET "TimeZone" TO 'UTC'
    AS $$
    -- FAILED rows are in tasks_done, never here: the archive expires whole, as a period does.
    SELECT * FROM pgsched.time_partitions_maintain(
        'finished_partitions_maintain', 'pgsched.tasks_finished', 'pgsched.finished_partitions', NULL,
        ahead, keep, as_of, lock_wait)
$$;

--
-- Name: FUNCTION finished_partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.finished_partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) IS 'The retention sweep: makes the partitions of tasks_finished for the next ahead periods and drops those wholly older than keep, with their tasks'' idempotency keys. Waits at most lock_wait for the lock; a lock not granted changes nothing. 22023 on bad arguments.';

--
-- Name: finished_partitions_status(timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.finished_partitions_status(as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(period interval, current_covered boolean, periods_ahead integer, default_rows bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH s AS (
        SELECT st.event_partition_period AS period, coalesce(as_of, now()) AS t
          FROM pgsched.settings AS st
    )
    SELECT s.period,
           EXISTS (SELECT 1 FROM pgsched.finished_partitions() AS p
                    WHERE NOT p.is_default AND s.t < p.upper_bound
                      AND (p.lower_bound IS NULL OR p.lower_bound <= s.t)),
           (SELECT count(*)::integer FROM pgsched.finished_partitions() AS p
             WHERE p.lower_bound >= pgsched.event_period_start(s.t, s.period) + s.period),
           (SELECT p.approx_rows FROM pgsched.finished_partitions() AS p WHERE p.is_default)
      FROM s
$$;

--
-- Name: FUNCTION finished_partitions_status(as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.finished_partitions_status(as_of timestamp with time zone) IS 'How far ahead tasks_finished is covered as of as_of, as event_partitions_status says for task_events. pgsched doctor reads it.';

--
-- Name: hot_tier_due_by_ids(bigint[], timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(id bigint, lane text, priority integer, next_run_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    until timestamptz;
    usable pgsched.task_lane[];
    -- Workers requeue any tenant's tasks; a producer's login learns only of its tenants.
    every_tenant boolean := pg_has_role(session_user, 'pgsched_worker', 'MEMBER')
        OR pgsched.login_acts_for_all_tenants();
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'ids must be an array of task ids, got NULL' USING ERRCODE = '22023';
    END IF;
    IF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'ids holds % ids; at most 10000 per call', cardinality(ids)
            USING ERRCODE = '22023';
    END IF;
    SELECT h.immediate_until INTO until FROM pgsched.tier_horizons(t) AS h;
    SELECT coalesce(array_agg(l.lane), '{}') INTO usable
      FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l (lane)
     WHERE pgsched.hot_tier_lane_usable(l.lane);
    RETURN QUERY
    SELECT tk.id, tk.lane::text, tk.priority, tk.next_run_at
      FROM pgsched.tasks AS tk
     WHERE tk.id = ANY(hot_tier_due_by_ids.ids)
       AND tk.status = 'QUEUED'
       AND tk.next_run_at < until
       AND tk.lane = ANY(usable)
       AND (every_tenant OR EXISTS (
            SELECT 1 FROM pgsched.producer_tenants AS b
             WHERE b.role_name = session_user AND b.tenant_id = tk.tenant_id));
END;
$$;

--
-- Name: FUNCTION hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone) IS 'Which of these ids the Redis mirror holds: QUEUED, due within the immediate window, on a lane it serves; a producer''s login learns only of its own tenants'' tasks.';

--
-- Name: hot_tier_lane_usable(pgsched.task_lane); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT hot_tier_lane_usable.lane = ANY (s.fairness_off_lanes)
           AND NOT EXISTS (SELECT 1 FROM pgsched.task_limits)
      FROM pgsched.settings AS s
$$;

--
-- Name: FUNCTION hot_tier_lane_usable(lane pgsched.task_lane); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) IS 'Whether claims by id (the Redis hot tier) may serve a lane: fairness off and no task limits.';

--
-- Name: hot_tier_window(pgsched.task_lane, integer, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(id bigint, priority integer, next_run_at timestamp with time zone, db_now timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    until timestamptz;
BEGIN
    IF max_tasks IS NULL OR max_tasks < 1 THEN
        RAISE EXCEPTION 'max_tasks must be at least 1, got %', max_tasks USING ERRCODE = '22023';
    END IF;
    SELECT h.immediate_until INTO until FROM pgsched.tier_horizons(t) AS h;
    RETURN QUERY
    SELECT c.id, c.priority, c.next_run_at, t
      FROM unnest(pgsched.lane_priorities(hot_tier_window.lane)) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT tk.id, tk.priority, tk.next_run_at
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'QUEUED'
           AND tk.lane = hot_tier_window.lane
           AND tk.priority = p.priority
           AND tk.next_run_at < until
         ORDER BY tk.next_run_at
         LIMIT hot_tier_window.max_tasks
     ) AS c
     LIMIT hot_tier_window.max_tasks;
END;
$$;

--
-- Name: FUNCTION hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) IS 'The Redis mirror''s pass: the ids of a lane QUEUED and due within the immediate window, at most max_tasks, in claim order, with the database''s now.';

--
-- Name: lane_for(integer, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.lane_for(priority integer, lane text DEFAULT NULL::text) RETURNS pgsched.task_lane
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

--
-- Name: FUNCTION lane_for(priority integer, lane text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.lane_for(priority integer, lane text) IS 'The lane of a task: BATCH when asked for, else from the priority (8+ HIGH, 4-7 NORMAL, 0-3 LOW).';

--
-- Name: lane_next_due(pgsched.task_lane); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.lane_next_due(lane pgsched.task_lane) RETURNS TABLE(next_due timestamp with time zone, db_now timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT min(c.next_run_at), clock_timestamp()
      FROM unnest(pgsched.lane_priorities(lane_next_due.lane)) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT tk.next_run_at
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'QUEUED' AND tk.lane = lane_next_due.lane AND tk.priority = p.priority
         ORDER BY tk.next_run_at
         LIMIT 1
     ) AS c
$$;

--
-- Name: FUNCTION lane_next_due(lane pgsched.task_lane); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.lane_next_due(lane pgsched.task_lane) IS 'When a lane next has work, and the database''s now: the worker sleeps exactly until then.';

--
-- Name: lane_priorities(pgsched.task_lane); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) RETURNS integer[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE lane
        WHEN 'HIGH' THEN ARRAY[10, 9, 8]
        WHEN 'NORMAL' THEN ARRAY[7, 6, 5, 4]
        WHEN 'LOW' THEN ARRAY[3, 2, 1, 0]
        ELSE ARRAY[10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    END
$$;

--
-- Name: FUNCTION lane_priorities(lane pgsched.task_lane); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) IS 'The priorities of a lane, highest first (the claim reads one index range per priority).';

--
-- Name: lane_set_fairness(pgsched.task_lane, boolean); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.lane_set_fairness(lane pgsched.task_lane, fair boolean) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION lane_set_fairness(lane pgsched.task_lane, fair boolean); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.lane_set_fairness(lane pgsched.task_lane, fair boolean) IS 'Turn fair claims on or off for one lane (on by default): on, a claim shares its batch between the tenants with work queued.';

--
-- Name: lease_rescue_expired(pgsched.task_lane, integer, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.lease_rescue_expired(lane pgsched.task_lane DEFAULT NULL::pgsched.task_lane, max_tasks integer DEFAULT 1000, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION lease_rescue_expired(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.lease_rescue_expired(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) IS 'The rescue sweep: PROCESSING tasks of a lane (NULL: every lane) whose lease expired go back to the tier of their due time, or to FAILED with worker lost when their attempts are used up; one asked to stop is CANCELLED. At most max_tasks; returns how many were rescued.';

--
-- Name: limit_clear(text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.limit_clear(scope text, key text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION limit_clear(scope text, key text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.limit_clear(scope text, key text) IS 'Remove the limits of one task type or tenant; false when it had none.';

--
-- Name: limit_list(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.limit_list() RETURNS TABLE(scope text, key text, max_processing integer, rate integer, per text, processing integer, updated_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION limit_list(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.limit_list() IS 'Every limit, with what is PROCESSING under it now.';

--
-- Name: limit_room(integer, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.limit_room(max_tasks integer, t timestamp with time zone) RETURNS TABLE(scope text, key text, room integer)
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

--
-- Name: FUNCTION limit_room(max_tasks integer, t timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.limit_room(max_tasks integer, t timestamp with time zone) IS 'How many more tasks each limit lets a claim take now (at most max_tasks); used by the claims.';

--
-- Name: task_limits; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.task_limits (
    scope text NOT NULL,
    key text NOT NULL,
    max_processing integer,
    rate integer,
    rate_period interval,
    tokens double precision,
    tokens_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT task_limits_limit_something CHECK (((max_processing IS NOT NULL) OR (rate IS NOT NULL))),
    CONSTRAINT task_limits_max_processing_range CHECK ((max_processing >= 0)),
    CONSTRAINT task_limits_rate_period_known CHECK ((((rate IS NULL) AND (rate_period IS NULL)) OR ((rate IS NOT NULL) AND (rate_period = ANY (ARRAY['00:00:01'::interval, '00:01:00'::interval]))))),
    CONSTRAINT task_limits_rate_range CHECK ((rate >= 1)),
    CONSTRAINT task_limits_scope_known CHECK ((scope = ANY (ARRAY['task_type'::text, 'tenant'::text])))
);

--
-- Name: TABLE task_limits; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.task_limits IS 'Limits per task type or tenant, read by every claim: max_processing at once and a claim rate (a token bucket).';

--
-- Name: limit_set(text, text, integer, integer, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.limit_set(scope text, key text, max_processing integer DEFAULT NULL::integer, rate integer DEFAULT NULL::integer, per text DEFAULT 'second'::text) RETURNS pgsched.task_limits
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION limit_set(scope text, key text, max_processing integer, rate integer, per text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.limit_set(scope text, key text, max_processing integer, rate integer, per text) IS 'Set (or replace) the limits of one task type or tenant: max_processing tasks PROCESSING at once across all workers, and/or rate claims per second or minute (a token bucket). A bad field is refused with 22023 naming it.';

--
-- Name: limit_tokens(pgsched.task_limits, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamp with time zone) RETURNS double precision
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN l.rate IS NULL THEN NULL ELSE least(
        greatest(l.rate / 10.0, 1.0),
        coalesce(l.tokens, greatest(l.rate / 10.0, 1.0))
        + greatest(extract(EPOCH FROM t - coalesce(l.tokens_at, t)), 0)
        * l.rate / extract(EPOCH FROM l.rate_period)
    ) END
$$;

--
-- Name: FUNCTION limit_tokens(l pgsched.task_limits, t timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamp with time zone) IS 'The tokens a limit''s rate bucket holds at t: refilled at rate per period, up to a tenth of the rate (at least 1).';

--
-- Name: login_acts_for_all_tenants(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.login_acts_for_all_tenants() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT pg_has_role(session_user, 'pgsched_admin', 'MEMBER')
        OR pg_has_role(session_user, (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n
                                       WHERE n.nspname = 'pgsched'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b
                    WHERE b.role_name = session_user AND b.tenant_id = '*')
$$;

--
-- Name: FUNCTION login_acts_for_all_tenants(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.login_acts_for_all_tenants() IS 'Whether the session''s login acts for every tenant: superusers, the pgsched schema''s owner and pgsched_admin members do; any other login needs the binding tenant_id ''*''.';

--
-- Name: occurrence_is_live(bigint); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.occurrence_is_live(task_id bigint) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT task_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM pgsched.tasks AS tk
         WHERE tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
           AND (tk.id = occurrence_is_live.task_id OR tk.parent_id = occurrence_is_live.task_id)
    )
$$;

--
-- Name: FUNCTION occurrence_is_live(task_id bigint); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.occurrence_is_live(task_id bigint) IS 'Whether a recurring occurrence is still live: its task, or any tenant''s child of its fan-out, is still to run or running.';

--
-- Name: partitions_maintain(integer, interval, timestamp with time zone, interval); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.partitions_maintain(ahead integer DEFAULT 3, keep interval DEFAULT '30 days'::interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, lock_wait interval DEFAULT '00:00:01'::interval) RETURNS TABLE(partition_name text, action text, event_rows bigint)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET "TimeZone" TO 'UTC'
    AS $$
    -- Expired periods keep the events of live and DEAD tasks, in the archive.
    SELECT * FROM pgsched.time_partitions_maintain(
        'partitions_maintain', 'pgsched.task_events', 'pgsched.event_partitions',
        'EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = e.task_id'
        ' AND tk.status IN (''PENDING'', ''QUEUED'', ''PROCESSING'', ''FAILED''))',
        ahead, keep, as_of, lock_wait)
$$;

--
-- Name: FUNCTION partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) IS 'The retention sweep: makes the partitions of task_events for the next ahead periods and drops those wholly older than keep, copying the events of live and DEAD tasks to task_events_archive first. Waits at most lock_wait for the lock; a lock not granted changes nothing. 22023 on bad arguments.';

--
-- Name: producer_tenant_problem(text[]); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE
        WHEN pgsched.login_acts_for_all_tenants() THEN NULL
        WHEN NOT EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user)
            THEN format(
                'role %s is bound to no tenant, so it may act for none; an admin binds it with: '
                'INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%L, %L)',
                session_user, session_user::text,
                CASE WHEN coalesce(tenant_ids[1], 'default') LIKE '\_%' THEN '*'
                     ELSE coalesce(tenant_ids[1], 'default') END)
        ELSE (
            SELECT format(
                'role %s may only schedule for tenant(s) %s, not %s',
                session_user,
                (SELECT string_agg(b.tenant_id, ', ' ORDER BY b.tenant_id)
                   FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user),
                u.t)
              FROM unnest(tenant_ids) AS u(t)
             WHERE NOT EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b
                                WHERE b.role_name = session_user AND b.tenant_id = coalesce(u.t, 'default'))
             LIMIT 1)
    END
$$;

--
-- Name: FUNCTION producer_tenant_problem(tenant_ids text[]); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) IS 'Why the session''s login may not act for these tenants, or NULL. Fails closed: a login bound to no tenant (pgsched.producer_tenants) acts for none, and the message gives the binding an admin would add.';

--
-- Name: retention_prune(interval, integer, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.retention_prune(keep interval DEFAULT '30 days'::interval, max_rows integer DEFAULT 10000, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(tasks bigint, events bigint, idempotency_keys bigint, occurrences bigint, ledger bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    cutoff timestamptz := coalesce(as_of, now()) - keep;
    row_cutoff timestamptz;
    n_tasks bigint;
    n_keys bigint;
    n_occurrences bigint;
    n_ledger bigint;
BEGIN
    SELECT least(cutoff, min(p.lower_bound)) INTO row_cutoff
      FROM pgsched.finished_partitions() AS p
     WHERE p.lower_bound IS NOT NULL;
    WITH old AS (
        SELECT tk.id, tk.status, tk.updated_at FROM pgsched.tasks_finished AS tk
         WHERE tk.status IN ('COMPLETED', 'CANCELLED') AND tk.updated_at < row_cutoff
         LIMIT max_rows
    )
    DELETE FROM pgsched.tasks_finished AS tk USING old
     WHERE tk.id = old.id AND tk.status = old.status AND tk.updated_at = old.updated_at
       AND tk.updated_at < row_cutoff;
    GET DIAGNOSTICS n_tasks = ROW_COUNT;

    WITH old AS (
        SELECT k.tenant_id, k.idempotency_key FROM pgsched.idempotency_keys AS k
         WHERE k.created_at < cutoff
           AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = k.task_id)
         LIMIT max_rows
    )
    DELETE FROM pgsched.idempotency_keys AS k USING old
     WHERE k.tenant_id = old.tenant_id AND k.idempotency_key = old.idempotency_key;
    GET DIAGNOSTICS n_keys = ROW_COUNT;

    WITH old AS (
        SELECT o.schedule_id, o.fire_at FROM pgsched.schedule_occurrences AS o
         WHERE o.created_at < cutoff
           AND NOT EXISTS (SELECT 1 FROM pgsched.schedules AS s
                            WHERE s.id = o.schedule_id AND s.last_fire_at = o.fire_at)
         LIMIT max_rows
    )
    DELETE FROM pgsched.schedule_occurrences AS o USING old
     WHERE o.schedule_id = old.schedule_id AND o.fire_at = old.fire_at;
    GET DIAGNOSTICS n_occurrences = ROW_COUNT;

    -- '#once' cannot occur in a task type (plain identifiers), so this spares exactly the
    -- once-keys.
    WITH old AS (
        SELECT w.tenant_id, w.task_type, w.idempotency_key FROM pgsched.completed_work AS w
         WHERE w.completed_at < cutoff AND w.task_type NOT LIKE '%#once'
         LIMIT max_rows
    )
    DELETE FROM pgsched.completed_work AS w USING old
     WHERE w.tenant_id = old.tenant_id AND w.task_type = old.task_type
       AND w.idempotency_key = old.idempotency_key;
    GET DIAGNOSTICS n_ledger = ROW_COUNT;

    RETURN QUERY SELECT n_tasks, 0::bigint, n_keys, n_occurrences, n_ledger;
END;
$$;

--
-- Name: FUNCTION retention_prune(keep interval, max_rows integer, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.retention_prune(keep interval, max_rows integer, as_of timestamp with time zone) IS 'The retention sweep: deletes, in batches of max_rows, the bookkeeping older than keep (idempotency keys, occurrences and ledger rows no longer used) and finished tasks that no dated partition holds. ctx.once keys, the DEAD lane and its history are kept. Returns the counts.';

--
-- Name: route(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.route(run_at timestamp with time zone, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT pgsched.tier_of(route.run_at, h.immediate_until, h.hot_until)
      FROM pgsched.tier_horizons(route.as_of) AS h
$$;

--
-- Name: FUNCTION route(run_at timestamp with time zone, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.route(run_at timestamp with time zone, as_of timestamp with time zone) IS 'The route a due time takes as of as_of (default now): IMMEDIATE (within settings.immediate_window), HOT (within settings.hot_window) or COLD.';

--
-- Name: run_at_problem(timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.run_at_problem(run_at timestamp with time zone) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN run_at < '1970-01-01 00:00:00+00' OR run_at >= '9999-01-01 00:00:00+00'
            OR NOT isfinite(run_at) THEN format(
            'run_at %s is out of range (1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)',
            run_at::text)
    END
$$;

--
-- Name: FUNCTION run_at_problem(run_at timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.run_at_problem(run_at timestamp with time zone) IS 'Why a due time is refused, or NULL: it must lie in [1970-01-01, 9999-01-01) UTC, so that every reading of it, in any zone, fits a client''s datetime.';

--
-- Name: schedule_arm(bigint, bigint, timestamp with time zone, timestamp with time zone[], timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[] DEFAULT '{}'::timestamp with time zone[], as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    s pgsched.schedules;
    t timestamptz := coalesce(as_of, now());
    occurrence_is_new boolean;
    new_task bigint;
BEGIN
    SELECT * INTO s FROM pgsched.schedules AS sc WHERE sc.id = schedule_arm.schedule_id FOR UPDATE;
    IF NOT FOUND OR NOT s.enabled OR s.armed_task_id IS DISTINCT FROM schedule_arm.expected_task_id
       OR pgsched.occurrence_is_live(s.armed_task_id) THEN
        RETURN NULL;
    END IF;

    WITH recorded AS (
        INSERT INTO pgsched.schedule_occurrences AS o (schedule_id, fire_at, outcome, created_at)
        SELECT s.id, m, 'MISSED', t FROM unnest(coalesce(schedule_arm.missed, '{}')) AS m
        ON CONFLICT DO NOTHING
        RETURNING o.fire_at
    )
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, fire_at, detail)
    SELECT s.id, t, 'missed', r.fire_at, format('missed during downtime; misfire policy %s', s.misfire_policy)
      FROM recorded AS r;

    INSERT INTO pgsched.schedule_occurrences AS o (schedule_id, fire_at, outcome, created_at)
    VALUES (s.id, schedule_arm.fire_at, 'ARMED', t)
    ON CONFLICT DO NOTHING
    RETURNING TRUE INTO occurrence_is_new;
    IF occurrence_is_new IS NULL THEN
        -- This fire time already has its occurrence: never create it twice.
        RETURN NULL;
    END IF;

    new_task := pgsched.schedule_task(
        task_type => s.task_type,
        payload => s.payload,
        run_at => schedule_arm.fire_at,
        tenant_id => s.tenant_id,
        priority => s.priority,
        max_attempts => s.max_attempts,
        lane => CASE WHEN s.lane = 'BATCH' THEN 'BATCH' END,
        metadata => s.metadata,
        as_of => t,
        scope => s.scope,
        product => s.product
    );
    UPDATE pgsched.tasks AS tk
       SET schedule_type = 'RECURRING', schedule_id = s.id,
           cron_expression = s.cron_expression, timezone = s.timezone
     WHERE tk.id = new_task;
    UPDATE pgsched.schedule_occurrences AS o SET task_id = new_task
     WHERE o.schedule_id = s.id AND o.fire_at = schedule_arm.fire_at;
    UPDATE pgsched.schedules AS sc
       SET armed_task_id = new_task, last_fire_at = schedule_arm.fire_at, updated_at = t
     WHERE sc.id = s.id;
    RETURN new_task;
END;
$$;

--
-- Name: FUNCTION schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[], as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[], as_of timestamp with time zone) IS 'The recurring sweep or a worker arms one occurrence of a schedule: a compare-and-set on the armed task (expected_task_id, NULL for none yet), so two processes racing arm it once; missed fire times are recorded per the misfire policy. Returns the new task id, or NULL when someone else armed it first or the schedule is disabled.';

--
-- Name: schedule_cancel_armed(bigint, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_cancel_armed(schedule_id bigint, reason text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE sql
    AS $$
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = reason, updated_at = coalesce(as_of, now())
      FROM pgsched.schedules AS s
     WHERE s.id = schedule_cancel_armed.schedule_id
       AND tk.id = s.armed_task_id
       AND tk.status IN ('PENDING', 'QUEUED')
    RETURNING tk.id
$$;

--
-- Name: FUNCTION schedule_cancel_armed(schedule_id bigint, reason text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_cancel_armed(schedule_id bigint, reason text, as_of timestamp with time zone) IS 'Cancel a schedule''s armed occurrence if it has not started; returns its id, or NULL. Used by schedule_pause and schedule_delete.';

--
-- Name: schedule_delete(bigint, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_delete(schedule_id bigint, reason text DEFAULT 'deleted by operator'::text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    cancelled bigint;
BEGIN
    PERFORM 1 FROM pgsched.schedules AS s WHERE s.id = schedule_delete.schedule_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no schedule with id %', schedule_delete.schedule_id
            USING ERRCODE = 'no_data_found';
    END IF;
    cancelled := pgsched.schedule_cancel_armed(schedule_delete.schedule_id, schedule_delete.reason, t);
    DELETE FROM pgsched.schedules AS s WHERE s.id = schedule_delete.schedule_id;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, detail)
    VALUES (
        schedule_delete.schedule_id, t, 'deleted',
        schedule_delete.reason || coalesce(format(' (armed task %s cancelled)', cancelled), '')
    );
    RETURN schedule_delete.schedule_id;
END;
$$;

--
-- Name: FUNCTION schedule_delete(schedule_id bigint, reason text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_delete(schedule_id bigint, reason text, as_of timestamp with time zone) IS 'Delete a recurring schedule: its armed occurrence cancelled if it has not started, the row gone, a ''deleted'' row in schedule_events; its events and its tasks'' history stay. An unknown id is refused (P0002).';

--
-- Name: schedule_enable(bigint, boolean, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_enable(schedule_id bigint, enabled boolean DEFAULT true, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS void
    LANGUAGE sql
    AS $$
    WITH e AS (
        UPDATE pgsched.schedules AS s
           SET enabled = schedule_enable.enabled,
               quarantine_reason = CASE WHEN schedule_enable.enabled THEN NULL ELSE s.quarantine_reason END,
               updated_at = coalesce(as_of, now())
         WHERE s.id = schedule_enable.schedule_id
        RETURNING s.id
    )
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what)
    SELECT e.id, coalesce(as_of, now()), CASE WHEN schedule_enable.enabled THEN 'enabled' ELSE 'disabled' END
      FROM e
$$;

--
-- Name: FUNCTION schedule_enable(schedule_id bigint, enabled boolean, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_enable(schedule_id bigint, enabled boolean, as_of timestamp with time zone) IS 'The older switch of migration 0005: sets a schedule''s enabled flag (clearing a quarantine when enabling) and writes an ''enabled'' or ''disabled'' event, leaving an armed occurrence to run. Prefer schedule_pause and schedule_resume.';

--
-- Name: schedule_pause(bigint, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_pause(schedule_id bigint, reason text DEFAULT 'paused by operator'::text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    cancelled bigint;
BEGIN
    PERFORM 1 FROM pgsched.schedules AS s WHERE s.id = schedule_pause.schedule_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no schedule with id %', schedule_pause.schedule_id
            USING ERRCODE = 'no_data_found';
    END IF;
    cancelled := pgsched.schedule_cancel_armed(schedule_pause.schedule_id, schedule_pause.reason, t);
    UPDATE pgsched.schedules AS s
       SET enabled = FALSE, updated_at = t
     WHERE s.id = schedule_pause.schedule_id;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, detail)
    VALUES (
        schedule_pause.schedule_id, t, 'paused',
        schedule_pause.reason || coalesce(format(' (armed task %s cancelled)', cancelled), '')
    );
    RETURN schedule_pause.schedule_id;
END;
$$;

--
-- Name: FUNCTION schedule_pause(schedule_id bigint, reason text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_pause(schedule_id bigint, reason text, as_of timestamp with time zone) IS 'Pause a recurring schedule: disabled, its armed occurrence cancelled if it has not started (one running finishes, and is not re-armed); a ''paused'' row in schedule_events with the reason. An unknown id is refused (P0002).';

--
-- Name: schedule_quarantine(bigint, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH q AS (
        UPDATE pgsched.schedules AS s
           SET enabled = FALSE, quarantine_reason = reason, updated_at = coalesce(as_of, now())
         WHERE s.id = schedule_quarantine.schedule_id AND s.enabled
        RETURNING s.id
    )
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, detail)
    SELECT q.id, coalesce(as_of, now()), 'quarantined', reason FROM q
$$;

--
-- Name: FUNCTION schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone) IS 'The recurring sweep takes a broken schedule out of service (disabled, quarantine_reason, a schedule_events row); every other schedule keeps firing.';

--
-- Name: schedule_recurring(text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamp with time zone, timestamp with time zone, text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_recurring(task_type text, cron_expression text, timezone text DEFAULT 'UTC'::text, payload jsonb DEFAULT '{}'::jsonb, tenant_id text DEFAULT 'default'::text, priority integer DEFAULT 5, idempotency_key text DEFAULT NULL::text, misfire_policy text DEFAULT 'run_once'::text, max_attempts bigint DEFAULT 3, lane text DEFAULT NULL::text, metadata jsonb DEFAULT '{}'::jsonb, catch_up_limit integer DEFAULT 10, first_fire_at timestamp with time zone DEFAULT NULL::timestamp with time zone, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, scope text DEFAULT 'tenant'::text, product text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    problem text;
    owner text := schedule_recurring.tenant_id;
    new_id bigint;
    t timestamptz := coalesce(as_of, now());
BEGIN
    problem := coalesce(
        pgsched.task_input_problem(
            schedule_recurring.task_type, coalesce(schedule_recurring.payload, '{}'),
            schedule_recurring.tenant_id, schedule_recurring.priority, schedule_recurring.max_attempts,
            schedule_recurring.lane, coalesce(schedule_recurring.metadata, '{}'),
            schedule_recurring.idempotency_key, (SELECT s.max_payload_bytes FROM pgsched.settings AS s),
            schedule_recurring.scope, schedule_recurring.product),

        pgsched.cron_problem(schedule_recurring.cron_expression),
        pgsched.timezone_problem(schedule_recurring.timezone),
        CASE WHEN schedule_recurring.misfire_policy IS NULL
                  OR schedule_recurring.misfire_policy NOT IN ('run_once', 'skip', 'catch_up')
             THEN format('unknown misfire_policy %L (run_once, skip or catch_up)', schedule_recurring.misfire_policy)
        END,
        CASE WHEN schedule_recurring.catch_up_limit IS NULL OR schedule_recurring.catch_up_limit < 1
             THEN 'catch_up_limit must be at least 1'
        END
    );
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A product or global schedule belongs to no single tenant, like its tasks.
    IF schedule_recurring.scope <> 'tenant' THEN
        owner := '_all';
    END IF;
    problem := pgsched.producer_tenant_problem(ARRAY[owner]);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: %', problem USING ERRCODE = 'insufficient_privilege';
    END IF;

    INSERT INTO pgsched.schedules AS s (
        tenant_id, task_type, cron_expression, timezone, payload, metadata, priority, lane,
        max_attempts, misfire_policy, catch_up_limit, idempotency_key, scope, product,
        created_at, updated_at
    ) VALUES (
        owner, schedule_recurring.task_type, btrim(schedule_recurring.cron_expression),
        schedule_recurring.timezone, coalesce(schedule_recurring.payload, '{}'),
        coalesce(schedule_recurring.metadata, '{}'), schedule_recurring.priority,
        pgsched.lane_for(schedule_recurring.priority, schedule_recurring.lane),
        schedule_recurring.max_attempts, schedule_recurring.misfire_policy::pgsched.misfire_policy,
        schedule_recurring.catch_up_limit, schedule_recurring.idempotency_key,
        schedule_recurring.scope, schedule_recurring.product, t, t
    )
    ON CONFLICT ON CONSTRAINT schedules_key_per_tenant DO NOTHING
    RETURNING s.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT s.id INTO new_id FROM pgsched.schedules AS s
         WHERE s.tenant_id = owner
           AND s.idempotency_key = schedule_recurring.idempotency_key;
        RETURN new_id;
    END IF;
    IF first_fire_at IS NOT NULL THEN
        PERFORM pgsched.schedule_arm(new_id, NULL, first_fire_at, '{}', t);
    ELSE
        PERFORM pg_notify('pgsched_recurring', '');
    END IF;
    RETURN new_id;
END;
$$;

--
-- Name: FUNCTION schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text) IS 'Create a recurring schedule: a five-field cron expression in an IANA zone, a task type and its payload, a misfire policy (run_once, skip, catch_up with catch_up_limit). With first_fire_at the first occurrence is armed in the same transaction; without it the recurring sweep, woken by NOTIFY pgsched_recurring, arms it. An idempotency key the tenant already used returns that schedule''s id. Returns the schedule id.';

--
-- Name: schedule_resume(bigint, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_resume(schedule_id bigint, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
BEGIN
    UPDATE pgsched.schedules AS s
       SET enabled = TRUE, quarantine_reason = NULL, updated_at = t
     WHERE s.id = schedule_resume.schedule_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no schedule with id %', schedule_resume.schedule_id
            USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what)
    VALUES (schedule_resume.schedule_id, t, 'resumed');
    PERFORM pg_notify('pgsched_recurring', '');
    RETURN schedule_resume.schedule_id;
END;
$$;

--
-- Name: FUNCTION schedule_resume(schedule_id bigint, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_resume(schedule_id bigint, as_of timestamp with time zone) IS 'Resume a recurring schedule: enabled, its quarantine cleared, a ''resumed'' row in schedule_events, and NOTIFY pgsched_recurring so the sweeper arms it at once. An unknown id is refused (P0002).';

--
-- Name: schedule_task(text, jsonb, timestamp with time zone, text, integer, text, bigint, text, jsonb, timestamp with time zone, text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_task(task_type text, payload jsonb DEFAULT '{}'::jsonb, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, tenant_id text DEFAULT 'default'::text, priority integer DEFAULT 5, idempotency_key text DEFAULT NULL::text, max_attempts bigint DEFAULT 3, lane text DEFAULT NULL::text, metadata jsonb DEFAULT '{}'::jsonb, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, scope text DEFAULT 'tenant'::text, product text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT e.task_id
      FROM pgsched.schedule_task_ex(
          schedule_task.task_type, schedule_task.payload, schedule_task.run_at, schedule_task.tenant_id,
          schedule_task.priority, schedule_task.idempotency_key, schedule_task.max_attempts,
          schedule_task.lane, schedule_task.metadata, schedule_task.as_of, schedule_task.scope,
          schedule_task.product) AS e
$$;

--
-- Name: FUNCTION schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) IS 'Schedule one task; returns its id. Checks every argument (SQLSTATE 22023 naming it), routes the task by its due time (IMMEDIATE and HOT: QUEUED in the hot tier, with a NOTIFY for IMMEDIATE; COLD: PENDING in the cold tier), and honours the idempotency key per tenant: a key the tenant already used returns that task''s id and changes nothing (schedule_task_ex says which). priority 0 to 10 picks the lane (8+ HIGH, 4-7 NORMAL, 0-3 LOW); lane => ''BATCH'' asks for the BATCH lane; scope => ''product'' or ''global'' fans out to tenants when it runs.';

--
-- Name: schedule_task_ex(text, jsonb, timestamp with time zone, text, integer, text, bigint, text, jsonb, timestamp with time zone, text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_task_ex(task_type text, payload jsonb DEFAULT '{}'::jsonb, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, tenant_id text DEFAULT 'default'::text, priority integer DEFAULT 5, idempotency_key text DEFAULT NULL::text, max_attempts bigint DEFAULT 3, lane text DEFAULT NULL::text, metadata jsonb DEFAULT '{}'::jsonb, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, scope text DEFAULT 'tenant'::text, product text DEFAULT NULL::text) RETURNS TABLE(task_id bigint, created boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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
        max_attempts, idempotency_key, scope, product, created_at, updated_at
    ) VALUES (
        new_id, owner, schedule_task_ex.task_type, due, coalesce(schedule_task_ex.payload, '{}'),
        coalesce(schedule_task_ex.metadata, '{}'), coalesce(schedule_task_ex.priority, 5), task_lane,
        pgsched.tier_status(tier),
        coalesce(schedule_task_ex.max_attempts, 3), schedule_task_ex.idempotency_key,
        coalesce(schedule_task_ex.scope, 'tenant'), schedule_task_ex.product, t, t
    );
    IF tier = 'IMMEDIATE' THEN
        PERFORM pg_notify('pgsched_' || lower(task_lane::text), '');
    END IF;
    RETURN QUERY SELECT new_id, TRUE;
END;
$$;

--
-- Name: FUNCTION schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) IS 'Schedule one task, as schedule_task with the same arguments; returns its id and created: false when the tenant already used this idempotency key (that task''s id comes back, unchanged).';

--
-- Name: schedule_tasks(text[], jsonb[], timestamp with time zone[], text[], integer[], text[], bigint[], text[], jsonb[], timestamp with time zone, text[], text[]); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedule_tasks(task_types text[], payloads jsonb[] DEFAULT NULL::jsonb[], run_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], tenant_ids text[] DEFAULT NULL::text[], priorities integer[] DEFAULT NULL::integer[], idempotency_keys text[] DEFAULT NULL::text[], max_attempts bigint[] DEFAULT NULL::bigint[], lanes text[] DEFAULT NULL::text[], metadatas jsonb[] DEFAULT NULL::jsonb[], as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, scopes text[] DEFAULT NULL::text[], products text[] DEFAULT NULL::text[]) RETURNS TABLE(ordinal bigint, task_id bigint, created boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
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

--
-- Name: FUNCTION schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]) IS 'Schedule many tasks in one statement: parallel arrays, one element per task (every array one-dimensional), with the checks, routing and idempotency of schedule_task. Returns (ordinal, task_id, created) per input row, ordinal 1-based. One bad row refuses the whole batch, naming it: row N of the batch.';

--
-- Name: schedules; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.schedules (
    id bigint NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    cron_expression text NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    misfire_policy pgsched.misfire_policy DEFAULT 'run_once'::pgsched.misfire_policy NOT NULL,
    catch_up_limit integer DEFAULT 10 NOT NULL,
    idempotency_key text,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    enabled boolean DEFAULT true NOT NULL,
    quarantine_reason text,
    last_fire_at timestamp with time zone,
    armed_task_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_catch_up_limit_check CHECK ((catch_up_limit >= 1))
);

--
-- Name: TABLE schedules; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.schedules IS 'Recurring schedules: a cron expression and an IANA zone, the task to arm, the misfire policy, enabled, quarantine_reason and the armed task.';

--
-- Name: schedules_unarmed(integer); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.schedules_unarmed(max_rows integer DEFAULT 500) RETURNS SETOF pgsched.schedules
    LANGUAGE sql STABLE
    AS $$
    SELECT s.*
      FROM pgsched.schedules AS s
     WHERE s.enabled AND NOT pgsched.occurrence_is_live(s.armed_task_id)
     ORDER BY s.id
     LIMIT max_rows
$$;

--
-- Name: FUNCTION schedules_unarmed(max_rows integer); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.schedules_unarmed(max_rows integer) IS 'The recurring sweep: enabled schedules with no live occurrence (new, resumed, their occurrence finished, or left unarmed by a crash).';

--
-- Name: sweep_leader_acquire(text, interval, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(acquired boolean, generation bigint, leader text, expires_at timestamp with time zone, expires_in_s double precision)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    problem text := pgsched.sweep_leader_lease_problem(holder, lease);
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: sweep_leader_acquire: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Compare-and-set: only an expired lease is taken. A concurrent candidate waits for
    -- this row, then re-reads it, finds it live, and takes nothing.
    RETURN QUERY
    UPDATE pgsched.sweep_leader AS l
       SET holder = sweep_leader_acquire.holder, generation = l.generation + 1,
           acquired_at = t, renewed_at = t, expires_at = t + lease
     WHERE l.expires_at <= t
    RETURNING TRUE, l.generation, l.holder, l.expires_at, extract(EPOCH FROM l.expires_at - t)::float8;
    IF NOT FOUND THEN
        RETURN QUERY
        SELECT FALSE, l.generation, l.holder, l.expires_at, extract(EPOCH FROM l.expires_at - t)::float8
          FROM pgsched.sweep_leader AS l;
    END IF;
END;
$$;

--
-- Name: FUNCTION sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone) IS 'A sweeper tries to take the leader lease: granted by compare-and-set when the lease is free or expired, each takeover incrementing the generation. Returns whether it was acquired, the generation, the holder and when the lease expires.';

--
-- Name: sweep_leader_fence(text, bigint, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    held record;
BEGIN
    PERFORM 1 FROM pgsched.sweep_leader AS l
     WHERE l.generation = sweep_leader_fence.generation
       AND l.holder = sweep_leader_fence.holder
       AND l.expires_at > coalesce(as_of, now())
       FOR SHARE;
    IF NOT FOUND THEN
        SELECT l.holder, l.generation, l.expires_at INTO held FROM pgsched.sweep_leader AS l;
        RAISE EXCEPTION 'pgsched: sweep leader % generation % no longer leads (generation % of %, until %)',
            sweep_leader_fence.holder, sweep_leader_fence.generation,
            held.generation, held.holder, held.expires_at
            USING ERRCODE = 'PS001';
    END IF;
END;
$$;

--
-- Name: FUNCTION sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone) IS 'Run in the same transaction before a leader''s writes: refuses a holder or generation that is no longer current, and holds off a takeover while the transaction runs.';

--
-- Name: sweep_leader_lease_problem(text, interval); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN holder IS NULL OR holder = '' THEN 'holder must be a non-empty name'
        WHEN length(holder) > 200 THEN 'holder must be at most 200 characters'
        WHEN lease IS NULL OR lease < INTERVAL '1 second' OR lease > INTERVAL '1 hour'
            THEN 'lease must be between 1 second and 1 hour'
    END
$$;

--
-- Name: FUNCTION sweep_leader_lease_problem(holder text, lease interval); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval) IS 'Why a holder name or lease length is refused, or NULL.';

--
-- Name: sweep_leader_release(text, bigint, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    UPDATE pgsched.sweep_leader AS l
       SET expires_at = least(l.expires_at, coalesce(as_of, now()))
     WHERE l.generation = sweep_leader_release.generation AND l.holder = sweep_leader_release.holder;
    RETURN FOUND;
END;
$$;

--
-- Name: FUNCTION sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone) IS 'The leader lets its lease go on a clean stop, so the next sweeper takes over at once; returns whether it held it.';

--
-- Name: sweep_leader_renew(text, bigint, interval, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    problem text := pgsched.sweep_leader_lease_problem(holder, lease);
    until timestamptz;
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: sweep_leader_renew: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Fenced by the generation: a lease that lapsed unseen by anyone is still this
    -- holder's (nobody led meanwhile); one taken over since is not. NULL: deposed.
    UPDATE pgsched.sweep_leader AS l
       SET renewed_at = t, expires_at = t + lease
     WHERE l.generation = sweep_leader_renew.generation AND l.holder = sweep_leader_renew.holder
    RETURNING l.expires_at INTO until;
    RETURN until;
END;
$$;

--
-- Name: FUNCTION sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone) IS 'The leader renews its lease (holder and generation must match); returns the new expiry, or NULL when the lease is no longer its own.';

--
-- Name: system_identifier(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.system_identifier() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT system_identifier::text FROM pg_control_system()
$$;

--
-- Name: FUNCTION system_identifier(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.system_identifier() IS 'The Postgres system identifier, which the Redis mirror records so that a mirror built from another database is recognised.';

--
-- Name: task_cancel_requested(bigint[]); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) RETURNS SETOF bigint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT tk.id
      FROM pgsched.tasks AS tk
     WHERE tk.status = 'PROCESSING'
       AND tk.id = ANY(task_cancel_requested.task_ids)
       AND tk.cancel_requested_at IS NOT NULL
$$;

--
-- Name: FUNCTION task_cancel_requested(task_ids bigint[]); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) IS 'Which of these tasks (a worker''s running ones) were asked to stop: the heartbeat''s backstop for a lost NOTIFY pgsched_cancel.';

--
-- Name: task_id_seq; Type: SEQUENCE; Schema: pgsched; Owner: -
--

CREATE SEQUENCE pgsched.task_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: tasks; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tasks (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
)
PARTITION BY LIST (status);

--
-- Name: TABLE tasks; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tasks IS 'Every task, one row each, list-partitioned by status: the status is the tier (tasks_cold, tasks_hot, tasks_finished, tasks_done). Write through this table, never a partition: a trigger checks and records every transition.';

--
-- Name: task_claim_ids(pgsched.task_lane, bigint[], text, interval, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval DEFAULT '00:00:30'::interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF pgsched.tasks
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    SET enable_seqscan TO 'true'
    SET enable_bitmapscan TO 'true'
    SET enable_nestloop TO 'true'
    SET enable_hashjoin TO 'true'
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
    )
    SELECT c.*
      FROM claimed AS c
     INNER JOIN unnest(locked) WITH ORDINALITY AS a (id, pos) ON a.id = c.id
     ORDER BY a.pos;
END;
$$;

--
-- Name: FUNCTION task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval, as_of timestamp with time zone) IS 'A worker claims these ids of a lane (popped from the Redis hot tier): as task_claim_many, only rows still QUEUED in that lane and due. Claims nothing on a lane where hot_tier_lane_usable is false.';

--
-- Name: task_claim_many(pgsched.task_lane, integer, text, interval, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval DEFAULT '00:00:30'::interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF pgsched.tasks
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    SET enable_hashjoin TO 'false'
    SET enable_mergejoin TO 'false'
    SET enable_seqscan TO 'true'
    SET enable_bitmapscan TO 'true'
    SET enable_nestloop TO 'true'
    SET enable_sort TO 'true'
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
    -- Planned once per connection (see the top of this file).
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', TRUE);
    SELECT NOT (task_claim_many.lane = ANY (s.fairness_off_lanes)) INTO fair FROM pgsched.settings AS s;
    limited := EXISTS (SELECT 1 FROM pgsched.task_limits);

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
    )
    SELECT c.*
      FROM claimed AS c
     INNER JOIN unnest(admitted) WITH ORDINALITY AS a (id, pos) ON a.id = c.id
     ORDER BY a.pos;
END;
$$;

--
-- Name: FUNCTION task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval, as_of timestamp with time zone) IS 'A worker claims up to max_tasks due tasks of a lane: QUEUED, due by the database clock, higher priority first then earliest due, shared between tenants when the lane is fair, within the task limits; FOR UPDATE SKIP LOCKED. Each becomes PROCESSING with a lease (worker, lease token, expiry) and its attempt counted; keyed tasks whose work the ledger already holds come back with done_by set.';

--
-- Name: task_content_problem(jsonb, jsonb, text, bigint); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint) RETURNS text
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

--
-- Name: FUNCTION task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint) IS 'Why a task''s content is refused, or NULL: the payload as JSON text at most max_payload_bytes, metadata a JSON object under the same cap, an idempotency key of 1 to 200 characters.';

--
-- Name: task_fan_out(bigint, uuid, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone) IS 'A worker runs a product or global task: creates one child task per active tenant in the BATCH lane (the tenant set resolved now). A parent asked to stop does not fan out. Returns the number of children.';

--
-- Name: task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[] DEFAULT NULL::text[], retry_delays interval[] DEFAULT NULL::interval[], as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(task_id bigint, applied boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_custom_plan'
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'true'
    SET enable_bitmapscan TO 'true'
    SET enable_nestloop TO 'true'
    SET enable_hashjoin TO 'true'
    AS $$
DECLARE
    -- The statement's own clock: in a handler's transaction now() is when the work began.
    t timestamptz := coalesce(as_of, clock_timestamp());
    h record;
    bad text;
    done bigint[];
    stale bigint[];
    wake pgsched.task_lane[];
BEGIN
    -- The usual flush is planned once per connection (see the top of this file).
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', TRUE);
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    SELECT u.outcome INTO bad
      FROM unnest(outcomes) AS u(outcome)
     WHERE u.outcome IS NULL OR u.outcome NOT IN ('COMPLETED', 'RETRY', 'FAILED', 'RELEASED', 'CANCELLED')
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: unknown outcome % (COMPLETED, RETRY, FAILED, RELEASED or CANCELLED)', bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The reported rows, each found by its primary key whatever the statistics (see the
    -- top of this file), matched to its report by hashing.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE),
            set_config('enable_nestloop', 'off', TRUE), set_config('enable_hashjoin', 'on', TRUE);
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
         WHERE tk.id = u.id AND tk.lease_token = u.token
           AND tk.id = ANY (task_ids)
           -- The hot tier only (pruning), in words no partial index's predicate follows from.
           AND tk.status IN ('QUEUED', 'PROCESSING')
           AND tk.status::text = 'PROCESSING'
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

    IF cardinality(done) = cardinality(task_ids) THEN
        -- Every report applied (the usual flush): no stale report to record, and no
        -- statement to plan for it (planning a join against every partition of
        -- pgsched.tasks was the largest fixed cost of a flush).
        RETURN QUERY SELECT u.id, TRUE FROM unnest(task_ids) AS u(id);
        RETURN;
    END IF;

    -- Reports that lost their lease change nothing; say so on the task's record. The task
    -- may be in any tier by now: each id is looked up in each tier's primary key. Rare:
    -- planned when it happens, for the partitions there are then.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
    SELECT coalesce(array_agg(u.id), '{}') INTO stale
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id
     WHERE d.id IS NULL;
    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT tk.id, tk.tenant_id, tk.task_type, tk.status, tk.status, t, tk.next_run_at, tk.attempts,
           tk.locked_by,
           format('stale %s report ignored: the lease was lost (the task had moved on)', u.outcome)
      FROM unnest(task_ids, outcomes) AS u(id, outcome)
      JOIN pgsched.tasks AS tk ON tk.id = u.id
     WHERE tk.id = ANY (stale);

    RETURN QUERY
    SELECT u.id, d.id IS NOT NULL
      FROM unnest(task_ids) AS u(id)
      LEFT JOIN unnest(done) AS d(id) ON d.id = u.id;
END;
$$;

--
-- Name: FUNCTION task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[], retry_delays interval[], as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[], retry_delays interval[], as_of timestamp with time zone) IS 'A worker writes a batch of outcomes (COMPLETED, RETRY, FAILED, RELEASED, CANCELLED), each a compare-and-set on status and lease token: a report whose lease is gone is not applied and is recorded as a stale-report event instead. A retry is routed by its new due time. Returns (task_id, applied) per report.';

--
-- Name: task_heartbeat_many(bigint[], uuid[], interval, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval DEFAULT '00:00:30'::interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    SET enable_seqscan TO 'true'
    SET enable_bitmapscan TO 'true'
    SET enable_nestloop TO 'true'
    SET enable_hashjoin TO 'true'
    AS $$
DECLARE
    held bigint[];
    renewed bigint[];
BEGIN
    -- Each leased row found by its primary key whatever the statistics (see the top of
    -- this file), matched to its token by hashing.
    PERFORM set_config('enable_seqscan', 'off', TRUE), set_config('enable_bitmapscan', 'off', TRUE),
            set_config('enable_nestloop', 'off', TRUE), set_config('enable_hashjoin', 'on', TRUE);
    FOR attempt IN 1..5 LOOP
        BEGIN
            SELECT coalesce(array_agg(l.id), '{}')
              INTO held
              FROM (
                SELECT tk.id
                  FROM pgsched.tasks AS tk
                 INNER JOIN unnest(task_ids, lease_tokens) AS u (id, token)
                    ON tk.id = u.id AND tk.lease_token = u.token
                 WHERE tk.id = ANY (task_ids)
                   -- The hot tier only (pruning), in words no partial index's predicate follows from.
                   AND tk.status IN ('QUEUED', 'PROCESSING')
                   AND tk.status::text = 'PROCESSING'
                   FOR UPDATE OF tk SKIP LOCKED
            ) AS l;
            WITH extended AS (
                UPDATE pgsched.tasks AS tk
                   SET lease_expires_at = coalesce(as_of, now()) + lease
                 WHERE tk.id = ANY (held)
                   AND tk.status IN ('QUEUED', 'PROCESSING')
                   AND tk.status::text = 'PROCESSING'
                RETURNING tk.id
            )
            SELECT coalesce(array_agg(e.id), '{}') INTO renewed FROM extended AS e;
            RETURN QUERY SELECT unnest(renewed);
            RETURN;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- a row moved partitions mid-lock: try again, it will be gone
        END;
    END LOOP;
    RETURN;
END;
$$;

--
-- Name: FUNCTION task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval, as_of timestamp with time zone) IS 'A worker renews the leases of its running tasks (a compare-and-set on the lease token); returns the ids renewed. An id missing from the result is no longer this worker''s.';

--
-- Name: task_identity_problem(text, text, integer, bigint, text, text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text DEFAULT 'tenant'::text, product text DEFAULT NULL::text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $_$
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
$_$;

--
-- Name: FUNCTION task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text, product text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text, product text) IS 'Why a task''s identity is refused, or NULL: task type and tenant as plain identifiers (tenants starting with _ are the engine''s), priority 0 to 10, max_attempts 1 to 1000, lane, scope and product.';

--
-- Name: task_input_problem(text, jsonb, text, integer, bigint, text, jsonb, text, bigint, text, text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text DEFAULT 'tenant'::text, product text DEFAULT NULL::text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(
        pgsched.task_identity_problem(task_type, tenant_id, priority, max_attempts, lane, scope, product),
        pgsched.task_content_problem(payload, metadata, idempotency_key, max_payload_bytes)
    )
$$;

--
-- Name: FUNCTION task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text, product text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text, product text) IS 'Why one task''s input is refused, or NULL: task_identity_problem and task_content_problem together.';

--
-- Name: task_insert_many(text[], jsonb[], timestamp with time zone[], text[], integer[], text[], bigint[], text[], jsonb[], text[], text[], timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_insert_many(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], scopes text[], products text[], as_of timestamp with time zone) RETURNS TABLE(ordinal bigint, task_id bigint, created boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    h record;
    n integer := coalesce(cardinality(task_types), 0);
    ids bigint[];
    created_ids bigint[];
    wake_lanes pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(as_of);
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
               pgsched.tier_status(pgsched.tier_of(i.run_at, h.immediate_until, h.hot_until)),
               i.max_attempts, i.idempotency_key, i.scope, i.product, as_of, as_of
          FROM input AS i
         WHERE i.idempotency_key IS NULL OR i.id IN (SELECT kd.task_id FROM keyed AS kd)
        RETURNING tk.id, tk.lane, tk.next_run_at
    )
    SELECT coalesce(array_agg(x.id), '{}'),
           coalesce(array_agg(DISTINCT x.lane) FILTER (
               WHERE pgsched.tier_of(x.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
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

--
-- Name: FUNCTION task_insert_many(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], scopes text[], products text[], as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_insert_many(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], scopes text[], products text[], as_of timestamp with time zone) IS 'The engine''s insert behind schedule_task and schedule_tasks, after their checks: routes each row by tier_of and honours idempotency keys. Returns (ordinal, task_id, created).';

--
-- Name: task_promote_due(integer, timestamp with time zone, interval); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_promote_due(max_tasks integer DEFAULT 10000, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone, within interval DEFAULT NULL::interval) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'true'
    SET enable_bitmapscan TO 'true'
    SET enable_sort TO 'true'
    AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    h record;
    horizon timestamptz;
    due bigint[];
    promoted integer;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO h FROM pgsched.tier_horizons(t);
    horizon := coalesce(t + extract(epoch FROM task_promote_due.within) * INTERVAL '1 second', h.hot_until);
    -- The cold tier read in due order, as far as it promotes, whatever the statistics (see
    -- the top of this file); then each row found by its primary key.
    PERFORM set_config('enable_sort', 'off', TRUE), set_config('enable_seqscan', 'off', TRUE),
            set_config('enable_bitmapscan', 'off', TRUE);
    SELECT coalesce(array_agg(d.id), '{}')
      INTO due
      FROM (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PENDING' AND tk.next_run_at < horizon
         ORDER BY tk.next_run_at
         LIMIT task_promote_due.max_tasks
           FOR UPDATE SKIP LOCKED
    ) AS d;
    PERFORM set_config('enable_sort', 'on', TRUE);
    WITH moved AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED',
               status_reason = CASE
                   WHEN tk.next_run_at <= t THEN 'promoted late: already due (overdue sweep)'
                   ELSE 'promoted into the hot window'
               END,
               updated_at = t
         WHERE tk.id = ANY (due) AND tk.status = 'PENDING'
        RETURNING tk.lane, tk.next_run_at
    )
    SELECT count(*),
           coalesce(array_agg(DISTINCT m.lane) FILTER (
               WHERE pgsched.tier_of(m.next_run_at, h.immediate_until, h.hot_until) = 'IMMEDIATE'), '{}')
      INTO promoted, wake
      FROM moved AS m;
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    RETURN promoted;
END;
$$;

--
-- Name: FUNCTION task_promote_due(max_tasks integer, as_of timestamp with time zone, within interval); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_promote_due(max_tasks integer, as_of timestamp with time zone, within interval) IS 'The promotion sweep: moves up to max_tasks cold (PENDING) tasks due within the hot window into the hot tier, reading only the slice coming due. Returns how many moved.';

--
-- Name: task_record_transitions(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_record_transitions() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_nestloop TO 'false'
    SET enable_mergejoin TO 'false'
    SET enable_hashjoin TO 'true'
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

--
-- Name: FUNCTION task_record_transitions(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_record_transitions() IS 'Statement trigger on pgsched.tasks: refuses an illegal status change (transition_is_legal) and writes one task_events row per transition, in the same statement.';

--
-- Name: task_refuse_bad_due_times(); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_refuse_bad_due_times() RETURNS trigger
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

--
-- Name: FUNCTION task_refuse_bad_due_times(); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_refuse_bad_due_times() IS 'Statement trigger on inserts into pgsched.tasks: refuses a due time run_at_problem refuses, whichever path wrote the row, naming the task type and tenant.';

--
-- Name: task_request_cancel(bigint[], text, text, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_request_cancel(task_ids bigint[], reason text, actor text, t timestamp with time zone) RETURNS bigint[]
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

--
-- Name: FUNCTION task_request_cancel(task_ids bigint[], reason text, actor text, t timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_request_cancel(task_ids bigint[], reason text, actor text, t timestamp with time zone) IS 'Ask the workers holding these PROCESSING tasks to stop them: the request on each row (the first wins), an event and a NOTIFY pgsched_cancel per row. Returns the ids newly asked.';

--
-- Name: task_wake_overdue(interval, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.task_wake_overdue(older_than interval DEFAULT '00:01:00'::interval, as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(lane pgsched.task_lane, overdue bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT l.lane, c.n
      FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l(lane)
     CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM pgsched.tasks AS tk
             WHERE tk.status = 'QUEUED' AND tk.lane = l.lane
               AND tk.next_run_at < coalesce(as_of, now()) - older_than
             LIMIT 10000) AS x
     ) AS c
     WHERE c.n > 0;
    PERFORM pg_notify('pgsched_' || lower(o.lane::text), '')
       FROM (SELECT l.lane FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l(lane)
              WHERE EXISTS (SELECT 1 FROM pgsched.tasks AS tk
                             WHERE tk.status = 'QUEUED' AND tk.lane = l.lane
                               AND tk.next_run_at < coalesce(as_of, now()) - older_than)) AS o;
END;
$$;

--
-- Name: FUNCTION task_wake_overdue(older_than interval, as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.task_wake_overdue(older_than interval, as_of timestamp with time zone) IS 'The rescue sweep''s safety net: wakes the lanes with due work nobody claimed for longer than older_than. Returns the lanes and their overdue counts.';

--
-- Name: tenant_add(text, text, jsonb); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.tenant_add(tenant_id text, product text, metadata jsonb DEFAULT '{}'::jsonb) RETURNS text
    LANGUAGE plpgsql
    AS $_$
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
$_$;

--
-- Name: FUNCTION tenant_add(tenant_id text, product text, metadata jsonb); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.tenant_add(tenant_id text, product text, metadata jsonb) IS 'Register a tenant, with its product and metadata; returns its id.';

--
-- Name: tenant_set_active(text, boolean); Type: FUNCTION; Schema: pgsched; Owner: -
--

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

--
-- Name: FUNCTION tenant_set_active(tenant_id text, active boolean); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.tenant_set_active(tenant_id text, active boolean) IS 'Activate or deactivate a tenant: an inactive tenant is left out of fan-outs. Returns its id.';

--
-- Name: tier_horizons(timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.tier_horizons(as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(immediate_until timestamp with time zone, hot_until timestamp with time zone)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(as_of, now()) + extract(epoch FROM s.immediate_window) * INTERVAL '1 second',
           coalesce(as_of, now()) + extract(epoch FROM s.hot_window) * INTERVAL '1 second'
      FROM pgsched.settings AS s
$$;

--
-- Name: FUNCTION tier_horizons(as_of timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.tier_horizons(as_of timestamp with time zone) IS 'Where the IMMEDIATE and HOT routes end as of as_of (default now), from pgsched.settings.';

--
-- Name: tier_of(timestamp with time zone, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN run_at < immediate_until THEN 'IMMEDIATE'
        WHEN run_at < hot_until THEN 'HOT'
        ELSE 'COLD'
    END
$$;

--
-- Name: FUNCTION tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone) IS 'The route of a due time given the horizons of tier_horizons: IMMEDIATE, HOT or COLD. Every path that puts a task in a tier uses it.';

--
-- Name: tier_status(text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.tier_status(tier text) RETURNS pgsched.task_status
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    -- Enum constants, not a text-to-enum cast (only STABLE): keeps it inlinable.
    SELECT CASE WHEN tier = 'COLD' THEN 'PENDING'::pgsched.task_status ELSE 'QUEUED'::pgsched.task_status END
$$;

--
-- Name: FUNCTION tier_status(tier text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.tier_status(tier text) IS 'The status a route gives a task: QUEUED (hot tier) for IMMEDIATE and HOT, PENDING (cold tier) for COLD.';

--
-- Name: time_partitions_maintain(text, regclass, regproc, text, integer, interval, timestamp with time zone, interval); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.time_partitions_maintain(caller text, parent regclass, listing regproc, archive_keeps text, ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) RETURNS TABLE(partition_name text, action text, n_rows bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET "TimeZone" TO 'UTC'
    AS $_$
DECLARE
    t timestamptz := coalesce(as_of, now());
    base text;
    key_column text;
    archive text;
    next_archive text;
    period interval;
    cutoff timestamptz;
    horizon timestamptz;
    top timestamptz;
    lo timestamptz;
    hi timestamptz;
    part text;
    expired text[];
    new_upper timestamptz;
    n bigint;
    idx record;
    saved_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF ahead IS NULL OR ahead < 1 OR ahead > 366 THEN
        RAISE EXCEPTION 'pgsched: %: ahead must be between 1 and 366 periods, not %', caller, ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep IS NULL OR keep <= INTERVAL '0' THEN
        RAISE EXCEPTION 'pgsched: %: keep must be above 0, not %', caller, keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lock_wait IS NULL OR lock_wait <= INTERVAL '0' OR lock_wait > INTERVAL '1 minute' THEN
        RAISE EXCEPTION 'pgsched: %: lock_wait must be above 0 and at most 1 minute, not %', caller, lock_wait
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maintainer of a table at a time (the sweeper, or someone calling this by hand).
    PERFORM pg_advisory_xact_lock(hashtext('pgsched.' || caller));
    SELECT c.relname, a.attname INTO base, key_column
      FROM pg_partitioned_table AS pt
      JOIN pg_class AS c ON c.oid = pt.partrelid
      JOIN pg_attribute AS a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
     WHERE pt.partrelid = parent;
    archive := base || '_archive';
    next_archive := base || '_archive_next';
    SELECT s.event_partition_period INTO period FROM pgsched.settings AS s;
    cutoff := t - keep;
    horizon := pgsched.event_period_start(t, period) + (ahead + 1) * period;
    PERFORM set_config('lock_timeout', (extract(EPOCH FROM lock_wait) * 1000)::bigint::text, TRUE);

    -- Ahead: partitions continue from the newest one, so they never leave a gap; a changed
    -- period takes effect at the next period boundary.
    EXECUTE format('SELECT max(p.upper_bound) FROM %s() AS p WHERE NOT p.is_default', listing)
       INTO top;
    -- None at all (dropped by hand): start again from the current period.
    top := coalesce(top, pgsched.event_period_start(t, period));
    WHILE top < horizon LOOP
        lo := top;
        hi := pgsched.event_period_start(lo, period) + period;
        part := base || '_p' || to_char(lo, 'YYYYMMDD')
                || CASE WHEN lo <> date_trunc('day', lo) THEN to_char(lo, '_HH24MISS') ELSE '' END;
        BEGIN
            -- Made apart and attached: attaching takes no ACCESS EXCLUSIVE lock on the table,
            -- only on the default partition, whose rows of this period move in. The table's
            -- CHECK constraints come along: a partition must have them.
            EXECUTE format('CREATE TABLE pgsched.%I (LIKE %s INCLUDING CONSTRAINTS)', part, parent);
            EXECUTE format(
                'ALTER TABLE pgsched.%1$I ADD CONSTRAINT %2$I CHECK (%3$I >= %4$L AND %3$I < %5$L)',
                part, part || '_range', key_column, lo, hi);
            EXECUTE format(
                'WITH moved AS (DELETE FROM pgsched.%1$I AS d'
                ' WHERE d.%2$I >= %3$L AND d.%2$I < %4$L RETURNING d.*)'
                ' INSERT INTO pgsched.%5$I SELECT * FROM moved', base || '_default', key_column, lo, hi, part);
            GET DIAGNOSTICS n = ROW_COUNT;
            EXECUTE format(
                'ALTER TABLE %s ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
                parent, part, lo, hi);
            -- The bound says it now; a CHECK would only cost every insert.
            EXECUTE format('ALTER TABLE pgsched.%I DROP CONSTRAINT %I', part, part || '_range');
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT part, 'not_created'::text, NULL::bigint;
            EXIT;
        END;
        RETURN QUERY SELECT part, 'created'::text, n;
        top := hi;
    END LOOP;

    -- Expired: partitions every row of which is older than the cutoff (the archive among
    -- them when it expires whole). A kept archive is rebuilt first, outside the lock; the
    -- ACCESS EXCLUSIVE lock on the table (an insert waits for it, at most lock_wait) is for
    -- catalog changes alone.
    EXECUTE format(
        'SELECT array_agg(p.partition_name ORDER BY p.upper_bound), max(p.upper_bound)'
        '  FROM %s() AS p'
        ' WHERE NOT p.is_default AND p.upper_bound <= $1 AND ($2 OR p.lower_bound IS NOT NULL)',
        listing)
       INTO expired, new_upper
      USING cutoff, archive_keeps IS NULL;
    IF expired IS NOT NULL THEN
        BEGIN
            IF archive_keeps IS NOT NULL THEN
                EXECUTE format('CREATE TABLE pgsched.%I (LIKE %s INCLUDING CONSTRAINTS)', next_archive, parent);
                EXECUTE format(
                    'ALTER TABLE pgsched.%I ADD CONSTRAINT %I CHECK (%I < %L)',
                    next_archive, archive || '_range', key_column, new_upper);
                EXECUTE format(
                    'INSERT INTO pgsched.%I SELECT e.* FROM %s AS e WHERE e.%I < %L AND (%s)',
                    next_archive, parent, key_column, new_upper, archive_keeps);
                GET DIAGNOSTICS n = ROW_COUNT;
                -- The table's key and indexes, built once the rows are in (faster than
                -- keeping them up row by row), named as the table's with the archive's
                -- name for the table's.
                FOR idx IN
                    SELECT ic.relname AS name, con.oid AS constraint_oid, i.indexrelid, i.indisunique
                      FROM pg_index AS i
                      JOIN pg_class AS ic ON ic.oid = i.indexrelid
                      LEFT JOIN pg_constraint AS con ON con.conindid = i.indexrelid AND con.conrelid = parent
                     WHERE i.indrelid = parent
                     ORDER BY ic.relname
                LOOP
                    IF idx.constraint_oid IS NOT NULL THEN
                        EXECUTE format(
                            'ALTER TABLE pgsched.%I ADD CONSTRAINT %I %s',
                            next_archive, next_archive || substr(idx.name, length(base) + 1),
                            pg_get_constraintdef(idx.constraint_oid));
                    ELSE
                        EXECUTE format(
                            'CREATE %sINDEX %I ON pgsched.%I%s',
                            CASE WHEN idx.indisunique THEN 'UNIQUE ' ELSE '' END,
                            next_archive || substr(idx.name, length(base) + 1), next_archive,
                            substring(pg_get_indexdef(idx.indexrelid) FROM ' USING .*$'));
                    END IF;
                END LOOP;
            END IF;

            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', parent);
            IF archive_keeps IS NOT NULL THEN
                EXECUTE format('DROP TABLE IF EXISTS pgsched.%I', archive);
            END IF;
            FOREACH part IN ARRAY expired LOOP
                EXECUTE format('DROP TABLE pgsched.%I', part);
            END LOOP;
            IF archive_keeps IS NOT NULL THEN
                EXECUTE format('ALTER TABLE pgsched.%I RENAME TO %I', next_archive, archive);
                -- Renaming the key's index renames the key.
                FOREACH part IN ARRAY ARRAY(
                    SELECT ic.relname::text FROM pg_index AS i JOIN pg_class AS ic ON ic.oid = i.indexrelid
                     WHERE i.indrelid = format('pgsched.%I', archive)::regclass
                ) LOOP
                    EXECUTE format(
                        'ALTER INDEX pgsched.%I RENAME TO %I', part, archive || substr(part, length(next_archive) + 1));
                END LOOP;
                EXECUTE format(
                    'ALTER TABLE %s ATTACH PARTITION pgsched.%I FOR VALUES FROM (MINVALUE) TO (%L)',
                    parent, archive, new_upper);
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT x, 'not_dropped'::text, NULL::bigint FROM unnest(expired) AS x;
            expired := NULL;
        END;
        IF expired IS NOT NULL THEN
            RETURN QUERY SELECT x, 'dropped'::text, NULL::bigint FROM unnest(expired) AS x;
            IF archive_keeps IS NOT NULL THEN
                RETURN QUERY SELECT archive, 'archived'::text, n;
            END IF;
        END IF;
    END IF;
    PERFORM set_config('lock_timeout', saved_lock_timeout, TRUE);
END;
$_$;

--
-- Name: FUNCTION time_partitions_maintain(caller text, parent regclass, listing regproc, archive_keeps text, ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.time_partitions_maintain(caller text, parent regclass, listing regproc, archive_keeps text, ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) IS 'The one body of partitions_maintain and finished_partitions_maintain (the table, its listing, what its archive keeps); callable by no role.';

--
-- Name: timezone_problem(text); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.timezone_problem(timezone text) RETURNS text
    LANGUAGE sql STABLE
    AS $_$
    SELECT CASE
        WHEN timezone IS NULL OR btrim(timezone) = '' THEN 'time zone is required (an IANA name such as Europe/Berlin)'
        WHEN timezone IN ('UTC', 'Etc/UTC') THEN NULL
        WHEN timezone !~ '^[A-Z][A-Za-z_+-]+(/[A-Za-z0-9_+-]+)+$'
            OR timezone ~ '^(posix|right|Etc|SystemV)/'
            OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names AS z WHERE z.name = timezone)
            THEN format('unknown time zone %L (use an IANA Area/Location name such as America/New_York)', timezone)
    END
$_$;

--
-- Name: FUNCTION timezone_problem(timezone text); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.timezone_problem(timezone text) IS 'Why a time zone name is refused, or NULL: only IANA Area/Location names and UTC are accepted (abbreviations such as PST and legacy names are ambiguous).';

--
-- Name: transition_is_legal(pgsched.task_status, pgsched.task_status); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status) RETURNS boolean
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

--
-- Name: FUNCTION transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status) IS 'The state machine: whether a task may go from one status to another. The transition trigger refuses any other change.';

--
-- Name: work_once(text, text, text, bigint); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.work_once(tenant_id text, task_type text, key text, task_id bigint) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

--
-- Name: FUNCTION work_once(tenant_id text, task_type text, key text, task_id bigint); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.work_once(tenant_id text, task_type text, key text, task_id bigint) IS 'ctx.once(key): true the first time a (tenant, task type, key) is asked for, false ever after.';

--
-- Name: work_record_done_many(bigint[], uuid[]); Type: FUNCTION; Schema: pgsched; Owner: -
--

CREATE FUNCTION pgsched.work_record_done_many(task_ids bigint[], lease_tokens uuid[]) RETURNS TABLE(task_id bigint, recorded boolean)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH given AS (
        SELECT g.task_id, g.lease_token, g.ord
          FROM unnest(work_record_done_many.task_ids, work_record_done_many.lease_tokens)
               WITH ORDINALITY AS g (task_id, lease_token, ord)
    ),
    held AS (
        SELECT tk.tenant_id, tk.task_type, tk.idempotency_key, tk.id, g.lease_token
          FROM given AS g
          JOIN pgsched.tasks AS tk
            ON tk.id = g.task_id AND tk.status = 'PROCESSING' AND tk.lease_token = g.lease_token
         WHERE tk.idempotency_key IS NOT NULL
    ),
    ins AS (
        INSERT INTO pgsched.completed_work AS w (tenant_id, task_type, idempotency_key, task_id)
        SELECT h.tenant_id, h.task_type, h.idempotency_key, h.id FROM held AS h
        ON CONFLICT DO NOTHING
        RETURNING w.task_id
    )
    SELECT g.task_id,
           EXISTS (SELECT 1
                     FROM ins JOIN held AS h ON h.id = ins.task_id
                    WHERE ins.task_id = g.task_id AND h.lease_token = g.lease_token)
      FROM given AS g
     ORDER BY g.ord
$$;

--
-- Name: FUNCTION work_record_done_many(task_ids bigint[], lease_tokens uuid[]); Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON FUNCTION pgsched.work_record_done_many(task_ids bigint[], lease_tokens uuid[]) IS 'Record in the completed-work ledger that these keyed tasks'' work is done, right after execute returned and before the batched completion; only the lease holder may record. Returns (task_id, recorded) per task.';

--
-- Name: completed_work; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.completed_work (
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    idempotency_key text NOT NULL,
    task_id bigint NOT NULL,
    completed_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: TABLE completed_work; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.completed_work IS 'The completed-work ledger: (tenant, task type, key) of keyed work done, and ctx.once keys. A keyed task found here when claimed is completed as a recorded no-op.';

--
-- Name: fan_out_summary; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.fan_out_summary AS
 SELECT c.parent_id,
    c.task_type,
    count(*) AS tenants,
    count(*) FILTER (WHERE (c.status = 'COMPLETED'::pgsched.task_status)) AS completed,
    count(*) FILTER (WHERE (c.status = 'FAILED'::pgsched.task_status)) AS failed,
    count(*) FILTER (WHERE (c.status = ANY (ARRAY['PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status, 'PROCESSING'::pgsched.task_status]))) AS unfinished,
    count(*) FILTER (WHERE (c.status = 'CANCELLED'::pgsched.task_status)) AS cancelled
   FROM pgsched.tasks c
  WHERE (c.parent_id IS NOT NULL)
  GROUP BY c.parent_id, c.task_type;

--
-- Name: VIEW fan_out_summary; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.fan_out_summary IS 'Per fan-out parent: its tenants, and how many completed, failed or are unfinished.';

--
-- Name: idempotency_keys; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.idempotency_keys (
    tenant_id text NOT NULL,
    idempotency_key text NOT NULL,
    task_id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: TABLE idempotency_keys; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.idempotency_keys IS 'Idempotency keys per tenant: a (tenant_id, idempotency_key) names one task.';

--
-- Name: lane_batch; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.lane_batch AS
 SELECT tasks.id,
    tasks.tenant_id,
    tasks.task_type,
    tasks.schedule_type,
    tasks.next_run_at,
    tasks.cron_expression,
    tasks.timezone,
    tasks.payload,
    tasks.metadata,
    tasks.priority,
    tasks.lane,
    tasks.status,
    tasks.attempts,
    tasks.max_attempts,
    tasks.last_run_at,
    tasks.last_error,
    tasks.status_reason,
    tasks.idempotency_key,
    tasks.locked_by,
    tasks.lease_token,
    tasks.lease_expires_at,
    tasks.scope,
    tasks.product,
    tasks.parent_id,
    tasks.created_at,
    tasks.updated_at,
    tasks.schedule_id
   FROM pgsched.tasks
  WHERE ((tasks.lane = 'BATCH'::pgsched.task_lane) AND (tasks.status = ANY (ARRAY['PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status, 'PROCESSING'::pgsched.task_status])));

--
-- Name: VIEW lane_batch; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.lane_batch IS 'The BATCH lane''s unfinished tasks.';

--
-- Name: lane_dead; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.lane_dead AS
 SELECT tasks.id,
    tasks.tenant_id,
    tasks.task_type,
    tasks.schedule_type,
    tasks.next_run_at,
    tasks.cron_expression,
    tasks.timezone,
    tasks.payload,
    tasks.metadata,
    tasks.priority,
    tasks.lane,
    tasks.status,
    tasks.attempts,
    tasks.max_attempts,
    tasks.last_run_at,
    tasks.last_error,
    tasks.status_reason,
    tasks.idempotency_key,
    tasks.locked_by,
    tasks.lease_token,
    tasks.lease_expires_at,
    tasks.scope,
    tasks.product,
    tasks.parent_id,
    tasks.created_at,
    tasks.updated_at,
    tasks.schedule_id
   FROM pgsched.tasks
  WHERE (tasks.status = 'FAILED'::pgsched.task_status);

--
-- Name: VIEW lane_dead; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.lane_dead IS 'The DEAD lane: FAILED tasks, to retry or discard.';

--
-- Name: lane_high; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.lane_high AS
 SELECT tasks.id,
    tasks.tenant_id,
    tasks.task_type,
    tasks.schedule_type,
    tasks.next_run_at,
    tasks.cron_expression,
    tasks.timezone,
    tasks.payload,
    tasks.metadata,
    tasks.priority,
    tasks.lane,
    tasks.status,
    tasks.attempts,
    tasks.max_attempts,
    tasks.last_run_at,
    tasks.last_error,
    tasks.status_reason,
    tasks.idempotency_key,
    tasks.locked_by,
    tasks.lease_token,
    tasks.lease_expires_at,
    tasks.scope,
    tasks.product,
    tasks.parent_id,
    tasks.created_at,
    tasks.updated_at,
    tasks.schedule_id
   FROM pgsched.tasks
  WHERE ((tasks.lane = 'HIGH'::pgsched.task_lane) AND (tasks.status = ANY (ARRAY['PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status, 'PROCESSING'::pgsched.task_status])));

--
-- Name: VIEW lane_high; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.lane_high IS 'The HIGH lane''s unfinished tasks.';

--
-- Name: lane_low; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.lane_low AS
 SELECT tasks.id,
    tasks.tenant_id,
    tasks.task_type,
    tasks.schedule_type,
    tasks.next_run_at,
    tasks.cron_expression,
    tasks.timezone,
    tasks.payload,
    tasks.metadata,
    tasks.priority,
    tasks.lane,
    tasks.status,
    tasks.attempts,
    tasks.max_attempts,
    tasks.last_run_at,
    tasks.last_error,
    tasks.status_reason,
    tasks.idempotency_key,
    tasks.locked_by,
    tasks.lease_token,
    tasks.lease_expires_at,
    tasks.scope,
    tasks.product,
    tasks.parent_id,
    tasks.created_at,
    tasks.updated_at,
    tasks.schedule_id
   FROM pgsched.tasks
  WHERE ((tasks.lane = 'LOW'::pgsched.task_lane) AND (tasks.status = ANY (ARRAY['PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status, 'PROCESSING'::pgsched.task_status])));

--
-- Name: VIEW lane_low; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.lane_low IS 'The LOW lane''s unfinished tasks.';

--
-- Name: lane_normal; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.lane_normal AS
 SELECT tasks.id,
    tasks.tenant_id,
    tasks.task_type,
    tasks.schedule_type,
    tasks.next_run_at,
    tasks.cron_expression,
    tasks.timezone,
    tasks.payload,
    tasks.metadata,
    tasks.priority,
    tasks.lane,
    tasks.status,
    tasks.attempts,
    tasks.max_attempts,
    tasks.last_run_at,
    tasks.last_error,
    tasks.status_reason,
    tasks.idempotency_key,
    tasks.locked_by,
    tasks.lease_token,
    tasks.lease_expires_at,
    tasks.scope,
    tasks.product,
    tasks.parent_id,
    tasks.created_at,
    tasks.updated_at,
    tasks.schedule_id
   FROM pgsched.tasks
  WHERE ((tasks.lane = 'NORMAL'::pgsched.task_lane) AND (tasks.status = ANY (ARRAY['PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status, 'PROCESSING'::pgsched.task_status])));

--
-- Name: VIEW lane_normal; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.lane_normal IS 'The NORMAL lane''s unfinished tasks.';

--
-- Name: lane_summary; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.lane_summary AS
 WITH lanes AS (
         SELECT l_1.lane,
            l_1.ord
           FROM unnest(ARRAY['HIGH'::text, 'NORMAL'::text, 'LOW'::text, 'BATCH'::text, 'DEAD'::text]) WITH ORDINALITY l_1(lane, ord)
        ), counts AS (
         SELECT
                CASE
                    WHEN (t.status = 'FAILED'::pgsched.task_status) THEN 'DEAD'::text
                    ELSE (t.lane)::text
                END AS lane,
            count(*) FILTER (WHERE (t.status = 'PENDING'::pgsched.task_status)) AS cold,
            count(*) FILTER (WHERE (t.status = 'QUEUED'::pgsched.task_status)) AS queued,
            count(*) FILTER (WHERE ((t.status = 'QUEUED'::pgsched.task_status) AND (t.next_run_at <= now()))) AS due_now,
            count(*) FILTER (WHERE (t.status = 'PROCESSING'::pgsched.task_status)) AS processing,
            count(*) FILTER (WHERE (t.status = 'FAILED'::pgsched.task_status)) AS dead,
            min(t.next_run_at) FILTER (WHERE ((t.status = 'QUEUED'::pgsched.task_status) AND (t.next_run_at <= now()))) AS oldest_due
           FROM pgsched.tasks t
          WHERE (t.status = ANY (ARRAY['PENDING'::pgsched.task_status, 'QUEUED'::pgsched.task_status, 'PROCESSING'::pgsched.task_status, 'FAILED'::pgsched.task_status]))
          GROUP BY
                CASE
                    WHEN (t.status = 'FAILED'::pgsched.task_status) THEN 'DEAD'::text
                    ELSE (t.lane)::text
                END
        )
 SELECT l.lane,
    COALESCE(c.cold, (0)::bigint) AS cold,
    COALESCE(c.queued, (0)::bigint) AS queued,
    COALESCE(c.due_now, (0)::bigint) AS due_now,
    COALESCE(c.processing, (0)::bigint) AS processing,
    COALESCE(c.dead, (0)::bigint) AS dead,
    (now() - c.oldest_due) AS oldest_lateness
   FROM (lanes l
     LEFT JOIN counts c ON ((l.lane = c.lane)))
  ORDER BY l.ord;

--
-- Name: VIEW lane_summary; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.lane_summary IS 'Per lane: cold, queued, due now, processing and dead counts, and the oldest due task''s lateness; what pgsched status prints.';

--
-- Name: producer_tenants; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.producer_tenants (
    role_name name NOT NULL,
    tenant_id text NOT NULL
);

--
-- Name: TABLE producer_tenants; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.producer_tenants IS 'Which tenants each login may act for (role_name, tenant_id; ''*'' for all). A login with no row acts for none.';

--
-- Name: task_events; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.task_events (
    id bigint NOT NULL,
    task_id bigint NOT NULL,
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    from_status pgsched.task_status NOT NULL,
    to_status pgsched.task_status NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    attempt bigint NOT NULL,
    worker text,
    detail text
)
PARTITION BY RANGE (occurred_at);

--
-- Name: TABLE task_events; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.task_events IS 'Every transition of every task (and every stale report refused), partitioned by time (settings.event_partition_period) and dropped a whole period at a time by retention.';

--
-- Name: task_runs; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.task_runs AS
 SELECT s.task_id,
    s.tenant_id,
    s.task_type,
    s.attempt,
    s.worker,
    s.scheduled_for,
    s.occurred_at AS started_at,
    f.occurred_at AS finished_at,
    (s.occurred_at - s.scheduled_for) AS lateness,
    COALESCE((f.to_status)::text, 'RUNNING'::text) AS outcome,
    f.detail
   FROM (pgsched.task_events s
     LEFT JOIN LATERAL ( SELECT e.occurred_at,
            e.to_status,
            e.detail
           FROM pgsched.task_events e
          WHERE ((e.task_id = s.task_id) AND (e.id > s.id) AND (e.from_status = 'PROCESSING'::pgsched.task_status) AND (e.to_status <> 'PROCESSING'::pgsched.task_status))
          ORDER BY e.id
         LIMIT 1) f ON (true))
  WHERE ((s.to_status = 'PROCESSING'::pgsched.task_status) AND (s.from_status <> 'PROCESSING'::pgsched.task_status));

--
-- Name: VIEW task_runs; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.task_runs IS 'One row per attempt: task, tenant, type, attempt, worker, due time, start, finish, lateness, outcome and detail.';

--
-- Name: run_history; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.run_history AS
 SELECT r.task_id,
    t.schedule_id,
    r.tenant_id,
    r.task_type,
    r.attempt,
    r.scheduled_for,
    r.started_at,
    r.finished_at,
    r.lateness,
    r.worker,
    r.outcome,
    r.detail
   FROM (pgsched.task_runs r
     LEFT JOIN pgsched.tasks t ON ((r.task_id = t.id)));

--
-- Name: VIEW run_history; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.run_history IS 'Every run with its schedule: what pgsched history and App.history read.';

--
-- Name: schedule_events; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.schedule_events (
    id bigint NOT NULL,
    schedule_id bigint NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    what text NOT NULL,
    fire_at timestamp with time zone,
    detail text
);

--
-- Name: TABLE schedule_events; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.schedule_events IS 'What happened to each schedule: paused, resumed, deleted, enabled, disabled, quarantined, missed fire times, with a detail saying who and why.';

--
-- Name: schedule_events_id_seq; Type: SEQUENCE; Schema: pgsched; Owner: -
--

ALTER TABLE pgsched.schedule_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgsched.schedule_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: schedule_occurrences; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.schedule_occurrences (
    schedule_id bigint NOT NULL,
    fire_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    task_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedule_occurrences_outcome_check CHECK ((outcome = ANY (ARRAY['ARMED'::text, 'MISSED'::text])))
);

--
-- Name: TABLE schedule_occurrences; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.schedule_occurrences IS 'One row per (schedule, fire time): armed, run or MISSED; the unique key keeps an occurrence from being created twice.';

--
-- Name: schedules_id_seq; Type: SEQUENCE; Schema: pgsched; Owner: -
--

ALTER TABLE pgsched.schedules ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgsched.schedules_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: schema_migrations; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: TABLE schema_migrations; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.schema_migrations IS 'The migrations applied to this database, each once, with its checksum (pgsched migrate).';

--
-- Name: settings; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.settings (
    singleton boolean DEFAULT true NOT NULL,
    immediate_window interval DEFAULT '00:15:00'::interval NOT NULL,
    hot_window interval DEFAULT '24:00:00'::interval NOT NULL,
    max_payload_bytes bigint DEFAULT 1048576 NOT NULL,
    fairness_off_lanes pgsched.task_lane[] DEFAULT '{}'::pgsched.task_lane[] NOT NULL,
    event_partition_period interval DEFAULT '1 day'::interval NOT NULL,
    CONSTRAINT settings_event_partition_period_known CHECK (((event_partition_period = '7 days'::interval) OR (((event_partition_period >= '00:01:00'::interval) AND (event_partition_period <= '1 day'::interval)) AND (mod((86400)::numeric, EXTRACT(epoch FROM event_partition_period)) = (0)::numeric)))),
    CONSTRAINT settings_payload_cap_positive CHECK ((max_payload_bytes > 0)),
    CONSTRAINT settings_singleton_check CHECK (singleton),
    CONSTRAINT settings_windows_ordered CHECK (((immediate_window >= '00:00:00'::interval) AND (immediate_window <= hot_window)))
);

--
-- Name: TABLE settings; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.settings IS 'One row of engine settings: immediate_window and hot_window (the time router), max_payload_bytes, event_partition_period (the partitions of task_events and tasks_finished) and fairness_off_lanes.';

--
-- Name: sweep_leader; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.sweep_leader (
    id boolean DEFAULT true NOT NULL,
    holder text,
    generation bigint DEFAULT 0 NOT NULL,
    acquired_at timestamp with time zone,
    renewed_at timestamp with time zone,
    expires_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    CONSTRAINT sweep_leader_one_row CHECK (id)
);

--
-- Name: TABLE sweep_leader; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.sweep_leader IS 'The sweep leader''s lease: holder, generation and expiry, taken and renewed by compare-and-set (sweep_leader_acquire, sweep_leader_renew).';

--
-- Name: task_events_id_seq; Type: SEQUENCE; Schema: pgsched; Owner: -
--

CREATE SEQUENCE pgsched.task_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: task_events_id_seq; Type: SEQUENCE OWNED BY; Schema: pgsched; Owner: -
--

ALTER SEQUENCE pgsched.task_events_id_seq OWNED BY pgsched.task_events.id;

--
-- Name: task_events_default; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.task_events_default (
    id bigint DEFAULT nextval('pgsched.task_events_id_seq'::regclass) NOT NULL,
    task_id bigint NOT NULL,
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    from_status pgsched.task_status NOT NULL,
    to_status pgsched.task_status NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    attempt bigint NOT NULL,
    worker text,
    detail text
);

--
-- Name: TABLE task_events_default; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.task_events_default IS 'task_events'' default partition: any event no dated period covers. pgsched doctor warns when it holds rows.';

--
-- Name: task_timeline; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.task_timeline AS
 SELECT t.id AS task_id,
    t.tenant_id,
    t.task_type,
    (0)::bigint AS event_id,
    t.created_at AS occurred_at,
    NULL::pgsched.task_status AS from_status,
    'scheduled'::text AS what,
    NULL::bigint AS attempt,
    NULL::text AS worker,
    format('due %s'::text, t.next_run_at) AS detail
   FROM pgsched.tasks t
UNION ALL
 SELECT e.task_id,
    e.tenant_id,
    e.task_type,
    e.id AS event_id,
    e.occurred_at,
    e.from_status,
    (e.to_status)::text AS what,
    e.attempt,
    e.worker,
    e.detail
   FROM pgsched.task_events e;

--
-- Name: VIEW task_timeline; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.task_timeline IS 'Every event of every task with its time, transition, worker, attempt and detail: what happened to task 123.';

--
-- Name: tasks_cold; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tasks_cold (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

--
-- Name: TABLE tasks_cold; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tasks_cold IS 'The cold tier: PENDING tasks due beyond the hot window. Claims never read it; the promotion sweep moves tasks coming due to tasks_hot.';

--
-- Name: tasks_done; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tasks_done (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

--
-- Name: TABLE tasks_done; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tasks_done IS 'The DEAD lane: FAILED tasks, kept whatever their age until retried or discarded.';

--
-- Name: tasks_finished; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tasks_finished (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
)
PARTITION BY RANGE (updated_at);

--
-- Name: TABLE tasks_finished; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tasks_finished IS 'The finished tier: COMPLETED and CANCELLED tasks, partitioned by updated_at (a period each, like task_events), dropped a whole period at a time by retention.';

--
-- Name: tasks_finished_default; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tasks_finished_default (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

--
-- Name: TABLE tasks_finished_default; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tasks_finished_default IS 'tasks_finished''s default partition: any row no dated period covers, so no completion ever fails for want of a partition. pgsched doctor warns when it holds rows.';

--
-- Name: tasks_hot; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tasks_hot (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');

--
-- Name: TABLE tasks_hot; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tasks_hot IS 'The hot tier: QUEUED and PROCESSING tasks, the only partition claims read (tasks_hot_claim_idx: lane, priority, next_run_at where QUEUED). Small by design; tuned for aggressive autovacuum.';

--
-- Name: tenant_outcomes; Type: VIEW; Schema: pgsched; Owner: -
--

CREATE VIEW pgsched.tenant_outcomes AS
 SELECT c.parent_id,
    c.id AS task_id,
    c.tenant_id,
    c.task_type,
    c.status,
    c.attempts,
    c.max_attempts,
    c.last_error,
    c.updated_at
   FROM pgsched.tasks c
  WHERE (c.parent_id IS NOT NULL);

--
-- Name: VIEW tenant_outcomes; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON VIEW pgsched.tenant_outcomes IS 'Per fan-out parent and tenant: the child task and its status.';

--
-- Name: tenants; Type: TABLE; Schema: pgsched; Owner: -
--

CREATE TABLE pgsched.tenants (
    tenant_id text NOT NULL,
    product text NOT NULL,
    active boolean DEFAULT true NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenants_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT tenants_product_check CHECK ((product ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$'::text)),
    CONSTRAINT tenants_tenant_id_check CHECK ((tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'::text))
);

--
-- Name: TABLE tenants; Type: COMMENT; Schema: pgsched; Owner: -
--

COMMENT ON TABLE pgsched.tenants IS 'The tenant registry: id, product, active, metadata. Fan-outs run for the active tenants of a product, or all of them.';

--
-- Name: task_events_default; Type: TABLE ATTACH; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.task_events ATTACH PARTITION pgsched.task_events_default DEFAULT;

--
-- Name: tasks_cold; Type: TABLE ATTACH; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_cold FOR VALUES IN ('PENDING');

--
-- Name: tasks_done; Type: TABLE ATTACH; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_done FOR VALUES IN ('FAILED');

--
-- Name: tasks_finished; Type: TABLE ATTACH; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_finished FOR VALUES IN ('COMPLETED', 'CANCELLED');

--
-- Name: tasks_finished_default; Type: TABLE ATTACH; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks_finished ATTACH PARTITION pgsched.tasks_finished_default DEFAULT;

--
-- Name: tasks_hot; Type: TABLE ATTACH; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_hot FOR VALUES IN ('QUEUED', 'PROCESSING');

--
-- Name: task_events id; Type: DEFAULT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.task_events ALTER COLUMN id SET DEFAULT nextval('pgsched.task_events_id_seq'::regclass);

--
-- Name: completed_work completed_work_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.completed_work
    ADD CONSTRAINT completed_work_pkey PRIMARY KEY (tenant_id, task_type, idempotency_key);

--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, idempotency_key);

--
-- Name: producer_tenants producer_tenants_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.producer_tenants
    ADD CONSTRAINT producer_tenants_pkey PRIMARY KEY (role_name, tenant_id);

--
-- Name: schedule_events schedule_events_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.schedule_events
    ADD CONSTRAINT schedule_events_pkey PRIMARY KEY (id);

--
-- Name: schedule_occurrences schedule_occurrences_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.schedule_occurrences
    ADD CONSTRAINT schedule_occurrences_pkey PRIMARY KEY (schedule_id, fire_at);

--
-- Name: schedules schedules_key_per_tenant; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.schedules
    ADD CONSTRAINT schedules_key_per_tenant UNIQUE (tenant_id, idempotency_key);

--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (singleton);

--
-- Name: sweep_leader sweep_leader_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.sweep_leader
    ADD CONSTRAINT sweep_leader_pkey PRIMARY KEY (id);

--
-- Name: task_events task_events_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.task_events
    ADD CONSTRAINT task_events_pkey PRIMARY KEY (id, occurred_at);

--
-- Name: task_events_default task_events_default_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.task_events_default
    ADD CONSTRAINT task_events_default_pkey PRIMARY KEY (id, occurred_at);

--
-- Name: task_limits task_limits_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.task_limits
    ADD CONSTRAINT task_limits_pkey PRIMARY KEY (scope, key);

--
-- Name: tasks tasks_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks
    ADD CONSTRAINT tasks_pkey PRIMARY KEY (id, status, updated_at);

--
-- Name: tasks_cold tasks_cold_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks_cold
    ADD CONSTRAINT tasks_cold_pkey PRIMARY KEY (id, status, updated_at);

--
-- Name: tasks_done tasks_done_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks_done
    ADD CONSTRAINT tasks_done_pkey PRIMARY KEY (id, status, updated_at);

--
-- Name: tasks_finished tasks_finished_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks_finished
    ADD CONSTRAINT tasks_finished_pkey PRIMARY KEY (id, status, updated_at);

--
-- Name: tasks_finished_default tasks_finished_default_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks_finished_default
    ADD CONSTRAINT tasks_finished_default_pkey PRIMARY KEY (id, status, updated_at);

--
-- Name: tasks_hot tasks_hot_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tasks_hot
    ADD CONSTRAINT tasks_hot_pkey PRIMARY KEY (id, status, updated_at);

--
-- Name: tenants tenants_pkey; Type: CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.tenants
    ADD CONSTRAINT tenants_pkey PRIMARY KEY (tenant_id);

--
-- Name: schedule_events_schedule_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX schedule_events_schedule_idx ON pgsched.schedule_events USING btree (schedule_id, id);

--
-- Name: schedules_enabled_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX schedules_enabled_idx ON pgsched.schedules USING btree (id) WHERE enabled;

--
-- Name: task_events_task_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX task_events_task_idx ON ONLY pgsched.task_events USING btree (task_id, id);

--
-- Name: task_events_default_task_id_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX task_events_default_task_id_id_idx ON pgsched.task_events_default USING btree (task_id, id);

--
-- Name: task_events_tenant_time_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX task_events_tenant_time_idx ON ONLY pgsched.task_events USING btree (tenant_id, occurred_at);

--
-- Name: task_events_default_tenant_id_occurred_at_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX task_events_default_tenant_id_occurred_at_idx ON pgsched.task_events_default USING btree (tenant_id, occurred_at);

--
-- Name: tasks_cold_due_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_cold_due_idx ON pgsched.tasks_cold USING btree (next_run_at);

--
-- Name: tasks_parent_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_parent_idx ON ONLY pgsched.tasks USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: tasks_cold_parent_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_cold_parent_id_idx ON pgsched.tasks_cold USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: tasks_cold_tenant_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_cold_tenant_idx ON pgsched.tasks_cold USING btree (tenant_id, id);

--
-- Name: tasks_cold_type_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_cold_type_idx ON pgsched.tasks_cold USING btree (task_type, id);

--
-- Name: tasks_done_dead_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_done_dead_idx ON pgsched.tasks_done USING btree (task_type, updated_at) WHERE (status = 'FAILED'::pgsched.task_status);

--
-- Name: tasks_done_due_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_done_due_idx ON pgsched.tasks_done USING btree (next_run_at);

--
-- Name: tasks_done_not_completed_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_done_not_completed_idx ON pgsched.tasks_done USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

--
-- Name: tasks_done_parent_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_done_parent_id_idx ON pgsched.tasks_done USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: tasks_done_tenant_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_done_tenant_idx ON pgsched.tasks_done USING btree (tenant_id, id);

--
-- Name: tasks_done_type_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_done_type_idx ON pgsched.tasks_done USING btree (task_type, id);

--
-- Name: tasks_finished_due_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_due_idx ON ONLY pgsched.tasks_finished USING btree (next_run_at);

--
-- Name: tasks_finished_default_next_run_at_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_default_next_run_at_idx ON pgsched.tasks_finished_default USING btree (next_run_at);

--
-- Name: tasks_finished_parent_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_parent_id_idx ON ONLY pgsched.tasks_finished USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: tasks_finished_default_parent_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_default_parent_id_idx ON pgsched.tasks_finished_default USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: tasks_finished_not_completed_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_not_completed_idx ON ONLY pgsched.tasks_finished USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

--
-- Name: tasks_finished_default_status_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_default_status_id_idx ON pgsched.tasks_finished_default USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

--
-- Name: tasks_finished_type_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_type_idx ON ONLY pgsched.tasks_finished USING btree (task_type, id);

--
-- Name: tasks_finished_default_task_type_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_default_task_type_id_idx ON pgsched.tasks_finished_default USING btree (task_type, id);

--
-- Name: tasks_finished_tenant_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_tenant_idx ON ONLY pgsched.tasks_finished USING btree (tenant_id, id);

--
-- Name: tasks_finished_default_tenant_id_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_default_tenant_id_id_idx ON pgsched.tasks_finished_default USING btree (tenant_id, id);

--
-- Name: tasks_finished_updated_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_updated_idx ON ONLY pgsched.tasks_finished USING btree (updated_at) WHERE (status = ANY (ARRAY['COMPLETED'::pgsched.task_status, 'CANCELLED'::pgsched.task_status]));

--
-- Name: tasks_finished_default_updated_at_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_finished_default_updated_at_idx ON pgsched.tasks_finished_default USING btree (updated_at) WHERE (status = ANY (ARRAY['COMPLETED'::pgsched.task_status, 'CANCELLED'::pgsched.task_status]));

--
-- Name: tasks_hot_claim_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_hot_claim_idx ON pgsched.tasks_hot USING btree (lane, priority, next_run_at) WHERE (status = 'QUEUED'::pgsched.task_status);

--
-- Name: tasks_hot_lease_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_hot_lease_idx ON pgsched.tasks_hot USING btree (lease_expires_at) WHERE (status = 'PROCESSING'::pgsched.task_status);

--
-- Name: tasks_hot_parent_id_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_hot_parent_id_idx ON pgsched.tasks_hot USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: tasks_hot_tenant_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tasks_hot_tenant_idx ON pgsched.tasks_hot USING btree (lane, tenant_id, priority DESC, next_run_at) WHERE (status = 'QUEUED'::pgsched.task_status);

--
-- Name: tenants_product_active_idx; Type: INDEX; Schema: pgsched; Owner: -
--

CREATE INDEX tenants_product_active_idx ON pgsched.tenants USING btree (product) WHERE active;

--
-- Name: task_events_default_pkey; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.task_events_pkey ATTACH PARTITION pgsched.task_events_default_pkey;

--
-- Name: task_events_default_task_id_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.task_events_task_idx ATTACH PARTITION pgsched.task_events_default_task_id_id_idx;

--
-- Name: task_events_default_tenant_id_occurred_at_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.task_events_tenant_time_idx ATTACH PARTITION pgsched.task_events_default_tenant_id_occurred_at_idx;

--
-- Name: tasks_cold_parent_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_cold_parent_id_idx;

--
-- Name: tasks_cold_pkey; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_cold_pkey;

--
-- Name: tasks_done_parent_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_done_parent_id_idx;

--
-- Name: tasks_done_pkey; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_done_pkey;

--
-- Name: tasks_finished_default_next_run_at_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_due_idx ATTACH PARTITION pgsched.tasks_finished_default_next_run_at_idx;

--
-- Name: tasks_finished_default_parent_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_parent_id_idx ATTACH PARTITION pgsched.tasks_finished_default_parent_id_idx;

--
-- Name: tasks_finished_default_pkey; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_pkey ATTACH PARTITION pgsched.tasks_finished_default_pkey;

--
-- Name: tasks_finished_default_status_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_not_completed_idx ATTACH PARTITION pgsched.tasks_finished_default_status_id_idx;

--
-- Name: tasks_finished_default_task_type_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_type_idx ATTACH PARTITION pgsched.tasks_finished_default_task_type_id_idx;

--
-- Name: tasks_finished_default_tenant_id_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_tenant_idx ATTACH PARTITION pgsched.tasks_finished_default_tenant_id_id_idx;

--
-- Name: tasks_finished_default_updated_at_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_finished_updated_idx ATTACH PARTITION pgsched.tasks_finished_default_updated_at_idx;

--
-- Name: tasks_finished_parent_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_finished_parent_id_idx;

--
-- Name: tasks_finished_pkey; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_finished_pkey;

--
-- Name: tasks_hot_parent_id_idx; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_hot_parent_id_idx;

--
-- Name: tasks_hot_pkey; Type: INDEX ATTACH; Schema: pgsched; Owner: -
--

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_hot_pkey;

--
-- Name: tasks tasks_record_transitions; Type: TRIGGER; Schema: pgsched; Owner: -
--

CREATE TRIGGER tasks_record_transitions AFTER UPDATE ON pgsched.tasks REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_record_transitions();

--
-- Name: tasks tasks_refuse_bad_due_times; Type: TRIGGER; Schema: pgsched; Owner: -
--

CREATE TRIGGER tasks_refuse_bad_due_times AFTER INSERT ON pgsched.tasks REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_refuse_bad_due_times();

--
-- Name: schedule_occurrences schedule_occurrences_schedule_id_fkey; Type: FK CONSTRAINT; Schema: pgsched; Owner: -
--

ALTER TABLE ONLY pgsched.schedule_occurrences
    ADD CONSTRAINT schedule_occurrences_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES pgsched.schedules(id) ON DELETE CASCADE;

--
-- Name: SCHEMA pgsched; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA pgsched TO pgsched_producer;
GRANT USAGE ON SCHEMA pgsched TO pgsched_worker;
GRANT USAGE ON SCHEMA pgsched TO pgsched_admin;

--
-- Name: FUNCTION cancel_actor(actor text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cancel_actor(actor text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cancel_actor(actor text) TO pgsched_admin;

--
-- Name: FUNCTION cancel_input_problem(reason text, actor text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cancel_input_problem(reason text, actor text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cancel_input_problem(reason text, actor text) TO pgsched_admin;

--
-- Name: FUNCTION cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.cancel_task(task_id bigint, reason text, as_of timestamp with time zone, actor text) TO pgsched_admin;

--
-- Name: FUNCTION cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.cancel_task_ex(task_id bigint, reason text, actor text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.cancel_tasks(task_type text, tenant_id text, idempotency_key text, due_from timestamp with time zone, due_until timestamp with time zone, reason text, actor text, dry_run boolean, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.cron_field_values(cron_expression text, field text, field_no integer, OUT problem text, OUT field_values integer[]) TO pgsched_admin;

--
-- Name: FUNCTION cron_problem(cron_expression text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.cron_problem(cron_expression text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.cron_problem(cron_expression text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.cron_problem(cron_expression text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.cron_problem(cron_expression text) TO pgsched_admin;

--
-- Name: FUNCTION dead_discard(task_id bigint, reason text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.dead_discard(task_id bigint, reason text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.dead_discard(task_id bigint, reason text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION dead_retry(task_id bigint, task_type text, all_tasks boolean, reason text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.dead_retry(task_id bigint, task_type text, all_tasks boolean, reason text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.dead_retry(task_id bigint, task_type text, all_tasks boolean, reason text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION event_partitions(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.event_partitions() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.event_partitions() TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.event_partitions() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.event_partitions() TO pgsched_admin;

--
-- Name: FUNCTION event_partitions_status(as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.event_partitions_status(as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.event_partitions_status(as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.event_partitions_status(as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.event_partitions_status(as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION finished_partitions(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.finished_partitions() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.finished_partitions() TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.finished_partitions() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.finished_partitions() TO pgsched_admin;

--
-- Name: FUNCTION finished_partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.finished_partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.finished_partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.finished_partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) TO pgsched_admin;

--
-- Name: FUNCTION finished_partitions_status(as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.finished_partitions_status(as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.finished_partitions_status(as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.finished_partitions_status(as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.finished_partitions_status(as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.hot_tier_due_by_ids(ids bigint[], as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION hot_tier_lane_usable(lane pgsched.task_lane); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.hot_tier_lane_usable(lane pgsched.task_lane) TO pgsched_admin;

--
-- Name: FUNCTION hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.hot_tier_window(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION lane_for(priority integer, lane text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.lane_for(priority integer, lane text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.lane_for(priority integer, lane text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.lane_for(priority integer, lane text) TO pgsched_admin;

--
-- Name: FUNCTION lane_next_due(lane pgsched.task_lane); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.lane_next_due(lane pgsched.task_lane) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.lane_next_due(lane pgsched.task_lane) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.lane_next_due(lane pgsched.task_lane) TO pgsched_admin;

--
-- Name: FUNCTION lane_priorities(lane pgsched.task_lane); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.lane_priorities(lane pgsched.task_lane) TO pgsched_admin;

--
-- Name: FUNCTION lane_set_fairness(lane pgsched.task_lane, fair boolean); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.lane_set_fairness(lane pgsched.task_lane, fair boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.lane_set_fairness(lane pgsched.task_lane, fair boolean) TO pgsched_admin;

--
-- Name: FUNCTION lease_rescue_expired(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.lease_rescue_expired(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.lease_rescue_expired(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.lease_rescue_expired(lane pgsched.task_lane, max_tasks integer, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION limit_clear(scope text, key text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.limit_clear(scope text, key text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.limit_clear(scope text, key text) TO pgsched_admin;

--
-- Name: FUNCTION limit_list(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.limit_list() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.limit_list() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.limit_list() TO pgsched_admin;

--
-- Name: FUNCTION limit_room(max_tasks integer, t timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.limit_room(max_tasks integer, t timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.limit_room(max_tasks integer, t timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.limit_room(max_tasks integer, t timestamp with time zone) TO pgsched_admin;

--
-- Name: TABLE task_limits; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.task_limits TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_limits TO pgsched_admin;

--
-- Name: FUNCTION limit_set(scope text, key text, max_processing integer, rate integer, per text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.limit_set(scope text, key text, max_processing integer, rate integer, per text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.limit_set(scope text, key text, max_processing integer, rate integer, per text) TO pgsched_admin;

--
-- Name: FUNCTION limit_tokens(l pgsched.task_limits, t timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.limit_tokens(l pgsched.task_limits, t timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION login_acts_for_all_tenants(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.login_acts_for_all_tenants() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.login_acts_for_all_tenants() TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.login_acts_for_all_tenants() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.login_acts_for_all_tenants() TO pgsched_admin;

--
-- Name: FUNCTION occurrence_is_live(task_id bigint); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.occurrence_is_live(task_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.occurrence_is_live(task_id bigint) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.occurrence_is_live(task_id bigint) TO pgsched_admin;

--
-- Name: FUNCTION partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.partitions_maintain(ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) TO pgsched_admin;

--
-- Name: FUNCTION producer_tenant_problem(tenant_ids text[]); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) TO pgsched_admin;

--
-- Name: FUNCTION retention_prune(keep interval, max_rows integer, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.retention_prune(keep interval, max_rows integer, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.retention_prune(keep interval, max_rows integer, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.retention_prune(keep interval, max_rows integer, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION route(run_at timestamp with time zone, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.route(run_at timestamp with time zone, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.route(run_at timestamp with time zone, as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.route(run_at timestamp with time zone, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.route(run_at timestamp with time zone, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION run_at_problem(run_at timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.run_at_problem(run_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.run_at_problem(run_at timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.run_at_problem(run_at timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.run_at_problem(run_at timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[], as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[], as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[], as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedule_arm(schedule_id bigint, expected_task_id bigint, fire_at timestamp with time zone, missed timestamp with time zone[], as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_cancel_armed(schedule_id bigint, reason text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_cancel_armed(schedule_id bigint, reason text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_cancel_armed(schedule_id bigint, reason text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_delete(schedule_id bigint, reason text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_delete(schedule_id bigint, reason text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_delete(schedule_id bigint, reason text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_enable(schedule_id bigint, enabled boolean, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_enable(schedule_id bigint, enabled boolean, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_enable(schedule_id bigint, enabled boolean, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_pause(schedule_id bigint, reason text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_pause(schedule_id bigint, reason text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_pause(schedule_id bigint, reason text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedule_quarantine(schedule_id bigint, reason text, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedule_recurring(task_type text, cron_expression text, timezone text, payload jsonb, tenant_id text, priority integer, idempotency_key text, misfire_policy text, max_attempts bigint, lane text, metadata jsonb, catch_up_limit integer, first_fire_at timestamp with time zone, as_of timestamp with time zone, scope text, product text) TO pgsched_admin;

--
-- Name: FUNCTION schedule_resume(schedule_id bigint, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_resume(schedule_id bigint, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_resume(schedule_id bigint, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedule_task(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) TO pgsched_admin;

--
-- Name: FUNCTION schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedule_task_ex(task_type text, payload jsonb, run_at timestamp with time zone, tenant_id text, priority integer, idempotency_key text, max_attempts bigint, lane text, metadata jsonb, as_of timestamp with time zone, scope text, product text) TO pgsched_admin;

--
-- Name: FUNCTION schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedule_tasks(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], as_of timestamp with time zone, scopes text[], products text[]) TO pgsched_admin;

--
-- Name: TABLE schedules; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.schedules TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schedules TO pgsched_admin;

--
-- Name: FUNCTION schedules_unarmed(max_rows integer); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.schedules_unarmed(max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.schedules_unarmed(max_rows integer) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.schedules_unarmed(max_rows integer) TO pgsched_admin;

--
-- Name: FUNCTION sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION sweep_leader_lease_problem(holder text, lease interval); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval) TO pgsched_admin;

--
-- Name: FUNCTION sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.sweep_leader_renew(holder text, generation bigint, lease interval, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION system_identifier(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.system_identifier() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.system_identifier() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.system_identifier() TO pgsched_admin;

--
-- Name: FUNCTION task_cancel_requested(task_ids bigint[]); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_cancel_requested(task_ids bigint[]) TO pgsched_admin;

--
-- Name: SEQUENCE task_id_seq; Type: ACL; Schema: pgsched; Owner: -
--

GRANT ALL ON SEQUENCE pgsched.task_id_seq TO pgsched_admin;

--
-- Name: TABLE tasks; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tasks TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks TO pgsched_admin;

--
-- Name: FUNCTION task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_claim_ids(lane pgsched.task_lane, ids bigint[], worker text, lease interval, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_claim_many(lane pgsched.task_lane, max_tasks integer, worker text, lease interval, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_content_problem(payload jsonb, metadata jsonb, idempotency_key text, max_payload_bytes bigint) TO pgsched_admin;

--
-- Name: FUNCTION task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_fan_out(task_id bigint, lease_token uuid, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[], retry_delays interval[], as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[], retry_delays interval[], as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[], retry_delays interval[], as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_finish_many(task_ids bigint[], lease_tokens uuid[], outcomes text[], errors text[], retry_delays interval[], as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_heartbeat_many(task_ids bigint[], lease_tokens uuid[], lease interval, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text, product text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text, product text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text, product text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_identity_problem(task_type text, tenant_id text, priority integer, max_attempts bigint, lane text, scope text, product text) TO pgsched_admin;

--
-- Name: FUNCTION task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text, product text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text, product text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text, product text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_input_problem(task_type text, payload jsonb, tenant_id text, priority integer, max_attempts bigint, lane text, metadata jsonb, idempotency_key text, max_payload_bytes bigint, scope text, product text) TO pgsched_admin;

--
-- Name: FUNCTION task_insert_many(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], scopes text[], products text[], as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_insert_many(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], scopes text[], products text[], as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_insert_many(task_types text[], payloads jsonb[], run_ats timestamp with time zone[], tenant_ids text[], priorities integer[], idempotency_keys text[], max_attempts bigint[], lanes text[], metadatas jsonb[], scopes text[], products text[], as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_promote_due(max_tasks integer, as_of timestamp with time zone, within interval); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_promote_due(max_tasks integer, as_of timestamp with time zone, within interval) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_promote_due(max_tasks integer, as_of timestamp with time zone, within interval) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_promote_due(max_tasks integer, as_of timestamp with time zone, within interval) TO pgsched_admin;

--
-- Name: FUNCTION task_record_transitions(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_record_transitions() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_record_transitions() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_record_transitions() TO pgsched_admin;

--
-- Name: FUNCTION task_refuse_bad_due_times(); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_refuse_bad_due_times() FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_refuse_bad_due_times() TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_refuse_bad_due_times() TO pgsched_admin;

--
-- Name: FUNCTION task_request_cancel(task_ids bigint[], reason text, actor text, t timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_request_cancel(task_ids bigint[], reason text, actor text, t timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_request_cancel(task_ids bigint[], reason text, actor text, t timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION task_wake_overdue(older_than interval, as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.task_wake_overdue(older_than interval, as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.task_wake_overdue(older_than interval, as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.task_wake_overdue(older_than interval, as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION tenant_add(tenant_id text, product text, metadata jsonb); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.tenant_add(tenant_id text, product text, metadata jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.tenant_add(tenant_id text, product text, metadata jsonb) TO pgsched_admin;

--
-- Name: FUNCTION tenant_set_active(tenant_id text, active boolean); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.tenant_set_active(tenant_id text, active boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.tenant_set_active(tenant_id text, active boolean) TO pgsched_admin;

--
-- Name: FUNCTION tier_horizons(as_of timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.tier_horizons(as_of timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.tier_horizons(as_of timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.tier_horizons(as_of timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.tier_horizons(as_of timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.tier_of(run_at timestamp with time zone, immediate_until timestamp with time zone, hot_until timestamp with time zone) TO pgsched_admin;

--
-- Name: FUNCTION tier_status(tier text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.tier_status(tier text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.tier_status(tier text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.tier_status(tier text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.tier_status(tier text) TO pgsched_admin;

--
-- Name: FUNCTION time_partitions_maintain(caller text, parent regclass, listing regproc, archive_keeps text, ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.time_partitions_maintain(caller text, parent regclass, listing regproc, archive_keeps text, ahead integer, keep interval, as_of timestamp with time zone, lock_wait interval) FROM PUBLIC;

--
-- Name: FUNCTION timezone_problem(timezone text); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.timezone_problem(timezone text) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.timezone_problem(timezone text) TO pgsched_producer;
GRANT ALL ON FUNCTION pgsched.timezone_problem(timezone text) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.timezone_problem(timezone text) TO pgsched_admin;

--
-- Name: FUNCTION transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.transition_is_legal(from_status pgsched.task_status, to_status pgsched.task_status) TO pgsched_admin;

--
-- Name: FUNCTION work_once(tenant_id text, task_type text, key text, task_id bigint); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.work_once(tenant_id text, task_type text, key text, task_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.work_once(tenant_id text, task_type text, key text, task_id bigint) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.work_once(tenant_id text, task_type text, key text, task_id bigint) TO pgsched_admin;

--
-- Name: FUNCTION work_record_done_many(task_ids bigint[], lease_tokens uuid[]); Type: ACL; Schema: pgsched; Owner: -
--

REVOKE ALL ON FUNCTION pgsched.work_record_done_many(task_ids bigint[], lease_tokens uuid[]) FROM PUBLIC;
GRANT ALL ON FUNCTION pgsched.work_record_done_many(task_ids bigint[], lease_tokens uuid[]) TO pgsched_worker;
GRANT ALL ON FUNCTION pgsched.work_record_done_many(task_ids bigint[], lease_tokens uuid[]) TO pgsched_admin;

--
-- Name: TABLE completed_work; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.completed_work TO pgsched_worker;
GRANT ALL ON TABLE pgsched.completed_work TO pgsched_admin;

--
-- Name: TABLE fan_out_summary; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.fan_out_summary TO pgsched_worker;
GRANT ALL ON TABLE pgsched.fan_out_summary TO pgsched_admin;

--
-- Name: TABLE idempotency_keys; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.idempotency_keys TO pgsched_worker;
GRANT ALL ON TABLE pgsched.idempotency_keys TO pgsched_admin;

--
-- Name: TABLE lane_batch; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.lane_batch TO pgsched_worker;
GRANT ALL ON TABLE pgsched.lane_batch TO pgsched_admin;

--
-- Name: TABLE lane_dead; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.lane_dead TO pgsched_worker;
GRANT ALL ON TABLE pgsched.lane_dead TO pgsched_admin;

--
-- Name: TABLE lane_high; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.lane_high TO pgsched_worker;
GRANT ALL ON TABLE pgsched.lane_high TO pgsched_admin;

--
-- Name: TABLE lane_low; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.lane_low TO pgsched_worker;
GRANT ALL ON TABLE pgsched.lane_low TO pgsched_admin;

--
-- Name: TABLE lane_normal; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.lane_normal TO pgsched_worker;
GRANT ALL ON TABLE pgsched.lane_normal TO pgsched_admin;

--
-- Name: TABLE lane_summary; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.lane_summary TO pgsched_worker;
GRANT ALL ON TABLE pgsched.lane_summary TO pgsched_admin;

--
-- Name: TABLE producer_tenants; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.producer_tenants TO pgsched_worker;
GRANT ALL ON TABLE pgsched.producer_tenants TO pgsched_admin;

--
-- Name: TABLE task_events; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.task_events TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_events TO pgsched_admin;

--
-- Name: TABLE task_runs; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.task_runs TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_runs TO pgsched_admin;

--
-- Name: TABLE run_history; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.run_history TO pgsched_worker;
GRANT ALL ON TABLE pgsched.run_history TO pgsched_admin;

--
-- Name: TABLE schedule_events; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.schedule_events TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schedule_events TO pgsched_admin;

--
-- Name: SEQUENCE schedule_events_id_seq; Type: ACL; Schema: pgsched; Owner: -
--

GRANT ALL ON SEQUENCE pgsched.schedule_events_id_seq TO pgsched_admin;

--
-- Name: TABLE schedule_occurrences; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.schedule_occurrences TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schedule_occurrences TO pgsched_admin;

--
-- Name: SEQUENCE schedules_id_seq; Type: ACL; Schema: pgsched; Owner: -
--

GRANT ALL ON SEQUENCE pgsched.schedules_id_seq TO pgsched_admin;

--
-- Name: TABLE schema_migrations; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.schema_migrations TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schema_migrations TO pgsched_admin;

--
-- Name: TABLE settings; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.settings TO pgsched_worker;
GRANT ALL ON TABLE pgsched.settings TO pgsched_admin;

--
-- Name: TABLE sweep_leader; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.sweep_leader TO pgsched_worker;
GRANT ALL ON TABLE pgsched.sweep_leader TO pgsched_admin;

--
-- Name: SEQUENCE task_events_id_seq; Type: ACL; Schema: pgsched; Owner: -
--

GRANT ALL ON SEQUENCE pgsched.task_events_id_seq TO pgsched_admin;

--
-- Name: TABLE task_timeline; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.task_timeline TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_timeline TO pgsched_admin;

--
-- Name: TABLE tasks_cold; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tasks_cold TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_cold TO pgsched_admin;

--
-- Name: TABLE tasks_done; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tasks_done TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_done TO pgsched_admin;

--
-- Name: TABLE tasks_finished; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tasks_finished TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_finished TO pgsched_admin;

--
-- Name: TABLE tasks_hot; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tasks_hot TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_hot TO pgsched_admin;

--
-- Name: TABLE tenant_outcomes; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tenant_outcomes TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tenant_outcomes TO pgsched_admin;

--
-- Name: TABLE tenants; Type: ACL; Schema: pgsched; Owner: -
--

GRANT SELECT ON TABLE pgsched.tenants TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tenants TO pgsched_admin;

--
-- PostgreSQL database dump complete
--
