-- 0019 — the sweep leader holds a lease row, not a session advisory lock.
--
-- A session advisory lock needs a session that is the client's for as long as it leads; a
-- transaction pooler (PgBouncer in transaction mode) hands a server session to a client for
-- one transaction only. Leadership is now one row, taken and kept by compare-and-set:
--
--   sweep_leader_acquire(holder, lease)        take the lease if it expired (or was
--                                               released): generation + 1; else report who
--                                               holds it and for how long
--   sweep_leader_renew(holder, generation, lease)   push the expiry on, only while the
--                                               generation is still this holder's
--   sweep_leader_release(holder, generation)   end the lease now (a clean stop), so another
--                                               sweeper takes over at its next try
--   sweep_leader_fence(holder, generation)     inside a leader's write transaction: refuses
--                                               (SQLSTATE PS001) unless the generation is
--                                               current and unexpired, and holds the row
--                                               FOR SHARE until that transaction ends, so no
--                                               takeover commits while a fenced write runs
--
-- Each takeover increments the generation: a leader that was deposed (paused past its
-- lease, cut off from the database) finds its generation gone at its next renewal or fenced
-- write, and stops. Time is the database's clock (now(), or as_of in tests).

CREATE TABLE pgsched.sweep_leader (
    id boolean PRIMARY KEY DEFAULT TRUE CONSTRAINT sweep_leader_one_row CHECK (id),
    holder text,
    generation bigint NOT NULL DEFAULT 0,
    acquired_at timestamptz,
    renewed_at timestamptz,
    -- Never held: expired since the epoch (not -infinity, which a client's datetime
    -- cannot read).
    expires_at timestamptz NOT NULL DEFAULT '1970-01-01 00:00:00+00'
);

INSERT INTO pgsched.sweep_leader DEFAULT VALUES;

CREATE FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN holder IS NULL OR holder = '' THEN 'holder must be a non-empty name'
        WHEN length(holder) > 200 THEN 'holder must be at most 200 characters'
        WHEN lease IS NULL OR lease < INTERVAL '1 second' OR lease > INTERVAL '1 hour'
            THEN 'lease must be between 1 second and 1 hour'
    END
$$;

CREATE FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (
    acquired boolean, generation bigint, leader text, expires_at timestamptz, expires_in_s float8
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    problem text := pgsched.sweep_leader_lease_problem(holder, lease);
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: sweep_leader_acquire: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Compare-and-set: only an expired lease is taken. A concurrent candidate waits for
    -- this row, then re-reads it, finds it live, and takes nothing.
    RETURN QUERY
    UPDATE pgsched.sweep_leader AS l
       SET holder = sweep_leader_acquire.holder, generation = l.generation + 1,
           acquired_at = t, renewed_at = t, expires_at = t + lease
     WHERE l.expires_at <= t
    RETURNING TRUE, l.generation, l.holder, l.expires_at, extract(EPOCH FROM l.expires_at - t)::float8;
    IF NOT FOUND THEN
        RETURN QUERY
        SELECT FALSE, l.generation, l.holder, l.expires_at, extract(EPOCH FROM l.expires_at - t)::float8
          FROM pgsched.sweep_leader AS l;
    END IF;
END;
$$;

CREATE FUNCTION pgsched.sweep_leader_renew(
    holder text, generation bigint, lease interval, as_of timestamptz DEFAULT NULL
)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    problem text := pgsched.sweep_leader_lease_problem(holder, lease);
    until timestamptz;
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: sweep_leader_renew: %', problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Fenced by the generation: a lease that lapsed unseen by anyone is still this
    -- holder's (nobody led meanwhile); one taken over since is not. NULL: deposed.
    UPDATE pgsched.sweep_leader AS l
       SET renewed_at = t, expires_at = t + lease
     WHERE l.generation = sweep_leader_renew.generation AND l.holder = sweep_leader_renew.holder
    RETURNING l.expires_at INTO until;
    RETURN until;
END;
$$;

CREATE FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgsched.sweep_leader AS l
       SET expires_at = least(l.expires_at, coalesce(as_of, now()))
     WHERE l.generation = sweep_leader_release.generation AND l.holder = sweep_leader_release.holder;
    RETURN FOUND;
END;
$$;

CREATE FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    held record;
BEGIN
    PERFORM 1 FROM pgsched.sweep_leader AS l
     WHERE l.generation = sweep_leader_fence.generation
       AND l.holder = sweep_leader_fence.holder
       AND l.expires_at > coalesce(as_of, now())
       FOR SHARE;
    IF NOT FOUND THEN
        SELECT l.holder, l.generation, l.expires_at INTO held FROM pgsched.sweep_leader AS l;
        RAISE EXCEPTION 'pgsched: sweep leader % generation % no longer leads (generation % of %, until %)',
            sweep_leader_fence.holder, sweep_leader_fence.generation,
            held.generation, held.holder, held.expires_at
            USING ERRCODE = 'PS001';
    END IF;
END;
$$;

-- The sweep leader's functions are the sweepers' (pgsched_worker) and the operators'.
REVOKE ALL ON pgsched.sweep_leader FROM public;
GRANT SELECT ON pgsched.sweep_leader TO pgsched_worker;
GRANT ALL ON pgsched.sweep_leader TO pgsched_admin;
REVOKE EXECUTE ON FUNCTION
pgsched.sweep_leader_lease_problem(text, interval),
pgsched.sweep_leader_acquire(text, interval, timestamptz),
pgsched.sweep_leader_renew(text, bigint, interval, timestamptz),
pgsched.sweep_leader_release(text, bigint, timestamptz),
pgsched.sweep_leader_fence(text, bigint, timestamptz)
FROM public;
GRANT EXECUTE ON FUNCTION
pgsched.sweep_leader_lease_problem(text, interval),
pgsched.sweep_leader_acquire(text, interval, timestamptz),
pgsched.sweep_leader_renew(text, bigint, interval, timestamptz),
pgsched.sweep_leader_release(text, bigint, timestamptz),
pgsched.sweep_leader_fence(text, bigint, timestamptz)
TO pgsched_worker, pgsched_admin;
