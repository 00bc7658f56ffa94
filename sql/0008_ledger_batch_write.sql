-- 0008 — the completed-work ledger, written for a batch of tasks in one statement.
--
-- A worker records a keyed task's work as done right after execute returns, before its
-- batched completion (0006, work_record_done). One statement per task made the ledger a
-- round trip and a commit per keyed task; a worker now collects them for a few
-- milliseconds and writes them together. Same rules as work_record_done: only a task
-- still PROCESSING under the given lease, and the first completion of a (tenant, task
-- type, key) wins.

CREATE FUNCTION pgsched.work_record_done_many(
    task_ids bigint[], lease_tokens uuid[]
) RETURNS TABLE (task_id bigint, recorded boolean)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH given AS (
        SELECT g.task_id, g.lease_token, g.ord
          FROM unnest(work_record_done_many.task_ids, work_record_done_many.lease_tokens)
               WITH ORDINALITY AS g (task_id, lease_token, ord)
    ),
    held AS (
        SELECT tk.tenant_id, tk.task_type, tk.idempotency_key, tk.id, g.lease_token
          FROM given AS g
          JOIN pgsched.tasks AS tk
            ON tk.id = g.task_id AND tk.status = 'PROCESSING' AND tk.lease_token = g.lease_token
         WHERE tk.idempotency_key IS NOT NULL
    ),
    ins AS (
        INSERT INTO pgsched.completed_work AS w (tenant_id, task_type, idempotency_key, task_id)
        SELECT h.tenant_id, h.task_type, h.idempotency_key, h.id FROM held AS h
        ON CONFLICT DO NOTHING
        RETURNING w.task_id
    )
    SELECT g.task_id,
           EXISTS (SELECT 1
                     FROM ins JOIN held AS h ON h.id = ins.task_id
                    WHERE ins.task_id = g.task_id AND h.lease_token = g.lease_token)
      FROM given AS g
     ORDER BY g.ord
$$;

REVOKE EXECUTE ON FUNCTION pgsched.work_record_done_many(bigint[], uuid[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.work_record_done_many(bigint[], uuid[])
TO pgsched_worker, pgsched_admin;
