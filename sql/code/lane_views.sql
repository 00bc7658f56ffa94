-- sql/code/lane_views.sql — lane views.
--
-- lane_high, lane_normal, lane_low, lane_batch and lane_summary (what pgsched status and
-- the dashboard read).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Per lane: cold (waiting beyond the hot window), queued in the hot window, due now,
-- running, dead, and how late the oldest due task is.
CREATE OR REPLACE VIEW pgsched.lane_summary AS
WITH lanes AS (
    SELECT
        l.lane,
        l.ord
    FROM unnest(ARRAY['HIGH', 'NORMAL', 'LOW', 'BATCH', 'DEAD']) WITH ORDINALITY AS l (lane, ord)
),

counts AS (
    SELECT
        CASE WHEN t.status = 'FAILED' THEN 'DEAD' ELSE t.lane::text END AS lane,
        count(*) FILTER (WHERE t.status = 'PENDING') AS cold,
        count(*) FILTER (WHERE t.status = 'QUEUED') AS queued,
        count(*) FILTER (WHERE t.status = 'QUEUED' AND t.next_run_at <= now()) AS due_now,
        count(*) FILTER (WHERE t.status = 'PROCESSING') AS processing,
        count(*) FILTER (WHERE t.status = 'FAILED') AS dead,
        min(t.next_run_at) FILTER (WHERE t.status = 'QUEUED' AND t.next_run_at <= now()) AS oldest_due
    FROM pgsched.tasks AS t
    WHERE t.status IN ('PENDING', 'QUEUED', 'PROCESSING', 'FAILED')
    GROUP BY CASE WHEN t.status = 'FAILED' THEN 'DEAD' ELSE t.lane::text END
)

SELECT
    l.lane,
    coalesce(c.cold, 0) AS cold,
    coalesce(c.queued, 0) AS queued,
    coalesce(c.due_now, 0) AS due_now,
    coalesce(c.processing, 0) AS processing,
    coalesce(c.dead, 0) AS dead,
    now() - c.oldest_due AS oldest_lateness
FROM lanes AS l
LEFT JOIN counts AS c ON l.lane = c.lane
ORDER BY l.ord;
COMMENT ON VIEW pgsched.lane_summary IS 'Per lane: cold, queued, due now, processing and dead counts, and the oldest due task''s lateness; what pgsched status prints.';
REVOKE ALL ON pgsched.lane_summary FROM public;
GRANT SELECT ON pgsched.lane_summary TO pgsched_worker;
GRANT ALL ON pgsched.lane_summary TO pgsched_admin;

-- A view per lane: the live tasks of that lane (cold, queued or running).
-- The columns tasks had when 0010 made these views with SELECT * (Postgres fixes a view's
-- columns when it is made): written out, so applying this file again keeps them.
CREATE OR REPLACE VIEW pgsched.lane_high AS
SELECT
    id,
    tenant_id,
    task_type,
    schedule_type,
    next_run_at,
    cron_expression,
    timezone,
    payload,
    metadata,
    priority,
    lane,
    status,
    attempts,
    max_attempts,
    last_run_at,
    last_error,
    status_reason,
    idempotency_key,
    locked_by,
    lease_token,
    lease_expires_at,
    scope,
    product,
    parent_id,
    created_at,
    updated_at,
    schedule_id
FROM pgsched.tasks
WHERE lane = 'HIGH' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');
COMMENT ON VIEW pgsched.lane_high IS 'The HIGH lane''s unfinished tasks.';
REVOKE ALL ON pgsched.lane_high FROM public;
GRANT SELECT ON pgsched.lane_high TO pgsched_worker;
GRANT ALL ON pgsched.lane_high TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.lane_normal AS
SELECT
    id,
    tenant_id,
    task_type,
    schedule_type,
    next_run_at,
    cron_expression,
    timezone,
    payload,
    metadata,
    priority,
    lane,
    status,
    attempts,
    max_attempts,
    last_run_at,
    last_error,
    status_reason,
    idempotency_key,
    locked_by,
    lease_token,
    lease_expires_at,
    scope,
    product,
    parent_id,
    created_at,
    updated_at,
    schedule_id
FROM pgsched.tasks
WHERE lane = 'NORMAL' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');
COMMENT ON VIEW pgsched.lane_normal IS 'The NORMAL lane''s unfinished tasks.';
REVOKE ALL ON pgsched.lane_normal FROM public;
GRANT SELECT ON pgsched.lane_normal TO pgsched_worker;
GRANT ALL ON pgsched.lane_normal TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.lane_low AS
SELECT
    id,
    tenant_id,
    task_type,
    schedule_type,
    next_run_at,
    cron_expression,
    timezone,
    payload,
    metadata,
    priority,
    lane,
    status,
    attempts,
    max_attempts,
    last_run_at,
    last_error,
    status_reason,
    idempotency_key,
    locked_by,
    lease_token,
    lease_expires_at,
    scope,
    product,
    parent_id,
    created_at,
    updated_at,
    schedule_id
FROM pgsched.tasks
WHERE lane = 'LOW' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');
COMMENT ON VIEW pgsched.lane_low IS 'The LOW lane''s unfinished tasks.';
REVOKE ALL ON pgsched.lane_low FROM public;
GRANT SELECT ON pgsched.lane_low TO pgsched_worker;
GRANT ALL ON pgsched.lane_low TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.lane_batch AS
SELECT
    id,
    tenant_id,
    task_type,
    schedule_type,
    next_run_at,
    cron_expression,
    timezone,
    payload,
    metadata,
    priority,
    lane,
    status,
    attempts,
    max_attempts,
    last_run_at,
    last_error,
    status_reason,
    idempotency_key,
    locked_by,
    lease_token,
    lease_expires_at,
    scope,
    product,
    parent_id,
    created_at,
    updated_at,
    schedule_id
FROM pgsched.tasks
WHERE lane = 'BATCH' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');
COMMENT ON VIEW pgsched.lane_batch IS 'The BATCH lane''s unfinished tasks.';
REVOKE ALL ON pgsched.lane_batch FROM public;
GRANT SELECT ON pgsched.lane_batch TO pgsched_worker;
GRANT ALL ON pgsched.lane_batch TO pgsched_admin;
