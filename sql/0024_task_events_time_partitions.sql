-- 0024 — task_events is partitioned by time; retention drops whole periods instead of
-- deleting rows (docs/retention.md has the measurements behind this).
--
--   task_events             PARTITION BY RANGE (occurred_at), primary key (id, occurred_at)
--   task_events_pYYYYMMDD   one partition per period (a day, a week, or a part of a day:
--                           settings.event_partition_period; a period starting inside a
--                           day has _HH24MISS added), made ahead by partitions_maintain
--   task_events_archive     FROM (MINVALUE): the history still kept from expired periods,
--                           the events of tasks that are live or DEAD
--   task_events_default     DEFAULT: catches an event no period covers (the sweeper down for
--                           longer than the periods made ahead, or an as_of far in the
--                           future), so a transition never fails for want of a partition
--
--   partitions_maintain(ahead, keep, as_of, lock_wait)
--       makes the next `ahead` periods (moving any rows of theirs out of the default
--       partition), and once periods are wholly older than `keep`, copies the events of
--       live and DEAD tasks into a new archive and drops the expired periods and the old
--       archive: the finished tasks' events go whole, without a DELETE
--       One row per partition acted on: created (event_rows: moved in from the default
--       partition), dropped, archived (task_events_archive; event_rows: events kept), or
--       not_created / not_dropped: its lock was not granted within lock_wait, nothing of
--       that step changed, and the next run tries again.
--   event_partitions()      the partitions with their bounds (doctor, tests, operators)
--   event_partitions_status(as_of)   whether the current period is covered, how many
--                           periods ahead are, and rows in the default partition (doctor)
--
-- The DEFAULT partition costs an ACCESS EXCLUSIVE lock on task_events to drop a partition
-- (Postgres refuses DETACH ... CONCURRENTLY beside a default partition, and cannot run it in
-- a function anyway): the wait for it is bounded by lock_wait, and a run that times out
-- changes nothing and is retried by the next sweep. Without it, an event outside every
-- partition would fail the statement that made it: a claim or a completion.
--
-- The existing table becomes the first archive, covering everything up to the end of
-- today; no row is copied. Attaching it reads it once (the CHECK that lets Postgres skip
-- its own scan) and builds the (id, occurred_at) key: both under the lock below, so on a
-- large table this migration takes as long as one sequential read and one index build.
SET LOCAL lock_timeout = '5s';

-- A week, a day, or a part of a day that divides it evenly (an hour, 10 minutes: for a
-- day compressed into minutes, as the soak benchmark runs it).
ALTER TABLE pgsched.settings
ADD COLUMN event_partition_period interval NOT NULL DEFAULT '1 day'
CONSTRAINT settings_event_partition_period_known CHECK (
    event_partition_period = interval '7 days'
    OR (
        event_partition_period BETWEEN interval '1 minute' AND interval '1 day'
        AND mod(86400, extract(EPOCH FROM event_partition_period)) = 0
    )
);

-- The first instant of the period holding `t`: a week from Monday (UTC), or a UTC day or
-- part of one (periods that divide a day evenly start at UTC midnight).
CREATE FUNCTION pgsched.event_period_start(t timestamptz, period interval)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN period = INTERVAL '7 days' THEN date_trunc('week', t, 'UTC')
                ELSE to_timestamp(floor(extract(EPOCH FROM t) / extract(EPOCH FROM period))
                                  * extract(EPOCH FROM period)) END
$$;

-- The old table, renamed, becomes the archive --------------------------------------------
ALTER TABLE pgsched.task_events RENAME TO task_events_archive;
ALTER INDEX pgsched.task_events_task_idx RENAME TO task_events_archive_task_idx;
ALTER INDEX pgsched.task_events_tenant_time_idx RENAME TO task_events_archive_tenant_time_idx;
-- Partition pruning does what the BRIN index did.
DROP INDEX pgsched.task_events_time_brin;
ALTER TABLE pgsched.task_events_archive DROP CONSTRAINT task_events_pkey;
ALTER TABLE pgsched.task_events_archive
ADD CONSTRAINT task_events_archive_pkey PRIMARY KEY (id, occurred_at);

-- A partitioned table cannot have an identity column (Postgres 15): the ids continue from
-- a plain sequence of the same name.
ALTER SEQUENCE pgsched.task_events_id_seq RENAME TO task_events_archive_id_seq;
CREATE SEQUENCE pgsched.task_events_id_seq AS bigint;
SELECT setval('pgsched.task_events_id_seq', s.last_value, s.is_called)
FROM pgsched.task_events_archive_id_seq AS s;
ALTER TABLE pgsched.task_events_archive ALTER COLUMN id DROP IDENTITY;

-- Every status transition, written by the statement that makes it (see 0001).
CREATE TABLE pgsched.task_events (
    id bigint NOT NULL DEFAULT nextval('pgsched.task_events_id_seq'),
    task_id bigint NOT NULL,
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    from_status pgsched.task_status NOT NULL,
    to_status pgsched.task_status NOT NULL,
    occurred_at timestamptz NOT NULL,
    -- The task's due time when the transition happened: lateness = occurred_at - scheduled_for.
    scheduled_for timestamptz NOT NULL,
    attempt bigint NOT NULL,
    worker text,
    detail text,
    -- The partition key must be part of the key; `id` stays unique by the sequence.
    CONSTRAINT task_events_pkey PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);

ALTER SEQUENCE pgsched.task_events_id_seq OWNED BY pgsched.task_events.id;

CREATE INDEX task_events_task_idx ON pgsched.task_events (task_id, id);

CREATE INDEX task_events_tenant_time_idx ON pgsched.task_events (tenant_id, occurred_at);

CREATE TABLE pgsched.task_events_default PARTITION OF pgsched.task_events DEFAULT;

DO $$
DECLARE
    bound timestamptz := pgsched.event_period_start(now(), INTERVAL '1 day') + INTERVAL '1 day';
BEGIN
    -- Events dated after today (an as_of in the future) belong to periods not made yet.
    WITH moved AS (
        DELETE FROM pgsched.task_events_archive AS a WHERE a.occurred_at >= bound RETURNING a.*
    )
    INSERT INTO pgsched.task_events_default SELECT * FROM moved;
    -- A valid CHECK that implies the partition bound: ATTACH then skips its own scan.
    EXECUTE format(
        'ALTER TABLE pgsched.task_events_archive'
        ' ADD CONSTRAINT task_events_archive_range CHECK (occurred_at < %L)', bound);
    EXECUTE format(
        'ALTER TABLE pgsched.task_events ATTACH PARTITION pgsched.task_events_archive'
        ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END;
$$;

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
        AND e.id > s.id
        AND e.from_status = 'PROCESSING'
        AND e.to_status <> 'PROCESSING'
    ORDER BY e.id
    LIMIT 1
) AS f ON TRUE
WHERE s.to_status = 'PROCESSING' AND s.from_status <> 'PROCESSING';

GRANT SELECT ON pgsched.task_events TO pgsched_worker;
GRANT ALL ON pgsched.task_events TO pgsched_admin;
GRANT ALL ON SEQUENCE pgsched.task_events_id_seq TO pgsched_admin;

-- Partitions --------------------------------------------------------------------------------

-- task_events' partitions and their bounds (lower_bound NULL: the archive, from MINVALUE;
-- both NULL: the default partition). approx_rows is the planner's estimate, except for the
-- default partition: its rows counted (up to 100,000), since any row there is a finding.
CREATE FUNCTION pgsched.event_partitions()
RETURNS TABLE (
    partition_name text, lower_bound timestamptz, upper_bound timestamptz,
    is_default boolean, approx_rows bigint
)
LANGUAGE sql STABLE
SECURITY DEFINER
-- The bounds are read back from their text form, written in this zone and style.
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC' SET datestyle = 'ISO, YMD'
AS $$
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
$$;

-- How far ahead task_events is covered, as of `as_of`: the period in force, whether the
-- current period has a partition, how many whole periods after it do, and the default
-- partition's rows (counted up to 100,000). `pgsched doctor` reads it.
CREATE FUNCTION pgsched.event_partitions_status(as_of timestamptz DEFAULT NULL)
RETURNS TABLE (
    period interval, current_covered boolean, periods_ahead integer, default_rows bigint
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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

CREATE FUNCTION pgsched.partitions_maintain(
    ahead integer DEFAULT 3,
    keep interval DEFAULT '30 days',
    as_of timestamptz DEFAULT NULL,
    lock_wait interval DEFAULT '1 second'
) RETURNS TABLE (partition_name text, action text, event_rows bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC'
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
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
    saved_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF ahead IS NULL OR ahead < 1 OR ahead > 366 THEN
        RAISE EXCEPTION 'pgsched: partitions_maintain: ahead must be between 1 and 366 periods, not %', ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep IS NULL OR keep <= INTERVAL '0' THEN
        RAISE EXCEPTION 'pgsched: partitions_maintain: keep must be above 0, not %', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lock_wait IS NULL OR lock_wait <= INTERVAL '0' OR lock_wait > INTERVAL '1 minute' THEN
        RAISE EXCEPTION 'pgsched: partitions_maintain: lock_wait must be above 0 and at most 1 minute, not %', lock_wait
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maintainer at a time (the sweeper, or someone calling this by hand).
    PERFORM pg_advisory_xact_lock(hashtext('pgsched.partitions_maintain'));
    SELECT s.event_partition_period INTO period FROM pgsched.settings AS s;
    cutoff := t - keep;
    horizon := pgsched.event_period_start(t, period) + (ahead + 1) * period;
    PERFORM set_config('lock_timeout', (extract(EPOCH FROM lock_wait) * 1000)::bigint::text, TRUE);

    -- Ahead: partitions continue from the newest one, so they never leave a gap; a changed
    -- period takes effect at the next period boundary.
    SELECT max(p.upper_bound) INTO top FROM pgsched.event_partitions() AS p WHERE NOT p.is_default;
    -- None at all (dropped by hand): start again from the current period.
    top := coalesce(top, pgsched.event_period_start(t, period));
    WHILE top < horizon LOOP
        lo := top;
        hi := pgsched.event_period_start(lo, period) + period;
        part := 'task_events_p' || to_char(lo, 'YYYYMMDD')
                || CASE WHEN lo <> date_trunc('day', lo) THEN to_char(lo, '_HH24MISS') ELSE '' END;
        BEGIN
            -- Made apart and attached: attaching needs no ACCESS EXCLUSIVE lock on
            -- task_events, only on the default partition, whose rows of this period move in.
            EXECUTE format('CREATE TABLE pgsched.%I (LIKE pgsched.task_events)', part);
            EXECUTE format(
                'ALTER TABLE pgsched.%I ADD CONSTRAINT %I CHECK (occurred_at >= %L AND occurred_at < %L)',
                part, part || '_range', lo, hi);
            EXECUTE format(
                'WITH moved AS (DELETE FROM pgsched.task_events_default AS d'
                ' WHERE d.occurred_at >= %L AND d.occurred_at < %L RETURNING d.*)'
                ' INSERT INTO pgsched.%I SELECT * FROM moved', lo, hi, part);
            GET DIAGNOSTICS n = ROW_COUNT;
            EXECUTE format(
                'ALTER TABLE pgsched.task_events ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
                part, lo, hi);
            -- The bound says it now; a CHECK would only cost every insert.
            EXECUTE format('ALTER TABLE pgsched.%I DROP CONSTRAINT %I', part, part || '_range');
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT part, 'not_created'::text, NULL::bigint;
            EXIT;
        END;
        RETURN QUERY SELECT part, 'created'::text, n;
        top := hi;
    END LOOP;

    -- Expired: periods wholly older than the cutoff. Their kept events (live and DEAD
    -- tasks'), and the archive's still kept, go into a new archive first; only then is the
    -- lock taken, for catalog changes alone.
    SELECT array_agg(p.partition_name ORDER BY p.lower_bound), max(p.upper_bound)
      INTO expired, new_upper
      FROM pgsched.event_partitions() AS p
     WHERE p.lower_bound IS NOT NULL AND p.upper_bound <= cutoff;
    IF expired IS NOT NULL THEN
        BEGIN
            CREATE TABLE pgsched.task_events_archive_next (LIKE pgsched.task_events);
            EXECUTE format(
                'ALTER TABLE pgsched.task_events_archive_next'
                ' ADD CONSTRAINT task_events_archive_range CHECK (occurred_at < %L)', new_upper);
            INSERT INTO pgsched.task_events_archive_next
            SELECT e.* FROM pgsched.task_events AS e
             WHERE e.occurred_at < new_upper
               AND EXISTS (SELECT 1 FROM pgsched.tasks AS tk
                            WHERE tk.id = e.task_id
                              AND tk.status IN ('PENDING', 'QUEUED', 'PROCESSING', 'FAILED'));
            GET DIAGNOSTICS n = ROW_COUNT;
            ALTER TABLE pgsched.task_events_archive_next
            ADD CONSTRAINT task_events_archive_next_pkey PRIMARY KEY (id, occurred_at);
            CREATE INDEX task_events_archive_next_task_idx
            ON pgsched.task_events_archive_next (task_id, id);
            CREATE INDEX task_events_archive_next_tenant_time_idx
            ON pgsched.task_events_archive_next (tenant_id, occurred_at);

            LOCK TABLE pgsched.task_events IN ACCESS EXCLUSIVE MODE;
            DROP TABLE IF EXISTS pgsched.task_events_archive;
            FOREACH part IN ARRAY expired LOOP
                EXECUTE format('DROP TABLE pgsched.%I', part);
            END LOOP;
            ALTER TABLE pgsched.task_events_archive_next RENAME TO task_events_archive;
            ALTER TABLE pgsched.task_events_archive
            RENAME CONSTRAINT task_events_archive_next_pkey TO task_events_archive_pkey;
            ALTER INDEX pgsched.task_events_archive_next_task_idx RENAME TO task_events_archive_task_idx;
            ALTER INDEX pgsched.task_events_archive_next_tenant_time_idx
            RENAME TO task_events_archive_tenant_time_idx;
            EXECUTE format(
                'ALTER TABLE pgsched.task_events ATTACH PARTITION pgsched.task_events_archive'
                ' FOR VALUES FROM (MINVALUE) TO (%L)', new_upper);
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT x, 'not_dropped'::text, NULL::bigint FROM unnest(expired) AS x;
            expired := NULL;
        END;
        IF expired IS NOT NULL THEN
            RETURN QUERY SELECT x, 'dropped'::text, NULL::bigint FROM unnest(expired) AS x;
            RETURN QUERY SELECT 'task_events_archive'::text, 'archived'::text, n;
        END IF;
    END IF;
    PERFORM set_config('lock_timeout', saved_lock_timeout, TRUE);
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.event_partitions() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.event_partitions()
TO pgsched_producer, pgsched_worker, pgsched_admin;
REVOKE EXECUTE ON FUNCTION pgsched.event_partitions_status(timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.event_partitions_status(timestamptz)
TO pgsched_producer, pgsched_worker, pgsched_admin;
REVOKE EXECUTE ON FUNCTION pgsched.partitions_maintain(integer, interval, timestamptz, interval)
FROM public;
GRANT EXECUTE ON FUNCTION pgsched.partitions_maintain(integer, interval, timestamptz, interval)
TO pgsched_worker, pgsched_admin;

-- Retention no longer deletes events: partitions_maintain drops them by the period. The
-- `events` column stays (callers read it) and is 0.
CREATE OR REPLACE FUNCTION pgsched.retention_prune(
    keep interval DEFAULT '30 days',
    max_rows integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (tasks bigint, events bigint, idempotency_keys bigint, occurrences bigint, ledger bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cutoff timestamptz := coalesce(as_of, now()) - keep;
    n_tasks bigint;
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

-- The periods ahead, from today.
SELECT count(*) FROM pgsched.partitions_maintain();
