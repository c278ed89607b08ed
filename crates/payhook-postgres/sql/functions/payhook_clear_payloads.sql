-- Clears the raw body and headers of up to `p_limit` settled events received in `[p_from, p_before)`, oldest
-- first, skipping rows locked right now. Each row is updated by its bucket and id: one partition, one probe of its
-- id index (a join of the inbox with the rows chosen would be planned over every partition). Returns how many.
CREATE OR REPLACE FUNCTION payhook_clear_payloads(p_from bigint, p_before bigint, p_limit integer, p_now bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_cleared integer := 0;
BEGIN
    FOR r IN
        SELECT bucket, id FROM inbox
        WHERE received_at >= p_from AND received_at < p_before AND status IN ('processed', 'duplicate', 'ignored')
          AND pruned_at IS NULL
        ORDER BY received_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox SET body = '\x'::bytea, headers = '{}', pruned_at = p_now WHERE bucket = r.bucket AND id = r.id;
        v_cleared := v_cleared + 1;
    END LOOP;
    RETURN v_cleared;
END $$;
