-- Applies a subscription event as payhook-core decided it from the row read under the subscription's lock
-- (`p_seen_status`, `p_seen_at`; NULL when there was none): 'insert', 'update', 'stale' or 'defer', with `p_why`
-- for the last two. Claims the business key first. Returns 'duplicate' (the key is another event's; the detail
-- names it), 'processed' (with the reason as detail when nothing changed: the key stays claimed) or 'deferred'
-- (the caller settles the row and releases the key). A change writes its audit row and `subscription.updated`
-- rows; an end (`p_revoke_reason` set) revokes the subscription's granted entitlements, each with its audit row
-- and `entitlement.revoked` rows (sinks `p_revoke_sinks`).
--
-- Invariant: the subscription changes only through the guarded INSERT or UPDATE (on the state it was decided
-- from); a miss changes nothing and is answered 'deferred'.
CREATE OR REPLACE FUNCTION payhook_apply_subscription(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_now bigint,
    p_decision text, p_why text, p_id text, p_customer text, p_status text, p_period_end bigint,
    p_seen_status text, p_seen_at bigint, p_sinks text[], p_payload jsonb, p_revoke_reason text,
    p_revoke_sinks text[],
    OUT outcome text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    detail := payhook_claim_key(p_source, p_business_key, p_event_id, p_now);
    IF detail IS NOT NULL THEN
        outcome := 'duplicate';
        RETURN;
    END IF;
    IF p_decision = 'stale' THEN
        outcome := 'processed';
        detail := p_why;
        RETURN;
    ELSIF p_decision = 'defer' THEN
        outcome := 'deferred';
        detail := p_why;
        RETURN;
    ELSIF p_decision = 'insert' THEN
        INSERT INTO subscriptions (id, customer_id, status, current_period_end, occurred_at, source, event_id,
                                   created_at, updated_at)
        VALUES (p_id, p_customer, p_status, p_period_end, p_occurred_at, p_source, p_event_id, p_now, p_now)
        ON CONFLICT (id) DO NOTHING;
    ELSIF p_decision = 'update' THEN
        UPDATE subscriptions
        SET customer_id = coalesce(p_customer, customer_id), status = p_status,
            current_period_end = coalesce(p_period_end, current_period_end), occurred_at = p_occurred_at,
            source = p_source, event_id = p_event_id, updated_at = p_now
        WHERE id = p_id AND status = p_seen_status AND occurred_at = p_seen_at;
    ELSE
        RAISE 'unknown subscription decision %', p_decision;
    END IF;
    IF NOT FOUND THEN
        outcome := 'deferred';
        detail := format('subscription %s changed concurrently', p_id);
        RETURN;
    END IF;

    INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
    VALUES ('subscription', p_id, p_source, p_event_id, p_event_type, p_seen_status, p_status, p_now);
    PERFORM payhook_billing_outbox('subscription.updated', p_sinks, p_source, p_event_id, p_payload, p_now);
    IF p_revoke_reason IS NOT NULL THEN
        FOR r IN
            UPDATE entitlements
            SET status = 'revoked', reason = p_revoke_reason, revoked_at = p_now, updated_at = p_now
            WHERE subscription_id = p_id AND status = 'granted'
            RETURNING invoice_id, customer_id
        LOOP
            INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
            VALUES ('entitlement', r.invoice_id, p_source, p_event_id, p_event_type, 'granted', 'revoked', p_now);
            PERFORM payhook_billing_outbox(
                'entitlement.revoked', p_revoke_sinks, p_source, p_event_id,
                jsonb_build_object('kind', 'entitlement.revoked', 'invoice_id', r.invoice_id,
                                   'customer_id', r.customer_id, 'subscription_id', p_id, 'amount', NULL,
                                   'currency', NULL, 'reason', p_revoke_reason, 'source', p_source,
                                   'event_id', p_event_id, 'event_type', p_event_type, 'occurred_at', p_occurred_at),
                p_now);
        END LOOP;
    END IF;
    outcome := 'processed';
END
$$;
