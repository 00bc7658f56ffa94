-- 0027 — COMPLETED and CANCELLED tasks are partitioned by time; retention drops whole
-- periods of them instead of deleting rows, as 0024 does for task_events
-- (docs/retention.md has the measurements).
--
--   tasks                    PARTITION BY LIST (status), primary key (id, status, updated_at)
--     tasks_cold             PENDING
--     tasks_hot              QUEUED, PROCESSING
--     tasks_done             FAILED only: the DEAD lane, never dropped by age
--     tasks_finished         COMPLETED, CANCELLED; PARTITION BY RANGE (updated_at)
--       tasks_finished_pYYYYMMDD   one period (settings.event_partition_period, the same
--                          periods as task_events), made ahead by
--                          finished_partitions_maintain
--       tasks_finished_archive     FROM (MINVALUE): the rows finished before this migration,
--                          deleted by row by retention_prune and dropped whole once every
--                          row it can hold is past the retention
--       tasks_finished_default     DEFAULT: a task finished at a time no period covers
--                          (the sweeper down for longer than the periods made ahead, an
--                          as_of far in the future, or one in the past below the oldest
--                          period), so a completion never fails for want of a partition
--
--   finished_partitions_maintain(ahead, keep, as_of, lock_wait)
--       the sibling of partitions_maintain for tasks_finished, with the same arguments,
--       checks and result rows (task_rows instead of event_rows): created (task_rows moved
--       in from the default partition), dropped, or not_created / not_dropped when its
--       lock was not granted within lock_wait.
--   finished_partitions()    the partitions of tasks_finished with their bounds
--   finished_partitions_status(as_of)   as event_partitions_status, for tasks_finished
--
-- updated_at is the partition key: it is the time a COMPLETED or CANCELLED row finished
-- (every transition sets it, and nothing updates a finished row), and retention has always
-- judged finished rows by it, so dropping a period keeps retention's rule: a row goes once
-- its whole period is older than the retention.
--
-- The existing tasks_done becomes the archive, covering everything up to the end of the
-- current period; no COMPLETED or CANCELLED row is copied. Its FAILED rows (the DEAD lane,
-- small) are copied into a new tasks_done. Under the lock below, the (id, status,
-- updated_at) key is built on tasks_cold, tasks_hot and the archive, and attaching the
-- archive reads it once: on a large database this migration takes as long as those index
-- builds and that read.
SET LOCAL lock_timeout = '5s';

LOCK TABLE pgsched.tasks IN ACCESS EXCLUSIVE MODE;

DO $$
BEGIN
    ALTER TABLE pgsched.tasks DETACH PARTITION pgsched.tasks_done;
END;
$$;
ALTER TABLE pgsched.tasks_done RENAME TO tasks_finished_archive;
ALTER INDEX pgsched.tasks_done_dead_idx RENAME TO tasks_finished_archive_dead_idx;
ALTER INDEX pgsched.tasks_done_due_idx RENAME TO tasks_finished_archive_due_idx;
ALTER INDEX pgsched.tasks_done_not_completed_idx RENAME TO tasks_finished_archive_not_completed_idx;
ALTER INDEX pgsched.tasks_done_parent_id_idx RENAME TO tasks_finished_archive_parent_id_idx;
ALTER INDEX pgsched.tasks_done_retention_idx RENAME TO tasks_finished_archive_updated_idx;
ALTER INDEX pgsched.tasks_done_tenant_idx RENAME TO tasks_finished_archive_tenant_idx;
ALTER INDEX pgsched.tasks_done_type_idx RENAME TO tasks_finished_archive_type_idx;

-- A partitioned table's key must contain its partition keys, at every level.
ALTER TABLE pgsched.tasks DROP CONSTRAINT tasks_pkey;
ALTER TABLE pgsched.tasks_finished_archive DROP CONSTRAINT tasks_done_pkey;
ALTER TABLE pgsched.tasks ADD CONSTRAINT tasks_pkey PRIMARY KEY (id, status, updated_at);

-- The DEAD lane, with the indexes tasks_done had for it (0001, 0018).
CREATE TABLE pgsched.tasks_done PARTITION OF pgsched.tasks FOR VALUES IN ('FAILED');
INSERT INTO pgsched.tasks_done
SELECT * FROM pgsched.tasks_finished_archive
WHERE status = 'FAILED';
DELETE FROM pgsched.tasks_finished_archive
WHERE status = 'FAILED';
DROP INDEX pgsched.tasks_finished_archive_dead_idx;
CREATE INDEX tasks_done_dead_idx ON pgsched.tasks_done (task_type, updated_at)
WHERE status = 'FAILED';
CREATE INDEX tasks_done_type_idx ON pgsched.tasks_done (task_type, id);
CREATE INDEX tasks_done_tenant_idx ON pgsched.tasks_done (tenant_id, id);
CREATE INDEX tasks_done_due_idx ON pgsched.tasks_done (next_run_at);
CREATE INDEX tasks_done_not_completed_idx ON pgsched.tasks_done (status, id)
WHERE status <> 'COMPLETED';

-- Finished work: the indexes task search (0018) and the dashboard's last hour read, on
-- every period. The updated_at index is the one retention used (0005): it answers "the
-- last hour" inside the current period, and retention_prune's deletes in the archive.
CREATE TABLE pgsched.tasks_finished PARTITION OF pgsched.tasks
FOR VALUES IN ('COMPLETED', 'CANCELLED')
PARTITION BY RANGE (updated_at);
CREATE INDEX tasks_finished_type_idx ON pgsched.tasks_finished (task_type, id);
CREATE INDEX tasks_finished_tenant_idx ON pgsched.tasks_finished (tenant_id, id);
CREATE INDEX tasks_finished_due_idx ON pgsched.tasks_finished (next_run_at);
CREATE INDEX tasks_finished_not_completed_idx ON pgsched.tasks_finished (status, id)
WHERE status <> 'COMPLETED';
CREATE INDEX tasks_finished_updated_idx ON pgsched.tasks_finished (updated_at)
WHERE status IN ('COMPLETED', 'CANCELLED');

CREATE TABLE pgsched.tasks_finished_default PARTITION OF pgsched.tasks_finished DEFAULT;

DO $$
DECLARE
    bound timestamptz := (
        SELECT pgsched.event_period_start(now(), s.event_partition_period) + s.event_partition_period
          FROM pgsched.settings AS s
    );
BEGIN
    -- Finished after the end of this period (an as_of in the future): periods not made yet.
    WITH moved AS (
        DELETE FROM pgsched.tasks_finished_archive AS a WHERE a.updated_at >= bound RETURNING a.*
    )
    INSERT INTO pgsched.tasks_finished_default SELECT * FROM moved;
    ALTER TABLE pgsched.tasks_finished_archive
    ADD CONSTRAINT tasks_finished_archive_pkey PRIMARY KEY (id, status, updated_at);
    -- Its indexes match the partitioned ones and are attached as they are: nothing rebuilt.
    EXECUTE format(
        'ALTER TABLE pgsched.tasks_finished ATTACH PARTITION pgsched.tasks_finished_archive'
        ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END;
$$;

GRANT SELECT ON pgsched.tasks_done, pgsched.tasks_finished TO pgsched_worker;
GRANT ALL ON pgsched.tasks_done, pgsched.tasks_finished TO pgsched_admin;

-- Partitions --------------------------------------------------------------------------------

-- tasks_finished's partitions and their bounds, as event_partitions() lists task_events'
-- (lower_bound NULL: the archive; both NULL: the default partition, whose rows are counted
-- up to 100,000).
CREATE FUNCTION pgsched.finished_partitions()
RETURNS TABLE (
    partition_name text, lower_bound timestamptz, upper_bound timestamptz,
    is_default boolean, approx_rows bigint
)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC' SET datestyle = 'ISO, YMD'
AS $$
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
$$;

CREATE FUNCTION pgsched.finished_partitions_status(as_of timestamptz DEFAULT NULL)
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
           EXISTS (SELECT 1 FROM pgsched.finished_partitions() AS p
                    WHERE NOT p.is_default AND s.t < p.upper_bound
                      AND (p.lower_bound IS NULL OR p.lower_bound <= s.t)),
           (SELECT count(*)::integer FROM pgsched.finished_partitions() AS p
             WHERE p.lower_bound >= pgsched.event_period_start(s.t, s.period) + s.period),
           (SELECT p.approx_rows FROM pgsched.finished_partitions() AS p WHERE p.is_default)
      FROM s
$$;

CREATE FUNCTION pgsched.finished_partitions_maintain(
    ahead integer DEFAULT 3,
    keep interval DEFAULT '30 days',
    as_of timestamptz DEFAULT NULL,
    lock_wait interval DEFAULT '1 second'
) RETURNS TABLE (partition_name text, action text, task_rows bigint)
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
    n bigint;
    saved_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF ahead IS NULL OR ahead < 1 OR ahead > 366 THEN
        RAISE EXCEPTION 'pgsched: finished_partitions_maintain: ahead must be between 1 and 366 periods, not %', ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep IS NULL OR keep <= INTERVAL '0' THEN
        RAISE EXCEPTION 'pgsched: finished_partitions_maintain: keep must be above 0, not %', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lock_wait IS NULL OR lock_wait <= INTERVAL '0' OR lock_wait > INTERVAL '1 minute' THEN
        RAISE EXCEPTION 'pgsched: finished_partitions_maintain: lock_wait must be above 0 and at most 1 minute, not %', lock_wait
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pgsched.finished_partitions_maintain'));
    SELECT s.event_partition_period INTO period FROM pgsched.settings AS s;
    cutoff := t - keep;
    horizon := pgsched.event_period_start(t, period) + (ahead + 1) * period;
    PERFORM set_config('lock_timeout', (extract(EPOCH FROM lock_wait) * 1000)::bigint::text, TRUE);

    -- Ahead, continuing from the newest partition (as partitions_maintain does).
    SELECT max(p.upper_bound) INTO top FROM pgsched.finished_partitions() AS p WHERE NOT p.is_default;
    top := coalesce(top, pgsched.event_period_start(t, period));
    WHILE top < horizon LOOP
        lo := top;
        hi := pgsched.event_period_start(lo, period) + period;
        part := 'tasks_finished_p' || to_char(lo, 'YYYYMMDD')
                || CASE WHEN lo <> date_trunc('day', lo) THEN to_char(lo, '_HH24MISS') ELSE '' END;
        BEGIN
            -- Made apart and attached: attaching takes no ACCESS EXCLUSIVE lock on
            -- tasks_finished, only on the default partition, whose rows of this period move
            -- in. The CHECK constraints of tasks come along: a partition must have them.
            EXECUTE format('CREATE TABLE pgsched.%I (LIKE pgsched.tasks_finished INCLUDING CONSTRAINTS)', part);
            EXECUTE format(
                'WITH moved AS (DELETE FROM pgsched.tasks_finished_default AS d'
                ' WHERE d.updated_at >= %L AND d.updated_at < %L RETURNING d.*)'
                ' INSERT INTO pgsched.%I SELECT * FROM moved', lo, hi, part);
            GET DIAGNOSTICS n = ROW_COUNT;
            EXECUTE format(
                'ALTER TABLE pgsched.tasks_finished ATTACH PARTITION pgsched.%I FOR VALUES FROM (%L) TO (%L)',
                part, lo, hi);
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT part, 'not_created'::text, NULL::bigint;
            EXIT;
        END;
        RETURN QUERY SELECT part, 'created'::text, n;
        top := hi;
    END LOOP;

    -- Expired: partitions every row of which is older than the cutoff, the archive
    -- included. FAILED rows are in tasks_done, never here. Dropped under an ACCESS
    -- EXCLUSIVE lock on tasks_finished (a completion's insert waits for it, at most
    -- lock_wait), for catalog changes only: nothing is read or copied.
    SELECT array_agg(p.partition_name ORDER BY p.upper_bound)
      INTO expired
      FROM pgsched.finished_partitions() AS p
     WHERE NOT p.is_default AND p.upper_bound <= cutoff;
    IF expired IS NOT NULL THEN
        BEGIN
            LOCK TABLE pgsched.tasks_finished IN ACCESS EXCLUSIVE MODE;
            FOREACH part IN ARRAY expired LOOP
                EXECUTE format('DROP TABLE pgsched.%I', part);
            END LOOP;
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT x, 'not_dropped'::text, NULL::bigint FROM unnest(expired) AS x;
            expired := NULL;
        END;
        IF expired IS NOT NULL THEN
            RETURN QUERY SELECT x, 'dropped'::text, NULL::bigint FROM unnest(expired) AS x;
        END IF;
    END IF;
    PERFORM set_config('lock_timeout', saved_lock_timeout, TRUE);
END;
$$;

REVOKE EXECUTE ON FUNCTION pgsched.finished_partitions() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.finished_partitions()
TO pgsched_producer, pgsched_worker, pgsched_admin;
REVOKE EXECUTE ON FUNCTION pgsched.finished_partitions_status(timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.finished_partitions_status(timestamptz)
TO pgsched_producer, pgsched_worker, pgsched_admin;
REVOKE EXECUTE ON FUNCTION pgsched.finished_partitions_maintain(integer, interval, timestamptz, interval)
FROM public;
GRANT EXECUTE ON FUNCTION pgsched.finished_partitions_maintain(integer, interval, timestamptz, interval)
TO pgsched_worker, pgsched_admin;

-- Retention deletes by row only the finished rows no dated partition holds: the archive's
-- and the default partition's below the oldest period. The dated periods go whole
-- (finished_partitions_maintain). The rest is as in 0024.
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

-- The periods ahead, from the end of the archive's.
SELECT count(*) FROM pgsched.finished_partitions_maintain();
