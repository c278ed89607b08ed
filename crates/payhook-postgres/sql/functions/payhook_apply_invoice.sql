-- Applies an invoice event as payhook-core decided it from the entitlement (and the subscription) read under
-- their locks: 'grant', 'grant_ended', 'tombstone', 'revoke', 'report' or 'noop', with `p_why` the reason of a
-- revocation or of nothing to do. Claims the business key first; same outcomes as payhook_apply_subscription.
-- Writes `p_kind` rows with `p_payload` for a grant, a revocation (completed with the stored customer and
-- subscription when the event names none) and a report.
--
-- Invariant: an entitlement is created only by an INSERT on its invoice id (never twice) and revoked only from
-- 'granted'; a miss changes nothing and is answered 'deferred'.
CREATE OR REPLACE FUNCTION payhook_apply_invoice(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_now bigint,
    p_decision text, p_why text, p_invoice text, p_customer text, p_subscription text, p_amount bigint,
    p_currency text, p_kind text, p_sinks text[], p_payload jsonb,
    OUT outcome text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_customer text;
    v_subscription text;
BEGIN
    detail := payhook_claim_key(p_source, p_business_key, p_event_id, p_now);
    IF detail IS NOT NULL THEN
        outcome := 'duplicate';
        RETURN;
    END IF;
    IF p_decision = 'noop' THEN
        outcome := 'processed';
        detail := p_why;
        RETURN;
    ELSIF p_decision IN ('grant', 'grant_ended', 'tombstone') THEN
        v_status := CASE WHEN p_decision = 'grant' THEN 'granted' ELSE 'revoked' END;
        INSERT INTO entitlements (invoice_id, customer_id, subscription_id, status, amount, currency, reason,
                                  granted_at, revoked_at, updated_at)
        VALUES (p_invoice, p_customer, p_subscription, v_status, p_amount, p_currency,
                CASE WHEN v_status = 'granted' THEN NULL ELSE p_why END,
                CASE WHEN v_status = 'granted' THEN p_now END, CASE WHEN v_status = 'revoked' THEN p_now END, p_now)
        ON CONFLICT (invoice_id) DO NOTHING;
        IF NOT FOUND THEN
            outcome := 'deferred';
            detail := format('entitlement of invoice %s changed concurrently', p_invoice);
            RETURN;
        END IF;
        INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
        VALUES ('entitlement', p_invoice, p_source, p_event_id, p_event_type, NULL, v_status, p_now);
        IF v_status = 'granted' THEN
            PERFORM payhook_billing_outbox(p_kind, p_sinks, p_source, p_event_id, p_payload, p_now);
            detail := NULL;
        ELSE
            detail := p_why;
        END IF;
    ELSIF p_decision = 'revoke' THEN
        UPDATE entitlements SET status = 'revoked', reason = p_why, revoked_at = p_now, updated_at = p_now
        WHERE invoice_id = p_invoice AND status = 'granted'
        RETURNING customer_id, subscription_id INTO v_customer, v_subscription;
        IF NOT FOUND THEN
            outcome := 'deferred';
            detail := format('entitlement of invoice %s changed concurrently', p_invoice);
            RETURN;
        END IF;
        INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
        VALUES ('entitlement', p_invoice, p_source, p_event_id, p_event_type, 'granted', 'revoked', p_now);
        PERFORM payhook_billing_outbox(
            p_kind, p_sinks, p_source, p_event_id,
            p_payload || jsonb_build_object('customer_id', coalesce(p_customer, v_customer),
                                            'subscription_id', coalesce(p_subscription, v_subscription)),
            p_now);
    ELSIF p_decision = 'report' THEN
        PERFORM payhook_billing_outbox(p_kind, p_sinks, p_source, p_event_id, p_payload, p_now);
    ELSE
        RAISE 'unknown invoice decision %', p_decision;
    END IF;
    outcome := 'processed';
END
$$;
