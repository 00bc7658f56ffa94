-- 0003 — views for people at a psql prompt.
--
--   What happened to task 123?          SELECT * FROM pgsched.task_timeline WHERE task_id = 123;
--   What ran for acme last Tuesday?     SELECT * FROM pgsched.task_runs
--                                        WHERE tenant_id = 'acme'
--                                          AND started_at >= '2026-11-24' AND started_at < '2026-11-25';
--   How is each lane doing?             SELECT * FROM pgsched.lane_summary;

-- The life of each task: its creation, then every transition in order.
CREATE VIEW pgsched.task_timeline AS
SELECT
    t.id AS task_id,
    t.tenant_id,
    t.task_type,
    0::bigint AS event_id,
    t.created_at AS occurred_at,
    NULL::pgsched.task_status AS from_status,
    'scheduled' AS what,
    NULL::bigint AS attempt,
    NULL::text AS worker,
    format('due %s', t.next_run_at) AS detail
FROM pgsched.tasks AS t
UNION ALL
SELECT
    e.task_id,
    e.tenant_id,
    e.task_type,
    e.id AS event_id,
    e.occurred_at,
    e.from_status,
    e.to_status::text AS what,
    e.attempt,
    e.worker,
    e.detail
FROM pgsched.task_events AS e;

-- One row per attempt: when it was due, when it started, how and when it ended.
CREATE VIEW pgsched.task_runs AS
SELECT
    s.task_id,
    s.tenant_id,
    s.task_type,
    s.attempt,
    s.worker,
    s.scheduled_for,
    s.occurred_at AS started_at,
    f.occurred_at AS finished_at,
    s.occurred_at - s.scheduled_for AS lateness,
    coalesce(f.to_status::text, 'RUNNING') AS outcome,
    f.detail
FROM pgsched.task_events AS s
LEFT JOIN LATERAL (
    SELECT
        e.occurred_at,
        e.to_status,
        e.detail
    FROM pgsched.task_events AS e
    WHERE
        e.task_id = s.task_id
        AND e.id > s.id
        AND e.from_status = 'PROCESSING'
    ORDER BY e.id
    LIMIT 1
) AS f ON TRUE
WHERE s.to_status = 'PROCESSING';

-- A view per lane: the live tasks of that lane (cold, queued or running).
CREATE VIEW pgsched.lane_high AS
SELECT * FROM pgsched.tasks
WHERE lane = 'HIGH' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

CREATE VIEW pgsched.lane_normal AS
SELECT * FROM pgsched.tasks
WHERE lane = 'NORMAL' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

CREATE VIEW pgsched.lane_low AS
SELECT * FROM pgsched.tasks
WHERE lane = 'LOW' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

CREATE VIEW pgsched.lane_batch AS
SELECT * FROM pgsched.tasks
WHERE lane = 'BATCH' AND status IN ('PENDING', 'QUEUED', 'PROCESSING');

-- The DEAD lane: terminal failures, whatever lane they ran in, waiting for a person.
CREATE VIEW pgsched.lane_dead AS
SELECT * FROM pgsched.tasks
WHERE status = 'FAILED';

-- Per lane: cold (waiting beyond the hot window), queued in the hot window, due now,
-- running, dead, and how late the oldest due task is.
CREATE VIEW pgsched.lane_summary AS
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
