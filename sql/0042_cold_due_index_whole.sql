-- The cold tier's due-time index covers every PENDING task again: the dashboard's and the
-- CLI's searches by due time read it (0037 made it partial, which left them a sequential
-- scan of the cold tier). The promotion sweep, which must not step over tasks waiting for
-- their parents whatever their due time, reads a partial index of its own.
DROP INDEX pgsched.tasks_cold_due_idx;
CREATE INDEX tasks_cold_due_idx ON pgsched.tasks_cold USING btree (next_run_at);
CREATE INDEX tasks_cold_promotable_idx ON pgsched.tasks_cold USING btree (next_run_at)
WHERE (waiting_for IS NULL);
