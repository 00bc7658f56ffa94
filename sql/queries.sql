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

-- name: task_claim_many
SELECT
    id,
    task_type,
    tenant_id,
    payload,
    metadata,
    attempts,
    max_attempts,
    next_run_at,
    lane,
    priority,
    idempotency_key,
    lease_token
FROM pgsched.task_claim_many(%(lane)s, %(max_tasks)s, %(worker)s, %(lease)s);

-- name: lane_next_due
SELECT
    next_due,
    db_now
FROM pgsched.lane_next_due(%(lane)s);

-- name: task_finish_many
SELECT
    task_id,
    applied
FROM pgsched.task_finish_many(
    task_ids => %(task_ids)s::bigint[],
    lease_tokens => %(lease_tokens)s::uuid[],
    outcomes => %(outcomes)s::text[],
    errors => %(errors)s::text[],
    retry_delays => %(retry_delays)s::interval[]
);

-- name: task_heartbeat_many
SELECT task_id
FROM pgsched.task_heartbeat_many(
    %(task_ids)s::bigint[], %(lease_tokens)s::uuid[], %(lease)s
) AS task_id;

-- name: lease_rescue_expired
SELECT pgsched.lease_rescue_expired(%(lane)s) AS rescued;

-- name: dead_list
SELECT
    id,
    tenant_id,
    task_type,
    attempts,
    max_attempts,
    updated_at AS failed_at,
    last_error
FROM pgsched.lane_dead
ORDER BY updated_at DESC, id DESC
LIMIT %(max_rows)s;

-- name: dead_retry
SELECT task_id
FROM pgsched.dead_retry(
    task_id => %(task_id)s, task_type => %(task_type)s, all_tasks => %(all_tasks)s
) AS task_id;

-- name: dead_discard
SELECT pgsched.dead_discard(%(task_id)s, %(reason)s) AS task_id;

-- name: demo_per_lane
SELECT
    CASE WHEN t.status = 'FAILED' THEN 'DEAD' ELSE t.lane::text END AS lane,
    count(*) FILTER (WHERE t.status = 'COMPLETED') AS completed,
    count(*) FILTER (WHERE t.status = 'FAILED') AS dead,
    count(*) FILTER (WHERE t.status = 'QUEUED') AS hot_waiting,
    count(*) FILTER (WHERE t.status = 'PENDING') AS cold_waiting
FROM pgsched.tasks AS t
WHERE t.id >= %(first_id)s
GROUP BY CASE WHEN t.status = 'FAILED' THEN 'DEAD' ELSE t.lane::text END
ORDER BY array_position(ARRAY['HIGH', 'NORMAL', 'LOW', 'BATCH', 'DEAD'], CASE WHEN t.status = 'FAILED' THEN 'DEAD' ELSE t.lane::text END);

-- name: demo_lateness
SELECT
    t.lane::text AS lane,
    CASE
        WHEN r.scheduled_for < %(worker_started)s THEN 'backlog at start'
        ELSE 'due while running'
    END AS due,
    count(*) AS runs,
    percentile_cont(0.50) WITHIN GROUP (ORDER BY extract(EPOCH FROM r.lateness)::float8 * 1000) AS p50_ms,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(EPOCH FROM r.lateness)::float8 * 1000) AS p95_ms,
    percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(EPOCH FROM r.lateness)::float8 * 1000) AS p99_ms,
    max(extract(EPOCH FROM r.lateness)::float8 * 1000) AS max_ms
FROM pgsched.task_runs AS r
INNER JOIN pgsched.tasks AS t ON r.task_id = t.id
WHERE r.task_id >= %(first_id)s
GROUP BY
    t.lane,
    CASE
        WHEN r.scheduled_for < %(worker_started)s THEN 'backlog at start'
        ELSE 'due while running'
    END
ORDER BY t.lane ASC, due ASC;

-- name: demo_unfinished
SELECT count(*) AS unfinished
FROM pgsched.tasks AS t
WHERE
    t.id >= %(first_id)s
    AND (
        t.status = 'PROCESSING'
        OR (t.status = 'QUEUED' AND t.next_run_at <= %(horizon)s)
    );
