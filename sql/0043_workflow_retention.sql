-- 0043 — retention reaches the workflows' bookkeeping.
--
-- An edge of task_dependencies and a row of task_result_waiters outlive their tasks unless
-- something deletes them: finished tasks mostly go a whole partition at a time, with no
-- per-row hook. retention_prune (sql/code/partitions_retention.sql) now deletes the rows
-- whose task is gone, reading them through these indexes on created_at from the oldest: a
-- row cannot belong to a pruned task before its created_at is older than the retention
-- period, so the rows newer than the cutoff are never read. Its result gains the counts
-- dependencies and result_waiters, so the old signature goes here.

CREATE INDEX task_dependencies_created_idx ON pgsched.task_dependencies USING btree (created_at);
CREATE INDEX task_result_waiters_created_idx ON pgsched.task_result_waiters USING btree (created_at);

DROP FUNCTION IF EXISTS pgsched.retention_prune(interval, integer, timestamptz);
