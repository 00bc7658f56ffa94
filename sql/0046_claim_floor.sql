-- The claim and the lane's next due time take a floor (not_before): sql/code/claim.sql
-- says why. The old signatures go first; the code files make the new ones.
DROP FUNCTION IF EXISTS pgsched.task_claim_many(pgsched.task_lane, integer, text, interval, timestamptz);
DROP FUNCTION IF EXISTS pgsched.lane_next_due(pgsched.task_lane);
