-- 0030 — one maintenance for every table partitioned by period. partitions_maintain
-- (task_events, sql/0024) and finished_partitions_maintain (tasks_finished, sql/0027) were
-- two copies of the same steps; both are now calls of time_partitions_maintain, with their
-- arguments, refusals, result rows and privileges as before.
--
--   time_partitions_maintain(caller, parent, listing, archive_keeps, ahead, keep, as_of, lock_wait)
--       internal: run as the owner by the two public functions, callable by no role.
--       caller       the public function's name: in the refusals, and the advisory lock
--                    (each table has its own maintainer, as before)
--       parent       the partitioned table; its partitions are <parent>_pYYYYMMDD[_HH24MISS],
--                    <parent>_archive and <parent>_default, its partition key the column
--                    the periods bound
--       listing      the table's partition listing (event_partitions, finished_partitions)
--       archive_keeps   NULL: the archive expires whole, as a period does (tasks_finished).
--                    Otherwise a condition on `e`, a row of the table: the rows of expired
--                    periods (and of the archive) meeting it are copied into a new archive
--                    before the drop, which takes the old one's place (task_events: the
--                    history of live and DEAD tasks).
--
-- One difference of steps between the two copies is settled the careful way: a new period of
-- tasks_finished is now made with the range CHECK task_events' periods had while their rows
-- move in from the default partition (dropped once attached), so both are made alike.
-- The new archive of task_events gets the table's key and indexes as the table declares
-- them, read from the catalog, no longer from a list written here.

CREATE FUNCTION pgsched.time_partitions_maintain(
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

-- Not even the roles that may run the maintenance: archive_keeps is SQL, run as given.
REVOKE EXECUTE ON FUNCTION pgsched.time_partitions_maintain(
    text, regclass, regproc, text, integer, interval, timestamptz, interval
) FROM public;

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

CREATE OR REPLACE FUNCTION pgsched.finished_partitions_maintain(
    ahead integer DEFAULT 3,
    keep interval DEFAULT '30 days',
    as_of timestamptz DEFAULT NULL,
    lock_wait interval DEFAULT '1 second'
) RETURNS TABLE (partition_name text, action text, task_rows bigint)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET timezone = 'UTC'
AS $$
    -- FAILED rows are in tasks_done, never here: the archive expires whole, as a period does.
    SELECT * FROM pgsched.time_partitions_maintain(
        'finished_partitions_maintain', 'pgsched.tasks_finished', 'pgsched.finished_partitions', NULL,
        ahead, keep, as_of, lock_wait)
$$;
