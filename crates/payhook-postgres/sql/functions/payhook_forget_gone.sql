-- Deletes the event-id keys, the business keys and the attempt log of up to `p_limit` events of the oldest
-- detached day, in row id order from where the previous step stopped; drops the detached table with the step
-- that reaches its end. Returns what it deleted, and the table it dropped.
CREATE OR REPLACE FUNCTION payhook_forget_gone(p_limit integer,
    OUT events bigint, OUT business_keys bigint, OUT dropped text)
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    v_last bigint;
BEGIN
    events := 0;
    business_keys := 0;
    PERFORM pg_advisory_xact_lock(hashtext('payhook-partitions:' || current_schema()));
    SELECT name, after_id INTO g FROM inbox_gone ORDER BY name LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    EXECUTE format(
        'WITH b AS (SELECT id, source, event_id, business_key FROM %I WHERE id > $1 ORDER BY id LIMIT $2),
              k AS (DELETE FROM inbox_keys x USING b WHERE x.source = b.source AND x.event_id = b.event_id),
              bk AS (DELETE FROM business_keys x USING b
                     WHERE x.source = b.source AND x.key = b.business_key AND x.event_id = b.event_id RETURNING 1),
              a AS (DELETE FROM inbox_attempts x USING b WHERE x.inbox_id = b.id)
         SELECT (SELECT max(id) FROM b), (SELECT count(*) FROM b), (SELECT count(*) FROM bk)', g.name)
        INTO v_last, events, business_keys USING g.after_id, p_limit;
    IF events < p_limit THEN
        EXECUTE format('DROP TABLE %I', g.name);
        DELETE FROM inbox_gone WHERE name = g.name;
        dropped := g.name;
    ELSE
        UPDATE inbox_gone SET after_id = v_last WHERE name = g.name;
    END IF;
END $$;
