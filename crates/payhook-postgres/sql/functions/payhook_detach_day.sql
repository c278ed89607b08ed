-- Detaches the oldest day partition wholly older than the key retention (`p_keys_before`), if it holds no
-- unsettled row: subtracts its rows from the counters, detaches it and renames it `inbox_gone_YYYYMMDD` for
-- payhook_forget_gone. Waits at most `p_lock_timeout_ms` for the ACCESS EXCLUSIVE lock on `inbox` a DETACH needs
-- (`lock_timed_out` when it did not get it: the next step tries again). Returns the events it removed.
CREATE OR REPLACE FUNCTION payhook_detach_day(p_keys_before bigint, p_lock_timeout_ms integer,
    OUT detached text, OUT events bigint, OUT lock_timed_out boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_unsettled boolean;
BEGIN
    events := 0;
    lock_timed_out := false;
    PERFORM pg_advisory_xact_lock(hashtext('payhook-partitions:' || current_schema()));
    SELECT p.name INTO v_name FROM payhook_day_partitions() p
    WHERE p.day < (p_keys_before / 86400000)::integer ORDER BY p.day LIMIT 1;
    IF v_name IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
        LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        lock_timed_out := true;
        RETURN;
    END;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = ''dead_lettered'')
                        OR EXISTS (SELECT 1 FROM %I WHERE status = ''deferred'')', v_name, v_name)
        INTO v_unsettled;
    IF v_unsettled THEN
        RETURN;
    END IF;
    EXECUTE format('WITH c AS (SELECT source, status, count(*) AS n FROM %I GROUP BY source, status),
                         d AS (INSERT INTO counter_deltas SELECT ''inbox'', source, '''', status, -n FROM c)
                    SELECT coalesce(sum(n), 0)::bigint FROM c', v_name)
        INTO events;
    EXECUTE format('ALTER TABLE inbox DETACH PARTITION %I', v_name);
    detached := 'inbox_gone_' || substr(v_name, 7);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', v_name, detached);
    INSERT INTO inbox_gone (name, after_id) VALUES (detached, 0);
END $$;
