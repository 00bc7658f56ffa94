-- 0025 — the transition trigger pairs old and new rows in one hashed pass.
--
-- task_record_transitions joins its transition tables (old_rows, new_rows) on id. Its
-- statements have no parameters, so PL/pgSQL plans each once per connection and keeps the
-- plan, estimated from the row counts of the first call. A connection whose first
-- transition was a single row (a worker's first claim at a low rate, a hand-written
-- UPDATE) kept a nested loop that rescanned new_rows for every old row: seen with
-- auto_explain in a 30,000-task backlog, every 100-row call ran its check and its INSERT
-- with new_rows scanned 100 times (loops=100), 7 to 25 ms each; the cost per row grew with
-- the rows per call. Which plan a worker got depended on the size of its first claim.
--
-- Now the join can only be hashed (nested loops and merge joins off for the trigger: a
-- hash join is linear whatever the estimate), and the pairs are read once: one statement
-- pairs the rows, records the legal ones and returns the first illegal one, which is then
-- refused exactly as before (same message, SQLSTATE and hint; the lowest such id). When a
-- row is illegal the statement fails, so nothing it recorded survives.

CREATE OR REPLACE FUNCTION pgsched.task_record_transitions() RETURNS trigger
LANGUAGE plpgsql
SET enable_nestloop = FALSE
SET enable_mergejoin = FALSE
SET enable_hashjoin = TRUE
AS $$
DECLARE
    bad record;
BEGIN
    WITH moved AS MATERIALIZED (
        SELECT n.id, n.tenant_id, n.task_type, o.status AS from_status, n.status AS to_status,
               -- A hand-written UPDATE that forgets updated_at still gets a true time.
               CASE WHEN n.updated_at IS DISTINCT FROM o.updated_at THEN n.updated_at ELSE now() END
                   AS occurred_at,
               n.next_run_at, n.attempts, coalesce(n.locked_by, o.locked_by) AS worker,
               n.status_reason,
               (pgsched.transition_is_legal(o.status, n.status)
                OR (o.status = 'PROCESSING' AND n.status = 'CANCELLED'
                    AND o.cancel_requested_at IS NOT NULL)) IS NOT FALSE AS legal
          FROM old_rows AS o
         INNER JOIN new_rows AS n ON n.id = o.id
         WHERE n.status IS DISTINCT FROM o.status
    ),

    recorded AS (
        INSERT INTO pgsched.task_events (
            task_id, tenant_id, task_type, from_status, to_status,
            occurred_at, scheduled_for, attempt, worker, detail
        )
        SELECT m.id, m.tenant_id, m.task_type, m.from_status, m.to_status,
               m.occurred_at, m.next_run_at, m.attempts, m.worker, m.status_reason
          FROM moved AS m
         WHERE m.legal
    )

    SELECT m.id, m.from_status, m.to_status INTO bad
      FROM moved AS m
     WHERE NOT m.legal
     ORDER BY m.id
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: illegal transition % -> % for task %',
            bad.from_status, bad.to_status, bad.id
            USING ERRCODE = 'check_violation',
                  HINT = CASE WHEN bad.from_status = 'PROCESSING' AND bad.to_status = 'CANCELLED'
                      THEN 'A running task is cancelled with pgsched.cancel_task: its worker stops it.'
                      ELSE 'See the state diagram in the README for the legal transitions.' END;
    END IF;
    RETURN NULL;
END;
$$;
