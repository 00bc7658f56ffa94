-- 0035 — unique windows and debounce, a trace context and a retry schedule per task.
--
-- pgsched.task_windows holds a tenant's windowed keys: a key scheduled with unique_for
-- names its task until the window ends; one scheduled with debounce names the task a burst
-- of calls keeps replacing until it starts. The tasks get a traceparent (the W3C trace
-- context of the request that scheduled them, handed to the worker with the claimed row)
-- and retry_delays (an explicit list of waits between attempts, used instead of the
-- handler's policy). schedule_task, schedule_task_ex, schedule_tasks and task_insert_many
-- take the new arguments: their old signatures go here, the new ones are made by
-- sql/code/scheduling.sql and sql/code/router.sql.

CREATE TABLE pgsched.task_windows (
    tenant_id text NOT NULL,
    window_key text NOT NULL,
    task_id bigint NOT NULL,
    kind text NOT NULL,
    opened_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    CONSTRAINT task_windows_pkey PRIMARY KEY (tenant_id, window_key),
    CONSTRAINT task_windows_kind_known CHECK (kind IN ('unique', 'debounce'))
);

COMMENT ON TABLE pgsched.task_windows IS 'Windowed keys per tenant: (tenant_id, window_key) names task_id until ends_at. kind unique: schedule_task with unique_for returns that task instead of a new one while the window lasts; kind debounce: a later call replaces the task''s payload and due time while it has not started.';

GRANT SELECT ON TABLE pgsched.task_windows TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_windows TO pgsched_admin;

ALTER TABLE pgsched.tasks ADD COLUMN traceparent text;
ALTER TABLE pgsched.tasks ADD COLUMN retry_delays interval[];

COMMENT ON COLUMN pgsched.tasks.traceparent IS 'The W3C trace context (traceparent header) of the request that scheduled the task, or NULL; handed to the worker with the claimed row so the execution can join that trace.';
COMMENT ON COLUMN pgsched.tasks.retry_delays IS 'The waits after failed attempts 1, 2, ... (the last repeats), or NULL: the handler''s retry schedule or policy decides.';

DROP FUNCTION IF EXISTS pgsched.schedule_task(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text
);
DROP FUNCTION IF EXISTS pgsched.schedule_task_ex(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text
);
DROP FUNCTION IF EXISTS pgsched.schedule_tasks(
    text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[],
    timestamptz, text[], text[]
);
DROP FUNCTION IF EXISTS pgsched.task_insert_many(
    text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[],
    text[], text[], timestamptz
);
