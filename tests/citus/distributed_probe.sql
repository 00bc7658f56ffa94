-- A distributed copy of pgsched's tables (schema probe), built from the real tables with
-- LIKE, without the statement triggers, as docs/scaling.md's distributed design places them;
-- and the state-changing functions as that design writes them: each writes its own
-- task_events rows and runs whole on the node holding the tenant's shard (a colocated
-- distributed function). Used by tests/citus/test_distributed_probe.py.

CREATE SCHEMA probe;
CREATE TABLE probe.tasks (LIKE pgsched.tasks INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
PARTITION BY LIST (status);
CREATE TABLE probe.tasks_cold PARTITION OF probe.tasks FOR VALUES IN ('PENDING');
CREATE TABLE probe.tasks_hot PARTITION OF probe.tasks FOR VALUES IN ('QUEUED', 'PROCESSING');
CREATE TABLE probe.tasks_done PARTITION OF probe.tasks FOR VALUES IN ('FAILED');
CREATE TABLE probe.tasks_finished PARTITION OF probe.tasks FOR VALUES IN ('COMPLETED', 'CANCELLED');
ALTER TABLE probe.tasks ADD PRIMARY KEY (tenant_id, id, status, updated_at);
CREATE SEQUENCE probe.task_events_id_seq;
CREATE TABLE probe.task_events (LIKE pgsched.task_events) PARTITION BY RANGE (occurred_at);
ALTER TABLE probe.task_events ALTER COLUMN id SET DEFAULT nextval('probe.task_events_id_seq');
CREATE TABLE probe.task_events_default PARTITION OF probe.task_events DEFAULT;
ALTER TABLE probe.task_events ADD PRIMARY KEY (tenant_id, id, occurred_at);
CREATE TABLE probe.idempotency_keys (LIKE pgsched.idempotency_keys INCLUDING ALL);
CREATE TABLE probe.completed_work (LIKE pgsched.completed_work INCLUDING ALL);
CREATE TABLE probe.tenants (LIKE pgsched.tenants INCLUDING ALL);
CREATE TABLE probe.settings (LIKE pgsched.settings INCLUDING ALL);
SELECT create_distributed_table('probe.tasks', 'tenant_id');
SELECT create_distributed_table('probe.task_events', 'tenant_id', colocate_with => 'probe.tasks');
SELECT create_distributed_table('probe.idempotency_keys', 'tenant_id', colocate_with => 'probe.tasks');
SELECT create_distributed_table('probe.completed_work', 'tenant_id', colocate_with => 'probe.tasks');
SELECT create_reference_table('probe.tenants');
SELECT create_reference_table('probe.settings');

CREATE FUNCTION probe.claim(tenant text, lane pgsched.task_lane, max_tasks integer, worker text, lease interval)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    claimed bigint[];
    tokens uuid[];
BEGIN
    WITH picked AS (
        SELECT t.id, t.status, t.updated_at FROM probe.tasks AS t
         WHERE t.tenant_id = claim.tenant AND t.status = 'QUEUED' AND t.lane = claim.lane
           AND t.next_run_at <= now()
         ORDER BY t.priority DESC, t.next_run_at, t.id
         LIMIT claim.max_tasks
           FOR UPDATE SKIP LOCKED
    )
    SELECT array_agg(p.id), array_agg(gen_random_uuid()) INTO claimed, tokens FROM picked AS p;
    -- Citus refuses a VOLATILE function (gen_random_uuid) in an UPDATE of a distributed
    -- table: the tokens are drawn above and passed in as values.
    UPDATE probe.tasks AS t
       SET status = 'PROCESSING', attempts = t.attempts + 1, locked_by = claim.worker,
           lease_token = c.token, lease_expires_at = now() + claim.lease,
           last_run_at = now(), updated_at = now()
      FROM unnest(claimed, tokens) AS c (id, token)
     WHERE t.tenant_id = claim.tenant AND t.id = c.id AND t.status = 'QUEUED';
    INSERT INTO probe.task_events
        (task_id, tenant_id, task_type, from_status, to_status, occurred_at, scheduled_for,
         attempt, worker, detail)
    SELECT t.id, t.tenant_id, t.task_type, 'QUEUED', 'PROCESSING', now(), t.next_run_at,
           t.attempts, claim.worker, 'port ' || inet_server_port()
      FROM probe.tasks AS t
     WHERE t.tenant_id = claim.tenant AND t.id = ANY (claimed) AND t.status = 'PROCESSING';
    RETURN QUERY SELECT unnest(claimed);
END $$;
SELECT create_distributed_function(
    'probe.claim(text, pgsched.task_lane, integer, text, interval)',
    distribution_arg_name => 'tenant', colocate_with => 'probe.tasks');

CREATE FUNCTION probe.finish(tenant text, task_id bigint, worker text, fail_after_event boolean)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    moved probe.tasks;
BEGIN
    UPDATE probe.tasks AS t
       SET status = 'COMPLETED', locked_by = NULL, lease_token = NULL, lease_expires_at = NULL,
           updated_at = now()
     WHERE t.tenant_id = finish.tenant AND t.id = finish.task_id AND t.status = 'PROCESSING'
           AND t.locked_by = finish.worker
    RETURNING * INTO moved;
    IF moved.id IS NULL THEN
        RETURN 'stale';
    END IF;
    INSERT INTO probe.task_events
        (task_id, tenant_id, task_type, from_status, to_status, occurred_at, scheduled_for,
         attempt, worker, detail)
    VALUES (moved.id, moved.tenant_id, moved.task_type, 'PROCESSING', 'COMPLETED', now(),
            moved.next_run_at, moved.attempts, finish.worker, 'port ' || inet_server_port());
    IF fail_after_event THEN
        RAISE EXCEPTION 'failing after the event was written';
    END IF;
    RETURN 'completed';
END $$;
SELECT create_distributed_function(
    'probe.finish(text, bigint, text, boolean)',
    distribution_arg_name => 'tenant', colocate_with => 'probe.tasks');
