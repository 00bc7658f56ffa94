-- sql/code/sweep_leader.sql — the sweep leader.
--
-- the sweep leader's lease: sweep_leader_acquire, sweep_leader_renew, sweep_leader_release
-- (compare-and-set, fenced by a generation), sweep_leader_fence.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

CREATE OR REPLACE FUNCTION pgsched.sweep_leader_lease_problem(holder text, lease interval)
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
COMMENT ON FUNCTION pgsched.sweep_leader_lease_problem(text, interval) IS 'Why a holder name or lease length is refused, or NULL.';
REVOKE ALL ON FUNCTION pgsched.sweep_leader_lease_problem(text, interval) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.sweep_leader_lease_problem(text, interval) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.sweep_leader_acquire(holder text, lease interval, as_of timestamptz DEFAULT NULL)
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
COMMENT ON FUNCTION pgsched.sweep_leader_acquire(text, interval, timestamp with time zone) IS 'A sweeper tries to take the leader lease: granted by compare-and-set when the lease is free or expired, each takeover incrementing the generation. Returns whether it was acquired, the generation, the holder and when the lease expires.';
REVOKE ALL ON FUNCTION pgsched.sweep_leader_acquire(text, interval, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.sweep_leader_acquire(text, interval, timestamptz) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.sweep_leader_renew(
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
COMMENT ON FUNCTION pgsched.sweep_leader_renew(text, bigint, interval, timestamp with time zone) IS 'The leader renews its lease (holder and generation must match); returns the new expiry, or NULL when the lease is no longer its own.';
REVOKE ALL ON FUNCTION pgsched.sweep_leader_renew(text, bigint, interval, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.sweep_leader_renew(text, bigint, interval, timestamptz) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.sweep_leader_release(holder text, generation bigint, as_of timestamptz DEFAULT NULL)
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
COMMENT ON FUNCTION pgsched.sweep_leader_release(text, bigint, timestamp with time zone) IS 'The leader lets its lease go on a clean stop, so the next sweeper takes over at once; returns whether it held it.';
REVOKE ALL ON FUNCTION pgsched.sweep_leader_release(text, bigint, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.sweep_leader_release(text, bigint, timestamptz) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.sweep_leader_fence(holder text, generation bigint, as_of timestamptz DEFAULT NULL)
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
COMMENT ON FUNCTION pgsched.sweep_leader_fence(text, bigint, timestamp with time zone) IS 'Run in the same transaction before a leader''s writes: refuses a holder or generation that is no longer current, and holds off a takeover while the transaction runs.';
REVOKE ALL ON FUNCTION pgsched.sweep_leader_fence(text, bigint, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.sweep_leader_fence(text, bigint, timestamptz) TO pgsched_worker, pgsched_admin;
