-- Leases up to `p_limit` due deferred events to `p_owner` until `p_now + p_lease_ms`, earliest due first,
-- skipping rows another instance is claiming right now; each row is updated by its bucket and id (one partition).
CREATE OR REPLACE FUNCTION payhook_claim_due(p_owner text, p_now bigint, p_lease_ms bigint, p_limit bigint)
RETURNS TABLE (id bigint, source text, event_id text, attempts integer, next_attempt_at bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT i.bucket, i.id FROM inbox i
        WHERE i.status = 'deferred' AND i.next_attempt_at <= p_now
          AND (i.lease_until IS NULL OR i.lease_until <= p_now)
        ORDER BY i.next_attempt_at, i.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox i SET lease_owner = p_owner, lease_until = p_now + p_lease_ms
        WHERE i.bucket = r.bucket AND i.id = r.id
        RETURNING i.id, i.source, i.event_id, i.attempts, i.next_attempt_at
        INTO id, source, event_id, attempts, next_attempt_at;
        RETURN NEXT;
    END LOOP;
END $$;
