-- 0001 — the durable record.
--
-- Every task is one row of pgsched.tasks, list-partitioned by status so that the
-- status *is* the tier:
--
--   tasks_cold  PENDING                        due beyond the hot window; claims never read it
--   tasks_hot   QUEUED, PROCESSING             due within the hot window, or running
--   tasks_done  COMPLETED, FAILED, CANCELLED   terminal (FAILED is the DEAD lane)
--
-- A status change that crosses tiers moves the row between partitions, so the claim
-- path (tasks_hot and its indexes) stays the size of the next hot window of work no
-- matter how many future or finished rows exist.
--
-- Every write goes through pgsched.tasks (never a partition directly): the statement
-- trigger at the end of this file checks each status change against the legal
-- transitions and writes it to pgsched.task_events in the same statement.

CREATE SCHEMA IF NOT EXISTS pgsched;

CREATE TYPE pgsched.task_status AS ENUM (
    'PENDING', 'QUEUED', 'PROCESSING', 'COMPLETED', 'FAILED', 'CANCELLED'
);

CREATE TYPE pgsched.task_lane AS ENUM ('HIGH', 'NORMAL', 'LOW', 'BATCH');

CREATE TYPE pgsched.schedule_type AS ENUM ('ONE_TIME', 'RECURRING');

-- One row of engine-wide settings; the time router and the input checks read it.
CREATE TABLE pgsched.settings (
    singleton boolean PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    immediate_window interval NOT NULL DEFAULT '15 minutes',
    hot_window interval NOT NULL DEFAULT '24 hours',
    max_payload_bytes bigint NOT NULL DEFAULT 1048576,
    CONSTRAINT settings_windows_ordered CHECK (
        immediate_window >= interval '0' AND immediate_window <= hot_window
    ),
    CONSTRAINT settings_payload_cap_positive CHECK (max_payload_bytes > 0)
);

INSERT INTO pgsched.settings DEFAULT VALUES;

-- Ids come from one sequence shared by every partition; the primary key must include
-- the partition key, so the sequence is what keeps an id unique across tiers.
CREATE SEQUENCE pgsched.task_id_seq AS bigint;

CREATE TABLE pgsched.tasks (
    id bigint NOT NULL DEFAULT nextval('pgsched.task_id_seq'),
    tenant_id text NOT NULL DEFAULT 'default',
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type NOT NULL DEFAULT 'ONE_TIME',
    next_run_at timestamptz NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb NOT NULL DEFAULT '{}',
    metadata jsonb NOT NULL DEFAULT '{}',
    priority integer NOT NULL DEFAULT 5,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    enabled boolean NOT NULL DEFAULT TRUE,
    attempts bigint NOT NULL DEFAULT 0,
    max_attempts bigint NOT NULL DEFAULT 3,
    last_run_at timestamptz,
    last_error text,
    -- Why the task is in its current status (cancel reason, failure, rescue); copied
    -- into the transition's event as its detail.
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamptz,
    -- Who the work is for: one tenant, every active tenant of a product, or every active
    -- tenant (global). A product/global task fans out into one child task per tenant.
    scope text NOT NULL DEFAULT 'tenant',
    product text,
    parent_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tasks_pkey PRIMARY KEY (id, status),
    CONSTRAINT tasks_scope_known CHECK (
        (scope = 'tenant' AND product IS NULL)
        OR (scope = 'product' AND product IS NOT NULL)
        OR (scope = 'global' AND product IS NULL)
    ),
    CONSTRAINT tasks_priority_range CHECK (priority BETWEEN 0 AND 10),
    CONSTRAINT tasks_attempts_sane CHECK (attempts >= 0 AND max_attempts >= 1),
    CONSTRAINT tasks_lane_matches_priority CHECK (
        lane = 'BATCH'
        OR (lane = 'HIGH' AND priority >= 8)
        OR (lane = 'NORMAL' AND priority BETWEEN 4 AND 7)
        OR (lane = 'LOW' AND priority <= 3)
    ),
    CONSTRAINT tasks_recurring_has_cron CHECK (
        schedule_type = 'ONE_TIME' OR (cron_expression IS NOT NULL AND timezone IS NOT NULL)
    ),
    CONSTRAINT tasks_lease_only_while_processing CHECK (
        status = 'PROCESSING' OR lease_token IS NULL
    )
) PARTITION BY LIST (status);

CREATE TABLE pgsched.tasks_cold PARTITION OF pgsched.tasks FOR VALUES IN ('PENDING');

-- The hot partition churns (claims, completions move rows out): vacuum it eagerly.
CREATE TABLE pgsched.tasks_hot PARTITION OF pgsched.tasks
FOR VALUES IN ('QUEUED', 'PROCESSING')
WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE pgsched.tasks_done PARTITION OF pgsched.tasks
FOR VALUES IN ('COMPLETED', 'FAILED', 'CANCELLED');

-- The claim index: one exact range scan per (lane, priority) for the due rows.
CREATE INDEX tasks_hot_claim_idx ON pgsched.tasks_hot (lane, priority, next_run_at)
WHERE status = 'QUEUED';

-- Expired leases are found without reading queued rows.
CREATE INDEX tasks_hot_lease_idx ON pgsched.tasks_hot (lease_expires_at)
WHERE status = 'PROCESSING';

-- Promotion reads the cold tier in due order.
CREATE INDEX tasks_cold_due_idx ON pgsched.tasks_cold (next_run_at);

-- The DEAD lane: terminal failures, newest first.
CREATE INDEX tasks_done_dead_idx ON pgsched.tasks_done (task_type, updated_at)
WHERE status = 'FAILED';

-- Children of a fan-out, by parent (few rows: a partial index).
CREATE INDEX tasks_parent_idx ON pgsched.tasks (parent_id) WHERE parent_id IS NOT NULL;

-- Producer logins bound to tenants: such a login may schedule only for these tenants.
CREATE TABLE pgsched.producer_tenants (
    role_name name NOT NULL,
    tenant_id text NOT NULL,
    PRIMARY KEY (role_name, tenant_id)
);

-- Tenant-scoped idempotency keys. A global unique key cannot live on the partitioned
-- table (it would have to include the status), so the key owns a row of its own that
-- points at its task; the unique index makes concurrent duplicates wait and collide.
CREATE TABLE pgsched.idempotency_keys (
    tenant_id text NOT NULL,
    idempotency_key text NOT NULL,
    task_id bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idempotency_key)
);

-- Every status transition, written by the statement that makes it.
CREATE TABLE pgsched.task_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    detail text
);

CREATE INDEX task_events_task_idx ON pgsched.task_events (task_id, id);

CREATE INDEX task_events_tenant_time_idx ON pgsched.task_events (tenant_id, occurred_at);

-- Retention prunes by time; a BRIN index costs almost nothing on an append-only table.
CREATE INDEX task_events_time_brin ON pgsched.task_events USING brin (occurred_at);

-- The state machine. Anything not listed here is refused by the trigger below.
CREATE FUNCTION pgsched.transition_is_legal(
    from_status pgsched.task_status, to_status pgsched.task_status
) RETURNS boolean
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

-- One statement-level trigger sees every row a statement changed (moved rows included),
-- refuses the whole statement if any change is illegal, and writes one event per change.
-- Statement level keeps the hot path set-based: a claim of 500 rows costs one call.
-- force_custom_plan: a cached generic plan guesses a handful of rows and joins the
-- transition tables with a nested loop (250,000 comparisons for a 500-row claim).
CREATE FUNCTION pgsched.task_record_transitions() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    bad_id bigint;
    bad record;
BEGIN
    -- An aggregate, not LIMIT 1: with a LIMIT the planner bets on finding a bad row early
    -- and nests the loops, which costs n^2 when (as always) there is none.
    SELECT min(o.id) FILTER (WHERE NOT pgsched.transition_is_legal(o.status, n.status))
      INTO bad_id
      FROM old_rows o
      JOIN new_rows n ON n.id = o.id
     WHERE n.status IS DISTINCT FROM o.status;
    IF bad_id IS NOT NULL THEN
        SELECT o.status AS from_status, n.status AS to_status INTO bad
          FROM old_rows o JOIN new_rows n ON n.id = o.id
         WHERE o.id = bad_id;
        RAISE EXCEPTION 'pgsched: illegal transition % -> % for task %',
            bad.from_status, bad.to_status, bad_id
            USING ERRCODE = 'check_violation',
                  HINT = 'See the state diagram in the README for the legal transitions.';
    END IF;

    INSERT INTO pgsched.task_events (
        task_id, tenant_id, task_type, from_status, to_status,
        occurred_at, scheduled_for, attempt, worker, detail
    )
    SELECT n.id, n.tenant_id, n.task_type, o.status, n.status,
           -- A hand-written UPDATE that forgets updated_at still gets a true time.
           CASE WHEN n.updated_at IS DISTINCT FROM o.updated_at THEN n.updated_at ELSE now() END,
           n.next_run_at, n.attempts,
           coalesce(n.locked_by, o.locked_by), n.status_reason
      FROM old_rows o
      JOIN new_rows n ON n.id = o.id
     WHERE n.status IS DISTINCT FROM o.status;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tasks_record_transitions
AFTER UPDATE ON pgsched.tasks
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pgsched.task_record_transitions();
