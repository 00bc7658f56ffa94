-- sql/code/tenancy.sql — tenancy and roles.
--
-- which tenants a login acts for (producer_tenant_problem, login_acts_for_all_tenants,
-- failing closed), the tenant registry (tenant_add, tenant_set_active), system_identifier.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Whether the session's login acts for every tenant: superusers, the schema's owner and
-- admins do; anyone else needs a binding with tenant_id '*'.
CREATE OR REPLACE FUNCTION pgsched.login_acts_for_all_tenants() RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_has_role(session_user, 'pgsched_admin', 'MEMBER')
        OR pg_has_role(session_user, (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n
                                       WHERE n.nspname = 'pgsched'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b
                    WHERE b.role_name = session_user AND b.tenant_id = '*')
$$;
COMMENT ON FUNCTION pgsched.login_acts_for_all_tenants() IS 'Whether the session''s login acts for every tenant: superusers, the pgsched schema''s owner and pgsched_admin members do; any other login needs the binding tenant_id ''*''.';
REVOKE ALL ON FUNCTION pgsched.login_acts_for_all_tenants() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.login_acts_for_all_tenants() TO pgsched_producer, pgsched_worker, pgsched_admin;

-- Refuses tenants the session's login may not act for. Fails closed: a login with no
-- binding acts for no tenant, and the message gives the binding an admin would add.
CREATE OR REPLACE FUNCTION pgsched.producer_tenant_problem(tenant_ids text[]) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN pgsched.login_acts_for_all_tenants() THEN NULL
        WHEN NOT EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user)
            THEN format(
                'role %s is bound to no tenant, so it may act for none; an admin binds it with: '
                'INSERT INTO pgsched.producer_tenants (role_name, tenant_id) VALUES (%L, %L)',
                session_user, session_user::text,
                CASE WHEN coalesce(tenant_ids[1], 'default') LIKE '\_%' THEN '*'
                     ELSE coalesce(tenant_ids[1], 'default') END)
        ELSE (
            SELECT format(
                'role %s may only schedule for tenant(s) %s, not %s',
                session_user,
                (SELECT string_agg(b.tenant_id, ', ' ORDER BY b.tenant_id)
                   FROM pgsched.producer_tenants AS b WHERE b.role_name = session_user),
                u.t)
              FROM unnest(tenant_ids) AS u(t)
             WHERE NOT EXISTS (SELECT 1 FROM pgsched.producer_tenants AS b
                                WHERE b.role_name = session_user AND b.tenant_id = coalesce(u.t, 'default'))
             LIMIT 1)
    END
$$;
COMMENT ON FUNCTION pgsched.producer_tenant_problem(text[]) IS 'Why the session''s login may not act for these tenants, or NULL. Fails closed: a login bound to no tenant (pgsched.producer_tenants) acts for none, and the message gives the binding an admin would add.';
REVOKE ALL ON FUNCTION pgsched.producer_tenant_problem(text[]) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.producer_tenant_problem(text[]) TO pgsched_worker, pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.tenant_add(
    tenant_id text, product text, metadata jsonb DEFAULT '{}'
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    -- A value, not now(): Citus allows only immutable functions in the upsert of a
    -- reference table (distributed mode).
    t_now timestamptz := now();
BEGIN
    IF tenant_add.tenant_id IS NULL OR tenant_add.tenant_id !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$' THEN
        RAISE EXCEPTION 'pgsched: tenant_id % is not a plain identifier (letters, digits, _, . and -, starting with a letter or digit)',
            quote_nullable(tenant_add.tenant_id) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tenant_add.product IS NULL OR tenant_add.product !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$' THEN
        RAISE EXCEPTION 'pgsched: product % is not a plain identifier', quote_nullable(tenant_add.product)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tenant_add.metadata IS NULL OR jsonb_typeof(tenant_add.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pgsched: tenant metadata must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.tenants AS t (tenant_id, product, metadata)
    VALUES (tenant_add.tenant_id, tenant_add.product, tenant_add.metadata)
    ON CONFLICT ON CONSTRAINT tenants_pkey DO UPDATE
        SET product = excluded.product, metadata = excluded.metadata, active = TRUE, updated_at = t_now;
    RETURN tenant_add.tenant_id;
END;
$$;
COMMENT ON FUNCTION pgsched.tenant_add(text, text, jsonb) IS 'Register a tenant, with its product and metadata; returns its id.';
REVOKE ALL ON FUNCTION pgsched.tenant_add(text, text, jsonb) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.tenant_add(text, text, jsonb) TO pgsched_admin;

CREATE OR REPLACE FUNCTION pgsched.tenant_set_active(tenant_id text, active boolean) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    t_now timestamptz := now();  -- a value: see tenant_add
BEGIN
    IF tenant_set_active.active IS NULL THEN
        RAISE EXCEPTION 'pgsched: active must be true or false, got NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgsched.tenants AS t
       SET active = tenant_set_active.active, updated_at = t_now
     WHERE t.tenant_id = tenant_set_active.tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: no tenant %', tenant_set_active.tenant_id USING ERRCODE = 'no_data_found';
    END IF;
    RETURN tenant_set_active.tenant_id;
END;
$$;
COMMENT ON FUNCTION pgsched.tenant_set_active(text, boolean) IS 'Activate or deactivate a tenant: an inactive tenant is left out of fan-outs. Returns its id.';
REVOKE ALL ON FUNCTION pgsched.tenant_set_active(text, boolean) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.tenant_set_active(text, boolean) TO pgsched_admin;

-- pg_control_system() is for superusers and pg_monitor; the identity alone is no secret.
CREATE OR REPLACE FUNCTION pgsched.system_identifier() RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT system_identifier::text FROM pg_control_system()
$$;
COMMENT ON FUNCTION pgsched.system_identifier() IS 'The Postgres system identifier, which the Redis mirror records so that a mirror built from another database is recognised.';
REVOKE ALL ON FUNCTION pgsched.system_identifier() FROM public;
GRANT EXECUTE ON FUNCTION pgsched.system_identifier() TO pgsched_worker, pgsched_admin;
