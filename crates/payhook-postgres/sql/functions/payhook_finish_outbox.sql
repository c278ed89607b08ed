-- Records the outcome of a delivery attempt of a leased outbox row, only for the holder of its lease; a row that
-- died raises the alert the caller passes (none for the alerts sink's own rows: alerts never alert), in the same
-- transaction. Returns whether the row was the caller's.
CREATE OR REPLACE FUNCTION payhook_finish_outbox(
    p_id bigint, p_owner text, p_status text, p_next_attempt_at bigint, p_last_status integer, p_error text,
    p_delivered_at bigint, p_alert_key text, p_alert_text text, p_now bigint, p_alert_kind text,
    p_alert_sink text, p_alert_window bigint, p_alert_gather bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE outbox
    SET status = p_status, attempts = attempts + 1, next_attempt_at = p_next_attempt_at,
        last_status = p_last_status, last_error = coalesce(p_error, last_error), delivered_at = p_delivered_at,
        lease_owner = NULL, lease_until = NULL
    WHERE id = p_id AND lease_owner = p_owner AND status = 'pending';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_alert_key IS NOT NULL THEN
        PERFORM payhook_raise_alert(p_alert_key, p_alert_text, p_now, p_alert_kind, p_alert_sink, p_alert_window,
                                    p_alert_gather);
    END IF;
    RETURN true;
END
$$;
