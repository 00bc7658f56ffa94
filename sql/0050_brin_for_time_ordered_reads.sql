-- Two btree indexes written on every task, each read only as a range of a column that
-- grows with the rows' insertion order, give way to BRIN indexes: a block range's minimum
-- and maximum, kept for about nothing per insert (a row in a block range not yet
-- summarized writes nothing to the index), serve those range reads as well. A range is
-- summarized once it is full (autosummarize: autovacuum is asked to as the next range
-- begins); until then its pages are read, as few as the ranges still filling.
--
-- task_events_pkey (id, occurred_at): two insertions per task, one per event. Read by the
-- sweep leader's count of workflow transitions after an event id (workflow_events_since);
-- nothing looks an event up by id, no key refers to one, and no statement updates or
-- deletes events (they go with their period). Event ids come from one sequence, so they
-- grow with each period's heap order. Distributed mode (sql/code/distribution.sql) keeps a
-- key with the tenant first, as before.
--
-- tasks_finished_updated_idx (updated_at of COMPLETED and CANCELLED): one insertion per
-- task. Read by the dashboard's recent throughput and lanes (the last hour) and by the
-- retention of the archive and default partitions, each a range of updated_at; a period's
-- rows are written as their tasks finish, in updated_at order.
ALTER TABLE pgsched.task_events DROP CONSTRAINT task_events_pkey;
CREATE INDEX task_events_id_idx ON pgsched.task_events USING brin (id)
WITH (autosummarize = on);

DROP INDEX pgsched.tasks_finished_updated_idx;
CREATE INDEX tasks_finished_updated_idx ON pgsched.tasks_finished USING brin (updated_at)
WITH (autosummarize = on)
WHERE status IN ('COMPLETED', 'CANCELLED');

-- workflow_events_last reads where the event ids stand from their sequence (a BRIN index
-- gives no maximum); the sweep leader counts them as pgsched_worker.
GRANT SELECT ON SEQUENCE pgsched.task_events_id_seq TO pgsched_worker;
