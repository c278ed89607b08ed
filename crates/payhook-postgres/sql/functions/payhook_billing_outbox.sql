-- One outbox row of a billing effect per sink in `p_sinks` (`{''}`: once, unrouted).
CREATE OR REPLACE FUNCTION payhook_billing_outbox(
    p_kind text, p_sinks text[], p_source text, p_event_id text, p_payload jsonb, p_now bigint)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox (kind, sink, source, event_id, payload, status, next_attempt_at, created_at)
    SELECT p_kind, s.sink, p_source, p_event_id, p_payload,
           CASE WHEN s.sink = '' THEN 'unrouted' ELSE 'pending' END,
           CASE WHEN s.sink = '' THEN NULL ELSE p_now END, p_now
    FROM unnest(coalesce(p_sinks, '{""}')) WITH ORDINALITY AS s(sink, n)
    ORDER BY s.n
$$;
