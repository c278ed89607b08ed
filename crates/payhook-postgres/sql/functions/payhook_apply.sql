-- Applies a planned order transition for one event: business-key claim, guarded update, audit row, and one
-- outbox row per sink in `p_sinks` (the sinks that take this kind, in configuration order; `{''}` records the
-- effect once, unrouted, when no sink takes it).
--
-- The caller holds the order's advisory lock and passes the status it read under it (`p_status`, NULL when the
-- order does not exist): it is the previous status of the transition. Returns 'processed', 'duplicate' (the
-- business key is held by another event; the detail names it) or 'unapplied' (the guard matched nothing: the
-- business key stays claimed, and the caller decides with payhook-core's ledger rules whether to keep it (no-op)
-- or release it (deferred, dead letter)).
--
-- The outbox document is rendered by payhook (`payhook_store::payload::OrderChanged`) for each status the guard
-- allows as the previous one: `p_payloads[1]` for `p_from1`, `p_payloads[2]` for `p_from2` (absent when the guard
-- has one status); the one whose previous status is the order's is written.
--
-- Invariant: the order changes only through the guarded UPDATE, and an audit row and the effect's outbox rows are
-- written with it.
CREATE OR REPLACE FUNCTION payhook_apply(
    p_source text, p_event_id text, p_event_type text, p_payloads text[], p_business_key text, p_order_id text,
    p_from1 text, p_from2 text, p_to text, p_amount bigint, p_currency text, p_outbox_kind text, p_sinks text[],
    p_now bigint, p_status text,
    OUT outcome text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
    v_payload jsonb;
    v_sink text;
BEGIN
    INSERT INTO business_keys (source, key, event_id, created_at)
    VALUES (p_source, p_business_key, p_event_id, p_now)
    ON CONFLICT (source, key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT event_id INTO v_holder FROM business_keys WHERE source = p_source AND key = p_business_key;
        outcome := 'duplicate';
        detail := format('business key %s was already applied by event %s', p_business_key, coalesce(v_holder, '?'));
        RETURN;
    END IF;

    IF p_status IS NOT NULL THEN
        UPDATE orders SET status = p_to, updated_at = p_now
        WHERE id = p_order_id AND status IN (p_from1, p_from2)
          AND (p_amount IS NULL OR (amount = p_amount AND currency = p_currency));
    END IF;
    IF p_status IS NULL OR NOT FOUND THEN
        outcome := 'unapplied';
        RETURN;
    END IF;

    INSERT INTO order_audit (order_id, source, event_id, event_type, from_status, to_status, at)
    VALUES (p_order_id, p_source, p_event_id, p_event_type, p_status, p_to, p_now);
    v_payload := (CASE WHEN p_status = p_from1 THEN p_payloads[1] ELSE coalesce(p_payloads[2], p_payloads[1]) END)::jsonb;
    IF coalesce(cardinality(p_sinks), 0) <= 1 THEN
        -- One sink or none (the common case): a plain INSERT.
        v_sink := coalesce(p_sinks[1], '');
        INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, next_attempt_at, created_at)
        VALUES (p_outbox_kind, v_sink, p_order_id, p_source, p_event_id, v_payload,
                CASE WHEN v_sink = '' THEN 'unrouted' ELSE 'pending' END,
                CASE WHEN v_sink = '' THEN NULL ELSE p_now END, p_now);
    ELSE
        INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, next_attempt_at, created_at)
        SELECT p_outbox_kind, s.sink, p_order_id, p_source, p_event_id, v_payload, 'pending', p_now, p_now
        FROM unnest(p_sinks) WITH ORDINALITY AS s(sink, n)
        ORDER BY s.n;
    END IF;
    outcome := 'processed';
END
$$;
