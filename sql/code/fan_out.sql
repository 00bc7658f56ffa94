-- sql/code/fan_out.sql — fan-out.
--
-- task_fan_out (a product or global task becomes one child per tenant) and the
-- fan_out_summary and tenant_outcomes views.
--
-- Applied by `pgsched migrate` after the numbered migrations whenever this file changes
-- (sql/code/order.txt gives the order), so everything here can be applied again: CREATE
-- OR REPLACE, triggers dropped and made again. A signature or a view's columns change
-- through a numbered migration that drops the old one first.

-- Fan-out, as 0006, with the cancel: a parent asked to stop does not fan out.
CREATE OR REPLACE FUNCTION pgsched.task_fan_out(
    task_id bigint, lease_token uuid, as_of timestamptz DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p pgsched.tasks;
    tenant_list text[];
    n integer;
    child_ids bigint[];
    applied boolean;
    owner text;
BEGIN
    -- The tenant first, then the row by tenant and id: in distributed mode a lock must name
    -- the shard.
    SELECT tk.tenant_id INTO owner FROM pgsched.tasks AS tk WHERE tk.id = task_fan_out.task_id;
    SELECT * INTO p FROM pgsched.tasks AS tk
     WHERE tk.tenant_id = owner AND tk.id = task_fan_out.task_id AND tk.status = 'PROCESSING'
       AND tk.lease_token = task_fan_out.lease_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Locked: a cancel either came first (no tenant is started) or waits for the children
    -- to exist and cancels them.
    IF p.cancel_requested_at IS NOT NULL THEN
        PERFORM pgsched.task_finish_many(
            ARRAY[p.id], ARRAY[p.lease_token], ARRAY['CANCELLED'], ARRAY['stopped before fanning out'],
            NULL, as_of, tenant => p.tenant_id);
        RETURN 0;
    END IF;
    SELECT coalesce(array_agg(t.tenant_id ORDER BY t.tenant_id), '{}') INTO tenant_list
      FROM pgsched.tenants AS t
     WHERE t.active AND (p.scope = 'global' OR t.product = p.product);
    n := cardinality(tenant_list);

    -- Children carry an engine-reserved key per tenant ('pgsched:' keys are refused from
    -- users), so a fan-out that runs again after a crash finds its children, not copies.
    SELECT coalesce(array_agg(s.task_id), '{}') INTO child_ids
      FROM pgsched.task_insert_many(
          array_fill(p.task_type, ARRAY[n]),
          array_fill(p.payload, ARRAY[n]),
          array_fill(coalesce(as_of, now()), ARRAY[n]),
          tenant_list,
          array_fill(p.priority, ARRAY[n]),
          array_fill('pgsched:fanout:' || p.id::text, ARRAY[n]),
          array_fill(p.max_attempts, ARRAY[n]),
          array_fill('BATCH'::text, ARRAY[n]),
          array_fill(p.metadata || jsonb_build_object('parent_id', p.id), ARRAY[n]),
          array_fill('tenant'::text, ARRAY[n]),
          array_fill(NULL::text, ARRAY[n]),
          coalesce(as_of, now()),
          -- The children carry on the parent's trace and retry schedule.
          array_fill(p.traceparent, ARRAY[n]),
          p.retry_delays
      ) AS s;
    -- A statement of its own: the children were inserted by the one above.
    UPDATE pgsched.tasks AS tk SET parent_id = p.id WHERE tk.id = ANY(child_ids) AND tk.parent_id IS NULL;
    n := cardinality(child_ids);

    -- The parent's own outcome: done fanning out. Each tenant's outcome is its child's.
    SELECT f.applied INTO applied FROM pgsched.task_finish_many(
        ARRAY[p.id], ARRAY[p.lease_token], ARRAY['COMPLETED'],
        ARRAY[format('fanned out to %s tenants', n)], NULL, as_of, tenant => p.tenant_id) AS f;
    RETURN n;
END;
$$;
COMMENT ON FUNCTION pgsched.task_fan_out(bigint, uuid, timestamp with time zone) IS 'A worker runs a product or global task: creates one child task per active tenant in the BATCH lane (the tenant set resolved now). A parent asked to stop does not fan out. Returns the number of children.';
REVOKE ALL ON FUNCTION pgsched.task_fan_out(bigint, uuid, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION pgsched.task_fan_out(bigint, uuid, timestamptz) TO pgsched_worker, pgsched_admin;

-- Per-tenant outcomes of a fan-out: one row per child (tenant) and a summary per parent.
CREATE OR REPLACE VIEW pgsched.tenant_outcomes AS
SELECT
    c.parent_id,
    c.id AS task_id,
    c.tenant_id,
    c.task_type,
    c.status,
    c.attempts,
    c.max_attempts,
    c.last_error,
    c.updated_at
FROM pgsched.tasks AS c
WHERE c.parent_id IS NOT NULL;
COMMENT ON VIEW pgsched.tenant_outcomes IS 'Per fan-out parent and tenant: the child task and its status.';
REVOKE ALL ON pgsched.tenant_outcomes FROM public;
GRANT SELECT ON pgsched.tenant_outcomes TO pgsched_worker;
GRANT ALL ON pgsched.tenant_outcomes TO pgsched_admin;

CREATE OR REPLACE VIEW pgsched.fan_out_summary AS
SELECT
    c.parent_id,
    c.task_type,
    count(*) AS tenants,
    count(*) FILTER (WHERE c.status = 'COMPLETED') AS completed,
    count(*) FILTER (WHERE c.status = 'FAILED') AS failed,
    count(*) FILTER (WHERE c.status IN ('PENDING', 'QUEUED', 'PROCESSING')) AS unfinished,
    count(*) FILTER (WHERE c.status = 'CANCELLED') AS cancelled
FROM pgsched.tasks AS c
WHERE c.parent_id IS NOT NULL
GROUP BY c.parent_id, c.task_type;
COMMENT ON VIEW pgsched.fan_out_summary IS 'Per fan-out parent: its tenants, and how many completed, failed or are unfinished.';
REVOKE ALL ON pgsched.fan_out_summary FROM public;
GRANT SELECT ON pgsched.fan_out_summary TO pgsched_worker;
GRANT ALL ON pgsched.fan_out_summary TO pgsched_admin;
