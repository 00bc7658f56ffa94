-- Named statements the Python side runs. Each block starts with "-- name: <name>";
-- pgsched/queries.py loads them. Parameters use psycopg's %(name)s style.

-- name: task_schedule_many
SELECT
    s.ordinal,
    s.task_id,
    s.created
FROM
    pgsched.schedule_tasks(
        task_types => %(task_types)s::text[],
        payloads => %(payloads)s::jsonb[],
        run_ats => %(run_ats)s::timestamptz[],
        tenant_ids => %(tenant_ids)s::text[],
        priorities => %(priorities)s::integer[],
        idempotency_keys => %(idempotency_keys)s::text[],
        max_attempts => %(max_attempts)s::bigint[],
        lanes => %(lanes)s::text[],
        metadatas => %(metadatas)s::jsonb[]
    ) AS s
ORDER BY s.ordinal;

-- name: task_schedule_one
SELECT pgsched.schedule_task(
    task_type => %(task_type)s,
    payload => %(payload)s,
    run_at => %(run_at)s,
    tenant_id => %(tenant_id)s,
    priority => %(priority)s,
    idempotency_key => %(idempotency_key)s,
    max_attempts => %(max_attempts)s,
    lane => %(lane)s,
    metadata => %(metadata)s
) AS task_id;

-- name: task_cancel
SELECT pgsched.cancel_task(%(task_id)s, %(reason)s) AS task_id;

-- name: lane_summary
SELECT
    lane,
    cold,
    queued,
    due_now,
    processing,
    dead,
    extract(EPOCH FROM oldest_lateness)::float8 AS oldest_lateness_s
FROM pgsched.lane_summary;

-- name: timezone_problem
SELECT pgsched.timezone_problem(%(timezone)s) AS problem;
