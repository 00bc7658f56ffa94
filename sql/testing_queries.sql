-- Named statements of pgsched.testing, the helpers a user's test suite runs: what is
-- scheduled, read back. (drain claims with the worker's own task_claim_many, as_of given.)

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
