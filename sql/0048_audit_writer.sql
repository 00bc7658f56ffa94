-- Who writes a task's transitions into task_events: the statement trigger on
-- pgsched.tasks ('trigger', single-node mode, the default) or the state-changing
-- functions themselves, in the statement that makes the change ('functions': the only way
-- on Citus, which refuses triggers on distributed tables). sql/code/transitions.sql reads
-- it when applied, and pgsched.audit_writer_set switches it; sql/code/transitions.sql says
-- what each writes.
ALTER TABLE pgsched.settings
ADD COLUMN audit_writer text NOT NULL DEFAULT 'trigger'
CONSTRAINT settings_audit_writer_known CHECK (audit_writer IN ('trigger', 'functions'));

COMMENT ON COLUMN pgsched.settings.audit_writer IS 'Who writes task_events: the transition trigger (''trigger'', the default) or the state-changing functions (''functions'', distributed mode). Switched by pgsched.audit_writer_set.';
