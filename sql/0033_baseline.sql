-- 0033 — the baseline: pgsched's tables, types, sequences, indexes, constraints and
-- grants on them, as migrations 0001 to 0033 of earlier releases left them.
--
-- Functions, views and triggers are not here: each lives once, in its concept's file under
-- sql/code/ (applied by `pgsched migrate` after the numbered migrations, whenever the file
-- changes). A database those 33 migrations made is recorded as at this version without
-- running it; a database older than 0033 is upgraded to 0033 by an earlier pgsched first.
--
-- The dated partitions of task_events and tasks_finished are made by partitions_maintain
-- and finished_partitions_maintain (sql/code/partitions_retention.sql), not here.

-- The roles (cluster-wide, so made only when missing):
--   pgsched_producer  schedules tasks and recurring schedules, cancels, reads the views;
--                     it cannot read or change task rows. A producer login listed in
--                     pgsched.producer_tenants may schedule only for its tenant(s).
--   pgsched_worker    runs tasks and the sweeps: claims, outcomes, heartbeats, rescue,
--                     the ledger, arming, promotion, retention -- through functions only.
--   pgsched_admin     everything, including the DEAD lane, tenants and settings.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_producer') THEN
        CREATE ROLE pgsched_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_worker') THEN
        CREATE ROLE pgsched_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsched_admin') THEN
        CREATE ROLE pgsched_admin NOLOGIN;
    END IF;
END;
$$;

-- Types -----------------------------------------------------------------------------------

CREATE TYPE pgsched.misfire_policy AS ENUM (
    'run_once',
    'skip',
    'catch_up'
);

CREATE TYPE pgsched.schedule_type AS ENUM (
    'ONE_TIME',
    'RECURRING'
);

CREATE TYPE pgsched.task_lane AS ENUM (
    'HIGH',
    'NORMAL',
    'LOW',
    'BATCH'
);

CREATE TYPE pgsched.task_status AS ENUM (
    'PENDING',
    'QUEUED',
    'PROCESSING',
    'COMPLETED',
    'FAILED',
    'CANCELLED'
);

-- Tables and sequences, each table with its description ---------------------------------

CREATE TABLE pgsched.task_limits (
    scope text NOT NULL,
    key text NOT NULL,
    max_processing integer,
    rate integer,
    rate_period interval,
    tokens double precision,
    tokens_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT task_limits_limit_something CHECK (((max_processing IS NOT NULL) OR (rate IS NOT NULL))),
    CONSTRAINT task_limits_max_processing_range CHECK ((max_processing >= 0)),
    CONSTRAINT task_limits_rate_period_known CHECK ((((rate IS NULL) AND (rate_period IS NULL)) OR ((rate IS NOT NULL) AND (rate_period = any(ARRAY['00:00:01'::interval, '00:01:00'::interval]))))),
    CONSTRAINT task_limits_rate_range CHECK ((rate >= 1)),
    CONSTRAINT task_limits_scope_known CHECK ((scope = any(ARRAY['task_type'::text, 'tenant'::text])))
);

COMMENT ON TABLE pgsched.task_limits IS 'Limits per task type or tenant, read by every claim: max_processing at once and a claim rate (a token bucket).';

CREATE TABLE pgsched.schedules (
    id bigint NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    cron_expression text NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    misfire_policy pgsched.misfire_policy DEFAULT 'run_once'::pgsched.misfire_policy NOT NULL,
    catch_up_limit integer DEFAULT 10 NOT NULL,
    idempotency_key text,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    enabled boolean DEFAULT TRUE NOT NULL,
    quarantine_reason text,
    last_fire_at timestamp with time zone,
    armed_task_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_catch_up_limit_check CHECK ((catch_up_limit >= 1))
);

COMMENT ON TABLE pgsched.schedules IS 'Recurring schedules: a cron expression and an IANA zone, the task to arm, the misfire policy, enabled, quarantine_reason and the armed task.';

CREATE SEQUENCE pgsched.task_id_seq AS bigint;

CREATE TABLE pgsched.tasks (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
)
PARTITION BY LIST (status);

COMMENT ON TABLE pgsched.tasks IS 'Every task, one row each, list-partitioned by status: the status is the tier (tasks_cold, tasks_hot, tasks_finished, tasks_done). Write through this table, never a partition: a trigger checks and records every transition.';

CREATE TABLE pgsched.completed_work (
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    idempotency_key text NOT NULL,
    task_id bigint NOT NULL,
    completed_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE pgsched.completed_work IS 'The completed-work ledger: (tenant, task type, key) of keyed work done, and ctx.once keys. A keyed task found here when claimed is completed as a recorded no-op.';

CREATE TABLE pgsched.idempotency_keys (
    tenant_id text NOT NULL,
    idempotency_key text NOT NULL,
    task_id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE pgsched.idempotency_keys IS 'Idempotency keys per tenant: a (tenant_id, idempotency_key) names one task.';

CREATE TABLE pgsched.producer_tenants (
    role_name name NOT NULL,
    tenant_id text NOT NULL
);

COMMENT ON TABLE pgsched.producer_tenants IS 'Which tenants each login may act for (role_name, tenant_id; ''*'' for all). A login with no row acts for none.';

CREATE TABLE pgsched.task_events (
    id bigint NOT NULL,
    task_id bigint NOT NULL,
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    from_status pgsched.task_status NOT NULL,
    to_status pgsched.task_status NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    attempt bigint NOT NULL,
    worker text,
    detail text
)
PARTITION BY RANGE (occurred_at);

COMMENT ON TABLE pgsched.task_events IS 'Every transition of every task (and every stale report refused), partitioned by time (settings.event_partition_period) and dropped a whole period at a time by retention.';

CREATE TABLE pgsched.schedule_events (
    id bigint NOT NULL,
    schedule_id bigint NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    what text NOT NULL,
    fire_at timestamp with time zone,
    detail text
);

COMMENT ON TABLE pgsched.schedule_events IS 'What happened to each schedule: paused, resumed, deleted, enabled, disabled, quarantined, missed fire times, with a detail saying who and why.';

ALTER TABLE pgsched.schedule_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgsched.schedule_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE pgsched.schedule_occurrences (
    schedule_id bigint NOT NULL,
    fire_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    task_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedule_occurrences_outcome_check CHECK ((outcome = any(ARRAY['ARMED'::text, 'MISSED'::text])))
);

COMMENT ON TABLE pgsched.schedule_occurrences IS 'One row per (schedule, fire time): armed, run or MISSED; the unique key keeps an occurrence from being created twice.';

ALTER TABLE pgsched.schedules ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgsched.schedules_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

COMMENT ON TABLE pgsched.schema_migrations IS 'The migrations applied to this database, each once, with its checksum (pgsched migrate).';

CREATE TABLE pgsched.settings (
    singleton boolean DEFAULT TRUE NOT NULL,
    immediate_window interval DEFAULT '00:15:00'::interval NOT NULL,
    hot_window interval DEFAULT '24:00:00'::interval NOT NULL,
    max_payload_bytes bigint DEFAULT 1048576 NOT NULL,
    fairness_off_lanes pgsched.task_lane[] DEFAULT '{}'::pgsched.task_lane[] NOT NULL,
    event_partition_period interval DEFAULT '1 day'::interval NOT NULL,
    -- BETWEEN, as 0024 wrote it: the catalogue keeps its shape (a flat AND would differ).
    CONSTRAINT settings_event_partition_period_known CHECK (
        event_partition_period = interval '7 days'
        OR (
            event_partition_period BETWEEN interval '1 minute' AND interval '1 day'
            AND mod(86400, extract(EPOCH FROM event_partition_period)) = 0
        )
    ),
    CONSTRAINT settings_payload_cap_positive CHECK ((max_payload_bytes > 0)),
    CONSTRAINT settings_singleton_check CHECK (singleton),
    CONSTRAINT settings_windows_ordered CHECK (((immediate_window >= '00:00:00'::interval) AND (immediate_window <= hot_window)))
);

COMMENT ON TABLE pgsched.settings IS 'One row of engine settings: immediate_window and hot_window (the time router), max_payload_bytes, event_partition_period (the partitions of task_events and tasks_finished) and fairness_off_lanes.';

CREATE TABLE pgsched.sweep_leader (
    id boolean DEFAULT TRUE NOT NULL,
    holder text,
    generation bigint DEFAULT 0 NOT NULL,
    acquired_at timestamp with time zone,
    renewed_at timestamp with time zone,
    expires_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    CONSTRAINT sweep_leader_one_row CHECK (id)
);

COMMENT ON TABLE pgsched.sweep_leader IS 'The sweep leader''s lease: holder, generation and expiry, taken and renewed by compare-and-set (sweep_leader_acquire, sweep_leader_renew).';

CREATE TABLE pgsched.task_events_archive (
    id bigint DEFAULT NULL NOT NULL,
    task_id bigint NOT NULL,
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    from_status pgsched.task_status NOT NULL,
    to_status pgsched.task_status NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    attempt bigint NOT NULL,
    worker text,
    detail text
);

COMMENT ON TABLE pgsched.task_events_archive IS 'The events of tasks that were live or DEAD when their period was dropped, kept until the task finished and its events are past retention.';

CREATE SEQUENCE pgsched.task_events_id_seq AS bigint;

ALTER SEQUENCE pgsched.task_events_id_seq OWNED BY pgsched.task_events.id;

CREATE TABLE pgsched.task_events_default (
    id bigint DEFAULT nextval('pgsched.task_events_id_seq'::regclass) NOT NULL,
    task_id bigint NOT NULL,
    tenant_id text NOT NULL,
    task_type text NOT NULL,
    from_status pgsched.task_status NOT NULL,
    to_status pgsched.task_status NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    scheduled_for timestamp with time zone NOT NULL,
    attempt bigint NOT NULL,
    worker text,
    detail text
);

COMMENT ON TABLE pgsched.task_events_default IS 'task_events'' default partition: any event no dated period covers. pgsched doctor warns when it holds rows.';

CREATE TABLE pgsched.tasks_cold (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

COMMENT ON TABLE pgsched.tasks_cold IS 'The cold tier: PENDING tasks due beyond the hot window. Claims never read it; the promotion sweep moves tasks coming due to tasks_hot.';

CREATE TABLE pgsched.tasks_done (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

COMMENT ON TABLE pgsched.tasks_done IS 'The DEAD lane: FAILED tasks, kept whatever their age until retried or discarded.';

CREATE TABLE pgsched.tasks_finished (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
)
PARTITION BY RANGE (updated_at);

COMMENT ON TABLE pgsched.tasks_finished IS 'The finished tier: COMPLETED and CANCELLED tasks, partitioned by updated_at (a period each, like task_events), dropped a whole period at a time by retention.';

CREATE TABLE pgsched.tasks_finished_archive (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

COMMENT ON TABLE pgsched.tasks_finished_archive IS 'tasks_finished''s partition for rows finished before migration 0027; deleted by row, dropped once wholly past retention.';

CREATE TABLE pgsched.tasks_finished_default (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
);

COMMENT ON TABLE pgsched.tasks_finished_default IS 'tasks_finished''s default partition: any row no dated period covers, so no completion ever fails for want of a partition. pgsched doctor warns when it holds rows.';

CREATE TABLE pgsched.tasks_hot (
    id bigint DEFAULT nextval('pgsched.task_id_seq'::regclass) NOT NULL,
    tenant_id text DEFAULT 'default'::text NOT NULL,
    task_type text NOT NULL,
    schedule_type pgsched.schedule_type DEFAULT 'ONE_TIME'::pgsched.schedule_type NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    cron_expression text,
    timezone text,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 5 NOT NULL,
    lane pgsched.task_lane NOT NULL,
    status pgsched.task_status NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    max_attempts bigint DEFAULT 3 NOT NULL,
    last_run_at timestamp with time zone,
    last_error text,
    status_reason text,
    idempotency_key text,
    locked_by text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    scope text DEFAULT 'tenant'::text NOT NULL,
    product text,
    parent_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    cancel_reason text,
    CONSTRAINT tasks_attempts_sane CHECK (((attempts >= 0) AND (max_attempts >= 1))),
    CONSTRAINT tasks_lane_matches_priority CHECK (((lane = 'BATCH'::pgsched.task_lane) OR ((lane = 'HIGH'::pgsched.task_lane) AND (priority >= 8)) OR ((lane = 'NORMAL'::pgsched.task_lane) AND ((priority >= 4) AND (priority <= 7))) OR ((lane = 'LOW'::pgsched.task_lane) AND (priority <= 3)))),
    CONSTRAINT tasks_lease_only_while_processing CHECK (((status = 'PROCESSING'::pgsched.task_status) OR (lease_token IS NULL))),
    CONSTRAINT tasks_priority_range CHECK (((priority >= 0) AND (priority <= 10))),
    CONSTRAINT tasks_recurring_has_cron CHECK (((schedule_type = 'ONE_TIME'::pgsched.schedule_type) OR ((cron_expression IS NOT NULL) AND (timezone IS NOT NULL)))),
    CONSTRAINT tasks_scope_known CHECK ((((scope = 'tenant'::text) AND (product IS NULL)) OR ((scope = 'product'::text) AND (product IS NOT NULL)) OR ((scope = 'global'::text) AND (product IS NULL))))
)
WITH (autovacuum_vacuum_scale_factor = '0.01', autovacuum_vacuum_threshold = '1000', autovacuum_analyze_scale_factor = '0.02', autovacuum_vacuum_cost_delay = '0');

COMMENT ON TABLE pgsched.tasks_hot IS 'The hot tier: QUEUED and PROCESSING tasks, the only partition claims read (tasks_hot_claim_idx: lane, priority, next_run_at where QUEUED). Small by design; tuned for aggressive autovacuum.';

CREATE TABLE pgsched.tenants (
    tenant_id text NOT NULL,
    product text NOT NULL,
    active boolean DEFAULT TRUE NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenants_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT tenants_product_check CHECK ((product ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$'::text)),
    CONSTRAINT tenants_tenant_id_check CHECK ((tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$'::text))
);

COMMENT ON TABLE pgsched.tenants IS 'The tenant registry: id, product, active, metadata. Fan-outs run for the active tenants of a product, or all of them.';

-- Partitions: the tiers of tasks (by status), the periods' default and archive partitions

-- The archives hold what was there before the periods began: everything up to the end
-- of the day the schema was made (UTC), a bound known only at install time.
DO $$
DECLARE
    bound timestamptz := date_trunc('day', now(), 'UTC') + INTERVAL '1 day';
BEGIN
    EXECUTE format(
        'ALTER TABLE pgsched.task_events_archive'
        ' ADD CONSTRAINT task_events_archive_range CHECK (occurred_at < %L)', bound);
    EXECUTE format(
        'ALTER TABLE ONLY pgsched.task_events ATTACH PARTITION pgsched.task_events_archive'
        ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END;
$$;

ALTER TABLE ONLY pgsched.task_events ATTACH PARTITION pgsched.task_events_default DEFAULT;  -- noqa: PRS

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_cold FOR VALUES IN ('PENDING');

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_done FOR VALUES IN ('FAILED');

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_finished FOR VALUES IN ('COMPLETED', 'CANCELLED');

DO $$
DECLARE
    bound timestamptz := date_trunc('day', now(), 'UTC') + INTERVAL '1 day';
BEGIN
    EXECUTE format(
        'ALTER TABLE ONLY pgsched.tasks_finished ATTACH PARTITION pgsched.tasks_finished_archive'
        ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END;
$$;

ALTER TABLE ONLY pgsched.tasks_finished ATTACH PARTITION pgsched.tasks_finished_default DEFAULT;  -- noqa: PRS

ALTER TABLE ONLY pgsched.tasks ATTACH PARTITION pgsched.tasks_hot FOR VALUES IN ('QUEUED', 'PROCESSING');

-- Defaults --------------------------------------------------------------------------------

ALTER TABLE ONLY pgsched.task_events ALTER COLUMN id SET DEFAULT nextval('pgsched.task_events_id_seq'::regclass);

-- Keys and unique constraints -----------------------------------------------------------

ALTER TABLE ONLY pgsched.completed_work
    ADD CONSTRAINT completed_work_pkey PRIMARY KEY (tenant_id, task_type, idempotency_key);

ALTER TABLE ONLY pgsched.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, idempotency_key);

ALTER TABLE ONLY pgsched.producer_tenants
    ADD CONSTRAINT producer_tenants_pkey PRIMARY KEY (role_name, tenant_id);

ALTER TABLE ONLY pgsched.schedule_events
    ADD CONSTRAINT schedule_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY pgsched.schedule_occurrences
    ADD CONSTRAINT schedule_occurrences_pkey PRIMARY KEY (schedule_id, fire_at);

ALTER TABLE ONLY pgsched.schedules
    ADD CONSTRAINT schedules_key_per_tenant UNIQUE (tenant_id, idempotency_key);

ALTER TABLE ONLY pgsched.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);

ALTER TABLE ONLY pgsched.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY pgsched.sweep_leader
    ADD CONSTRAINT sweep_leader_pkey PRIMARY KEY (id);

ALTER TABLE ONLY pgsched.task_events
    ADD CONSTRAINT task_events_pkey PRIMARY KEY (id, occurred_at);

ALTER TABLE ONLY pgsched.task_events_archive
    ADD CONSTRAINT task_events_archive_pkey PRIMARY KEY (id, occurred_at);

ALTER TABLE ONLY pgsched.task_events_default
    ADD CONSTRAINT task_events_default_pkey PRIMARY KEY (id, occurred_at);

ALTER TABLE ONLY pgsched.task_limits
    ADD CONSTRAINT task_limits_pkey PRIMARY KEY (scope, key);

ALTER TABLE ONLY pgsched.tasks
    ADD CONSTRAINT tasks_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tasks_cold
    ADD CONSTRAINT tasks_cold_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tasks_done
    ADD CONSTRAINT tasks_done_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tasks_finished
    ADD CONSTRAINT tasks_finished_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tasks_finished_archive
    ADD CONSTRAINT tasks_finished_archive_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tasks_finished_default
    ADD CONSTRAINT tasks_finished_default_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tasks_hot
    ADD CONSTRAINT tasks_hot_pkey PRIMARY KEY (id, status, updated_at);

ALTER TABLE ONLY pgsched.tenants
    ADD CONSTRAINT tenants_pkey PRIMARY KEY (tenant_id);

-- Indexes ---------------------------------------------------------------------------------

CREATE INDEX schedule_events_schedule_idx ON pgsched.schedule_events USING btree (schedule_id, id);

CREATE INDEX schedules_enabled_idx ON pgsched.schedules USING btree (id) WHERE enabled;

CREATE INDEX task_events_task_idx ON ONLY pgsched.task_events USING btree (task_id, id);

CREATE INDEX task_events_archive_task_idx ON pgsched.task_events_archive USING btree (task_id, id);

CREATE INDEX task_events_tenant_time_idx ON ONLY pgsched.task_events USING btree (tenant_id, occurred_at);

CREATE INDEX task_events_archive_tenant_time_idx ON pgsched.task_events_archive USING btree (tenant_id, occurred_at);

CREATE INDEX task_events_default_task_id_id_idx ON pgsched.task_events_default USING btree (task_id, id);

CREATE INDEX task_events_default_tenant_id_occurred_at_idx ON pgsched.task_events_default USING btree (tenant_id, occurred_at);

CREATE INDEX tasks_cold_due_idx ON pgsched.tasks_cold USING btree (next_run_at);

CREATE INDEX tasks_parent_idx ON ONLY pgsched.tasks USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_cold_parent_id_idx ON pgsched.tasks_cold USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_cold_tenant_idx ON pgsched.tasks_cold USING btree (tenant_id, id);

CREATE INDEX tasks_cold_type_idx ON pgsched.tasks_cold USING btree (task_type, id);

CREATE INDEX tasks_done_dead_idx ON pgsched.tasks_done USING btree (task_type, updated_at) WHERE (status = 'FAILED'::pgsched.task_status);

CREATE INDEX tasks_done_due_idx ON pgsched.tasks_done USING btree (next_run_at);

CREATE INDEX tasks_done_not_completed_idx ON pgsched.tasks_done USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

CREATE INDEX tasks_done_parent_id_idx ON pgsched.tasks_done USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_done_tenant_idx ON pgsched.tasks_done USING btree (tenant_id, id);

CREATE INDEX tasks_done_type_idx ON pgsched.tasks_done USING btree (task_type, id);

CREATE INDEX tasks_finished_due_idx ON ONLY pgsched.tasks_finished USING btree (next_run_at);

CREATE INDEX tasks_finished_archive_due_idx ON pgsched.tasks_finished_archive USING btree (next_run_at);

CREATE INDEX tasks_finished_not_completed_idx ON ONLY pgsched.tasks_finished USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

CREATE INDEX tasks_finished_archive_not_completed_idx ON pgsched.tasks_finished_archive USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

CREATE INDEX tasks_finished_parent_id_idx ON ONLY pgsched.tasks_finished USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_finished_archive_parent_id_idx ON pgsched.tasks_finished_archive USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_finished_tenant_idx ON ONLY pgsched.tasks_finished USING btree (tenant_id, id);

CREATE INDEX tasks_finished_archive_tenant_idx ON pgsched.tasks_finished_archive USING btree (tenant_id, id);

CREATE INDEX tasks_finished_type_idx ON ONLY pgsched.tasks_finished USING btree (task_type, id);

CREATE INDEX tasks_finished_archive_type_idx ON pgsched.tasks_finished_archive USING btree (task_type, id);

CREATE INDEX tasks_finished_updated_idx ON ONLY pgsched.tasks_finished USING btree (updated_at) WHERE (status = any(ARRAY['COMPLETED'::pgsched.task_status, 'CANCELLED'::pgsched.task_status]));

CREATE INDEX tasks_finished_archive_updated_idx ON pgsched.tasks_finished_archive USING btree (updated_at) WHERE (status = any(ARRAY['COMPLETED'::pgsched.task_status, 'CANCELLED'::pgsched.task_status]));

CREATE INDEX tasks_finished_default_next_run_at_idx ON pgsched.tasks_finished_default USING btree (next_run_at);

CREATE INDEX tasks_finished_default_parent_id_idx ON pgsched.tasks_finished_default USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_finished_default_status_id_idx ON pgsched.tasks_finished_default USING btree (status, id) WHERE (status <> 'COMPLETED'::pgsched.task_status);

CREATE INDEX tasks_finished_default_task_type_id_idx ON pgsched.tasks_finished_default USING btree (task_type, id);

CREATE INDEX tasks_finished_default_tenant_id_id_idx ON pgsched.tasks_finished_default USING btree (tenant_id, id);

CREATE INDEX tasks_finished_default_updated_at_idx ON pgsched.tasks_finished_default USING btree (updated_at) WHERE (status = any(ARRAY['COMPLETED'::pgsched.task_status, 'CANCELLED'::pgsched.task_status]));

CREATE INDEX tasks_hot_claim_idx ON pgsched.tasks_hot USING btree (lane, priority, next_run_at) WHERE (status = 'QUEUED'::pgsched.task_status);

CREATE INDEX tasks_hot_lease_idx ON pgsched.tasks_hot USING btree (lease_expires_at) WHERE (status = 'PROCESSING'::pgsched.task_status);

CREATE INDEX tasks_hot_parent_id_idx ON pgsched.tasks_hot USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX tasks_hot_tenant_idx ON pgsched.tasks_hot USING btree (lane, tenant_id, priority DESC, next_run_at) WHERE (status = 'QUEUED'::pgsched.task_status);

CREATE INDEX tenants_product_active_idx ON pgsched.tenants USING btree (product) WHERE active;

-- Partitions' indexes, attached to their parents' --------------------------------------

ALTER INDEX pgsched.task_events_pkey ATTACH PARTITION pgsched.task_events_archive_pkey;

ALTER INDEX pgsched.task_events_task_idx ATTACH PARTITION pgsched.task_events_archive_task_idx;

ALTER INDEX pgsched.task_events_tenant_time_idx ATTACH PARTITION pgsched.task_events_archive_tenant_time_idx;

ALTER INDEX pgsched.task_events_pkey ATTACH PARTITION pgsched.task_events_default_pkey;

ALTER INDEX pgsched.task_events_task_idx ATTACH PARTITION pgsched.task_events_default_task_id_id_idx;

ALTER INDEX pgsched.task_events_tenant_time_idx ATTACH PARTITION pgsched.task_events_default_tenant_id_occurred_at_idx;

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_cold_parent_id_idx;

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_cold_pkey;

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_done_parent_id_idx;

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_done_pkey;

ALTER INDEX pgsched.tasks_finished_due_idx ATTACH PARTITION pgsched.tasks_finished_archive_due_idx;

ALTER INDEX pgsched.tasks_finished_not_completed_idx ATTACH PARTITION pgsched.tasks_finished_archive_not_completed_idx;

ALTER INDEX pgsched.tasks_finished_parent_id_idx ATTACH PARTITION pgsched.tasks_finished_archive_parent_id_idx;

ALTER INDEX pgsched.tasks_finished_pkey ATTACH PARTITION pgsched.tasks_finished_archive_pkey;

ALTER INDEX pgsched.tasks_finished_tenant_idx ATTACH PARTITION pgsched.tasks_finished_archive_tenant_idx;

ALTER INDEX pgsched.tasks_finished_type_idx ATTACH PARTITION pgsched.tasks_finished_archive_type_idx;

ALTER INDEX pgsched.tasks_finished_updated_idx ATTACH PARTITION pgsched.tasks_finished_archive_updated_idx;

ALTER INDEX pgsched.tasks_finished_due_idx ATTACH PARTITION pgsched.tasks_finished_default_next_run_at_idx;

ALTER INDEX pgsched.tasks_finished_parent_id_idx ATTACH PARTITION pgsched.tasks_finished_default_parent_id_idx;

ALTER INDEX pgsched.tasks_finished_pkey ATTACH PARTITION pgsched.tasks_finished_default_pkey;

ALTER INDEX pgsched.tasks_finished_not_completed_idx ATTACH PARTITION pgsched.tasks_finished_default_status_id_idx;

ALTER INDEX pgsched.tasks_finished_type_idx ATTACH PARTITION pgsched.tasks_finished_default_task_type_id_idx;

ALTER INDEX pgsched.tasks_finished_tenant_idx ATTACH PARTITION pgsched.tasks_finished_default_tenant_id_id_idx;

ALTER INDEX pgsched.tasks_finished_updated_idx ATTACH PARTITION pgsched.tasks_finished_default_updated_at_idx;

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_finished_parent_id_idx;

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_finished_pkey;

ALTER INDEX pgsched.tasks_parent_idx ATTACH PARTITION pgsched.tasks_hot_parent_id_idx;

ALTER INDEX pgsched.tasks_pkey ATTACH PARTITION pgsched.tasks_hot_pkey;

-- Foreign keys ----------------------------------------------------------------------------

ALTER TABLE ONLY pgsched.schedule_occurrences
    ADD CONSTRAINT schedule_occurrences_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES pgsched.schedules(id) ON DELETE CASCADE;

-- Grants on the schema, tables and sequences (functions' and views' are in sql/code/) -----

GRANT USAGE ON SCHEMA pgsched TO pgsched_producer;
GRANT USAGE ON SCHEMA pgsched TO pgsched_worker;
GRANT USAGE ON SCHEMA pgsched TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.task_limits TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_limits TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.schedules TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schedules TO pgsched_admin;

GRANT ALL ON SEQUENCE pgsched.task_id_seq TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tasks TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.completed_work TO pgsched_worker;
GRANT ALL ON TABLE pgsched.completed_work TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.idempotency_keys TO pgsched_worker;
GRANT ALL ON TABLE pgsched.idempotency_keys TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.producer_tenants TO pgsched_worker;
GRANT ALL ON TABLE pgsched.producer_tenants TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.task_events TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_events TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.schedule_events TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schedule_events TO pgsched_admin;

GRANT ALL ON SEQUENCE pgsched.schedule_events_id_seq TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.schedule_occurrences TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schedule_occurrences TO pgsched_admin;

GRANT ALL ON SEQUENCE pgsched.schedules_id_seq TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.schema_migrations TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schema_migrations TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.settings TO pgsched_worker;
GRANT ALL ON TABLE pgsched.settings TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.sweep_leader TO pgsched_worker;
GRANT ALL ON TABLE pgsched.sweep_leader TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.task_events_archive TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_events_archive TO pgsched_admin;

GRANT ALL ON SEQUENCE pgsched.task_events_id_seq TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tasks_cold TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_cold TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tasks_done TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_done TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tasks_finished TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_finished TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tasks_finished_archive TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_finished_archive TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tasks_hot TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tasks_hot TO pgsched_admin;

GRANT SELECT ON TABLE pgsched.tenants TO pgsched_worker;
GRANT ALL ON TABLE pgsched.tenants TO pgsched_admin;

-- Seed rows -------------------------------------------------------------------------------

-- The one row of engine settings and of the sweep leader's lease.
INSERT INTO pgsched.settings DEFAULT VALUES;

INSERT INTO pgsched.sweep_leader DEFAULT VALUES;
