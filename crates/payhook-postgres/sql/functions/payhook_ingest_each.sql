-- Records a batch of verified deliveries and applies their effects one after another, in the order given (the
-- caller sorts them by lock): the general form of payhook_ingest_batch, which runs it for a batch it cannot run as
-- a set (see there), and the reference its set form is tested against. Each element of `p_deliveries` is one
-- delivery (the baseline's composite type `payhook_delivery`); an order event carries its planned change
-- (`lock`, `order_id`, the guard's `from1`/`from2`, `to_status`, the expected money, the outbox kind and its
-- documents, see payhook_apply). `create_order` (a payment of a source whose orders are implicit) creates a missing
-- order from the payment's amount and currency before it is applied, as payhook_register_batch would.
--
-- Each delivery runs in its own BEGIN … EXCEPTION block, a subtransaction, i.e. a savepoint: an error rolls back
-- that delivery's writes only and is returned as outcome 'failed', so that its batch-mates still commit.
-- Deadlocks and serialization failures are re-raised instead: they abort the batch, which the caller runs again.
--
-- The event-id key is claimed in `inbox_keys` before the row is written to the partition of its day, and a
-- duplicate by business key is found by its bucket and id.
--
-- Routing: `p_route_sinks` holds, once per batch, the sinks of each outbox kind present in the batch, one slice
-- after another; a delivery's kind has the slice `p_route_sinks[route_lo:route_hi]`.
--
-- One row per delivery, in order: the rows payhook_ingest_batch returns (its outcomes are described there), and
-- 'failed' (nothing of this delivery was written; the detail is the error).
CREATE OR REPLACE FUNCTION payhook_ingest_each(p_deliveries payhook_delivery[], p_route_sinks text[])
RETURNS TABLE (outcome text, detail text, row_id bigint, order_status text, order_amount bigint,
               order_currency text)
LANGUAGE plpgsql AS $$
DECLARE
    d payhook_delivery;
    v_applied record;
    v_bucket integer;
BEGIN
    FOREACH d IN ARRAY coalesce(p_deliveries, '{}')
    LOOP
        outcome := NULL; detail := NULL; row_id := NULL;
        order_status := NULL; order_amount := NULL; order_currency := NULL;
        BEGIN
            IF d.order_id IS NOT NULL THEN
                PERFORM pg_advisory_xact_lock(d.lock);
                SELECT o.status, o.amount, o.currency INTO order_status, order_amount, order_currency
                FROM orders o WHERE o.id = d.order_id;
            END IF;

            INSERT INTO inbox_keys (source, event_id) VALUES (d.source, d.event_id) ON CONFLICT DO NOTHING;
            IF FOUND THEN
                v_bucket := (d.received_at / 86400000)::integer;
                INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                                   received_at, updated_at, verification, headers, body, bucket)
                VALUES (d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.effect,
                        CASE WHEN d.status = 'billing' THEN 'processed' ELSE d.status END, d.reason,
                        d.received_at, d.received_at, d.verification, d.headers, d.body, v_bucket)
                RETURNING id INTO row_id;
            END IF;
            IF row_id IS NULL THEN
                outcome := 'duplicate';
            ELSIF d.status = 'billing' THEN
                outcome := 'billing';
            ELSIF d.status <> 'processed' OR d.order_id IS NULL THEN
                outcome := d.status;
                detail := d.reason;
                IF outcome = 'dead_lettered' THEN
                    INSERT INTO inbox_attempts (inbox_id, attempt, at, outcome, detail)
                    VALUES (row_id, 1, d.received_at, outcome, detail);
                END IF;
            ELSE
                IF order_status IS NULL AND d.create_order THEN
                    INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
                    VALUES (d.order_id, d.amount, d.currency, 'pending', d.received_at, d.received_at)
                    ON CONFLICT (id) DO NOTHING;
                    UPDATE inbox SET next_attempt_at = d.received_at
                    WHERE status = 'deferred' AND order_id = d.order_id AND next_attempt_at > d.received_at;
                    order_status := 'pending'; order_amount := d.amount; order_currency := d.currency;
                END IF;
                -- An assignment is evaluated as a plain expression, without starting an executor for a SELECT.
                v_applied := payhook_apply(
                    d.source, d.event_id, d.event_type, d.payloads, d.business_key, d.order_id, d.from1, d.from2,
                    d.to_status, d.amount, d.currency, d.outbox_kind, p_route_sinks[d.route_lo:d.route_hi],
                    d.received_at, order_status);
                outcome := v_applied.outcome;
                detail := v_applied.detail;
                IF outcome = 'duplicate' THEN
                    UPDATE inbox SET status = 'duplicate', reason = detail WHERE bucket = v_bucket AND id = row_id;
                    INSERT INTO inbox_attempts (inbox_id, attempt, at, outcome, detail)
                    VALUES (row_id, 1, d.received_at, outcome, detail);
                END IF;
            END IF;
        EXCEPTION
            WHEN deadlock_detected OR serialization_failure THEN
                RAISE;
            WHEN OTHERS THEN
                outcome := 'failed';
                detail := SQLSTATE || ': ' || SQLERRM;
                row_id := NULL;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
