-- Registers a batch of orders, in the order given (the caller sorts them by lock), each under its advisory lock
-- and in its own savepoint; an order's deferred events become due at once. One row per order: 'created',
-- 'exists' (with the stored money) or 'failed'.
CREATE OR REPLACE FUNCTION payhook_register_batch(
    p_lock bigint[], p_id text[], p_amount bigint[], p_currency text[], p_now bigint[])
RETURNS TABLE (outcome text, detail text, stored_amount bigint, stored_currency text)
LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT * FROM unnest(p_lock, p_id, p_amount, p_currency, p_now) WITH ORDINALITY
            AS u(lock, id, amount, currency, now, n)
        ORDER BY n
    LOOP
        outcome := NULL; detail := NULL; stored_amount := NULL; stored_currency := NULL;
        BEGIN
            PERFORM pg_advisory_xact_lock(d.lock);
            INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
            VALUES (d.id, d.amount, d.currency, 'pending', d.now, d.now)
            ON CONFLICT (id) DO NOTHING;
            IF FOUND THEN
                UPDATE inbox SET next_attempt_at = d.now
                WHERE status = 'deferred' AND order_id = d.id AND next_attempt_at > d.now;
                outcome := 'created';
            ELSE
                SELECT o.amount, o.currency INTO stored_amount, stored_currency FROM orders o WHERE o.id = d.id;
                outcome := 'exists';
            END IF;
        EXCEPTION
            WHEN deadlock_detected OR serialization_failure THEN
                RAISE;
            WHEN OTHERS THEN
                outcome := 'failed';
                detail := SQLSTATE || ': ' || SQLERRM;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
