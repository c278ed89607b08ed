-- Claims a signature nonce: prunes up to 64 expired nonces (rows another claim is pruning are skipped), then
-- records this one, replacing an expired row of the same nonce. Returns 'new', 'redelivery' (seen, same body) or
-- 'replayed' (seen, another body).
CREATE OR REPLACE FUNCTION payhook_claim_nonce(
    p_keyid text, p_nonce text, p_body_sha256 text, p_expires_at bigint, p_now bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_body text;
BEGIN
    DELETE FROM signature_nonces
    WHERE (keyid, nonce) IN (SELECT n.keyid, n.nonce FROM signature_nonces n WHERE n.expires_at < p_now
                             ORDER BY n.expires_at LIMIT 64 FOR UPDATE SKIP LOCKED);
    INSERT INTO signature_nonces AS n (keyid, nonce, body_sha256, expires_at)
    VALUES (p_keyid, p_nonce, p_body_sha256, p_expires_at)
    ON CONFLICT (keyid, nonce) DO UPDATE SET body_sha256 = excluded.body_sha256, expires_at = excluded.expires_at
        WHERE n.expires_at < p_now;
    IF FOUND THEN
        RETURN 'new';
    END IF;
    SELECT n.body_sha256 INTO v_body FROM signature_nonces n WHERE n.keyid = p_keyid AND n.nonce = p_nonce;
    RETURN CASE WHEN v_body = p_body_sha256 THEN 'redelivery' ELSE 'replayed' END;
END
$$;
