-- 0011 — bad input is refused where it comes in, and tenancy fails closed.
--
-- * Due times: every task row is inserted with a due time between 1970-01-01 00:00 UTC and
--   9999-01-01 00:00 UTC (run_at_problem). 'infinity', '-infinity', 4713 BC and year 10000
--   are valid timestamptz values that no worker (Python's datetime among them) can read
--   back; the statement trigger below refuses them whichever path inserts the row.
-- * Bounds: max_attempts 1 to 1000; metadata under the same byte cap as the payload.
-- * Cron: one grammar, the same in pgsched/cron.py, checked field by field. R and H
--   (random, hashed), L, W and #, steps larger than the field and ranges that run
--   backwards are refused, and so is a day of month that none of the listed months has.
-- * Tenancy fails closed: a login that is not an admin acts only for the tenants bound to
--   it in pgsched.producer_tenants; tenant_id '*' binds it to every tenant.

-- Why a due time is refused, or NULL. The margins keep every reading of the value, in any
-- session time zone, inside what clients can represent (Python: years 1 to 9999).
CREATE FUNCTION pgsched.run_at_problem(run_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN run_at < '1970-01-01 00:00:00+00' OR run_at >= '9999-01-01 00:00:00+00'
            OR NOT isfinite(run_at) THEN format(
            'run_at %s is out of range (1970-01-01 00:00 UTC to 9999-01-01 00:00 UTC)',
            run_at::text)
    END
$$;

-- Statement level, on INSERT only: a row moved between partitions by an UPDATE is not
-- seen, so rows written before this check can still be finished, promoted and pruned.
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

CREATE TRIGGER tasks_refuse_bad_due_times
AFTER INSERT ON pgsched.tasks
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_refuse_bad_due_times();

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

-- One field of a cron expression: why it is refused (problem) or the values it lists.
-- pgsched/cron.py (cron_problem) applies the same grammar with the same messages.
CREATE FUNCTION pgsched.cron_field_values(
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

-- Whether the session's login acts for every tenant: superusers, the schema's owner and
-- admins do; anyone else needs a binding with tenant_id '*'.
CREATE FUNCTION pgsched.login_acts_for_all_tenants() RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_has_role(session_user, 'pgsched_admin', 'MEMBER')
        OR pg_has_role(session_user, (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n
                                       WHERE n.nspname = 'pgsched'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b
                    WHERE b.role_name = session_user AND b.tenant_id = '*')
$$;

-- Refuses tenants the session's login may not act for. Fails closed: a login with no
-- binding acts for no tenant, and the message gives the binding an admin would add.
CREATE OR REPLACE FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) RETURNS text
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

REVOKE EXECUTE ON FUNCTION
pgsched.run_at_problem(timestamptz),
pgsched.task_refuse_bad_due_times(),
pgsched.cron_field_values(text, text, integer),
pgsched.login_acts_for_all_tenants()
FROM public;
GRANT EXECUTE ON FUNCTION
pgsched.run_at_problem(timestamptz),
pgsched.cron_field_values(text, text, integer),
pgsched.login_acts_for_all_tenants()
TO pgsched_producer, pgsched_worker, pgsched_admin;
GRANT EXECUTE ON FUNCTION pgsched.task_refuse_bad_due_times() TO pgsched_worker, pgsched_admin;
