-- 0040 — progress: the latest progress a handler reported for its task.
--
-- One row per task that ever reported (ctx.progress), replaced by each write: a fraction
-- from 0 to 1, an optional note and when. Apart from pgsched.tasks, so that a progress
-- write neither rewrites the task's row nor fires its transition trigger; workers write
-- it in batches, at most once a second per task (pgsched/worker/progress.py).
-- pgsched.task_progress(id) reads it; retention deletes rows older than --retention-days.

CREATE TABLE pgsched.task_progress (
    task_id bigint NOT NULL,
    fraction real NOT NULL,
    note text,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT task_progress_pkey PRIMARY KEY (task_id),
    CONSTRAINT task_progress_fraction_range CHECK (fraction >= 0 AND fraction <= 1),
    CONSTRAINT task_progress_note_length CHECK (length(note) <= 1000)
);

COMMENT ON TABLE pgsched.task_progress IS 'The latest progress each task reported (ctx.progress): fraction 0 to 1, note, updated_at. Written by workers in batches, at most once a second per task; read with pgsched.task_progress(id).';

GRANT SELECT ON TABLE pgsched.task_progress TO pgsched_worker;
GRANT ALL ON TABLE pgsched.task_progress TO pgsched_admin;
