-- Raises an alert: the first alert of a key opens a window and writes an outbox row for the alerts sink that waits
-- `p_gather` before it is due; repeats within the window are counted into that row while it waits (pending and not
-- leased), and counted as `suppressed` once a dispatcher has it, to be reported by the first alert of the next
-- window (`suppressed_before`).
--
-- Race-free across instances: the window row is made to exist (a placeholder with no alert, the first time) and
-- then locked before it is read, so concurrent raisers of one key queue up on it; a dispatcher's claim of the alert
-- row and a repeat's gathering into it meet on the row itself (the repeat re-checks `lease_owner IS NULL` on the
-- row version the claim committed).
CREATE OR REPLACE FUNCTION payhook_raise_alert(
    p_key text, p_text text, p_now bigint, p_kind text, p_sink text, p_window bigint, p_gather bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    v_id bigint;
    v_gathered boolean;
BEGIN
    INSERT INTO alert_windows (key, window_start, outbox_id, count, suppressed)
    VALUES (p_key, p_now, NULL, 0, 0)
    ON CONFLICT (key) DO NOTHING;
    SELECT a.window_start, a.outbox_id, a.suppressed INTO w FROM alert_windows a WHERE a.key = p_key FOR UPDATE;
    IF w.outbox_id IS NOT NULL AND p_now < w.window_start + p_window THEN
        UPDATE outbox
        SET payload = payload || jsonb_build_object('count', (payload ->> 'count')::bigint + 1,
                                                    'last_text', p_text, 'last_at_ms', p_now)
        WHERE id = w.outbox_id AND status = 'pending' AND lease_owner IS NULL;
        v_gathered := FOUND;
        UPDATE alert_windows
        SET count = count + 1, suppressed = suppressed + CASE WHEN v_gathered THEN 0 ELSE 1 END
        WHERE key = p_key;
        RETURN;
    END IF;
    INSERT INTO outbox (kind, sink, payload, status, next_attempt_at, created_at)
    VALUES (p_kind, p_sink,
            jsonb_build_object('kind', p_kind, 'key', p_key, 'text', p_text, 'count', 1, 'first_at_ms', p_now,
                               'window_ms', p_window, 'suppressed_before', w.suppressed),
            'pending', p_now + p_gather, p_now)
    RETURNING id INTO v_id;
    UPDATE alert_windows SET window_start = p_now, outbox_id = v_id, count = 1, suppressed = 0 WHERE key = p_key;
END
$$;
