-- 0005 — time: recurring schedules, occurrences, the sweeps' SQL, retention, history.
--
-- A recurring schedule is a row of pgsched.schedules (cron expression and IANA zone kept
-- apart). Each fire time becomes one ordinary task (schedule_type RECURRING), created by
-- pgsched.schedule_arm; pgsched.schedule_occurrences has one row per (schedule, fire time),
-- so two schedulers can never create one occurrence twice. A schedule has at most one armed
-- occurrence at a time: the next is armed when the current one finished.
--
-- Cron arithmetic (DST policy included) lives in Python (pgsched/cron.py); the database
-- checks the shape of an expression and owns every write.

CREATE TYPE pgsched.misfire_policy AS ENUM ('run_once', 'skip', 'catch_up');

CREATE TABLE pgsched.schedules (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id text NOT NULL DEFAULT 'default',
    task_type text NOT NULL,
    cron_expression text NOT NULL,
    timezone text NOT NULL DEFAULT 'UTC',
    payload jsonb NOT NULL DEFAULT '{}',
    metadata jsonb NOT NULL DEFAULT '{}',
    priority integer NOT NULL DEFAULT 5,
    lane pgsched.task_lane NOT NULL,
    max_attempts bigint NOT NULL DEFAULT 3,
    misfire_policy pgsched.misfire_policy NOT NULL DEFAULT 'run_once',
    catch_up_limit integer NOT NULL DEFAULT 10 CHECK (catch_up_limit >= 1),
    idempotency_key text,
    scope text NOT NULL DEFAULT 'tenant',
    product text,
    enabled boolean NOT NULL DEFAULT TRUE,
    quarantine_reason text,
    -- The fire time of the armed occurrence (or of the last one armed).
    last_fire_at timestamptz,
    armed_task_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_key_per_tenant UNIQUE (tenant_id, idempotency_key)
);

CREATE INDEX schedules_enabled_idx ON pgsched.schedules (id) WHERE enabled;

CREATE TABLE pgsched.schedule_occurrences (
    schedule_id bigint NOT NULL REFERENCES pgsched.schedules (id) ON DELETE CASCADE,
    fire_at timestamptz NOT NULL,
    -- ARMED: a task was created for it; MISSED: passed over after downtime (misfire policy).
    outcome text NOT NULL CHECK (outcome IN ('ARMED', 'MISSED')),
    task_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, fire_at)
);

-- What happened to a schedule that is not a task transition: missed occurrences, quarantine.
CREATE TABLE pgsched.schedule_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id bigint NOT NULL,
    occurred_at timestamptz NOT NULL,
    what text NOT NULL,
    fire_at timestamptz,
    detail text
);

CREATE INDEX schedule_events_schedule_idx ON pgsched.schedule_events (schedule_id, id);

ALTER TABLE pgsched.tasks ADD COLUMN schedule_id bigint;

-- Why a cron expression's shape is refused, or NULL. Python checks the rest (it computes
-- the fire times); this keeps obviously broken input out whichever language sends it.
CREATE FUNCTION pgsched.cron_problem(cron_expression text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    fields text[];
    dom_max integer;
    month_list integer[];
BEGIN
    IF cron_expression IS NULL OR btrim(cron_expression) = '' THEN
        RETURN 'cron_expression is required (five fields: minute hour day month weekday)';
    END IF;
    fields := regexp_split_to_array(btrim(cron_expression), '\s+');
    IF cardinality(fields) <> 5 THEN
        RETURN format('cron expression %L must have five fields: minute hour day month weekday', cron_expression);
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(fields) AS f WHERE f !~ '^[0-9A-Za-z*,/?-]+$') THEN
        RETURN format('invalid cron expression %L', cron_expression);
    END IF;
    -- Every number that is a value (not a step after /) must be in its field's range.
    IF EXISTS (
        SELECT 1
          FROM unnest(fields, ARRAY[0, 0, 1, 1, 0], ARRAY[59, 23, 31, 12, 7]) AS f(field, lo, hi)
         CROSS JOIN LATERAL regexp_matches(f.field, '(^|[^/0-9])([0-9]+)', 'g') AS m(parts)
         WHERE m.parts[2]::integer NOT BETWEEN f.lo AND f.hi
    ) THEN
        RETURN format('invalid cron expression %L: a value is out of its field''s range', cron_expression);
    END IF;
    -- A day of month that no listed month has (31 February) can never fire.
    IF fields[3] ~ '^[0-9]+(,[0-9]+)*$' AND fields[5] IN ('*', '?') AND fields[4] ~ '^[0-9]+(,[0-9]+)*$' THEN
        SELECT min(d::integer) INTO dom_max FROM unnest(string_to_array(fields[3], ',')) AS d;
        month_list := string_to_array(fields[4], ',')::integer[];
        IF NOT EXISTS (
            SELECT 1 FROM unnest(month_list) AS m
             WHERE dom_max <= CASE WHEN m = 2 THEN 29 WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END
        ) THEN
            RETURN format('cron expression %L never fires', cron_expression);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- Create a recurring schedule. With first_fire_at (Python computes it) the first occurrence
-- is armed in the same transaction; without it the schedule is left unarmed and the
-- recurring sweep, woken by NOTIFY pgsched_recurring, arms it at once.
CREATE FUNCTION pgsched.schedule_recurring(
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
    product text DEFAULT NULL
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

-- Arm one occurrence of a schedule: a compare-and-set on the armed task (expected_task_id,
-- NULL for "none yet"), so two schedulers racing to arm the next occurrence create it once.
-- Missed fire times (misfire policy) are recorded too. Returns the new task's id, or NULL
-- when someone else armed it first or the schedule is disabled.
CREATE FUNCTION pgsched.schedule_arm(
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

-- An occurrence is live while its task, or any tenant's child task of its fan-out, is
-- still to run or running: the next occurrence waits for every tenant's outcome.
CREATE FUNCTION pgsched.occurrence_is_live(task_id bigint) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT task_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM pgsched.tasks AS tk
         WHERE tk.status IN ('PENDING', 'QUEUED', 'PROCESSING')
           AND (tk.id = occurrence_is_live.task_id OR tk.parent_id = occurrence_is_live.task_id)
    )
$$;

-- Schedules that need arming: enabled, and with no live occurrence (new, re-enabled,
-- their occurrence finished, or left unarmed by a crash).
CREATE FUNCTION pgsched.schedules_unarmed(max_rows integer DEFAULT 500)
RETURNS SETOF pgsched.schedules
LANGUAGE sql STABLE
AS $$
    SELECT s.*
      FROM pgsched.schedules AS s
     WHERE s.enabled AND NOT pgsched.occurrence_is_live(s.armed_task_id)
     ORDER BY s.id
     LIMIT max_rows
$$;

-- Take a broken schedule out of service, with the reason; every other schedule keeps firing.
CREATE FUNCTION pgsched.schedule_quarantine(
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

-- Re-enable a schedule (after fixing it); the recurring sweep arms it again.
CREATE FUNCTION pgsched.schedule_enable(
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

-- Promotion: cold tasks coming due within the hot window (or `within`, if given) move to
-- the hot partition, in a bounded chunk (call until it returns less than max_tasks). A
-- task whose promotion was missed (already due) is promoted too, and says so in its event.
CREATE FUNCTION pgsched.task_promote_due(
    max_tasks integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL,
    within interval DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    cfg pgsched.settings;
    promoted integer;
    wake pgsched.task_lane[];
BEGIN
    SELECT * INTO cfg FROM pgsched.settings;
    WITH due AS MATERIALIZED (
        SELECT tk.id
          FROM pgsched.tasks AS tk
         WHERE tk.status = 'PENDING' AND tk.next_run_at - t < coalesce(task_promote_due.within, cfg.hot_window)
         ORDER BY tk.next_run_at
         LIMIT task_promote_due.max_tasks
           FOR UPDATE SKIP LOCKED
    ),
    moved AS (
        UPDATE pgsched.tasks AS tk
           SET status = 'QUEUED',
               status_reason = CASE
                   WHEN tk.next_run_at <= t THEN 'promoted late: already due (overdue sweep)'
                   ELSE 'promoted into the hot window'
               END,
               updated_at = t
          FROM due
         WHERE tk.id = due.id AND tk.status = 'PENDING'
        RETURNING tk.lane, tk.next_run_at
    )
    SELECT count(*), coalesce(array_agg(DISTINCT m.lane) FILTER (WHERE m.next_run_at - t < cfg.immediate_window), '{}')
      INTO promoted, wake
      FROM moved AS m;
    PERFORM pg_notify('pgsched_' || lower(w::text), '') FROM unnest(wake) AS w;
    RETURN promoted;
END;
$$;

-- The safety net for due work nobody claimed: wake the lanes that have it. Returns the
-- lanes and how many due tasks have waited longer than `older_than`.
CREATE FUNCTION pgsched.task_wake_overdue(
    older_than interval DEFAULT '1 minute',
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (lane pgsched.task_lane, overdue bigint)
LANGUAGE plpgsql
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

-- Retention: finished tasks, their events and old bookkeeping older than `keep` are
-- deleted in bounded chunks (call until every count is below max_rows). Live tasks and the
-- DEAD lane are never pruned.
CREATE FUNCTION pgsched.retention_prune(
    keep interval DEFAULT '30 days',
    max_rows integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (tasks bigint, events bigint, idempotency_keys bigint, occurrences bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    cutoff timestamptz := coalesce(as_of, now()) - keep;
    n_tasks bigint;
    n_events bigint;
    n_keys bigint;
    n_occurrences bigint;
    n_ledger bigint;
BEGIN
    WITH old AS (
        SELECT tk.id, tk.status FROM pgsched.tasks AS tk
         WHERE tk.status IN ('COMPLETED', 'CANCELLED') AND tk.updated_at < cutoff
         LIMIT max_rows
    )
    DELETE FROM pgsched.tasks AS tk USING old
     WHERE tk.id = old.id AND tk.status = old.status;
    GET DIAGNOSTICS n_tasks = ROW_COUNT;

    -- Only the events of tasks that are gone: a kept task (DEAD, live) keeps its history.
    WITH old AS (
        SELECT e.id FROM pgsched.task_events AS e
         WHERE e.occurred_at < cutoff
           AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = e.task_id)
         LIMIT max_rows
    )
    DELETE FROM pgsched.task_events AS e USING old WHERE e.id = old.id;
    GET DIAGNOSTICS n_events = ROW_COUNT;

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

    -- The ledger of completed work ages out with the tasks it vouches for.
    WITH old AS (
        SELECT w.tenant_id, w.task_type, w.idempotency_key FROM pgsched.completed_work AS w
         WHERE w.completed_at < cutoff
         LIMIT max_rows
    )
    DELETE FROM pgsched.completed_work AS w USING old
     WHERE w.tenant_id = old.tenant_id AND w.task_type = old.task_type
       AND w.idempotency_key = old.idempotency_key;
    GET DIAGNOSTICS n_ledger = ROW_COUNT;
    n_keys := n_keys + n_ledger;

    RETURN QUERY SELECT n_tasks, n_events, n_keys, n_occurrences;
END;
$$;

CREATE INDEX tasks_done_retention_idx ON pgsched.tasks_done (updated_at)
WHERE status IN ('COMPLETED', 'CANCELLED');

-- History: every run with its task's identity, for `pgsched history` and psql.
CREATE VIEW pgsched.run_history AS
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
LEFT JOIN pgsched.tasks AS t ON r.task_id = t.id;
