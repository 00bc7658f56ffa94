-- sql/code/partitions_retention.sql — partitions and retention.
--
-- time partitions of task_events and tasks_finished (partitions_maintain,
-- finished_partitions_maintain, both through time_partitions_maintain; event_partitions,
-- finished_partitions and their _status; event_period_start) and retention_prune; makes the
-- periods ahead when applied.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Retention deletes by row only the finished rows no dated partition holds: the archive's
-- and the default partition's below the oldest period. The dated periods go whole
-- (finished_partitions_maintain). The rest is as in 0024.
CREATE OR REPLACE FUNCTION pgsched.retention_prune(
    keep interval DEFAULT '30 days',
    max_rows integer DEFAULT 10000,
    as_of timestamptz DEFAULT NULL
) RETURNS TABLE (
    tasks bigint, events bigint, idempotency_keys bigint, occurrences bigint, ledger bigint,
    dependencies bigint, result_waiters bigint
)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cutoff timestamptz := coalesce(as_of, now()) - keep;
    row_cutoff timestamptz;
    n_tasks bigint;
    n_keys bigint;
    n_windows bigint;
    n_occurrences bigint;
    n_ledger bigint;
    n_dependencies bigint;
    n_waiters bigint;
    old_parents bigint[];
    old_children bigint[];
    old_tokens uuid[];
    live bigint[];
BEGIN
    IF pgsched.distributed_mode() THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', TRUE);
    END IF;
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
           -- With the tenant: a key's task is its tenant's (and so on its shard, when distributed).
           AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.tenant_id = k.tenant_id AND tk.id = k.task_id)
         LIMIT max_rows
    )
    DELETE FROM pgsched.idempotency_keys AS k USING old
     WHERE k.tenant_id = old.tenant_id AND k.idempotency_key = old.idempotency_key;
    GET DIAGNOSTICS n_keys = ROW_COUNT;

    -- Windows of unique_for and debounce ended long ago: counted with the keys.
    WITH old AS (
        SELECT w.tenant_id, w.window_key FROM pgsched.task_windows AS w
         WHERE w.ends_at < cutoff
         LIMIT max_rows
    )
    DELETE FROM pgsched.task_windows AS w USING old
     WHERE w.tenant_id = old.tenant_id AND w.window_key = old.window_key AND w.ends_at < cutoff;
    GET DIAGNOSTICS n_windows = ROW_COUNT;
    n_keys := n_keys + n_windows;

    -- Progress last reported before the cutoff (not counted).
    WITH old AS (
        SELECT p.task_id FROM pgsched.task_progress AS p
         WHERE p.updated_at < cutoff
         LIMIT max_rows
    )
    DELETE FROM pgsched.task_progress AS p USING old
     WHERE p.task_id = old.task_id AND p.updated_at < cutoff;

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

    -- Workflow edges with either end gone (deleted above, or dropped with its partition),
    -- and result waiters of tasks gone: a task's workflow bookkeeping expires with it. A
    -- row is no older than its tasks, so none newer than the cutoff can qualify: the
    -- created_at index is read from the oldest and stops at the cutoff.
    IF pgsched.distributed_mode() THEN
        -- These tables stay on the coordinator and Citus joins none of them to the tasks in
        -- one statement: the oldest max_rows rows are read, then which of their tasks are
        -- gone, then those rows deleted. (A batch of rows whose tasks all live deletes
        -- nothing, and the next batch is the same: kept tasks older than keep, such as the
        -- DEAD lane's, hold the rest back.)
        SELECT coalesce(array_agg(d.parent_id), '{}'), coalesce(array_agg(d.child_id), '{}')
          INTO old_parents, old_children
          FROM (SELECT x.parent_id, x.child_id FROM pgsched.task_dependencies AS x
                 WHERE x.created_at < cutoff ORDER BY x.created_at LIMIT max_rows) AS d;
        live := ARRAY(SELECT tk.id FROM pgsched.tasks AS tk WHERE tk.id = ANY (old_parents || old_children));
        DELETE FROM pgsched.task_dependencies AS d
         USING unnest(old_parents, old_children) AS o (parent_id, child_id)
         WHERE d.parent_id = o.parent_id AND d.child_id = o.child_id
           AND (o.parent_id <> ALL (live) OR o.child_id <> ALL (live));
        GET DIAGNOSTICS n_dependencies = ROW_COUNT;

        SELECT coalesce(array_agg(w.task_id), '{}'), coalesce(array_agg(w.token), '{}')
          INTO old_children, old_tokens
          FROM (SELECT x.task_id, x.token FROM pgsched.task_result_waiters AS x
                 WHERE x.created_at < cutoff ORDER BY x.created_at LIMIT max_rows) AS w;
        live := ARRAY(SELECT tk.id FROM pgsched.tasks AS tk WHERE tk.id = ANY (old_children));
        DELETE FROM pgsched.task_result_waiters AS w
         USING unnest(old_children, old_tokens) AS o (task_id, token)
         WHERE w.task_id = o.task_id AND w.token = o.token AND o.task_id <> ALL (live);
        GET DIAGNOSTICS n_waiters = ROW_COUNT;
    ELSE
        WITH old AS (
            SELECT d.parent_id, d.child_id FROM pgsched.task_dependencies AS d
             WHERE d.created_at < cutoff
               AND (NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = d.child_id)
                    OR NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = d.parent_id))
             ORDER BY d.created_at
             LIMIT max_rows
        )
        DELETE FROM pgsched.task_dependencies AS d USING old
         WHERE d.parent_id = old.parent_id AND d.child_id = old.child_id;
        GET DIAGNOSTICS n_dependencies = ROW_COUNT;

        WITH old AS (
            SELECT w.task_id, w.token FROM pgsched.task_result_waiters AS w
             WHERE w.created_at < cutoff
               AND NOT EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = w.task_id)
             ORDER BY w.created_at
             LIMIT max_rows
        )
        DELETE FROM pgsched.task_result_waiters AS w USING old
         WHERE w.task_id = old.task_id AND w.token = old.token;
        GET DIAGNOSTICS n_waiters = ROW_COUNT;
    END IF;

    RETURN QUERY SELECT n_tasks, 0::bigint, n_keys, n_occurrences, n_ledger, n_dependencies, n_waiters;
END;
$$;
COMMENT ON FUNCTION pgsched.retention_prune(interval, integer, timestamp with time zone) IS 'The retention sweep: deletes, in batches of max_rows, the bookkeeping older than keep (idempotency keys and ended unique_for or debounce windows, progress reports, occurrences and ledger rows no longer used, workflow edges and result waiters of tasks gone) and finished tasks that no dated partition holds. ctx.once keys, the DEAD lane and its history are kept. Returns the counts.';
REVOKE ALL ON FUNCTION pgsched.retention_prune(interval, integer, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.retention_prune(interval, integer, timestamptz) TO pgsched_worker, pgsched_admin;

-- The first instant of the period holding `t`: a week from Monday (UTC), or a UTC day or
-- part of one (periods that divide a day evenly start at UTC midnight).
CREATE OR REPLACE FUNCTION pgsched.event_period_start(t timestamptz, period interval)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN period = INTERVAL '7 days' THEN date_trunc('week', t, 'UTC')
                ELSE to_timestamp(floor(extract(EPOCH FROM t) / extract(EPOCH FROM period))
                                  * extract(EPOCH FROM period)) END
$$;
COMMENT ON FUNCTION pgsched.event_period_start(timestamp with time zone, interval) IS 'The first instant of the partition period holding t: a week from Monday (UTC), or a UTC day or a part of one that divides it.';

-- task_events' partitions and their bounds (lower_bound NULL: the archive, from MINVALUE;
-- both NULL: the default partition). approx_rows is the planner's estimate, except for the
-- default partition: its rows counted (up to 100,000), since any row there is a finding.
CREATE OR REPLACE FUNCTION pgsched.event_partitions()
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
COMMENT ON FUNCTION pgsched.event_partitions() IS 'task_events'' partitions and their bounds (lower_bound NULL: the archive; both NULL: the default partition, whose rows are counted up to 100,000; others: the planner''s estimate).';
REVOKE ALL ON FUNCTION pgsched.event_partitions() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.event_partitions() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- How far ahead task_events is covered, as of `as_of`: the period in force, whether the
-- current period has a partition, how many whole periods after it do, and the default
-- partition's rows (counted up to 100,000). `pgsched doctor` reads it.
CREATE OR REPLACE FUNCTION pgsched.event_partitions_status(as_of timestamptz DEFAULT NULL)
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
COMMENT ON FUNCTION pgsched.event_partitions_status(timestamp with time zone) IS 'How far ahead task_events is covered as of as_of: the period, whether the current period has a partition, how many whole periods after it do, and the default partition''s rows. pgsched doctor reads it.';
REVOKE ALL ON FUNCTION pgsched.event_partitions_status(timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.event_partitions_status(timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.time_partitions_maintain(
    caller text,
    parent regclass,
    listing regproc,
    archive_keeps text,
    ahead integer,
    keep interval,
    as_of timestamptz,
    lock_wait interval
) RETURNS TABLE (partition_name text, action text, n_rows bigint)
LANGUAGE plpgsql
-- The partitions are named after their periods' start, written in UTC.
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC'
AS $$
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
$$;
COMMENT ON FUNCTION pgsched.time_partitions_maintain(text, regclass, regproc, text, integer, interval, timestamp with time zone, interval) IS 'The one body of partitions_maintain and finished_partitions_maintain (the table, its listing, what its archive keeps); callable by no role.';
REVOKE ALL ON FUNCTION pgsched.time_partitions_maintain(text, regclass, regproc, text, integer, interval, timestamptz, interval) FROM public;

-- The public functions keep their signatures, owners and grants (CREATE OR REPLACE).
CREATE OR REPLACE FUNCTION pgsched.partitions_maintain(
    ahead integer DEFAULT 3,
    keep interval DEFAULT '30 days',
    as_of timestamptz DEFAULT NULL,
    lock_wait interval DEFAULT '1 second'
) RETURNS TABLE (partition_name text, action text, event_rows bigint)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC'
AS $$
    -- Expired periods keep the events of live and DEAD tasks, in the archive.
    SELECT * FROM pgsched.time_partitions_maintain(
        'partitions_maintain', 'pgsched.task_events', 'pgsched.event_partitions',
        'EXISTS (SELECT 1 FROM pgsched.tasks AS tk WHERE tk.id = e.task_id'
        ' AND tk.status IN (''PENDING'', ''QUEUED'', ''PROCESSING'', ''FAILED''))',
        ahead, keep, as_of, lock_wait)
$$;
COMMENT ON FUNCTION pgsched.partitions_maintain(integer, interval, timestamp with time zone, interval) IS 'The retention sweep: makes the partitions of task_events for the next ahead periods and drops those wholly older than keep, copying the events of live and DEAD tasks to task_events_archive first. Waits at most lock_wait for the lock; a lock not granted changes nothing. 22023 on bad arguments.';
REVOKE ALL ON FUNCTION pgsched.partitions_maintain(integer, interval, timestamptz, interval) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.partitions_maintain(integer, interval, timestamptz, interval) TO pgsched_worker, pgsched_admin;

-- The rows of a table, counted up to cap: a default partition's, named by oid so that the
-- functions reading it are made where that partition does not exist (distributed mode makes
-- tasks_finished one table: sql/code/distribution.sql).
CREATE OR REPLACE FUNCTION pgsched.rows_up_to(rel regclass, cap integer) RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %s) AS d', rel, cap) INTO n;
    RETURN n;
END;
$$;
COMMENT ON FUNCTION pgsched.rows_up_to(regclass, integer) IS 'The number of rows of rel, counted up to cap.';
REVOKE ALL ON FUNCTION pgsched.rows_up_to(regclass, integer) FROM public;

-- tasks_finished's partitions and their bounds, as event_partitions() lists task_events'
-- (lower_bound NULL: the archive; both NULL: the default partition, whose rows are counted
-- up to 100,000).
CREATE OR REPLACE FUNCTION pgsched.finished_partitions()
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
                THEN pgsched.rows_up_to(c.oid, 100000)
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
COMMENT ON FUNCTION pgsched.finished_partitions() IS 'tasks_finished''s partitions and their bounds, as event_partitions lists task_events''.';
REVOKE ALL ON FUNCTION pgsched.finished_partitions() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.finished_partitions() TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.finished_partitions_status(as_of timestamptz DEFAULT NULL)
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
COMMENT ON FUNCTION pgsched.finished_partitions_status(timestamp with time zone) IS 'How far ahead tasks_finished is covered as of as_of, as event_partitions_status says for task_events. pgsched doctor reads it.';
REVOKE ALL ON FUNCTION pgsched.finished_partitions_status(timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.finished_partitions_status(timestamptz) TO pgsched_producer, pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.finished_partitions_maintain(
    ahead integer DEFAULT 3,
    keep interval DEFAULT '30 days',
    as_of timestamptz DEFAULT NULL,
    lock_wait interval DEFAULT '1 second'
) RETURNS TABLE (partition_name text, action text, task_rows bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC'
AS $$
BEGIN
    -- In distributed mode tasks_finished is one table (Citus distributes one level of
    -- partitions): retention_prune deletes its old rows in batches instead.
    IF (SELECT c.relkind FROM pg_class AS c WHERE c.oid = 'pgsched.tasks_finished'::regclass) <> 'p' THEN
        RETURN;
    END IF;
    -- FAILED rows are in tasks_done, never here: the archive expires whole, as a period does.
    RETURN QUERY SELECT * FROM pgsched.time_partitions_maintain(
        'finished_partitions_maintain', 'pgsched.tasks_finished', 'pgsched.finished_partitions', NULL,
        finished_partitions_maintain.ahead, finished_partitions_maintain.keep,
        finished_partitions_maintain.as_of, finished_partitions_maintain.lock_wait);
END;
$$;
COMMENT ON FUNCTION pgsched.finished_partitions_maintain(integer, interval, timestamp with time zone, interval) IS 'The retention sweep: makes the partitions of tasks_finished for the next ahead periods and drops those wholly older than keep, with their tasks'' idempotency keys. Waits at most lock_wait for the lock; a lock not granted changes nothing. 22023 on bad arguments.';
REVOKE ALL ON FUNCTION pgsched.finished_partitions_maintain(integer, interval, timestamptz, interval) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.finished_partitions_maintain(integer, interval, timestamptz, interval) TO pgsched_worker, pgsched_admin;


-- The periods ahead, made when this file is applied (a fresh install gets them before any
-- sweep runs, as 0024 and 0027 did). Nothing is dropped here: a keep of a thousand years
-- leaves expiry to the retention sweep and its configured keep.
SELECT count(*) FROM pgsched.partitions_maintain(keep => interval '1000 years');

SELECT count(*) FROM pgsched.finished_partitions_maintain(keep => interval '1000 years');
