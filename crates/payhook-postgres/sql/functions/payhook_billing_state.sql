-- The subscription `p_subscription` and the entitlement of invoice `p_invoice` as the rules need them, read by
-- the caller under their billing locks (either may be NULL; a missing row reads as NULLs).
CREATE OR REPLACE FUNCTION payhook_billing_state(p_subscription text, p_invoice text,
    OUT subscription_status text, OUT subscription_at bigint, OUT entitlement_status text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_subscription IS NOT NULL THEN
        SELECT s.status, s.occurred_at INTO subscription_status, subscription_at
        FROM subscriptions s WHERE s.id = p_subscription;
    END IF;
    IF p_invoice IS NOT NULL THEN
        SELECT e.status INTO entitlement_status FROM entitlements e WHERE e.invoice_id = p_invoice;
    END IF;
END
$$;
