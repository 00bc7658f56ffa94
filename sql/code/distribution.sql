-- Distributed mode (docs/scaling.md, "Outgrowing one primary"): what `pgsched migrate
-- --distributed` does on a Citus coordinator once the migrations have run (distribute),
-- how to tell a distributed install (is_distributed), and where each table went
-- (distribution_placement). They name Citus's functions only inside EXECUTE, so this
-- file applies where Citus is not installed.

-- Whether pgsched's tasks are distributed over Citus worker nodes.
CREATE OR REPLACE FUNCTION pgsched.is_distributed() RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    distributed boolean;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition'
            ' WHERE logicalrelid = ''pgsched.tasks''::regclass)' INTO distributed;
    RETURN distributed;
END;
$$;
COMMENT ON FUNCTION pgsched.is_distributed() IS 'Whether pgsched.tasks is a Citus distributed table (pgsched migrate --distributed ran): false on plain PostgreSQL and in single-node mode on a Citus coordinator.';
REVOKE ALL ON FUNCTION pgsched.is_distributed() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.is_distributed() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Whether this database is distributed, as a constant the planner folds: the functions
-- whose statements differ in distributed mode test it at no cost in single-node mode.
-- Distributed mode plans at each call (Citus plans no distributed statement with
-- parameters left in it) and takes no row lock across shards (Citus refuses one): a
-- sweep picks rows without locks, then changes them with a compare-and-set. Remade by
-- distribution_apply, when this file is applied and by distribute.
CREATE OR REPLACE FUNCTION pgsched.distribution_apply() RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    distributed boolean := pgsched.is_distributed();
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION pgsched.distributed_mode() RETURNS boolean '
        'LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        CASE WHEN distributed THEN 'SELECT true' ELSE 'SELECT false' END);
    RETURN distributed;
END;
$$;
COMMENT ON FUNCTION pgsched.distribution_apply() IS 'Makes distributed_mode() match is_distributed(); returns it. Run when sql/code/distribution.sql is applied and by distribute.';
REVOKE ALL ON FUNCTION pgsched.distribution_apply() FROM public;

SELECT pgsched.distribution_apply();
COMMENT ON FUNCTION pgsched.distributed_mode() IS 'Whether pgsched''s tables are distributed over Citus worker nodes, as a constant (remade by distribution_apply) that single-node mode''s planner folds away.';
REVOKE ALL ON FUNCTION pgsched.distributed_mode() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.distributed_mode() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Where each of pgsched's tables lives: 'distributed' (by tenant_id, colocated with
-- tasks), 'reference' (a copy on every node) or 'coordinator' (local to it). The one
-- list distribute reads, and the docs' table of placements (docs/scaling.md).
CREATE OR REPLACE FUNCTION pgsched.distribution_placement()
RETURNS TABLE (table_name text, placement text, why text)
LANGUAGE sql IMMUTABLE
AS $$
    VALUES
        ('tasks', 'distributed', 'every claim, finish and event of a task touches its tenant only'),
        ('task_events', 'distributed', 'written in the statement that changes its task, on the same shard'),
        ('idempotency_keys', 'distributed', 'keys are scoped by tenant'),
        ('completed_work', 'distributed', 'the ledger is scoped by tenant'),
        ('task_windows', 'distributed', 'unique and debounce windows are scoped by tenant'),
        ('tenants', 'reference', 'small, read by every schedule'),
        ('settings', 'reference', 'one row, read by every function'),
        ('producer_tenants', 'reference', 'small, read by every schedule'),
        ('tenant_readers', 'reference', 'small, read by every tenant reader''s query'),
        ('task_limits', 'reference', 'small, read by claims of limited types'),
        ('schedules', 'coordinator', 'not keyed by tenant yet: recurring schedules stay on the coordinator'),
        ('schedule_occurrences', 'coordinator', 'not keyed by tenant yet, kept with schedules'),
        ('schedule_events', 'coordinator', 'not keyed by tenant yet, kept with schedules'),
        ('task_dependencies', 'coordinator', 'not keyed by tenant yet: workflows stay on the coordinator'),
        ('task_result_waiters', 'coordinator', 'not keyed by tenant yet'),
        ('task_progress', 'coordinator', 'not keyed by tenant yet'),
        ('sweep_leader', 'coordinator', 'the sweeps'' fence: one row the coordinator locks'),
        ('schema_migrations', 'coordinator', 'what pgsched migrate applied'),
        ('schema_code', 'coordinator', 'what pgsched migrate applied')
$$;
COMMENT ON FUNCTION pgsched.distribution_placement() IS 'Where pgsched migrate --distributed puts each table: distributed (by tenant_id, colocated with tasks), reference (a copy on every node) or coordinator (local), and why.';
REVOKE ALL ON FUNCTION pgsched.distribution_placement() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.distribution_placement() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Distribute pgsched's tables over the worker nodes. Citus refuses three things in
-- single-node mode's schema, each changed here: triggers on a distributed table (the
-- functions write the events instead: audit_writer_set('functions')), unique keys without
-- the distribution column (tasks and task_events are keyed with tenant_id first), and a
-- second level of partitions (tasks_finished becomes one table: retention_prune deletes
-- its old rows in batches instead of dropping periods). Rows move to the shards. Run once
-- by `pgsched migrate --distributed`, in the migration's transaction; again, it changes
-- nothing.
CREATE OR REPLACE FUNCTION pgsched.distribute() RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nodes bigint := 0;
    own_indexes text[];
    columns text;
    place record;
BEGIN
    -- `pgsched migrate --distributed` says how to set either up (pgsched/migrations.py).
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT count(*) FROM pg_catalog.citus_get_active_worker_nodes()' INTO nodes;
    END IF;
    IF nodes = 0 THEN
        RAISE EXCEPTION 'pgsched: cannot distribute: no Citus worker node in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF pgsched.is_distributed() THEN
        RETURN 'already distributed';
    END IF;
    PERFORM pgsched.audit_writer_set('functions');

    -- tasks_finished, one level: its own indexes (not those it inherits from tasks) are
    -- made again on the single table, under the same names.
    SELECT coalesce(array_agg(replace(pg_get_indexdef(x.indexrelid), ' ON ONLY ', ' ON ')), '{}')
      INTO own_indexes
      FROM pg_index AS x
     WHERE x.indrelid = 'pgsched.tasks_finished'::regclass
       AND NOT EXISTS (SELECT 1 FROM pg_inherits AS i WHERE i.inhrelid = x.indexrelid);
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
      FROM pg_attribute AS a
     WHERE a.attrelid = 'pgsched.tasks'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    ALTER TABLE pgsched.tasks DETACH PARTITION pgsched.tasks_finished;
    ALTER TABLE pgsched.tasks_finished RENAME TO tasks_finished_by_period;
    CREATE TABLE pgsched.tasks_finished (LIKE pgsched.tasks INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE);
    EXECUTE format('INSERT INTO pgsched.tasks_finished (%s) SELECT %s FROM pgsched.tasks_finished_by_period',
                   columns, columns);
    DROP TABLE pgsched.tasks_finished_by_period;
    FOR i IN 1 .. cardinality(own_indexes) LOOP
        EXECUTE own_indexes[i];
    END LOOP;
    -- One table whose deleted rows' space is reused: updated_at stops following the heap's
    -- order, which the periods' BRIN (migration 0050) relies on.
    DROP INDEX pgsched.tasks_finished_updated_idx;
    CREATE INDEX tasks_finished_updated_idx ON pgsched.tasks_finished (updated_at)
     WHERE status IN ('COMPLETED', 'CANCELLED');
    ALTER TABLE pgsched.tasks ATTACH PARTITION pgsched.tasks_finished FOR VALUES IN ('COMPLETED', 'CANCELLED');
    GRANT SELECT ON pgsched.tasks_finished TO pgsched_worker;
    GRANT ALL ON pgsched.tasks_finished TO pgsched_admin;

    -- Unique keys with the distribution column first.
    ALTER TABLE pgsched.tasks DROP CONSTRAINT tasks_pkey;
    ALTER TABLE pgsched.tasks ADD CONSTRAINT tasks_pkey PRIMARY KEY (tenant_id, id, status, updated_at);
    ALTER TABLE pgsched.task_events ADD CONSTRAINT task_events_pkey PRIMARY KEY (tenant_id, id, occurred_at);

    -- Citus refuses the tenant readers' policies (a subquery in a policy): they are dropped,
    -- and the readers lose the tables rather than see every tenant's rows.
    DROP POLICY IF EXISTS tenant_readers_own ON pgsched.tenant_readers;
    DROP POLICY IF EXISTS tasks_tenant_reader ON pgsched.tasks;
    DROP POLICY IF EXISTS task_events_tenant_reader ON pgsched.task_events;
    DROP POLICY IF EXISTS task_events_archive_tenant_reader ON pgsched.task_events_archive;
    DROP POLICY IF EXISTS schedules_tenant_reader ON pgsched.schedules;
    ALTER TABLE pgsched.tenant_readers DISABLE ROW LEVEL SECURITY;
    ALTER TABLE pgsched.tasks DISABLE ROW LEVEL SECURITY;
    ALTER TABLE pgsched.task_events DISABLE ROW LEVEL SECURITY;
    ALTER TABLE pgsched.task_events_archive DISABLE ROW LEVEL SECURITY;
    ALTER TABLE pgsched.schedules DISABLE ROW LEVEL SECURITY;
    REVOKE ALL ON ALL TABLES IN SCHEMA pgsched FROM pgsched_tenant_reader;

    FOR place IN SELECT p.table_name FROM pgsched.distribution_placement() AS p WHERE p.placement = 'reference' LOOP
        EXECUTE format('SELECT create_reference_table(%L)', 'pgsched.' || place.table_name);
    END LOOP;
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
    FOR place IN SELECT p.table_name FROM pgsched.distribution_placement() AS p WHERE p.placement = 'distributed' LOOP
        IF place.table_name = 'tasks' THEN
            EXECUTE 'SELECT create_distributed_table(''pgsched.tasks'', ''tenant_id'')';
        ELSE
            EXECUTE format('SELECT create_distributed_table(%L, %L, colocate_with => %L)',
                           'pgsched.' || place.table_name, 'tenant_id', 'pgsched.tasks');
        END IF;
    END LOOP;
    PERFORM pgsched.distribution_apply();
    RETURN 'distributed';
END;
$$;
COMMENT ON FUNCTION pgsched.distribute() IS 'Distributes pgsched''s tables over the Citus worker nodes as distribution_placement says: the audit written by the functions, tasks and task_events keyed with tenant_id, tasks_finished one table. Returns ''distributed'', or ''already distributed''. Raises 55000 where Citus or its worker nodes are missing.';
REVOKE ALL ON FUNCTION pgsched.distribute() FROM public;
