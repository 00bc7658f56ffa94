-- sql/code/progress.sql — progress.
--
-- task_progress_set_many (a worker's batch of the latest progress of its tasks) and
-- task_progress (one task's, for any caller).
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- The worker's flush: one statement for every task whose progress changed since the last.
CREATE OR REPLACE FUNCTION pgsched.task_progress_set_many(
    task_ids bigint[],
    fractions real[],
    notes text[],
    as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    n integer;
    bad record;
BEGIN
    IF coalesce(cardinality(fractions), 0) <> coalesce(cardinality(task_ids), 0)
       OR coalesce(cardinality(notes), cardinality(task_ids), 0) <> coalesce(cardinality(task_ids), 0) THEN
        RAISE EXCEPTION 'pgsched: task_ids, fractions and notes must have one element per task'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT u.ord, u.fraction, u.note INTO bad
      FROM unnest(fractions, notes) WITH ORDINALITY AS u(fraction, note, ord)
     WHERE u.fraction IS NULL OR NOT (u.fraction >= 0 AND u.fraction <= 1) OR length(u.note) > 1000
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: progress % of task % is out of range (a fraction from 0 to 1, a note of at most 1000 characters)',
            coalesce(bad.fraction::text, 'NULL'), task_ids[bad.ord]
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.task_progress AS p (task_id, fraction, note, updated_at)
    SELECT DISTINCT ON (u.task_id) u.task_id, u.fraction, u.note, coalesce(as_of, clock_timestamp())
      FROM unnest(task_ids, fractions, notes) WITH ORDINALITY AS u(task_id, fraction, note, ord)
     WHERE u.task_id IS NOT NULL
     ORDER BY u.task_id, u.ord DESC
    ON CONFLICT (task_id) DO UPDATE
       SET fraction = excluded.fraction, note = excluded.note, updated_at = excluded.updated_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
COMMENT ON FUNCTION pgsched.task_progress_set_many(bigint[], real[], text[], timestamp with time zone) IS 'A worker writes the latest progress of its tasks (ctx.progress), one row per task replaced: a fraction from 0 to 1 and a note of at most 1000 characters (else SQLSTATE 22023, nothing written). The last element wins for a task given twice. Returns the rows written.';
REVOKE ALL ON FUNCTION pgsched.task_progress_set_many(bigint[], real[], text[], timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_progress_set_many(bigint[], real[], text[], timestamptz) TO pgsched_worker, pgsched_admin;

-- PL/pgSQL, not SQL: its body is checked when called, not when made, so this file can be
-- applied before the migration that makes the table.
CREATE OR REPLACE FUNCTION pgsched.task_progress(task_id bigint)
RETURNS TABLE (fraction real, note text, updated_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT p.fraction, p.note, p.updated_at
      FROM pgsched.task_progress AS p
     WHERE p.task_id = task_progress.task_id;
END;
$$;
COMMENT ON FUNCTION pgsched.task_progress(bigint) IS 'The latest progress a task reported (ctx.progress): fraction from 0 to 1, note and when; no row if it never reported.';
REVOKE ALL ON FUNCTION pgsched.task_progress(bigint) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_progress(bigint) TO pgsched_producer, pgsched_worker, pgsched_admin;
