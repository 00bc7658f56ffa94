-- 0018 — task search by type, tenant, status or due time reads an index on the big tiers.
--
-- The dashboard's search returns the newest matches first (ORDER BY id DESC LIMIT n). With
-- only the primary key to walk, a type or tenant that few rows of a tier have made it read
-- that tier's primary key backwards in full: 6 s with 10 million future tasks. Each big
-- tier now has an index per search key, ending in id so that the newest matches come first
-- and the scan stops at n:
--
--   cold (PENDING)   (task_type, id), (tenant_id, id); due time: tasks_cold_due_idx (0001)
--   done (finished)  (task_type, id), (tenant_id, id), (next_run_at): a due range is
--                    listed earliest first; (status, id) for FAILED and CANCELLED, the
--                    rare statuses, which costs a completion nothing (COMPLETED walks the
--                    primary key: nearly every finished row is COMPLETED)
--
-- The hot tier gets none: it holds the next hot_window of work (24 h by default), every
-- claim rewrites its rows and so every index on it, and a search reads it whole in
-- milliseconds. The price is on writes: each future task scheduled writes two more index
-- entries, each finished task three (README, Dashboard, has the measured cost). On an
-- existing database the indexes are built here, holding off writes to each tier while its
-- index builds (tens of seconds for ten million rows).

CREATE INDEX tasks_cold_type_idx ON pgsched.tasks_cold (task_type, id);

CREATE INDEX tasks_cold_tenant_idx ON pgsched.tasks_cold (tenant_id, id);

CREATE INDEX tasks_done_type_idx ON pgsched.tasks_done (task_type, id);

CREATE INDEX tasks_done_tenant_idx ON pgsched.tasks_done (tenant_id, id);

CREATE INDEX tasks_done_due_idx ON pgsched.tasks_done (next_run_at);

CREATE INDEX tasks_done_not_completed_idx ON pgsched.tasks_done (status, id)
WHERE status <> 'COMPLETED';
