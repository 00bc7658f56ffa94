-- The lease rescue takes a floor (not_before): sql/code/leases_rescue.sql says why. The old
-- signature goes first; the code file makes the new one.
DROP FUNCTION IF EXISTS pgsched.lease_rescue_expired(pgsched.task_lane, integer, timestamptz);
