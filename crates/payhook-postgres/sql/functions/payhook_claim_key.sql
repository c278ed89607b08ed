-- Claims an event's business key: NULL when it was free, else why the event is a duplicate.
CREATE OR REPLACE FUNCTION payhook_claim_key(p_source text, p_key text, p_event_id text, p_now bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
BEGIN
    INSERT INTO business_keys (source, key, event_id, created_at)
    VALUES (p_source, p_key, p_event_id, p_now)
    ON CONFLICT (source, key) DO NOTHING;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT event_id INTO v_holder FROM business_keys WHERE source = p_source AND key = p_key;
    RETURN format('business key %s was already applied by event %s', p_key, coalesce(v_holder, '?'));
END
$$;
