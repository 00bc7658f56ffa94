-- 0037 — workflows: tasks that wait for other tasks, and handlers' results.
--
-- A task scheduled with depends_on waits, PENDING in the cold tier, until its last parent
-- finishes: task_dependencies holds one edge per (parent, child) and whether it is met;
-- tasks.waiting_for counts the child's unmet edges, decremented under the child's row
-- lock in the transaction that finishes a parent (task_dependencies_settle in
-- sql/code/workflows.sql), so it reaches zero, and the child is released, exactly once.
-- The cold tier's due index leaves waiting tasks out: promotion never reads them.
--
-- tasks.result keeps a handler's return value (JSON) with its task, so it expires with the
-- task under retention; settings.max_result_bytes caps it.

ALTER TABLE pgsched.tasks ADD COLUMN waiting_for integer;
ALTER TABLE pgsched.tasks ADD COLUMN on_parent_failure text;
ALTER TABLE pgsched.tasks ADD COLUMN result jsonb;

COMMENT ON COLUMN pgsched.tasks.waiting_for IS 'How many of the task''s parents (depends_on) it still waits for; NULL when it waits for none. A task waiting is PENDING in the cold tier and never promoted.';
COMMENT ON COLUMN pgsched.tasks.on_parent_failure IS 'What a parent going DEAD or CANCELLED does to this task: hold (NULL, the default: wait for a retry), cancel (cancel it and what waits for it) or run (release it anyway).';
COMMENT ON COLUMN pgsched.tasks.result IS 'The handler''s return value as JSON, stored when the task completed (pgsched.task_result); at most settings.max_result_bytes.';

ALTER TABLE pgsched.settings ADD COLUMN max_result_bytes bigint DEFAULT 1048576 NOT NULL;
ALTER TABLE pgsched.settings ADD CONSTRAINT settings_result_cap_positive CHECK (max_result_bytes > 0);

COMMENT ON TABLE pgsched.settings IS 'One row of engine settings: immediate_window and hot_window (the time router), max_payload_bytes, max_result_bytes (a handler''s return value), event_partition_period (the partitions of task_events and tasks_finished) and fairness_off_lanes.';

CREATE TABLE pgsched.task_dependencies (
    parent_id bigint NOT NULL,
    child_id bigint NOT NULL,
    met boolean DEFAULT FALSE NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT task_dependencies_pkey PRIMARY KEY (parent_id, child_id),
    CONSTRAINT task_dependencies_not_self CHECK (parent_id <> child_id)
);

COMMENT ON TABLE pgsched.task_dependencies IS 'One row per edge of a workflow: child_id waits for parent_id; met once the parent completed (or failed, for a child that runs anyway).';

CREATE INDEX task_dependencies_child_idx ON pgsched.task_dependencies USING btree (child_id);

GRANT SELECT ON TABLE pgsched.task_dependencies TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_dependencies TO pgsched_admin;

CREATE TABLE pgsched.task_result_waiters (
    task_id bigint NOT NULL,
    token uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT task_result_waiters_pkey PRIMARY KEY (task_id, token)
);

COMMENT ON TABLE pgsched.task_result_waiters IS 'Who waits for a task''s outcome (App.result): the task finishing sends NOTIFY pgsched_result with its id, only when a row here names it.';

GRANT ALL ON TABLE pgsched.task_result_waiters TO pgsched_admin;

-- Waiting tasks never come due: the promotion sweep's index leaves them out.
DROP INDEX pgsched.tasks_cold_due_idx;
CREATE INDEX tasks_cold_due_idx ON pgsched.tasks_cold USING btree (next_run_at) WHERE (waiting_for IS NULL);

-- The signatures that grew depends_on, on_parent_failure and results (as 0035 left them).
DROP FUNCTION IF EXISTS pgsched.schedule_task(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text, interval, interval, text, interval[]);
DROP FUNCTION IF EXISTS pgsched.schedule_task_ex(text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text, interval, interval, text, interval[]);
DROP FUNCTION IF EXISTS pgsched.schedule_tasks(text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], timestamptz, text[], text[], interval[], interval[], text[]);
DROP FUNCTION IF EXISTS pgsched.task_insert_many(text[], jsonb[], timestamptz[], text[], integer[], text[], bigint[], text[], jsonb[], text[], text[], timestamptz, text[], interval[]);
DROP FUNCTION IF EXISTS pgsched.task_finish_many(bigint[], uuid[], text[], text[], interval[], timestamptz);

-- Tenant readers see how a task waits and what it returned, as they see the rest of it.
GRANT SELECT (waiting_for, on_parent_failure, result) ON TABLE pgsched.tasks TO pgsched_tenant_reader;
