-- 0020 — a run is a claim and its outcome, not the events in between.
--
-- A cancel request (0016) and a stale report of a lost lease are events on a PROCESSING
-- task that change no status (PROCESSING -> PROCESSING). task_runs read such an event as a
-- run of its own and as the end of the run it happened in; a run starts with a claim
-- (into PROCESSING from another status) and ends with the first event out of PROCESSING.
CREATE OR REPLACE VIEW pgsched.task_runs AS
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
        AND e.to_status <> 'PROCESSING'
    ORDER BY e.id
    LIMIT 1
) AS f ON TRUE
WHERE s.to_status = 'PROCESSING' AND s.from_status <> 'PROCESSING';
