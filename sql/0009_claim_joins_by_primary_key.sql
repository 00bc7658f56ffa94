-- 0009 — the claim joins the rows it locked back by primary key, never by hashing the tier.
--
-- task_claim_many's UPDATE joins the ids its CTE locked (at most max_tasks) to tasks_hot.
-- A materialized CTE has no statistics, so the planner's estimate of that join is a guess,
-- and with tens of thousands of rows queued it could prefer hashing every QUEUED row of
-- tasks_hot (a sequential scan per claim) to max_tasks primary-key probes: measured at
-- 14 ms instead of 7 ms for a claim of 500 with 27,500 rows queued. Which plan won
-- depended on statistics left by unrelated work (a large cold tier tipped it), so a claim
-- was fast in one database and twice as slow in another. Pin the nested loop.
ALTER FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz)
SET enable_hashjoin = FALSE;
ALTER FUNCTION pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz)
SET enable_mergejoin = FALSE;

-- The transition trigger runs inside the claim's UPDATE and would inherit those settings;
-- its join of the two transition tables must stay a hash join (see 0001).
ALTER FUNCTION pgsched.task_record_transitions() SET enable_hashjoin = TRUE;
ALTER FUNCTION pgsched.task_record_transitions() SET enable_mergejoin = TRUE;
