-- Re-applies an event for the retry worker or a replay. The caller holds the order's advisory lock and then the
-- inbox row, and settles the row afterwards. Same arguments and outcomes as payhook_apply, plus the order as read.
CREATE OR REPLACE FUNCTION payhook_reapply(
    p_source text, p_event_id text, p_event_type text, p_payloads text[], p_business_key text, p_order_id text,
    p_from1 text, p_from2 text, p_to text, p_amount bigint, p_currency text, p_outbox_kind text, p_sinks text[],
    p_now bigint,
    OUT outcome text, OUT detail text, OUT order_status text, OUT order_amount bigint, OUT order_currency text)
LANGUAGE plpgsql AS $$
DECLARE
    v_applied record;
BEGIN
    SELECT o.status, o.amount, o.currency INTO order_status, order_amount, order_currency
    FROM orders o WHERE o.id = p_order_id;
    v_applied := payhook_apply(
        p_source, p_event_id, p_event_type, p_payloads, p_business_key, p_order_id, p_from1, p_from2, p_to,
        p_amount, p_currency, p_outbox_kind, p_sinks, p_now, order_status);
    outcome := v_applied.outcome;
    detail := v_applied.detail;
END
$$;
