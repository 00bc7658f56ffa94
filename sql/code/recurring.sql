-- sql/code/recurring.sql — recurring schedules.
--
-- cron and zones (cron_problem, cron_field_values, timezone_problem), schedule_recurring,
-- arming (schedule_arm, schedules_unarmed, occurrence_is_live), the operator's controls
-- (schedule_pause, schedule_resume, schedule_delete, schedule_enable, schedule_quarantine);
-- the run_history view.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Why a time zone name is refused, or NULL. Only IANA Area/Location names and UTC are
-- accepted: abbreviations (PST, EST) and legacy names are ambiguous about the rules.
CREATE OR REPLACE FUNCTION pgsched.timezone_problem(timezone text) RETURNS text
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
COMMENT ON FUNCTION pgsched.timezone_problem(text) IS 'Why a time zone name is refused, or NULL: only IANA Area/Location names and UTC are accepted (abbreviations such as PST and legacy names are ambiguous).';
REVOKE ALL ON FUNCTION pgsched.timezone_problem(text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.timezone_problem(text) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Why a cron expression is refused, or NULL; pgsched/cron.py gives the same verdicts.
CREATE OR REPLACE FUNCTION pgsched.cron_problem(cron_expression text) RETURNS text
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
COMMENT ON FUNCTION pgsched.cron_problem(text) IS 'Why a cron expression is refused, or NULL. One grammar with pgsched/cron.py: five fields, ranges, steps, lists, month and weekday names, ? for a day field, 7 for Sunday; refused: R, H, L, W, #, a step larger than its field, a backward range, an expression that never fires.';
REVOKE ALL ON FUNCTION pgsched.cron_problem(text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cron_problem(text) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Create a recurring schedule. With first_fire_at (Python computes it) the first occurrence
-- is armed in the same transaction; without it the schedule is left unarmed and the
-- recurring sweep, woken by NOTIFY pgsched_recurring, arms it at once.
CREATE OR REPLACE FUNCTION pgsched.schedule_recurring(
    task_type text,
    cron_expression text,
    timezone text DEFAULT 'UTC',
    payload jsonb DEFAULT '{}',
    tenant_id text DEFAULT 'default',
    priority integer DEFAULT 5,
    idempotency_key text DEFAULT NULL,
    misfire_policy text DEFAULT 'run_once',
    max_attempts bigint DEFAULT 3,
    lane text DEFAULT NULL,
    metadata jsonb DEFAULT '{}',
    catch_up_limit integer DEFAULT 10,
    first_fire_at timestamptz DEFAULT NULL,
    as_of timestamptz DEFAULT NULL,
    scope text DEFAULT 'tenant',
    product text DEFAULT NULL,
    complete_within interval DEFAULT NULL,
    deadline_callback text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
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
        END,
        CASE
            WHEN schedule_recurring.complete_within IS NULL AND schedule_recurring.deadline_callback IS NOT NULL
                THEN 'deadline_callback needs complete_within: the deadline whose miss it answers'
            WHEN schedule_recurring.complete_within <= interval '0'
                OR schedule_recurring.complete_within > interval '366 days'
                THEN format('complete_within %s is out of range (more than 0, at most 366 days)',
                            schedule_recurring.complete_within)
            WHEN schedule_recurring.complete_within IS NOT NULL AND schedule_recurring.scope <> 'tenant'
                THEN format('complete_within is for a tenant''s schedule, not scope %s', schedule_recurring.scope)
            WHEN schedule_recurring.deadline_callback !~ '^[A-Za-z_][A-Za-z0-9_.]{0,99}$'
                THEN format('deadline_callback %L is not a plain identifier (a task type)',
                            schedule_recurring.deadline_callback)
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
        created_at, updated_at, complete_within, deadline_callback
    ) VALUES (
        owner, schedule_recurring.task_type, btrim(schedule_recurring.cron_expression),
        schedule_recurring.timezone, coalesce(schedule_recurring.payload, '{}'),
        coalesce(schedule_recurring.metadata, '{}'), schedule_recurring.priority,
        pgsched.lane_for(schedule_recurring.priority, schedule_recurring.lane),
        schedule_recurring.max_attempts, schedule_recurring.misfire_policy::pgsched.misfire_policy,
        schedule_recurring.catch_up_limit, schedule_recurring.idempotency_key,
        schedule_recurring.scope, schedule_recurring.product, t, t,
        schedule_recurring.complete_within, schedule_recurring.deadline_callback
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
ALTER FUNCTION pgsched.schedule_recurring(
    text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamptz, timestamptz,
    text, text, interval, text
) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION pgsched.schedule_recurring(text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamp with time zone, timestamp with time zone, text, text, interval, text) IS 'Create a recurring schedule: a five-field cron expression in an IANA zone, a task type and its payload, a misfire policy (run_once, skip, catch_up with catch_up_limit). With first_fire_at the first occurrence is armed in the same transaction; without it the recurring sweep, woken by NOTIFY pgsched_recurring, arms it. An idempotency key the tenant already used returns that schedule''s id. complete_within gives each occurrence a deadline, its fire time + complete_within (the 09:00 report done by 09:30: 30 minutes); deadline_callback names a task type scheduled when one is missed. Returns the schedule id.';
REVOKE ALL ON FUNCTION pgsched.schedule_recurring(text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamptz, timestamptz, text, text, interval, text) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_recurring(text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamptz, timestamptz, text, text, interval, text) TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Arm one occurrence of a schedule: a compare-and-set on the armed task (expected_task_id,
-- NULL for "none yet"), so two schedulers racing to arm the next occurrence create it once.
-- Missed fire times (misfire policy) are recorded too. Returns the new task's id, or NULL
-- when someone else armed it first or the schedule is disabled.
CREATE OR REPLACE FUNCTION pgsched.schedule_arm(
    schedule_id bigint,
    expected_task_id bigint,
    fire_at timestamptz,
    missed timestamptz[] DEFAULT '{}',
    as_of timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
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
    -- The occurrence's deadline counts from its fire time, which the zone and the DST policy
    -- placed; a catch-up occurrence armed late may be past it already.
    UPDATE pgsched.tasks AS tk
       SET schedule_type = 'RECURRING', schedule_id = s.id,
           cron_expression = s.cron_expression, timezone = s.timezone,
           complete_by = schedule_arm.fire_at + s.complete_within,
           deadline_callback = CASE WHEN s.complete_within IS NOT NULL THEN s.deadline_callback END
     WHERE tk.id = new_task;
    UPDATE pgsched.schedule_occurrences AS o SET task_id = new_task
     WHERE o.schedule_id = s.id AND o.fire_at = schedule_arm.fire_at;
    UPDATE pgsched.schedules AS sc
       SET armed_task_id = new_task, last_fire_at = schedule_arm.fire_at, updated_at = t
     WHERE sc.id = s.id;
    RETURN new_task;
END;
$$;
ALTER FUNCTION pgsched.schedule_arm(bigint, bigint, timestamptz, timestamptz[], timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION pgsched.schedule_arm(bigint, bigint, timestamp with time zone, timestamp with time zone[], timestamp with time zone) IS 'The recurring sweep or a worker arms one occurrence of a schedule: a compare-and-set on the armed task (expected_task_id, NULL for none yet), so two processes racing arm it once; missed fire times are recorded per the misfire policy. Returns the new task id, or NULL when someone else armed it first or the schedule is disabled.';
REVOKE ALL ON FUNCTION pgsched.schedule_arm(bigint, bigint, timestamptz, timestamptz[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_arm(bigint, bigint, timestamptz, timestamptz[], timestamptz) TO pgsched_worker, pgsched_admin;

-- An occurrence is live while its task, or any tenant's child task of its fan-out, is
-- still to run or running: the next occurrence waits for every tenant's outcome.
-- PL/pgSQL, not SQL: Citus refuses a SQL function that reads a distributed table with a
-- parameter (distributed mode, sql/code/distribution.sql).
CREATE OR REPLACE FUNCTION pgsched.occurrence_is_live(task_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN occurrence_is_live.task_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM pgsched.tasks AS tk
         WHERE tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
           AND (tk.id = occurrence_is_live.task_id OR tk.parent_id = occurrence_is_live.task_id)
    );
END;
$$;
COMMENT ON FUNCTION pgsched.occurrence_is_live(bigint) IS 'Whether a recurring occurrence is still live: its task, or any tenant''s child of its fan-out, is still to run or running.';
REVOKE ALL ON FUNCTION pgsched.occurrence_is_live(bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.occurrence_is_live(bigint) TO pgsched_worker, pgsched_admin;

-- Schedules that need arming: enabled, and with no live occurrence (new, re-enabled,
-- their occurrence finished, or left unarmed by a crash).
CREATE OR REPLACE FUNCTION pgsched.schedules_unarmed(max_rows integer DEFAULT 500)
RETURNS SETOF pgsched.schedules
LANGUAGE sql STABLE
AS $$
    SELECT s.*
      FROM pgsched.schedules AS s
     WHERE s.enabled AND NOT pgsched.occurrence_is_live(s.armed_task_id)
     ORDER BY s.id
     LIMIT max_rows
$$;
COMMENT ON FUNCTION pgsched.schedules_unarmed(integer) IS 'The recurring sweep: enabled schedules with no live occurrence (new, resumed, their occurrence finished, or left unarmed by a crash).';
REVOKE ALL ON FUNCTION pgsched.schedules_unarmed(integer) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedules_unarmed(integer) TO pgsched_worker, pgsched_admin;

-- Take a broken schedule out of service, with the reason; every other schedule keeps firing.
CREATE OR REPLACE FUNCTION pgsched.schedule_quarantine(
    schedule_id bigint, reason text, as_of timestamptz DEFAULT NULL
) RETURNS void
LANGUAGE sql
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
ALTER FUNCTION pgsched.schedule_quarantine(bigint, text, timestamptz)
SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION pgsched.schedule_quarantine(bigint, text, timestamp with time zone) IS 'The recurring sweep takes a broken schedule out of service (disabled, quarantine_reason, a schedule_events row); every other schedule keeps firing.';
REVOKE ALL ON FUNCTION pgsched.schedule_quarantine(bigint, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_quarantine(bigint, text, timestamptz) TO pgsched_worker, pgsched_admin;

-- Re-enable a schedule (after fixing it); the recurring sweep arms it again.
CREATE OR REPLACE FUNCTION pgsched.schedule_enable(
    schedule_id bigint, enabled boolean DEFAULT TRUE, as_of timestamptz DEFAULT NULL
) RETURNS void
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
COMMENT ON FUNCTION pgsched.schedule_enable(bigint, boolean, timestamp with time zone) IS 'The older switch of migration 0005: sets a schedule''s enabled flag (clearing a quarantine when enabling) and writes an ''enabled'' or ''disabled'' event, leaving an armed occurrence to run. Prefer schedule_pause and schedule_resume.';
REVOKE ALL ON FUNCTION pgsched.schedule_enable(bigint, boolean, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_enable(bigint, boolean, timestamptz) TO pgsched_admin;

-- One field of a cron expression: why it is refused (problem) or the values it lists.
-- pgsched/cron.py (cron_problem) applies the same grammar with the same messages.
CREATE OR REPLACE FUNCTION pgsched.cron_field_values(
    cron_expression text,
    field text,
    field_no integer,
    OUT problem text,
    OUT field_values integer[]
)
LANGUAGE plpgsql IMMUTABLE
AS $$
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
$$;
COMMENT ON FUNCTION pgsched.cron_field_values(text, text, integer) IS 'One field of a cron expression: why it is refused (problem), or the values it lists. Used by cron_problem.';
REVOKE ALL ON FUNCTION pgsched.cron_field_values(text, text, integer) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.cron_field_values(text, text, integer) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.schedule_cancel_armed(
    schedule_id bigint, reason text, as_of timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    gone bigint;
BEGIN
    WITH was AS (
        SELECT tk.id, tk.status
          FROM pgsched.tasks AS tk
         INNER JOIN pgsched.schedules AS s ON tk.id = s.armed_task_id
         WHERE s.id = schedule_cancel_armed.schedule_id AND tk.status IN ('PENDING', 'QUEUED')
    ),
    cancelled AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'CANCELLED', status_reason = schedule_cancel_armed.reason,
               updated_at = coalesce(schedule_cancel_armed.as_of, now())
          FROM was
         WHERE tk.id = was.id AND tk.status = was.status
        RETURNING tk.id, tk.tenant_id, tk.task_type, was.status AS from_status, tk.updated_at,
                  tk.next_run_at, tk.attempts, tk.locked_by, tk.status_reason
    ),
    -- The cancel's event when the functions write them (sql/code/transitions.sql).
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
    SELECT x.id INTO gone FROM cancelled AS x;
    IF gone IS NOT NULL AND pgsched.events_by_functions() THEN
        PERFORM pgsched.task_settle_finished(ARRAY[gone], ARRAY['CANCELLED'::pgsched.task_status]);
    END IF;
    RETURN gone;
END;
$$;
COMMENT ON FUNCTION pgsched.schedule_cancel_armed(bigint, text, timestamp with time zone) IS 'Cancel a schedule''s armed occurrence if it has not started; returns its id, or NULL. Used by schedule_pause and schedule_delete.';
REVOKE ALL ON FUNCTION pgsched.schedule_cancel_armed(bigint, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_cancel_armed(bigint, text, timestamptz) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.schedule_pause(
    schedule_id bigint, reason text DEFAULT 'paused by operator', as_of timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
COMMENT ON FUNCTION pgsched.schedule_pause(bigint, text, timestamp with time zone) IS 'Pause a recurring schedule: disabled, its armed occurrence cancelled if it has not started (one running finishes, and is not re-armed); a ''paused'' row in schedule_events with the reason. An unknown id is refused (P0002).';
REVOKE ALL ON FUNCTION pgsched.schedule_pause(bigint, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_pause(bigint, text, timestamptz) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.schedule_resume(schedule_id bigint, as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
COMMENT ON FUNCTION pgsched.schedule_resume(bigint, timestamp with time zone) IS 'Resume a recurring schedule: enabled, its quarantine cleared, a ''resumed'' row in schedule_events, and NOTIFY pgsched_recurring so the sweeper arms it at once. An unknown id is refused (P0002).';
REVOKE ALL ON FUNCTION pgsched.schedule_resume(bigint, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_resume(bigint, timestamptz) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.schedule_delete(
    schedule_id bigint, reason text DEFAULT 'deleted by operator', as_of timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
COMMENT ON FUNCTION pgsched.schedule_delete(bigint, text, timestamp with time zone) IS 'Delete a recurring schedule: its armed occurrence cancelled if it has not started, the row gone, a ''deleted'' row in schedule_events; its events and its tasks'' history stay. An unknown id is refused (P0002).';
REVOKE ALL ON FUNCTION pgsched.schedule_delete(bigint, text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.schedule_delete(bigint, text, timestamptz) TO pgsched_admin;

-- History: every run with its task's identity, for `pgsched history` and psql.
CREATE OR REPLACE VIEW pgsched.run_history AS
SELECT
    r.task_id,
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
FROM pgsched.task_runs AS r
-- By tenant and id: on a distributed database the join stays on the tenant's shard.
LEFT JOIN pgsched.tasks AS t ON r.tenant_id = t.tenant_id AND r.task_id = t.id;
COMMENT ON VIEW pgsched.run_history IS 'Every run with its schedule: what pgsched history and App.history read.';
REVOKE ALL ON pgsched.run_history FROM public;
GRANT SELECT ON pgsched.run_history TO pgsched_worker;
GRANT ALL ON pgsched.run_history TO pgsched_admin;
