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
        metadatas => %(metadatas)b::jsonb[],
        unique_fors => %(unique_fors)b::interval[],
        debounces => %(debounces)b::interval[],
        traceparents => %(traceparents)b::text[]
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
    product => %(product)s,
    unique_for => %(unique_for)s,
    debounce => %(debounce)s,
    traceparent => %(traceparent)s,
    retry_delays => %(retry_delays)s,
    depends_on => %(depends_on)s::bigint[],
    on_parent_failure => %(on_parent_failure)s,
    complete_by => %(complete_by)s::timestamptz,
    deadline_callback => %(deadline_callback)s
) AS s;

-- name: task_cancel
-- outcome: CANCELLED, CANCEL_REQUESTED (running: its worker stops it) or FAN_OUT_CANCELLED.
SELECT
    outcome,
    detail
FROM pgsched.cancel_task_ex(
    task_id => %(task_id)s, reason => %(reason)s, actor => %(actor)s
);

-- name: task_cancel_where
SELECT
    cancelled,
    cancel_requested
FROM pgsched.cancel_tasks(
    task_type => %(task_type)s,
    tenant_id => %(tenant_id)s,
    idempotency_key => %(idempotency_key)s,
    due_from => %(due_from)s,
    due_until => %(due_until)s,
    reason => %(reason)s,
    actor => %(actor)s,
    dry_run => %(dry_run)s
);

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
-- Looked up in the ledger's key one claimed row at a time (a subquery: the key makes it
-- one row at most). As a join it was planned for the 1,000 rows a set-returning function
-- is assumed to return, so each claim hashed the whole ledger, which grows with keyed work
-- until retention prunes it.
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
-- as_of: NULL for a worker (the database's now); pgsched.testing's drain moves it.
-- not_before: the worker's floor for the lane (NULL: none), pgsched/worker/claim_floor.py.
FROM pgsched.task_claim_many(%(lane)s, %(max_tasks)s, %(worker)s, %(lease)s, %(as_of)s, %(not_before)s) AS c;

-- name: task_claim_ids
-- The ids a worker popped from the Redis hot tier, claimed if still QUEUED and due: the
-- same columns as task_claim_many (TaskRow's fields, bound by name), and the same ledger.
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
FROM pgsched.task_claim_ids(%(lane)s, %(ids)s::bigint[], %(worker)s, %(lease)s) AS c;

-- name: hot_tier_window
-- The ids the Redis mirror of a lane holds, in claim order; db_now is the clock they were
-- judged by.
SELECT
    id,
    priority,
    next_run_at,
    db_now
FROM pgsched.hot_tier_window(%(lane)s, %(max_tasks)s);

-- name: system_identifier
SELECT pgsched.system_identifier() AS system_identifier;

-- name: lane_next_due
SELECT
    next_due,
    db_now
FROM pgsched.lane_next_due(%(lane)s, %(not_before)s);

-- name: lane_next_due_distributed
-- lane_next_due on a distributed database: one read across the shards (Citus runs no
-- parameterized SQL function over a distributed table).
SELECT
    min(tk.next_run_at) AS next_due,
    clock_timestamp() AS db_now
FROM pgsched.tasks_hot AS tk
WHERE tk.status = 'QUEUED' AND tk.lane = %(lane)s::pgsched.task_lane;

-- name: task_claim_tenant
-- Distributed mode's claim (pgsched/worker/tenant_rotation.py): its columns are those of
-- task_claim_many above, done_by included, made by the function on the tenant's shard.
SELECT *
FROM pgsched.task_claim_tenant(
    %(tenant)s, %(lane)s, %(max_tasks)s, %(worker)s, %(lease)s
);

-- name: lane_due_tenants
SELECT tenant_id
FROM pgsched.lane_due_tenants(%(lane)s, %(max_tenants)s) AS tenant_id;

-- name: lane_due_tenants_by_shard
SELECT tenant_id
FROM pgsched.lane_due_tenants_by_shard(%(lane)s, %(max_tenants)s) AS tenant_id;

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
    retry_delays => %(retry_delays)b::interval[],
    results => %(results)b::text[]::jsonb[],
    tenant => %(tenant)s::text
);

-- name: task_progress_set_many
-- The latest ctx.progress of a lane's tasks, at most once a second (pgsched/worker/progress.py).
SELECT pgsched.task_progress_set_many(
    %(task_ids)s::bigint[], %(fractions)s::real[], %(notes)s::text[]
) AS written;

-- name: task_heartbeat_many
SELECT task_id
FROM pgsched.task_heartbeat_many(
    %(task_ids)s::bigint[], %(lease_tokens)s::uuid[], %(lease)s, NULL, %(tenant)s::text
) AS task_id;

-- name: task_cancel_requested
SELECT task_id
FROM pgsched.task_cancel_requested(%(task_ids)s::bigint[]) AS task_id;

-- name: lease_rescue_expired
-- A lane's rescue from the worker's floor (NULL: none); swept_at is the time the function
-- compared the leases with (the transaction's start), from which the next floor is made.
SELECT
    pgsched.lease_rescue_expired(
        %(lane)s, %(max_tasks)s, NULL, %(not_before)s
    ) AS rescued,
    now() AS swept_at;

-- name: dead_list
SELECT
    id,
    tenant_id,
    task_type,
    attempts,
    max_attempts,
    failed_at,
    last_error,
    holding_back
FROM pgsched.dead_page(max_rows => %(max_rows)s);

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
    product => %(product)s,
    complete_within => %(complete_within)s::interval,
    deadline_callback => %(deadline_callback)s
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
    %(missed)s::timestamptz[],
    %(now)s
) AS task_id;

-- name: schedule_quarantine
SELECT pgsched.schedule_quarantine(%(schedule_id)s, %(reason)s, %(now)s);

-- name: task_promote_due
SELECT pgsched.task_promote_due(%(max_tasks)s, %(now)s, %(within)s) AS promoted;

-- name: task_wake_overdue
SELECT
    lane::text AS lane,
    overdue
FROM pgsched.task_wake_overdue(%(older_than)s, %(now)s);

-- name: deadline_sweep
SELECT
    task_id,
    tenant_id,
    task_type,
    status::text AS status,
    complete_by,
    outcome,
    schedule_id,
    callback_task_id
FROM pgsched.deadline_sweep(%(max_tasks)s, %(now)s);

-- name: deadline_misses_recent
-- The misses whose deadline fell in the last `within` (tasks_deadline_missed_idx), newest
-- first, with the total.
SELECT
    task_id,
    tenant_id,
    task_type,
    complete_by,
    status::text AS status,
    schedule_id,
    count(*) OVER () AS total
FROM pgsched.deadline_misses
WHERE complete_by >= now() - %(within)s::interval
ORDER BY complete_by DESC
LIMIT %(max_rows)s;

-- name: lease_rescue_all
SELECT pgsched.lease_rescue_expired(NULL, %(max_tasks)s, %(now)s) AS rescued;

-- name: retention_prune
-- Events are not deleted here (the function's `events` column is always 0): they go with
-- their partition (partitions_maintain), and so do finished tasks, except the archive's
-- and the default partition's (finished_partitions_maintain).
SELECT
    tasks,
    idempotency_keys,
    occurrences,
    ledger,
    dependencies,
    result_waiters
FROM pgsched.retention_prune(%(keep)s, %(max_rows)s, %(now)s);

-- name: finished_partitions_maintain
SELECT
    partition_name,
    action,
    task_rows
FROM pgsched.finished_partitions_maintain(%(ahead)s, %(keep)s, %(now)s, %(lock_wait)s);

-- name: partitions_maintain
SELECT
    partition_name,
    action,
    event_rows
FROM pgsched.partitions_maintain(%(ahead)s, %(keep)s, %(now)s, %(lock_wait)s);

-- name: database_now
-- The database's clock: every due, misfire and lease decision is judged by it, never by
-- the host's (clock_timestamp, not now(): the caller may be inside a transaction).
SELECT clock_timestamp() AS now;

-- name: citus_installed
SELECT exists(
    SELECT 1 FROM pg_catalog.pg_extension
    WHERE extname = 'citus'
) AS installed;

-- name: citus_worker_nodes
SELECT count(*) AS nodes FROM pg_catalog.citus_get_active_worker_nodes();

-- name: tables_distribute
SELECT pgsched.distribute() AS outcome;

-- name: database_is_distributed
SELECT pgsched.is_distributed() AS distributed;

-- name: schema_migrations_present
SELECT to_regclass('pgsched.schema_migrations') IS NOT NULL AS present;

-- name: schema_migrations_applied
SELECT
    version,
    name,
    checksum
FROM pgsched.schema_migrations
ORDER BY version;

-- name: sweep_leader_acquire
SELECT
    acquired,
    generation,
    leader,
    expires_at,
    expires_in_s
FROM pgsched.sweep_leader_acquire(%(holder)s, %(lease)s);

-- name: sweep_leader_renew
SELECT pgsched.sweep_leader_renew(%(holder)s, %(generation)s, %(lease)s) AS expires_at;

-- name: sweep_leader_release
SELECT pgsched.sweep_leader_release(%(holder)s, %(generation)s) AS released;

-- name: sweep_leader_fence
SELECT pgsched.sweep_leader_fence(%(holder)s, %(generation)s);

-- name: history
-- then_due / then_attempt: where the run left the task (a retry's new due time; an attempt
-- given back, as a release does, shows as then_attempt below attempt).
SELECT
    h.task_id,
    h.schedule_id,
    h.tenant_id,
    h.task_type,
    h.attempt,
    h.scheduled_for,
    h.started_at,
    h.finished_at,
    -- In numeric, then to float8: exact to the microsecond (0.89, not 0.8899999999999999).
    round(extract(EPOCH FROM h.lateness) * 1000, 3)::float8 AS lateness_ms,
    h.worker,
    h.outcome,
    h.detail,
    f.scheduled_for AS then_due,
    f.attempt AS then_attempt
FROM pgsched.run_history AS h
LEFT JOIN LATERAL (
    SELECT
        e.scheduled_for,
        e.attempt
    FROM pgsched.task_events AS e
    WHERE
        e.task_id = h.task_id
        AND e.tenant_id = h.tenant_id
        AND e.from_status = 'PROCESSING'
        AND e.occurred_at = h.finished_at
    ORDER BY e.id
    LIMIT 1
) AS f ON h.finished_at IS NOT NULL
WHERE
    (%(task_type)s::text IS NULL OR h.task_type = %(task_type)s)
    AND (%(tenant_id)s::text IS NULL OR h.tenant_id = %(tenant_id)s)
    AND (%(task_id)s::bigint IS NULL OR h.task_id = %(task_id)s)
    AND (%(since)s::timestamptz IS NULL OR h.started_at >= %(since)s)
    AND (%(until)s::timestamptz IS NULL OR h.started_at < %(until)s)
    AND (%(outcome)s::text IS NULL OR h.outcome = %(outcome)s)
ORDER BY h.started_at DESC
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

-- name: task_parent_results
-- ctx.parent_results: the task's parents (depends_on) with their step names and results.
SELECT
    parent_id,
    step,
    status::text AS status,
    result
FROM pgsched.task_parent_results(%(task_id)s);

-- name: task_outcome
-- App.result: where the task stands; with a token, the caller waits (NOTIFY pgsched_result).
SELECT
    status::text AS status,
    result,
    reason
FROM pgsched.task_outcome(%(task_id)s, %(wait_token)s);

-- name: task_schedule_workflow
SELECT
    step,
    task_id,
    created
FROM pgsched.schedule_workflow(
    steps => %(steps)s, workflow_key => %(workflow_key)s, tenant_id => %(tenant_id)s
);

-- name: task_schedule_batch
SELECT
    callback_id,
    member_ids
FROM pgsched.schedule_batch(
    task_types => %(task_types)s::text[],
    payloads => %(payloads)s::jsonb[],
    on_complete_type => %(on_complete_type)s,
    on_complete_payload => %(on_complete_payload)s,
    tenant_id => %(tenant_id)s,
    priorities => %(priorities)s::integer[],
    max_attempts => %(max_attempts)s::bigint[],
    lanes => %(lanes)s::text[],
    metadatas => %(metadatas)s::jsonb[],
    on_complete_priority => %(on_complete_priority)s,
    on_complete_max_attempts => %(on_complete_max_attempts)s,
    on_complete_lane => %(on_complete_lane)s
);

-- name: batch_status
-- ctx.batch: a batch's members by outcome, by its callback's id.
SELECT
    total,
    completed,
    dead,
    cancelled,
    unfinished,
    member_ids
FROM pgsched.batch_status(%(task_id)s);

-- name: task_result_listen
LISTEN pgsched_result;

-- name: task_result_unwait
SELECT pgsched.task_result_unwait(%(wait_token)s);

-- name: task_graph
-- pgsched show: the tasks a task waits for and that wait for it.
SELECT
    relation,
    id,
    task_type,
    status::text AS status,
    met,
    step
FROM pgsched.task_graph(%(task_id)s);

-- name: transaction_tenant_set
-- Local to the caller's transaction (is_local TRUE, as SET LOCAL): nothing outlives it on a
-- pooled server session.
SELECT set_config('pgsched.tenant_id', %(tenant_id)s, TRUE);

-- name: tenant_add
SELECT pgsched.tenant_add(%(tenant_id)s, %(product)s, %(metadata)s) AS tenant_id;

-- name: tenant_set_active
SELECT pgsched.tenant_set_active(%(tenant_id)s, %(active)s) AS tenant_id;

-- name: limit_set
SELECT
    scope,
    key,
    max_processing,
    rate
FROM pgsched.limit_set(%(scope)s, %(key)s, %(max_processing)s, %(rate)s, %(per)s);

-- name: limit_clear
SELECT pgsched.limit_clear(%(scope)s, %(key)s) AS cleared;

-- name: limit_list
SELECT
    scope,
    key,
    max_processing,
    rate,
    per,
    processing,
    updated_at
FROM pgsched.limit_list();

-- name: lane_set_fairness
SELECT pgsched.lane_set_fairness(%(lane)s, %(fair)s) AS fair;

-- name: lane_fairness
SELECT
    l.lane::text AS lane,
    coalesce(array_position(s.fairness_off_lanes, l.lane), 0) = 0 AS fair
FROM pgsched.settings AS s
CROSS JOIN unnest(enum_range(NULL::pgsched.task_lane)) AS l (lane)
ORDER BY l.lane;

-- name: tenant_list
SELECT
    tenant_id,
    product,
    active,
    metadata,
    created_at
FROM pgsched.tenants
ORDER BY product ASC, tenant_id ASC;

-- Operator commands: show, schedules, dead list, status flags, doctor.

-- name: task_show
SELECT
    t.id,
    t.tenant_id,
    t.task_type,
    t.status::text AS status,
    t.lane::text AS lane,
    t.priority,
    t.scope,
    t.product,
    t.schedule_type::text AS schedule_type,
    t.schedule_id,
    t.next_run_at,
    t.attempts,
    t.max_attempts,
    t.last_run_at,
    t.last_error,
    t.status_reason,
    t.idempotency_key,
    t.locked_by,
    t.lease_expires_at,
    t.parent_id,
    t.created_at,
    t.updated_at,
    t.waiting_for,
    t.on_parent_failure,
    t.payload,
    t.metadata,
    t.result,
    p.fraction AS progress,
    p.note AS progress_note,
    p.updated_at AS progress_at
FROM pgsched.tasks AS t
LEFT JOIN pgsched.task_progress AS p ON t.id = p.task_id
WHERE t.id = %(task_id)s;

-- name: task_exists
SELECT exists(
    SELECT 1 FROM pgsched.tasks AS t
    WHERE t.id = %(task_id)s
) AS found;

-- name: task_timeline
-- pgsched.task_timeline's "scheduled" row reads the task's due time now, a retry's after a
-- retry: the first event records the due time the task had then (scheduled_for), which is
-- when it was first due. A task with no event yet (or none left after retention) has only
-- its own.
SELECT
    tl.occurred_at,
    tl.what,
    tl.from_status::text AS from_status,
    tl.attempt,
    tl.worker,
    CASE
        WHEN tl.event_id = 0 THEN format('due %%s', coalesce(first_event.scheduled_for, t.next_run_at))
        ELSE tl.detail
    END AS detail
FROM pgsched.task_timeline AS tl
INNER JOIN pgsched.tasks AS t ON tl.task_id = t.id
LEFT JOIN LATERAL (
    SELECT e.scheduled_for
    FROM pgsched.task_events AS e
    WHERE e.task_id = t.id
    ORDER BY e.id ASC
    LIMIT 1
) AS first_event ON tl.event_id = 0
WHERE tl.task_id = %(task_id)s
ORDER BY tl.occurred_at ASC, tl.event_id ASC;

-- name: schedule_list
SELECT
    s.id,
    s.tenant_id,
    s.task_type,
    s.cron_expression,
    s.timezone,
    s.lane::text AS lane,
    s.misfire_policy::text AS misfire_policy,
    s.idempotency_key,
    s.enabled,
    s.quarantine_reason,
    s.last_fire_at,
    s.armed_task_id,
    armed.next_run_at AS next_fire_at,
    armed.status::text AS armed_status,
    -- False: nothing waits to fire (until the recurring sweep arms it).
    pgsched.occurrence_is_live(s.armed_task_id) AS armed_live
FROM pgsched.schedules AS s
LEFT JOIN pgsched.tasks AS armed ON s.armed_task_id = armed.id
WHERE
    (%(tenant_id)s::text IS NULL OR s.tenant_id = %(tenant_id)s)
    AND (%(task_type)s::text IS NULL OR s.task_type = %(task_type)s)
ORDER BY s.id;

-- name: schedule_show
SELECT
    s.id,
    s.tenant_id,
    s.task_type,
    s.cron_expression,
    s.timezone,
    s.scope,
    s.product,
    s.priority,
    s.lane::text AS lane,
    s.max_attempts,
    s.misfire_policy::text AS misfire_policy,
    s.catch_up_limit,
    s.idempotency_key,
    s.enabled,
    s.quarantine_reason,
    s.last_fire_at,
    s.armed_task_id,
    armed.next_run_at AS next_fire_at,
    armed.status::text AS armed_status,
    s.created_at,
    s.updated_at,
    s.payload,
    s.metadata
FROM pgsched.schedules AS s
LEFT JOIN pgsched.tasks AS armed ON s.armed_task_id = armed.id
WHERE s.id = %(schedule_id)s;

-- name: schedule_event_list
SELECT
    occurred_at,
    what,
    fire_at,
    detail
FROM pgsched.schedule_events
WHERE schedule_id = %(schedule_id)s
ORDER BY id DESC
LIMIT %(max_rows)s;

-- name: schedule_same
-- A schedule the new one would duplicate: the same key for its owner, or (without a key)
-- the same work on the same clock: type, cron, zone, payload and scope.
SELECT s.id
FROM pgsched.schedules AS s
WHERE
    s.tenant_id = %(owner)s
    AND (
        (%(idempotency_key)s::text IS NOT NULL AND s.idempotency_key = %(idempotency_key)s)
        OR (
            %(idempotency_key)s::text IS NULL
            AND s.task_type = %(task_type)s
            AND s.cron_expression = btrim(%(cron_expression)s)
            AND s.timezone = %(timezone)s
            AND s.payload = %(payload)s::jsonb
            AND s.scope = %(scope)s
            AND s.product IS NOT DISTINCT FROM %(product)s
        )
    )
ORDER BY s.id
LIMIT 1;

-- name: schedule_pause
SELECT pgsched.schedule_pause(%(schedule_id)s, %(reason)s) AS schedule_id;

-- name: schedule_resume
SELECT pgsched.schedule_resume(%(schedule_id)s) AS schedule_id;

-- name: schedule_delete
SELECT pgsched.schedule_delete(%(schedule_id)s, %(reason)s) AS schedule_id;

-- name: dead_page
-- FAILED tasks live in the done partition; dead_page reads them in steps (distributed
-- mode too), lane_dead is their view.
SELECT
    id,
    tenant_id,
    task_type,
    attempts,
    max_attempts,
    failed_at,
    last_error,
    holding_back,
    total
FROM pgsched.dead_page(
    %(task_type)s, %(tenant_id)s, %(since)s::timestamptz, %(max_rows)s, %(skip_rows)s
);

-- name: dead_count
-- From the tasks, not lane_dead: distributed mode plans no statement naming that view.
SELECT count(*) AS total
FROM pgsched.tasks
WHERE
    status = 'FAILED'
    AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s)
    AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
    AND (%(since)s::timestamptz IS NULL OR updated_at >= %(since)s);

-- name: sweep_leader_held
-- The lease row while its lease runs: a leader that died is gone once its lease expires.
SELECT
    holder,
    generation,
    acquired_at,
    renewed_at,
    expires_at,
    extract(EPOCH FROM expires_at - now())::float8 AS expires_in_s
FROM pgsched.sweep_leader
WHERE expires_at > now();

-- name: overdue_pending
-- Cold work already due: only the promotion sweep moves it where workers claim.
SELECT
    count(*) AS overdue,
    extract(EPOCH FROM now() - min(next_run_at))::float8 AS oldest_s
FROM pgsched.tasks
WHERE status = 'PENDING' AND next_run_at <= now() AND waiting_for IS NULL;

-- name: pending_coming_due
-- Cold work not yet due that the promotion sweep should be moving to the hot partition
-- now: due within the hot window.
SELECT
    count(*) AS coming_due,
    extract(EPOCH FROM min(t.next_run_at) - now())::float8 AS first_in_s
FROM pgsched.tasks AS t
WHERE
    t.status = 'PENDING'
    AND t.waiting_for IS NULL
    AND t.next_run_at > now()
    AND t.next_run_at <= (SELECT h.hot_until FROM pgsched.tier_horizons() AS h);

-- name: schedule_unarmed_list
-- Active schedules with no occurrence waiting or running: only the recurring sweep arms them.
SELECT
    s.id,
    s.tenant_id,
    s.task_type,
    s.cron_expression,
    s.timezone
FROM pgsched.schedules_unarmed(%(max_rows)s) AS s;

-- name: lease_expired
SELECT
    id,
    tenant_id,
    task_type,
    lane::text AS lane,
    locked_by,
    lease_expires_at,
    extract(EPOCH FROM now() - lease_expires_at)::float8 AS expired_s
FROM pgsched.tasks
WHERE status = 'PROCESSING' AND lease_expires_at < now()
ORDER BY lease_expires_at
LIMIT %(max_rows)s;

-- name: schedule_quarantined
SELECT
    id,
    tenant_id,
    task_type,
    cron_expression,
    quarantine_reason,
    updated_at
FROM pgsched.schedules
WHERE NOT enabled AND quarantine_reason IS NOT NULL
ORDER BY id;

-- name: doctor_roles
SELECT
    current_user AS login,
    r.rolsuper AS superuser,
    array(
        SELECT g.rolname::text
        FROM pg_catalog.pg_roles AS g
        WHERE
            g.rolname IN ('pgsched_producer', 'pgsched_worker', 'pgsched_admin')
            AND pg_catalog.pg_has_role(current_user, g.oid, 'MEMBER')
        ORDER BY g.rolname
    ) AS member_of,
    array(
        SELECT g.rolname::text
        FROM pg_catalog.pg_roles AS g
        WHERE g.rolname IN ('pgsched_producer', 'pgsched_worker', 'pgsched_admin')
        ORDER BY g.rolname
    ) AS roles_present
FROM pg_catalog.pg_roles AS r
WHERE r.rolname = current_user;

-- name: doctor_hot_tables
-- The tables every claim and outcome rewrites: their autovacuum settings and dead tuples
-- (of task_events, the partition of the current period: the parent holds no rows).
SELECT
    c.relname::text AS relname,
    coalesce(array_to_string(c.reloptions, ','), '') AS reloptions,
    coalesce(st.n_live_tup, 0) AS live,
    coalesce(st.n_dead_tup, 0) AS dead,
    st.last_autovacuum,
    current_setting('autovacuum')::boolean AS autovacuum_on
FROM pg_catalog.pg_class AS c
INNER JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid
LEFT JOIN pg_catalog.pg_stat_all_tables AS st ON c.oid = st.relid
WHERE
    n.nspname = 'pgsched'
    AND (
        c.relname = 'tasks_hot'
        OR c.relname = (
            SELECT p.partition_name FROM pgsched.event_partitions() AS p
            WHERE
                NOT p.is_default AND now() < p.upper_bound
                AND (p.lower_bound IS NULL OR p.lower_bound <= now())
        )
    )
ORDER BY c.relname;

-- name: doctor_event_partitions
SELECT
    period,
    current_covered,
    periods_ahead,
    default_rows
FROM pgsched.event_partitions_status();

-- name: doctor_finished_partitions
SELECT
    period,
    current_covered,
    periods_ahead,
    default_rows
FROM pgsched.finished_partitions_status();

-- name: horizon_holders
-- What keeps VACUUM from removing the rows that died after it, the oldest pinned xmin
-- first: sessions holding a snapshot or a transaction id (a read-committed transaction that
-- has written nothing holds neither between statements, however long it stays open),
-- standbys' hot_standby_feedback, physical replication slots. A logical slot's catalog_xmin
-- holds back only the system catalogs, not pgsched's tables.
SELECT
    h.kind,
    h.pid,
    h.name,
    h.username,
    h.state,
    h.age_s,
    h.xid_age,
    h.query
FROM (
    SELECT
        'session' AS kind,
        a.pid,
        a.application_name AS name,
        a.usename::text AS username,
        a.state,
        extract(EPOCH FROM now() - a.xact_start)::float8 AS age_s,
        greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS xid_age,
        left(a.query, 80) AS query
    FROM pg_catalog.pg_stat_activity AS a
    WHERE
        (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
        AND a.pid <> pg_catalog.pg_backend_pid()
        AND a.backend_type = 'client backend'
        AND a.xact_start IS NOT NULL
    UNION ALL
    SELECT
        'standby' AS kind,
        r.pid,
        r.application_name AS name,
        r.usename::text AS username,
        r.state,
        NULL::float8 AS age_s,
        age(r.backend_xmin)::bigint AS xid_age,
        NULL AS query
    FROM pg_catalog.pg_stat_replication AS r
    WHERE r.backend_xmin IS NOT NULL
    UNION ALL
    SELECT
        'replication slot' AS kind,
        s.active_pid AS pid,
        s.slot_name::text AS name,
        NULL AS username,
        CASE WHEN s.active THEN 'active' ELSE 'inactive' END AS state,
        NULL::float8 AS age_s,
        age(s.xmin)::bigint AS xid_age,
        NULL AS query
    FROM pg_catalog.pg_replication_slots AS s
    WHERE s.xmin IS NOT NULL
) AS h
ORDER BY h.xid_age DESC NULLS LAST, h.age_s DESC NULLS LAST
LIMIT 10;

-- name: doctor_db_clock
SELECT clock_timestamp() AS db_now;

-- name: doctor_replication
-- The standbys streaming from this server, how many a commit waits for, and whether
-- commits wait at all: what a failover to one of them can lose.
SELECT
    pg_catalog.pg_is_in_recovery() AS in_recovery,
    pg_catalog.current_setting('synchronous_commit') AS synchronous_commit,
    pg_catalog.current_setting('synchronous_standby_names') AS synchronous_standby_names,
    (SELECT count(*) FROM pg_catalog.pg_stat_replication) AS standbys,
    (
        SELECT count(*) FROM pg_catalog.pg_stat_replication
        WHERE sync_state IN ('sync', 'quorum')
    ) AS synchronous_standbys;

-- name: queue_depth_lanes
-- The sweeper leader's gauges, per lane: QUEUED work already due and how long the oldest has
-- waited. One range probe of the claim index per (lane, priority) reads the due entries
-- only, never the work due later in the day. Priorities 0-10: tasks_priority_range.
SELECT
    l.lane::text AS lane,
    coalesce(sum(d.due), 0)::bigint AS due,
    coalesce(extract(EPOCH FROM now() - min(d.oldest)), 0)::float8 AS oldest_due_s
FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l (lane)
CROSS JOIN generate_series(0, 10) AS p (priority)
LEFT JOIN LATERAL (  -- noqa: ST05
    SELECT
        count(*) AS due,
        min(t.next_run_at) AS oldest
    FROM pgsched.tasks AS t
    WHERE
        t.status = 'QUEUED'
        AND t.lane = l.lane
        AND t.priority = p.priority
        AND t.next_run_at <= now()
) AS d ON TRUE
GROUP BY l.lane
ORDER BY l.lane;

-- name: queue_pending_tiers
-- Scheduled and not yet due, per tier. IMMEDIATE and HOT are counted in the hot partition
-- (small by design). COLD is the planner's row estimate of the cold partition, kept
-- current by autovacuum's ANALYZE: an exact count would read every cold row, and the cold
-- tier exists so that nothing routine does. Never analyzed, the estimate is -1: the caller
-- then counts (queue_cold_count). The horizon is one value (an InitPlan), read once.
SELECT
    count(*) FILTER (WHERE t.next_run_at < z.immediate_until) AS immediate,
    count(*) FILTER (WHERE t.next_run_at >= z.immediate_until) AS hot,
    (
        SELECT c.reltuples::bigint
        FROM pg_catalog.pg_class AS c
        WHERE c.oid = 'pgsched.tasks_cold'::regclass
    ) AS cold_estimate
FROM pgsched.tasks AS t
CROSS JOIN (  -- noqa: ST05
    SELECT (SELECT h.immediate_until FROM pgsched.tier_horizons() AS h) AS immediate_until
) AS z
WHERE t.status = 'QUEUED' AND t.next_run_at > now();

-- name: workflow_events_last
-- Where the sweep leader's count of workflow transitions starts: the newest event id
-- handed out (events' ids are read by a BRIN index, which cannot give a maximum).
SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END AS last_id
FROM pgsched.task_events_id_seq AS s;

-- name: workflow_events_since
-- The workflow transitions written since event `after` (the sweep leader's last read):
-- releases, holds and cascades, each an event naming the parent (task_dependencies_settle).
SELECT
    coalesce(max(e.id), %(after)s) AS last_id,
    count(*) FILTER (WHERE e.detail LIKE 'released: parent task %%') AS released,
    count(*) FILTER (WHERE e.detail LIKE 'held: parent task %%') AS held,
    count(*) FILTER (WHERE e.detail LIKE 'cancelled: parent task %%') AS cascaded
FROM pgsched.task_events AS e
WHERE e.id > %(after)s;

-- name: queue_cold_count
SELECT count(*) AS cold
FROM pgsched.tasks
WHERE status = 'PENDING';

-- name: hot_tier_lanes_usable
-- The lanes whose claims the Redis hot tier can serve (claims in plain priority order:
-- fairness off, no limits); the others claim from Postgres alone.
SELECT array_agg(l.lane::text) FILTER (WHERE pgsched.hot_tier_lane_usable(l.lane)) AS lanes
FROM unnest(enum_range(NULL::pgsched.task_lane)) AS l (lane);

-- name: hot_tier_due_by_ids
-- Of ids just committed (scheduled, retried, released), those the Redis mirror holds.
SELECT
    id,
    lane,
    priority,
    next_run_at
FROM pgsched.hot_tier_due_by_ids(%(ids)s::bigint[]);
