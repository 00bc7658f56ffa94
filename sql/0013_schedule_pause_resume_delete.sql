-- 0013 — an operator pauses, resumes and deletes a recurring schedule.
--
-- schedule_enable (0005) flips the flag only: a paused schedule's armed occurrence still ran,
-- and an unknown id changed nothing without a word. Here each control names the schedule it
-- acts on, refuses an unknown one (no_data_found, as cancel_task does for a task), and is
-- recorded in schedule_events:
--
--   schedule_pause(id, reason)    disabled; its armed occurrence is cancelled if not started
--   schedule_resume(id)           enabled, quarantine cleared; the recurring sweep re-arms it
--   schedule_delete(id, reason)   its armed occurrence cancelled if not started, the row gone;
--                                 its events and its tasks' history stay
--
-- An occurrence already PROCESSING runs to its end either way: stopping a handler midway is
-- not a schedule's decision. After a pause it is not re-armed (the worker re-arms only an
-- enabled schedule).

CREATE FUNCTION pgsched.schedule_cancel_armed(
    schedule_id bigint, reason text, as_of timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE sql
AS $$
    UPDATE pgsched.tasks AS tk
       SET status = 'CANCELLED', status_reason = reason, updated_at = coalesce(as_of, now())
      FROM pgsched.schedules AS s
     WHERE s.id = schedule_cancel_armed.schedule_id
       AND tk.id = s.armed_task_id
       AND tk.status IN ('PENDING', 'QUEUED')
    RETURNING tk.id
$$;

CREATE FUNCTION pgsched.schedule_pause(
    schedule_id bigint, reason text DEFAULT 'paused by operator', as_of timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    cancelled bigint;
BEGIN
    PERFORM 1 FROM pgsched.schedules AS s WHERE s.id = schedule_pause.schedule_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no schedule with id %', schedule_pause.schedule_id
            USING ERRCODE = 'no_data_found';
    END IF;
    cancelled := pgsched.schedule_cancel_armed(schedule_pause.schedule_id, schedule_pause.reason, t);
    UPDATE pgsched.schedules AS s
       SET enabled = FALSE, updated_at = t
     WHERE s.id = schedule_pause.schedule_id;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, detail)
    VALUES (
        schedule_pause.schedule_id, t, 'paused',
        schedule_pause.reason || coalesce(format(' (armed task %s cancelled)', cancelled), '')
    );
    RETURN schedule_pause.schedule_id;
END;
$$;

CREATE FUNCTION pgsched.schedule_resume(schedule_id bigint, as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
BEGIN
    UPDATE pgsched.schedules AS s
       SET enabled = TRUE, quarantine_reason = NULL, updated_at = t
     WHERE s.id = schedule_resume.schedule_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no schedule with id %', schedule_resume.schedule_id
            USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what)
    VALUES (schedule_resume.schedule_id, t, 'resumed');
    PERFORM pg_notify('pgsched_recurring', '');
    RETURN schedule_resume.schedule_id;
END;
$$;

CREATE FUNCTION pgsched.schedule_delete(
    schedule_id bigint, reason text DEFAULT 'deleted by operator', as_of timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := coalesce(as_of, now());
    cancelled bigint;
BEGIN
    PERFORM 1 FROM pgsched.schedules AS s WHERE s.id = schedule_delete.schedule_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no schedule with id %', schedule_delete.schedule_id
            USING ERRCODE = 'no_data_found';
    END IF;
    cancelled := pgsched.schedule_cancel_armed(schedule_delete.schedule_id, schedule_delete.reason, t);
    DELETE FROM pgsched.schedules AS s WHERE s.id = schedule_delete.schedule_id;
    INSERT INTO pgsched.schedule_events (schedule_id, occurred_at, what, detail)
    VALUES (
        schedule_delete.schedule_id, t, 'deleted',
        schedule_delete.reason || coalesce(format(' (armed task %s cancelled)', cancelled), '')
    );
    RETURN schedule_delete.schedule_id;
END;
$$;

-- New functions are not everyone's: only the roles of 0006, as for the rest of the API.
REVOKE EXECUTE ON FUNCTION
pgsched.schedule_cancel_armed(bigint, text, timestamptz),
pgsched.schedule_pause(bigint, text, timestamptz),
pgsched.schedule_resume(bigint, timestamptz),
pgsched.schedule_delete(bigint, text, timestamptz)
FROM public;
GRANT EXECUTE ON FUNCTION
pgsched.schedule_cancel_armed(bigint, text, timestamptz),
pgsched.schedule_pause(bigint, text, timestamptz),
pgsched.schedule_resume(bigint, timestamptz),
pgsched.schedule_delete(bigint, text, timestamptz)
TO pgsched_admin;
