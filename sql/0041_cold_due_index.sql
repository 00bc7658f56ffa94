-- 0041 — the cold tier's due index whole again, and one of its own for promotion.
--
-- 0037 made tasks_cold_due_idx partial (WHERE waiting_for IS NULL) so that promotion never
-- reads tasks waiting for their parents; the dashboard's searches by due time read that
-- index too, for every PENDING task, waiting or not, and could no longer use it. Promotion
-- (and the overdue counts) read tasks_cold_promote_idx now, which leaves waiting tasks out.

DROP INDEX pgsched.tasks_cold_due_idx;
CREATE INDEX tasks_cold_due_idx ON pgsched.tasks_cold USING btree (next_run_at);
CREATE INDEX tasks_cold_promote_idx ON pgsched.tasks_cold USING btree (next_run_at) WHERE (waiting_for IS NULL);
