-- Named statements of the web dashboard (pgsched/dashboard). Loaded by pgsched/queries.py
-- like sql/queries.sql. Reads touch the hot tier (small by design), one task by primary
-- key, the last hour of finished work, or (task search) an index range of each big tier;
-- writes call the same SQL functions as the CLI, with the acting user written into the
-- reason that the transition trigger records.

-- name: dashboard_lanes_live
-- The hot tier only (QUEUED and PROCESSING): what is due and running now.
SELECT
    h.lane::text AS lane,
    count(*) FILTER (WHERE h.status = 'QUEUED' AND h.next_run_at <= now()) AS due,
    count(*) FILTER (WHERE h.status = 'QUEUED') AS queued,
    count(*) FILTER (WHERE h.status = 'PROCESSING') AS processing,
    extract(
        EPOCH FROM now() - min(h.next_run_at) FILTER (WHERE h.status = 'QUEUED' AND h.next_run_at <= now())
    )::float8 AS oldest_due_s
FROM pgsched.tasks AS h
WHERE h.status IN ('QUEUED', 'PROCESSING')
GROUP BY h.lane;

-- name: dashboard_lanes_recent
-- Work finished in the last hour, per lane: COMPLETED through tasks_done_retention_idx
-- (updated_at), FAILED through the DEAD lane's own index. Lateness is the last attempt's
-- start (last_run_at) minus when it was due (next_run_at).
WITH finished AS (
    SELECT
        d.lane,
        d.status,
        d.updated_at,
        date_part('epoch', d.last_run_at - d.next_run_at) AS lateness_s
    FROM pgsched.tasks AS d
    WHERE
        d.status = 'COMPLETED'
        AND d.updated_at > now() - interval '60 minutes'
    UNION ALL
    SELECT
        d.lane,
        d.status,
        d.updated_at,
        NULL::float8 AS lateness_s
    FROM pgsched.tasks AS d
    WHERE
        d.status = 'FAILED'
        AND d.updated_at > now() - interval '60 minutes'
)

SELECT
    f.lane::text AS lane,
    count(*) FILTER (
        WHERE f.status = 'COMPLETED' AND f.updated_at > now() - interval '5 minutes'
    ) AS completed_5m,
    count(*) FILTER (WHERE f.status = 'COMPLETED') AS completed_60m,
    count(*) FILTER (
        WHERE f.status = 'FAILED' AND f.updated_at > now() - interval '5 minutes'
    ) AS failed_5m,
    count(*) FILTER (WHERE f.status = 'FAILED') AS failed_60m,
    -- Both percentiles from one sort of the lane's lateness.
    percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY f.lateness_s) AS lateness_s
FROM finished AS f
GROUP BY f.lane;

-- name: dashboard_throughput
-- The overview's charts, one row a minute over the last hour, oldest first: completions,
-- the p99 lateness of those completions, and how many tasks were due and not yet started
-- at the end of the minute, per lane. The hour's finished work is read once (COMPLETED through
-- tasks_finished_updated_idx, FAILED from the DEAD lane), with what is due or running
-- now from the hot tier. Each row is counted per minute first (a hash of at most 60
-- groups), then laid on the 60 minutes: joining each row to its minute sorted all of them.
-- Waiting is a running sum: +1 the minute a task fell due, -1 the minute its last attempt
-- started (both clamped to the hour's first minute); a task retried, or finished more than
-- an hour ago, counts from its last due time only.
WITH rows_of_the_hour AS (
    SELECT
        d.lane,
        d.status,
        d.updated_at,
        d.next_run_at,
        d.last_run_at
    FROM pgsched.tasks AS d
    WHERE
        d.status = 'COMPLETED'
        AND d.updated_at > now() - interval '60 minutes'
    UNION ALL
    SELECT
        d.lane,
        d.status,
        d.updated_at,
        d.next_run_at,
        d.last_run_at
    FROM pgsched.tasks AS d
    WHERE
        d.status = 'FAILED'
        AND d.updated_at > now() - interval '60 minutes'
    UNION ALL
    SELECT
        h.lane,
        h.status,
        NULL::timestamptz AS updated_at,
        h.next_run_at,
        CASE WHEN h.status = 'PROCESSING' THEN h.last_run_at END AS last_run_at
    FROM pgsched.tasks AS h
    WHERE
        h.status IN ('QUEUED', 'PROCESSING')
        AND h.next_run_at <= now()
),

bounds AS (
    SELECT date_trunc('minute', now()) - interval '59 minutes' AS first_minute
),

completed AS (
    SELECT
        date_bin('1 minute', r.updated_at, '2000-01-01') AS minute,
        count(*) AS completed,
        percentile_cont(0.99) WITHIN GROUP (
            ORDER BY date_part('epoch', r.last_run_at - r.next_run_at)
        ) AS lateness_p99_s
    FROM rows_of_the_hour AS r
    WHERE r.status = 'COMPLETED'
    GROUP BY date_bin('1 minute', r.updated_at, '2000-01-01')
),

steps AS (
    SELECT
        r.lane,
        greatest(date_bin('1 minute', r.next_run_at, '2000-01-01'), b.first_minute) AS minute,
        1 AS delta
    FROM rows_of_the_hour AS r CROSS JOIN bounds AS b
    UNION ALL
    SELECT
        r.lane,
        greatest(date_bin('1 minute', r.last_run_at, '2000-01-01'), b.first_minute) AS minute,
        -1 AS delta
    FROM rows_of_the_hour AS r CROSS JOIN bounds AS b
    WHERE r.last_run_at IS NOT NULL AND r.last_run_at >= r.next_run_at
),

per_minute_steps AS (
    SELECT
        s.minute,
        sum(s.delta) FILTER (WHERE s.lane = 'HIGH') AS high,
        sum(s.delta) FILTER (WHERE s.lane = 'NORMAL') AS normal,
        sum(s.delta) FILTER (WHERE s.lane = 'LOW') AS low,
        sum(s.delta) FILTER (WHERE s.lane = 'BATCH') AS batch
    FROM steps AS s
    GROUP BY s.minute
)

SELECT
    m.minute,
    coalesce(c.completed, 0) AS completed,
    c.lateness_p99_s,
    greatest(sum(coalesce(w.high, 0)) OVER (ORDER BY m.minute), 0)::bigint AS waiting_high,
    greatest(sum(coalesce(w.normal, 0)) OVER (ORDER BY m.minute), 0)::bigint AS waiting_normal,
    greatest(sum(coalesce(w.low, 0)) OVER (ORDER BY m.minute), 0)::bigint AS waiting_low,
    greatest(sum(coalesce(w.batch, 0)) OVER (ORDER BY m.minute), 0)::bigint AS waiting_batch
FROM
    generate_series(
        date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()), interval '1 minute'
    ) AS m (minute)
LEFT JOIN completed AS c ON m.minute = c.minute
LEFT JOIN per_minute_steps AS w ON m.minute = w.minute
ORDER BY m.minute;

-- name: dashboard_tiers
-- The big tiers' sizes from the planner's statistics (rows per page at the last ANALYZE
-- times the pages now, as the planner estimates them): an exact count of the cold tier
-- reads millions of rows. NULL when a tier was never analyzed.
SELECT
    sum(e.estimate) FILTER (WHERE e.relname = 'tasks_cold')::bigint AS cold_estimate,
    sum(e.estimate) FILTER (WHERE e.relname <> 'tasks_cold')::bigint AS finished_estimate
FROM (
    SELECT
        c.relname,
        CASE
            WHEN c.reltuples < 0 THEN NULL
            WHEN c.relpages = 0 THEN c.reltuples
            ELSE
                c.reltuples / c.relpages
                * (pg_relation_size(c.oid) / current_setting('block_size')::int)
        END AS estimate
    FROM pg_class AS c
    WHERE
        c.oid = 'pgsched.tasks_cold'::regclass
        OR c.oid IN (
            SELECT i.inhrelid
            FROM pg_inherits AS i
            WHERE i.inhparent = 'pgsched.tasks_finished'::regclass
        )
) AS e;

-- name: dashboard_deadline_misses
-- Deadlines that fell in the last 24 hours and were missed (tasks_deadline_missed_idx),
-- newest first, with their total.
SELECT
    task_id,
    tenant_id,
    task_type,
    complete_by AT TIME ZONE 'UTC' AS complete_by_utc,
    status::text AS status,
    schedule_id,
    count(*) OVER () AS total
FROM pgsched.deadline_misses
WHERE complete_by >= now() - interval '24 hours'
ORDER BY complete_by DESC
LIMIT %(max_rows)s;

-- name: dashboard_coming_due
-- Tasks falling due in the next hour (not yet due): the due-time range of the cold tier's
-- index and the hot tier, counted up to cap.
SELECT count(*) AS coming
FROM (
    SELECT 1 AS one
    FROM pgsched.tasks AS t
    WHERE
        t.status IN ('PENDING', 'QUEUED')
        AND t.next_run_at > now()
        AND t.next_run_at <= now() + interval '1 hour'
    LIMIT %(cap)s  -- noqa: AM09
) AS c;

-- name: dashboard_dead_count
SELECT count(*) AS dead FROM pgsched.tasks
WHERE status = 'FAILED';

-- name: dashboard_task_search
-- Every filter is optional (NULL). The connection plans each call for its own values
-- (plan_cache_mode = force_custom_plan), so an absent filter folds away, an id or an
-- idempotency key becomes a primary-key probe, and a type, tenant, status or due range an
-- index range on each big tier (0018). Newest first (by id); with a due range, earliest due
-- first, so that the due-time index yields the rows in order and the scan stops at
-- max_rows (by id, a range whose rows all sit low in the id order made the planner walk
-- the primary key through everything newer). Each tier is searched on its own up to
-- max_rows and the three are merged: one search of pgsched.tasks is a Merge Append that
-- costs every tier at the same fraction of its rows, and so walked the whole cold tier's
-- primary key for a due range that only finished tasks have. The filters are the same in
-- the three (only the tier's statuses differ). The status goes through CASE, not a cast: a
-- text-to-enum cast is only stable, so the planner could neither prune tiers by it nor use
-- a partial index; the CASE folds to a constant.
WITH found AS (
    (
        SELECT
            t.id,
            t.status
        FROM pgsched.tasks AS t
        WHERE
            t.status IN ('QUEUED', 'PROCESSING')
            AND (%(task_id)s::bigint IS NULL OR t.id = %(task_id)s::bigint)
            AND (
                %(idempotency_key)s::text IS NULL
                OR t.id = (
                    SELECT k.task_id
                    FROM pgsched.idempotency_keys AS k
                    WHERE
                        k.tenant_id = coalesce(%(tenant_id)s::text, 'default')
                        AND k.idempotency_key = %(idempotency_key)s::text
                )
            )
            AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
            AND (%(tenant_id)s::text IS NULL OR t.tenant_id = %(tenant_id)s::text)
            AND (
                %(status)s::text IS NULL
                OR t.status = CASE %(status)s::text
                    WHEN 'PENDING' THEN 'PENDING'::pgsched.task_status
                    WHEN 'QUEUED' THEN 'QUEUED'::pgsched.task_status
                    WHEN 'PROCESSING' THEN 'PROCESSING'::pgsched.task_status
                    WHEN 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                    WHEN 'FAILED' THEN 'FAILED'::pgsched.task_status
                    WHEN 'CANCELLED' THEN 'CANCELLED'::pgsched.task_status
                END
            )
            AND (%(due_from)s::timestamptz IS NULL OR t.next_run_at >= %(due_from)s::timestamptz)
            AND (%(due_until)s::timestamptz IS NULL OR t.next_run_at < %(due_until)s::timestamptz)
            AND (%(before_id)s::bigint IS NULL OR t.id < %(before_id)s::bigint)
            AND (%(after_due)s::timestamptz IS NULL OR t.next_run_at >= %(after_due)s::timestamptz)
            AND (
                %(after_due)s::timestamptz IS NULL
                OR t.next_run_at > %(after_due)s::timestamptz
                OR t.id < %(after_id)s::bigint
            )
        ORDER BY
            CASE
                WHEN %(due_from)s::timestamptz IS NULL AND %(due_until)s::timestamptz IS NULL
                    THEN NULL
                ELSE t.next_run_at
            END,
            t.id DESC
        LIMIT %(max_rows)s
    )
    UNION ALL
    (
        SELECT
            t.id,
            t.status
        FROM pgsched.tasks AS t
        WHERE
            t.status IN ('PENDING')
            AND (%(task_id)s::bigint IS NULL OR t.id = %(task_id)s::bigint)
            AND (
                %(idempotency_key)s::text IS NULL
                OR t.id = (
                    SELECT k.task_id
                    FROM pgsched.idempotency_keys AS k
                    WHERE
                        k.tenant_id = coalesce(%(tenant_id)s::text, 'default')
                        AND k.idempotency_key = %(idempotency_key)s::text
                )
            )
            AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
            AND (%(tenant_id)s::text IS NULL OR t.tenant_id = %(tenant_id)s::text)
            AND (
                %(status)s::text IS NULL
                OR t.status = CASE %(status)s::text
                    WHEN 'PENDING' THEN 'PENDING'::pgsched.task_status
                    WHEN 'QUEUED' THEN 'QUEUED'::pgsched.task_status
                    WHEN 'PROCESSING' THEN 'PROCESSING'::pgsched.task_status
                    WHEN 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                    WHEN 'FAILED' THEN 'FAILED'::pgsched.task_status
                    WHEN 'CANCELLED' THEN 'CANCELLED'::pgsched.task_status
                END
            )
            AND (%(due_from)s::timestamptz IS NULL OR t.next_run_at >= %(due_from)s::timestamptz)
            AND (%(due_until)s::timestamptz IS NULL OR t.next_run_at < %(due_until)s::timestamptz)
            AND (%(before_id)s::bigint IS NULL OR t.id < %(before_id)s::bigint)
            AND (%(after_due)s::timestamptz IS NULL OR t.next_run_at >= %(after_due)s::timestamptz)
            AND (
                %(after_due)s::timestamptz IS NULL
                OR t.next_run_at > %(after_due)s::timestamptz
                OR t.id < %(after_id)s::bigint
            )
        ORDER BY
            CASE
                WHEN %(due_from)s::timestamptz IS NULL AND %(due_until)s::timestamptz IS NULL
                    THEN NULL
                ELSE t.next_run_at
            END,
            t.id DESC
        LIMIT %(max_rows)s
    )
    UNION ALL
    (
        SELECT
            t.id,
            t.status
        FROM pgsched.tasks AS t
        WHERE
            t.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
            AND (%(task_id)s::bigint IS NULL OR t.id = %(task_id)s::bigint)
            AND (
                %(idempotency_key)s::text IS NULL
                OR t.id = (
                    SELECT k.task_id
                    FROM pgsched.idempotency_keys AS k
                    WHERE
                        k.tenant_id = coalesce(%(tenant_id)s::text, 'default')
                        AND k.idempotency_key = %(idempotency_key)s::text
                )
            )
            AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
            AND (%(tenant_id)s::text IS NULL OR t.tenant_id = %(tenant_id)s::text)
            AND (
                %(status)s::text IS NULL
                OR t.status = CASE %(status)s::text
                    WHEN 'PENDING' THEN 'PENDING'::pgsched.task_status
                    WHEN 'QUEUED' THEN 'QUEUED'::pgsched.task_status
                    WHEN 'PROCESSING' THEN 'PROCESSING'::pgsched.task_status
                    WHEN 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                    WHEN 'FAILED' THEN 'FAILED'::pgsched.task_status
                    WHEN 'CANCELLED' THEN 'CANCELLED'::pgsched.task_status
                END
            )
            AND (%(due_from)s::timestamptz IS NULL OR t.next_run_at >= %(due_from)s::timestamptz)
            AND (%(due_until)s::timestamptz IS NULL OR t.next_run_at < %(due_until)s::timestamptz)
            AND (%(before_id)s::bigint IS NULL OR t.id < %(before_id)s::bigint)
            AND (%(after_due)s::timestamptz IS NULL OR t.next_run_at >= %(after_due)s::timestamptz)
            AND (
                %(after_due)s::timestamptz IS NULL
                OR t.next_run_at > %(after_due)s::timestamptz
                OR t.id < %(after_id)s::bigint
            )
        ORDER BY
            CASE
                WHEN %(due_from)s::timestamptz IS NULL AND %(due_until)s::timestamptz IS NULL
                    THEN NULL
                ELSE t.next_run_at
            END,
            t.id DESC
        LIMIT %(max_rows)s
    )
)

SELECT
    t.id,
    t.tenant_id,
    t.task_type,
    t.status::text AS status,
    t.lane::text AS lane,
    t.next_run_at,
    t.attempts,
    t.max_attempts,
    t.idempotency_key,
    t.updated_at,
    t.last_error
FROM found AS f
INNER JOIN pgsched.tasks AS t ON f.id = t.id AND f.status = t.status
ORDER BY
    CASE
        WHEN %(due_from)s::timestamptz IS NULL AND %(due_until)s::timestamptz IS NULL
            THEN NULL
        ELSE t.next_run_at
    END,
    t.id DESC
LIMIT %(max_rows)s;

-- name: dashboard_task_count
-- How many tasks the search matches, up to cap (the page says "more than" past it): the
-- same filters, any order, so each tier's index range is read until cap rows are found.
SELECT count(*) AS n
FROM (
    SELECT 1 AS one
    FROM pgsched.tasks AS t
    WHERE
        (%(task_id)s::bigint IS NULL OR t.id = %(task_id)s::bigint)
        AND (
            %(idempotency_key)s::text IS NULL
            OR t.id = (
                SELECT k.task_id
                FROM pgsched.idempotency_keys AS k
                WHERE
                    k.tenant_id = coalesce(%(tenant_id)s::text, 'default')
                    AND k.idempotency_key = %(idempotency_key)s::text
            )
        )
        AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
        AND (%(tenant_id)s::text IS NULL OR t.tenant_id = %(tenant_id)s::text)
        AND (
            %(status)s::text IS NULL
            OR t.status = CASE %(status)s::text
                WHEN 'PENDING' THEN 'PENDING'::pgsched.task_status
                WHEN 'QUEUED' THEN 'QUEUED'::pgsched.task_status
                WHEN 'PROCESSING' THEN 'PROCESSING'::pgsched.task_status
                WHEN 'COMPLETED' THEN 'COMPLETED'::pgsched.task_status
                WHEN 'FAILED' THEN 'FAILED'::pgsched.task_status
                WHEN 'CANCELLED' THEN 'CANCELLED'::pgsched.task_status
            END
        )
        AND (%(due_from)s::timestamptz IS NULL OR t.next_run_at >= %(due_from)s::timestamptz)
        AND (%(due_until)s::timestamptz IS NULL OR t.next_run_at < %(due_until)s::timestamptz)
    LIMIT %(cap)s  -- noqa: AM09
) AS m;

-- name: dashboard_task
SELECT
    t.id,
    t.tenant_id,
    t.task_type,
    t.schedule_type::text AS schedule_type,
    t.status::text AS status,
    t.lane::text AS lane,
    t.priority,
    t.next_run_at,
    t.attempts,
    t.max_attempts,
    t.last_run_at,
    t.last_error,
    t.status_reason,
    t.idempotency_key,
    t.locked_by,
    t.lease_expires_at,
    t.cancel_requested_at,
    t.cancel_requested_by,
    t.cancel_reason,
    t.scope,
    t.product,
    t.parent_id,
    t.schedule_id,
    t.created_at,
    t.updated_at,
    t.payload::text AS payload,
    t.metadata::text AS metadata,
    p.fraction AS progress,
    p.note AS progress_note,
    p.updated_at AS progress_at
FROM pgsched.tasks AS t
LEFT JOIN pgsched.task_progress AS p ON t.id = p.task_id
WHERE t.id = %(task_id)s;

-- name: dashboard_task_events
SELECT
    e.id,
    e.occurred_at,
    e.from_status::text AS from_status,
    e.to_status::text AS to_status,
    e.attempt,
    e.worker,
    e.scheduled_for,
    e.detail
FROM pgsched.task_events AS e
WHERE e.task_id = %(task_id)s AND e.id > %(after_id)s
ORDER BY e.id
LIMIT %(max_rows)s;

-- name: dashboard_task_event_count
-- The task's events before and from the page shown (its history's length, by the index).
SELECT
    count(*) FILTER (WHERE e.id <= %(after_id)s) AS before,
    count(*) FILTER (WHERE e.id > %(after_id)s) AS rest
FROM pgsched.task_events AS e
WHERE e.task_id = %(task_id)s;

-- name: dashboard_task_graph
-- The workflow around a task: the tasks it waits for and that wait for it (at most 100 of
-- each, by id), with how many there are in all; a batch's callback counts its members.
SELECT
    r.relation,
    r.id,
    r.task_type,
    r.status,
    r.met,
    r.step,
    r.total
FROM (
    SELECT
        g.relation,
        g.id,
        g.task_type,
        g.status::text AS status,
        g.met,
        g.step,
        count(*) OVER (PARTITION BY g.relation) AS total,
        row_number() OVER (PARTITION BY g.relation ORDER BY g.id) AS n
    FROM pgsched.task_graph(%(task_id)s) AS g
) AS r
WHERE r.n <= 100
ORDER BY r.relation DESC, r.id ASC;

-- name: dashboard_task_batch
-- The batch a task is the callback of, or a member of: its size, its members by outcome
-- and its callback's status, read off the callback's own row (waiting_for and the
-- parents_* counters that task_dependencies_settle keeps as members finish), never off
-- its members, however many. A member finds its callback among its first 100 children,
-- by the key of task_dependencies (parent first).
SELECT
    cb.id AS callback_id,
    cb.task_type AS callback_type,
    cb.status::text AS callback_status,
    (cb.metadata ->> 'pgsched_batch_size')::bigint AS total,
    coalesce(cb.parents_completed, 0) AS completed,
    coalesce(cb.parents_dead, 0) AS dead,
    coalesce(cb.parents_cancelled, 0) AS cancelled,
    coalesce(cb.waiting_for, 0) AS waiting,
    cb.id = %(task_id)s AS is_callback
FROM pgsched.tasks AS cb
WHERE
    cb.metadata ? 'pgsched_batch_size'
    AND cb.id IN (
        SELECT %(task_id)s::bigint
        UNION ALL
        (
            SELECT d.child_id
            FROM pgsched.task_dependencies AS d
            WHERE d.parent_id = %(task_id)s
            ORDER BY d.child_id
            LIMIT 100
        )
    )
ORDER BY cb.id
LIMIT 1;

-- name: dashboard_task_outcomes
-- Per-tenant outcomes of a fan-out parent: its children, one per tenant.
SELECT
    c.id AS task_id,
    c.tenant_id,
    c.status::text AS status,
    c.attempts,
    c.max_attempts,
    c.last_error,
    c.updated_at
FROM pgsched.tasks AS c
WHERE c.parent_id = %(task_id)s
ORDER BY c.tenant_id;

-- name: dashboard_dead_list
-- A page of the DEAD lane (tasks_done holds DEAD tasks only), newest failure first. The
-- error class is the error's first line up to its first ':' or '(' (what the worker's
-- logs group failures by: the exception's class name).
SELECT
    t.id,
    t.tenant_id,
    t.task_type,
    t.lane::text AS lane,
    t.attempts,
    t.max_attempts,
    t.updated_at AS failed_at,
    t.last_error
FROM pgsched.tasks AS t
WHERE
    t.status = 'FAILED'
    AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
    AND (
        %(error_class)s::text IS NULL
        OR left(btrim(split_part(split_part(split_part(coalesce(t.last_error, ''), chr(10), 1), ':', 1), '(', 1)), 200) = %(error_class)s::text
    )
ORDER BY t.updated_at DESC, t.id DESC
LIMIT %(max_rows)s OFFSET %(skip_rows)s;

-- name: dashboard_dead_matching
-- How many DEAD tasks match the filter (up to cap), and when the newest of them failed:
-- a bulk action's confirmation carries both, and the action takes only the tasks that had
-- failed by then.
SELECT
    count(*) AS n,
    max(m.updated_at) AS last_failed
FROM (
    SELECT t.updated_at
    FROM pgsched.tasks AS t
    WHERE
        t.status = 'FAILED'
        AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
        AND (
            %(error_class)s::text IS NULL
            OR left(btrim(split_part(split_part(split_part(coalesce(t.last_error, ''), chr(10), 1), ':', 1), '(', 1)), 200) = %(error_class)s::text
        )
    LIMIT %(cap)s  -- noqa: AM09
) AS m;

-- name: dashboard_dead_matching_ids
-- The tasks a confirmed bulk action takes, locked until it commits.
SELECT t.id
FROM pgsched.tasks AS t
WHERE
    t.status = 'FAILED'
    AND t.updated_at <= %(failed_until)s::timestamptz
    AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
    AND (
        %(error_class)s::text IS NULL
        OR left(btrim(split_part(split_part(split_part(coalesce(t.last_error, ''), chr(10), 1), ':', 1), '(', 1)), 200) = %(error_class)s::text
    )
ORDER BY t.id
LIMIT %(cap)s
FOR UPDATE;

-- name: dashboard_dead_classes
-- The DEAD lane by error class, the most frequent first.
SELECT
    c.error_class,
    count(*) AS n,
    max(c.updated_at) AS last_failed
FROM (
    SELECT
        t.updated_at,
        left(btrim(split_part(split_part(split_part(coalesce(t.last_error, ''), chr(10), 1), ':', 1), '(', 1)), 200) AS error_class
    FROM pgsched.tasks AS t
    WHERE
        t.status = 'FAILED'
        AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
) AS c
GROUP BY c.error_class
ORDER BY n DESC, c.error_class ASC
LIMIT %(max_rows)s;

-- name: dashboard_dead_retry
-- DEAD tasks back to QUEUED (or PENDING, as their due time routes them), all or none; the
-- reason (naming who did it) lands in each task's event.
SELECT r.task_id
FROM unnest(%(task_ids)s::bigint[]) AS u (id)
CROSS JOIN LATERAL pgsched.dead_retry(task_id => u.id, reason => %(reason)s) AS r (task_id);

-- name: dashboard_dead_discard
SELECT pgsched.dead_discard(u.id, %(reason)s) AS task_id
FROM unnest(%(task_ids)s::bigint[]) AS u (id);

-- name: dashboard_task_cancel
-- The CLI's cancel, with the dashboard user as the actor (recorded with the role).
SELECT
    outcome,
    detail
FROM pgsched.cancel_task_ex(
    task_id => %(task_id)s, reason => %(reason)s, actor => %(actor)s
);

-- name: dashboard_schedules
SELECT
    s.id,
    s.tenant_id,
    s.task_type,
    s.cron_expression,
    s.timezone,
    s.misfire_policy::text AS misfire_policy,
    s.enabled,
    s.quarantine_reason,
    s.last_fire_at,
    s.armed_task_id,
    a.next_run_at AS armed_for,
    a.status::text AS armed_status,
    (
        SELECT count(*)
        FROM pgsched.schedule_occurrences AS o
        WHERE o.schedule_id = s.id AND o.outcome = 'MISSED'
    ) AS misfires
FROM pgsched.schedules AS s
LEFT JOIN pgsched.tasks AS a ON s.armed_task_id = a.id
ORDER BY s.id
LIMIT %(max_rows)s;

-- name: dashboard_schedule
-- One schedule, with the occurrence armed for it (what a pause or a delete cancels).
SELECT
    s.id,
    s.tenant_id,
    s.task_type,
    s.cron_expression,
    s.timezone,
    s.enabled,
    s.armed_task_id,
    a.next_run_at AS armed_for,
    a.status::text AS armed_status
FROM pgsched.schedules AS s
LEFT JOIN pgsched.tasks AS a ON s.armed_task_id = a.id
WHERE s.id = %(schedule_id)s;

-- name: dashboard_schedule_last_runs
-- The last runs of each listed schedule: its occurrences' tasks, newest first.
SELECT
    o.schedule_id,
    o.fire_at,
    o.outcome,
    o.task_id,
    t.status::text AS status
FROM unnest(%(schedule_ids)s::bigint[]) AS s (id)
CROSS JOIN
    LATERAL (  -- noqa: ST05
        SELECT
            oc.schedule_id,
            oc.fire_at,
            oc.outcome,
            oc.task_id
        FROM pgsched.schedule_occurrences AS oc
        WHERE oc.schedule_id = s.id
        ORDER BY oc.fire_at DESC
        LIMIT 3
    ) AS o
LEFT JOIN pgsched.tasks AS t ON o.task_id = t.id
ORDER BY o.schedule_id ASC, o.fire_at DESC;

-- name: dashboard_schedule_pause
-- The CLI's pause: disables the schedule and cancels its armed occurrence if not started.
SELECT pgsched.schedule_pause(%(schedule_id)s, %(reason)s);

-- name: dashboard_schedule_delete
-- The CLI's delete: the schedule goes, its armed occurrence is cancelled if not started.
SELECT pgsched.schedule_delete(%(schedule_id)s, %(reason)s);

-- name: dashboard_schedule_resume
SELECT pgsched.schedule_resume(%(schedule_id)s);

-- name: dashboard_schedule_event_actor
-- schedule_resume records 'resumed' without a detail; in the same transaction the
-- dashboard writes who did it into that event.
UPDATE pgsched.schedule_events AS e
SET detail = %(detail)s
WHERE e.id = (
    SELECT max(x.id)
    FROM pgsched.schedule_events AS x
    WHERE x.schedule_id = %(schedule_id)s AND x.what = 'resumed'
);

-- name: dashboard_tenants
SELECT
    t.tenant_id,
    t.product,
    t.active,
    t.created_at,
    t.updated_at
FROM pgsched.tenants AS t
ORDER BY t.product, t.tenant_id
LIMIT %(max_rows)s;

-- name: dashboard_workers
-- Workers as their live leases show them (the hot tier's PROCESSING rows): a worker is
-- alive while it renews leases, so the latest expiry is its last heartbeat plus the lease.
SELECT
    h.locked_by AS worker,
    count(*) AS leases,
    count(*) FILTER (WHERE h.lease_expires_at < now()) AS expired,
    min(h.lease_expires_at) AS first_expiry,
    max(h.lease_expires_at) AS last_expiry,
    max(h.last_run_at) AS last_claim
FROM pgsched.tasks AS h
WHERE h.status = 'PROCESSING'
GROUP BY h.locked_by
ORDER BY h.locked_by;

-- name: dashboard_worker_leases
SELECT
    h.id,
    h.locked_by AS worker,
    h.task_type,
    h.tenant_id,
    h.lane::text AS lane,
    h.attempts,
    h.last_run_at,
    h.lease_expires_at
FROM pgsched.tasks AS h
WHERE h.status = 'PROCESSING'
ORDER BY h.lease_expires_at
LIMIT %(max_rows)s;
