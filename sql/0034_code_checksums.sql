-- 0034 — the files of sql/code/ (functions, views, triggers by concept) are applied again
-- whenever one changes: pgsched.schema_code records the checksum each was last applied
-- with. pgsched migrate makes the table (as it makes schema_migrations) before any
-- migration runs; here it gets its description and grants.

COMMENT ON TABLE pgsched.schema_code IS 'The files of sql/code/ (functions, views and triggers by concept) as last applied, with their checksums: pgsched migrate applies a file again when it changes.';

GRANT SELECT ON TABLE pgsched.schema_code TO pgsched_worker;
GRANT ALL ON TABLE pgsched.schema_code TO pgsched_admin;
