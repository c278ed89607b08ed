-- Moves up to `p_limit` dead letters and deferred events of days older than the key retention (received before
-- `p_keys_before`) to the held partition, so that their day can be dropped. Rows locked right now (a retry, a
-- replay) are skipped and moved by a later step. Each status is looked up down its partial index. Returns how
-- many it moved.
CREATE OR REPLACE FUNCTION payhook_hold_unsettled(p_keys_before bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_last integer := (p_keys_before / 86400000)::integer;
    r record;
    v_moved integer := 0;
BEGIN
    FOR r IN
        SELECT bucket, id FROM inbox WHERE bucket >= 1 AND bucket < v_last AND status = 'dead_lettered'
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox SET bucket = 0 WHERE bucket = r.bucket AND id = r.id;
        v_moved := v_moved + 1;
    END LOOP;
    FOR r IN
        SELECT bucket, id FROM inbox WHERE bucket >= 1 AND bucket < v_last AND status = 'deferred'
        LIMIT p_limit - v_moved FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox SET bucket = 0 WHERE bucket = r.bucket AND id = r.id;
        v_moved := v_moved + 1;
    END LOOP;
    RETURN v_moved;
END $$;
