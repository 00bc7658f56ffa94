-- Named statements the Python side runs. Each block starts with "-- name: <name>";
-- pgsched/queries.py loads them. Parameters use psycopg's %(name)s style.

-- name: task_schedule_many
-- Arrays travel in binary (the b placeholders): text-encoding 50,000 payloads costs 15x more.
SELECT
    s.ordinal,
    s.task_id,
    s.created
FROM
    pgsched.schedule_tasks(
        task_types => %(task_types)b::text[],
        payloads => %(payloads)b::jsonb[],
        run_ats => %(run_ats)b::timestamptz[],
        tenant_ids => %(tenant_ids)b::text[],
        priorities => %(priorities)b::integer[],
        idempotency_keys => %(idempotency_keys)b::text[],
        max_attempts => %(max_attempts)b::bigint[],
        lanes => %(lanes)b::text[],
        metadatas => %(metadatas)b::jsonb[]
    ) AS s
ORDER BY s.ordinal;

-- name: task_schedule_one
SELECT
    s.task_id,
    s.created
FROM pgsched.schedule_task_ex(
    task_type => %(task_type)s,
    payload => %(payload)s,
    run_at => %(run_at)s,
    tenant_id => %(tenant_id)s,
    priority => %(priority)s,
    idempotency_key => %(idempotency_key)s,
    max_attempts => %(max_attempts)s,
    lane => %(lane)s,
    metadata => %(metadata)s,
    scope => %(scope)s,
    product => %(product)s
) AS s;

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
-- done_by: the task that already completed this (tenant, type, key); its run is a no-op.
-- payload and metadata travel as JSON text: the worker decodes them only if a handler
-- reads them (many never read metadata; a no-op never reads either).
-- Column names are TaskRow's field names: the worker binds them by name.
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
    w.task_id AS done_by
FROM pgsched.task_claim_many(%(lane)s, %(max_tasks)s, %(worker)s, %(lease)s) AS c
LEFT JOIN pgsched.completed_work AS w
    ON
        c.idempotency_key IS NOT NULL
        AND c.tenant_id = w.tenant_id
        AND c.task_type = w.task_type
        AND c.idempotency_key = w.idempotency_key;

-- name: lane_next_due
SELECT
    next_due,
    db_now
FROM pgsched.lane_next_due(%(lane)s);

-- name: task_finish_many
-- Binary arrays: text-encoding a flush of 500 outcomes was a tenth of the worker's time.
SELECT
    task_id,
    applied
FROM pgsched.task_finish_many(
    task_ids => %(task_ids)b::bigint[],
    lease_tokens => %(lease_tokens)b::uuid[],
    outcomes => %(outcomes)b::text[],
    errors => %(errors)b::text[],
    retry_delays => %(retry_delays)b::interval[]
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

-- name: schedule_recurring
SELECT pgsched.schedule_recurring(
    task_type => %(task_type)s,
    cron_expression => %(cron_expression)s,
    timezone => %(timezone)s,
    payload => %(payload)s,
    tenant_id => %(tenant_id)s,
    priority => %(priority)s,
    idempotency_key => %(idempotency_key)s,
    misfire_policy => %(misfire_policy)s,
    max_attempts => %(max_attempts)s,
    lane => %(lane)s,
    metadata => %(metadata)s,
    catch_up_limit => %(catch_up_limit)s,
    first_fire_at => %(first_fire_at)s,
    scope => %(scope)s,
    product => %(product)s
) AS schedule_id;

-- name: schedules_unarmed
SELECT
    id,
    cron_expression,
    timezone,
    misfire_policy::text AS misfire_policy,
    catch_up_limit,
    last_fire_at,
    armed_task_id,
    created_at
FROM pgsched.schedules_unarmed(%(max_rows)s);

-- name: schedule_for_task
SELECT
    s.id,
    s.cron_expression,
    s.timezone,
    s.misfire_policy::text AS misfire_policy,
    s.catch_up_limit,
    s.last_fire_at,
    s.armed_task_id,
    s.created_at
FROM pgsched.schedules AS s
WHERE s.armed_task_id = %(task_id)s AND s.enabled;

-- name: schedule_arm
SELECT pgsched.schedule_arm(
    %(schedule_id)s,
    %(expected_task_id)s,
    %(fire_at)s,
    %(missed)s::timestamptz[]
) AS task_id;

-- name: schedule_quarantine
SELECT pgsched.schedule_quarantine(%(schedule_id)s, %(reason)s);

-- name: task_promote_due
SELECT pgsched.task_promote_due(%(max_tasks)s, NULL, %(within)s) AS promoted;

-- name: task_wake_overdue
SELECT
    lane::text AS lane,
    overdue
FROM pgsched.task_wake_overdue(%(older_than)s);

-- name: lease_rescue_all
SELECT pgsched.lease_rescue_expired(NULL, %(max_tasks)s) AS rescued;

-- name: retention_prune
SELECT
    tasks,
    events,
    idempotency_keys,
    occurrences,
    ledger
FROM pgsched.retention_prune(%(keep)s, %(max_rows)s);

-- name: sweep_leader_try
SELECT pg_try_advisory_lock(%(key)s) AS leader;

-- name: history
SELECT
    task_id,
    schedule_id,
    tenant_id,
    task_type,
    attempt,
    scheduled_for,
    started_at,
    finished_at,
    extract(EPOCH FROM lateness)::float8 * 1000 AS lateness_ms,
    worker,
    outcome,
    detail
FROM pgsched.run_history
WHERE
    (%(task_type)s::text IS NULL OR task_type = %(task_type)s)
    AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
    AND (%(task_id)s::bigint IS NULL OR task_id = %(task_id)s)
    AND (%(since)s::timestamptz IS NULL OR started_at >= %(since)s)
    AND (%(until)s::timestamptz IS NULL OR started_at < %(until)s)
    AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s)
ORDER BY started_at DESC
LIMIT %(max_rows)s;

-- name: listen_recurring
LISTEN pgsched_recurring;

-- name: task_fan_out
SELECT pgsched.task_fan_out(%(task_id)s, %(lease_token)s) AS tenants;

-- name: work_record_done_many
SELECT
    task_id,
    recorded
FROM pgsched.work_record_done_many(
    task_ids => %(task_ids)s::bigint[],
    lease_tokens => %(lease_tokens)s::uuid[]
);

-- name: work_once
SELECT pgsched.work_once(%(tenant_id)s, %(task_type)s, %(key)s, %(task_id)s) AS first_time;

-- name: session_tenant_set
SELECT set_config('pgsched.tenant_id', %(tenant_id)s, TRUE);

-- name: tenant_add
SELECT pgsched.tenant_add(%(tenant_id)s, %(product)s, %(metadata)s) AS tenant_id;

-- name: tenant_set_active
SELECT pgsched.tenant_set_active(%(tenant_id)s, %(active)s) AS tenant_id;

-- name: tenant_list
SELECT
    tenant_id,
    product,
    active,
    metadata,
    created_at
FROM pgsched.tenants
ORDER BY product ASC, tenant_id ASC;
