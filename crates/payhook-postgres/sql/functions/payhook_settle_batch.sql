-- Writes the final state of attempts that were not simply applied (deferred, dead letter, no-op, duplicate,
-- retried, replayed), logs each attempt, and releases the business key of those whose effect was not applied, so
-- that it stays free for an event that can use it. The rows are identified by (source, event_id) and checked
-- against their row id. Then writes the forwarded events (`p_forward_kind` rows, `event.received`) and raises the
-- alerts, in the order given (the caller sorts them by key: see the locking protocol of the schema);
-- `p_alert_sink` is NULL when alerts are off. The element types are the baseline's composites.
CREATE OR REPLACE FUNCTION payhook_settle_batch(
    p_settlements payhook_settlement[], p_forward_kind text, p_forwards payhook_forward[], p_alert_kind text,
    p_alert_sink text, p_alert_window bigint, p_alert_gather bigint, p_alerts payhook_alert[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d payhook_settlement;
    a payhook_alert;
    v_key text;
    v_settled integer := 0;
BEGIN
    FOREACH d IN ARRAY coalesce(p_settlements, '{}')
    LOOP
        UPDATE inbox SET status = d.status, reason = d.reason, attempts = d.attempts,
                         next_attempt_at = d.next_attempt_at, order_id = d.waiting_order, lease_owner = NULL,
                         lease_until = NULL, updated_at = d.now
        WHERE source = d.source AND event_id = d.event_id AND id = d.row_id
        RETURNING business_key INTO v_key;
        IF NOT FOUND THEN
            RAISE 'inbox row % (%/%) to settle does not exist', d.row_id, d.source, d.event_id;
        END IF;
        IF d.release_key THEN
            DELETE FROM business_keys WHERE source = d.source AND key = v_key AND event_id = d.event_id;
        END IF;
        INSERT INTO inbox_attempts (inbox_id, attempt, at, outcome, detail)
        VALUES (d.row_id, d.attempts, d.now, d.status, d.reason)
        ON CONFLICT (inbox_id, attempt) DO UPDATE SET at = excluded.at, outcome = excluded.outcome,
                                                      detail = excluded.detail;
        v_settled := v_settled + 1;
    END LOOP;

    IF cardinality(p_forwards) > 0 THEN
        INSERT INTO outbox (kind, sink, source, event_id, payload, status, next_attempt_at, created_at)
        SELECT p_forward_kind, f.sink, f.source, f.event_id, f.payload::jsonb, 'pending', f.now, f.now
        FROM unnest(p_forwards) WITH ORDINALITY AS f(sink, source, event_id, payload, now, n)
        ORDER BY f.n;
    END IF;

    IF p_alert_sink IS NOT NULL THEN
        FOREACH a IN ARRAY coalesce(p_alerts, '{}')
        LOOP
            PERFORM payhook_raise_alert(a.key, a.text, a.now, p_alert_kind, p_alert_sink, p_alert_window,
                                        p_alert_gather);
        END LOOP;
    END IF;
    RETURN v_settled;
END
$$;
