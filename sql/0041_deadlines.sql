-- 0041 — deadlines: a task or a recurring schedule may say by when its work must be done.
--
-- tasks.complete_by is the deadline of one task; schedules.complete_within gives each
-- occurrence the deadline fire time + complete_within (schedule_arm writes it on the armed
-- task). deadline_sweep (sql/code/deadlines.sql) judges each task once its deadline has
-- passed, or once it completed: tasks.deadline_outcome 'met' or 'missed'; a miss writes an
-- event and may schedule the task type named in deadline_callback. The partial index holds
-- only the tasks still to judge. schedule_task, schedule_task_ex and schedule_recurring take
-- the new arguments: their old signatures go here, the new ones are made by
-- sql/code/scheduling.sql and sql/code/recurring.sql.

ALTER TABLE pgsched.tasks ADD COLUMN complete_by timestamp with time zone;
ALTER TABLE pgsched.tasks ADD COLUMN deadline_callback text;
ALTER TABLE pgsched.tasks ADD COLUMN deadline_outcome text;
ALTER TABLE pgsched.tasks ADD CONSTRAINT tasks_deadline_outcome_known
CHECK (deadline_outcome IN ('met', 'missed'));

COMMENT ON COLUMN pgsched.tasks.complete_by IS 'The task''s deadline, or NULL: it should have COMPLETED by then. A recurring occurrence gets its schedule''s fire time + complete_within.';
COMMENT ON COLUMN pgsched.tasks.deadline_callback IS 'A task type scheduled (same tenant, payload naming the task) when the deadline is missed, or NULL.';
COMMENT ON COLUMN pgsched.tasks.deadline_outcome IS 'How deadline_sweep judged the deadline: met (completed by complete_by), missed (not completed by then), or NULL (no deadline, or not judged yet).';

CREATE INDEX tasks_deadline_unjudged_idx ON pgsched.tasks USING btree (complete_by)
WHERE complete_by IS NOT NULL AND deadline_outcome IS NULL;
-- The misses, few, for status, the dashboard and pgsched.deadline_misses.
CREATE INDEX tasks_deadline_missed_idx ON pgsched.tasks USING btree (complete_by)
WHERE deadline_outcome = 'missed';

ALTER TABLE pgsched.schedules ADD COLUMN complete_within interval;
ALTER TABLE pgsched.schedules ADD COLUMN deadline_callback text;

COMMENT ON COLUMN pgsched.schedules.complete_within IS 'Each occurrence''s deadline, after its fire time (which the schedule''s zone and DST policy place): "the 09:00 report done by 09:30" is 30 minutes. NULL: no deadline.';
COMMENT ON COLUMN pgsched.schedules.deadline_callback IS 'A task type scheduled when an occurrence misses its deadline, or NULL.';

DROP FUNCTION IF EXISTS pgsched.schedule_task(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text,
    interval, interval, text, interval[], bigint[], text
);
DROP FUNCTION IF EXISTS pgsched.schedule_task_ex(
    text, jsonb, timestamptz, text, integer, text, bigint, text, jsonb, timestamptz, text, text,
    interval, interval, text, interval[], bigint[], text
);
DROP FUNCTION IF EXISTS pgsched.schedule_recurring(
    text, text, text, jsonb, text, integer, text, text, bigint, text, jsonb, integer, timestamptz,
    timestamptz, text, text
);
