-- 0045 — how a waiting task's parents finished, counted on its own row.
--
-- A batch's callback waits on a counter (waiting_for); the dashboard shows a batch's
-- progress — members completed, dead, cancelled, still waiting — without reading a
-- million members, so the counts by outcome are kept beside that counter, on the same row,
-- by the same UPDATE (task_dependencies_settle in sql/code/workflows.sql): no row more is
-- written per finishing parent.

ALTER TABLE pgsched.tasks ADD COLUMN parents_completed bigint;
ALTER TABLE pgsched.tasks ADD COLUMN parents_dead bigint;
ALTER TABLE pgsched.tasks ADD COLUMN parents_cancelled bigint;

COMMENT ON COLUMN pgsched.tasks.parents_completed IS 'How many of the task''s parents (depends_on, a batch''s members) COMPLETED while it waited; NULL for none.';
COMMENT ON COLUMN pgsched.tasks.parents_dead IS 'How many of the task''s parents went DEAD while it waited and met its edge (on_parent_failure run, as a batch''s callback has); NULL for none.';
COMMENT ON COLUMN pgsched.tasks.parents_cancelled IS 'How many of the task''s parents were CANCELLED while it waited and met its edge (on_parent_failure run, as a batch''s callback has); NULL for none.';
