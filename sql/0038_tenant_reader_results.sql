-- 0038 — tenant readers read a task's result and how many parents it waits for (0037's
-- tasks.result and tasks.waiting_for), through pgsched.tenant_tasks.

GRANT SELECT (result, waiting_for) ON TABLE pgsched.tasks TO pgsched_tenant_reader;
