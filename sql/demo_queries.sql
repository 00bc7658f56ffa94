-- Named statements of `pgsched demo` (pgsched/demo.py), loaded with the product's by
-- pgsched/queries.py. They read what the demo scheduled (ids from first_id on).

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
