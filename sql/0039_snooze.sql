-- 0039 — snooze: a handler puts its task back to be due later without spending an attempt.
--
-- tasks.snoozes counts how often a task was snoozed, so that a handler's cap
-- (max_snoozes) can end a task that would snooze forever: the worker turns a snooze past
-- the cap into a failed attempt. task_finish_many (sql/code/finish.sql) takes the outcome
-- SNOOZED: due again after the delay, the attempt given back, the count up by one.

-- No default: a partition made later by copying its parent's columns (time_partitions_maintain)
-- takes no default, so a default here would make an upgraded database differ from a fresh
-- one. NULL reads as never.
ALTER TABLE pgsched.tasks ADD COLUMN snoozes integer;

COMMENT ON COLUMN pgsched.tasks.snoozes IS 'How often the task was snoozed (ctx.snooze, raise Snooze), NULL for never: each put it back due later without spending an attempt; its handler''s max_snoozes caps it.';
