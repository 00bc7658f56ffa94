-- Named statements of pgsched.testing, the helpers a user's test suite runs: tasks drained
-- in-process through the worker's own runner, and what is scheduled, read back.

-- name: testing_claim_due
-- task_claim_many's columns (TaskRow's fields, bound by name) and ledger lookup, with
-- the claim's own as_of: the tasks due by then, by the database's judgement of due-ness.
SELECT
    c.id,
    c.task_type,
    c.tenant_id,
    c.payload::text AS payload_json,
    c.metadata::text AS metadata_json,
    c.attempts AS attempt,
    c.max_attempts,
    c.next_run_at AS scheduled_for,
    c.lane,
    c.priority,
    c.idempotency_key,
    c.lease_token,
    c.schedule_id,
    c.scope,
    (
        SELECT cw.task_id
        FROM pgsched.completed_work AS cw
        WHERE
            c.idempotency_key IS NOT NULL
            AND cw.tenant_id = c.tenant_id
            AND cw.task_type = c.task_type
            AND cw.idempotency_key = c.idempotency_key
    ) AS done_by,
    c.traceparent,
    c.retry_delays,
    coalesce(c.snoozes, 0) AS snoozes
FROM pgsched.task_claim_many(
    %(lane)s, %(max_tasks)s, %(worker)s, %(lease)s, %(as_of)s
) AS c;

-- name: testing_scheduled_tasks
-- Tasks in the given states matching every filter given (NULL: any); payload and metadata
-- match by containment (the task's may hold more keys).
SELECT
    t.id,
    t.task_type,
    t.tenant_id,
    t.payload,
    t.metadata,
    t.next_run_at AS run_at,
    t.lane::text AS lane,
    t.priority,
    t.status::text AS status,
    t.attempts,
    t.max_attempts,
    t.idempotency_key,
    t.last_error
FROM pgsched.tasks AS t
WHERE
    t.status::text = any(%(statuses)s::text[])
    AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
    AND (%(tenant_id)s::text IS NULL OR t.tenant_id = %(tenant_id)s::text)
    AND (%(payload)s::jsonb IS NULL OR t.payload @> %(payload)s::jsonb)
    AND (%(metadata)s::jsonb IS NULL OR t.metadata @> %(metadata)s::jsonb)
    AND (%(lane)s::text IS NULL OR t.lane::text = %(lane)s::text)
    AND (%(run_from)s::timestamptz IS NULL OR t.next_run_at >= %(run_from)s::timestamptz)
    AND (%(run_until)s::timestamptz IS NULL OR t.next_run_at <= %(run_until)s::timestamptz)
ORDER BY t.next_run_at, t.id;
