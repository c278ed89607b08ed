-- Records a batch of verified deliveries and applies their effects, in the order given (the caller sorts them by
-- lock): one call, so a batch of any size is one round trip. Each element of `p_deliveries` is one delivery (the
-- composite type `payhook_delivery` of the baseline); routing is as in payhook_ingest_each.
--
-- A batch whose deliveries share no event id, no order and no business key is run as a set: a handful of
-- multi-row statements for the whole batch, in one subtransaction, whatever its size (the row-counting triggers
-- then fire once per statement, not once per delivery). No delivery of such a batch can see another's writes,
-- so the set gives each delivery what running them one after another would. Any other batch, and a set that
-- fails for any reason but a deadlock or a serialization failure (its subtransaction rolls back, nothing of it
-- stays), runs one delivery at a time in payhook_ingest_each, where an error costs only its own delivery.
--
-- The set, in order:
--   1. the event-id keys of deliveries without an order claimed in `inbox_keys`, then the batch's order locks
--      (ascending), then the keys of the orders' events, the orders read under their locks: the lock order of
--      payhook_ingest_each, so that the two forms never wait for each other in a cycle;
--   2. the missing orders of claimed `create_order` payments created (waking the deferred rows waiting for them);
--   3. the business keys of claimed order events claimed (a key already held makes its event a duplicate, and a
--      second statement names the holder, as payhook_apply does);
--   4. the guarded order updates with their audit and outbox rows, in one statement (when some delivery claimed
--      its business key: a batch of nothing else touches no order table);
--   5. the inbox rows, in one statement, then the attempt rows of dead letters and duplicates by business key
--      (when there are any).
--
-- One row per delivery, in order. Outcomes: 'duplicate' without a row id (event id seen before: nothing written),
-- 'ignored' and 'dead_lettered' (recorded as given), 'processed', 'duplicate' with a detail (business key),
-- 'billing' (recorded as processed, applied by the caller in the same transaction), 'unapplied' (the caller
-- explains it and settles the row in the same transaction with payhook_settle_batch; order_* is the order as read
-- under its lock), 'failed' (payhook_ingest_each only: nothing of this delivery was written). A dead letter and a
-- duplicate by business key get their attempt logged here; the caller raises the dead letter's alert.
CREATE OR REPLACE FUNCTION payhook_ingest_batch(p_deliveries payhook_delivery[], p_route_sinks text[])
RETURNS TABLE (outcome text, detail text, row_id bigint, order_status text, order_amount bigint,
               order_currency text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_distinct boolean;
    v_creates boolean;
    v_orderless boolean;
    v_claimed boolean[];      -- by position: the event-id key was free and is now this delivery's
    v_status text[];          -- by position: the order as read under its lock (NULL: no order)
    v_amount bigint[];
    v_currency text[];
    v_key text[];             -- by position: 'claimed', 'taken' (business key held by another event) or NULL
    v_detail text[];          -- by position: why a 'taken' delivery is a duplicate
    v_outcome text[];
    v_out_detail text[];
    v_row_id bigint[];
    v_applied integer[];      -- the positions whose order changed
BEGIN
    SELECT count(*) = count(DISTINCT (d.source, d.event_id))
           AND count(d.order_id) = count(DISTINCT d.order_id)
           AND count(d.business_key)
               = count(DISTINCT (d.source, d.business_key)) FILTER (WHERE d.business_key IS NOT NULL),
           coalesce(bool_or(d.create_order), false), coalesce(bool_or(d.order_id IS NULL), false)
    INTO v_distinct, v_creates, v_orderless
    FROM unnest(p_deliveries) AS d;

    IF v_distinct AND cardinality(p_deliveries) > 0 THEN
        BEGIN
            -- The lock order of payhook_ingest_each: the keys of deliveries without an order, the order locks
            -- (ascending), then the keys of the orders' events.
            IF v_orderless THEN
                WITH d AS (
                    SELECT d.source, d.event_id, d.order_id, d.ordinality::int AS n
                    FROM unnest(p_deliveries) WITH ORDINALITY AS d
                ), k AS (
                    INSERT INTO inbox_keys (source, event_id)
                    SELECT d.source, d.event_id FROM d WHERE d.order_id IS NULL ORDER BY d.n
                    ON CONFLICT DO NOTHING
                    RETURNING inbox_keys.source, inbox_keys.event_id
                )
                SELECT array_agg(k.event_id IS NOT NULL ORDER BY d.n)
                INTO v_claimed
                FROM d LEFT JOIN k ON k.source = d.source AND k.event_id = d.event_id;
            END IF;

            PERFORM pg_advisory_xact_lock(l.lock)
            FROM (SELECT DISTINCT d.lock FROM unnest(p_deliveries) AS d WHERE d.order_id IS NOT NULL ORDER BY 1) l;

            WITH d AS (
                SELECT d.source, d.event_id, d.order_id, d.ordinality::int AS n
                FROM unnest(p_deliveries) WITH ORDINALITY AS d
            ), k AS (
                INSERT INTO inbox_keys (source, event_id)
                SELECT d.source, d.event_id FROM d WHERE d.order_id IS NOT NULL ORDER BY d.n
                ON CONFLICT DO NOTHING
                RETURNING inbox_keys.source, inbox_keys.event_id
            )
            SELECT array_agg(CASE WHEN d.order_id IS NULL THEN v_claimed[d.n] ELSE k.event_id IS NOT NULL END
                             ORDER BY d.n),
                   array_agg(o.status ORDER BY d.n), array_agg(o.amount ORDER BY d.n),
                   array_agg(o.currency ORDER BY d.n)
            INTO v_claimed, v_status, v_amount, v_currency
            FROM d
            LEFT JOIN k ON k.source = d.source AND k.event_id = d.event_id
            LEFT JOIN orders o ON o.id = d.order_id;

            IF v_creates THEN
                WITH d AS (
                    SELECT d.*, d.ordinality::int AS n,
                           (d.create_order AND v_claimed[d.ordinality] AND d.status = 'processed'
                            AND d.order_id IS NOT NULL AND v_status[d.ordinality] IS NULL) AS creates
                    FROM unnest(p_deliveries) WITH ORDINALITY AS d
                ), created AS (
                    INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
                    SELECT d.order_id, d.amount, d.currency, 'pending', d.received_at, d.received_at
                    FROM d WHERE d.creates ORDER BY d.n
                    ON CONFLICT (id) DO NOTHING
                ), woken AS (
                    UPDATE inbox SET next_attempt_at = d.received_at
                    FROM d
                    WHERE d.creates AND inbox.status = 'deferred' AND inbox.order_id = d.order_id
                      AND inbox.next_attempt_at > d.received_at
                )
                SELECT array_agg(CASE WHEN d.creates THEN 'pending' ELSE v_status[d.n] END ORDER BY d.n),
                       array_agg(CASE WHEN d.creates THEN d.amount ELSE v_amount[d.n] END ORDER BY d.n),
                       array_agg(CASE WHEN d.creates THEN d.currency ELSE v_currency[d.n] END ORDER BY d.n)
                INTO v_status, v_amount, v_currency
                FROM d;
            END IF;

            WITH d AS (
                SELECT d.source, d.business_key, d.event_id, d.received_at, d.ordinality::int AS n,
                       (v_claimed[d.ordinality] AND d.status = 'processed' AND d.order_id IS NOT NULL) AS applies
                FROM unnest(p_deliveries) WITH ORDINALITY AS d
            ), b AS (
                INSERT INTO business_keys (source, key, event_id, created_at)
                SELECT d.source, d.business_key, d.event_id, d.received_at FROM d WHERE d.applies ORDER BY d.n
                ON CONFLICT (source, key) DO NOTHING
                RETURNING business_keys.source, business_keys.key
            )
            SELECT array_agg(CASE WHEN NOT d.applies THEN NULL WHEN b.key IS NULL THEN 'taken' ELSE 'claimed' END
                             ORDER BY d.n)
            INTO v_key
            FROM d LEFT JOIN b ON b.source = d.source AND b.key = d.business_key;

            IF 'taken' = ANY(v_key) THEN
                -- A statement of its own, as in payhook_apply: it sees a holder that committed while the claim
                -- waited for it.
                SELECT array_agg(CASE WHEN v_key[d.ordinality] = 'taken' THEN
                                     format('business key %s was already applied by event %s', d.business_key,
                                            coalesce((SELECT h.event_id FROM business_keys h
                                                      WHERE h.source = d.source AND h.key = d.business_key), '?'))
                                 END ORDER BY d.ordinality)
                INTO v_detail
                FROM unnest(p_deliveries) WITH ORDINALITY AS d;
            END IF;

            -- The effects, only when some delivery claimed its business key: a batch of nothing else touches no
            -- order table.
            IF 'claimed' = ANY(v_key) THEN
                -- The columns the effects read, not the payload: `d` is materialized once and read three times.
                WITH d AS (
                    SELECT d.source, d.event_id, d.event_type, d.received_at, d.order_id, d.from1, d.from2,
                           d.to_status, d.amount, d.currency, d.outbox_kind, d.payloads, d.route_lo, d.route_hi,
                           d.ordinality::int AS n
                    FROM unnest(p_deliveries) WITH ORDINALITY AS d
                ), applied AS (
                    UPDATE orders o SET status = d.to_status, updated_at = d.received_at
                    FROM d
                    WHERE v_key[d.n] = 'claimed' AND o.id = d.order_id AND o.status IN (d.from1, d.from2)
                      AND (d.amount IS NULL OR (o.amount = d.amount AND o.currency = d.currency))
                    RETURNING d.n
                ), audited AS (
                    INSERT INTO order_audit (order_id, source, event_id, event_type, from_status, to_status, at)
                    SELECT d.order_id, d.source, d.event_id, d.event_type, v_status[d.n], d.to_status, d.received_at
                    FROM applied a JOIN d ON d.n = a.n ORDER BY d.n
                ), queued AS (
                    INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, next_attempt_at,
                                        created_at)
                    SELECT d.outbox_kind, s.sink, d.order_id, d.source, d.event_id,
                           (CASE WHEN v_status[d.n] = d.from1 THEN d.payloads[1]
                                 ELSE coalesce(d.payloads[2], d.payloads[1]) END)::jsonb,
                           CASE WHEN s.unrouted THEN 'unrouted' ELSE 'pending' END,
                           CASE WHEN s.unrouted THEN NULL ELSE d.received_at END,
                           d.received_at
                    FROM applied a JOIN d ON d.n = a.n
                    CROSS JOIN LATERAL (
                        -- No sink: one row, unrouted ('' stands for its sink; no sink is named ''); otherwise one
                        -- pending row per sink, in order.
                        SELECT r.sink, r.k, r.sink = '' AS unrouted
                        FROM unnest(coalesce(nullif(p_route_sinks[d.route_lo:d.route_hi], '{}'), '{""}'))
                             WITH ORDINALITY AS r(sink, k)
                    ) s
                    ORDER BY d.n, s.k
                )
                SELECT array_agg(a.n) INTO v_applied FROM applied a;
            END IF;

            WITH d AS (
                SELECT d.*, d.ordinality::int AS n FROM unnest(p_deliveries) WITH ORDINALITY AS d
            ), recorded AS (
                INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                                   received_at, updated_at, verification, headers, body, bucket)
                SELECT d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.effect,
                       CASE WHEN d.status = 'billing' THEN 'processed'
                            WHEN v_key[d.n] = 'taken' THEN 'duplicate'
                            ELSE d.status END,
                       CASE WHEN v_key[d.n] = 'taken' THEN v_detail[d.n] ELSE d.reason END,
                       d.received_at, d.received_at, d.verification, d.headers, d.body,
                       (d.received_at / 86400000)::integer
                FROM d WHERE v_claimed[d.n] ORDER BY d.n
                RETURNING inbox.id, inbox.source, inbox.event_id
            )
            SELECT array_agg(CASE WHEN NOT v_claimed[d.n] THEN 'duplicate'
                                  WHEN d.status = 'billing' THEN 'billing'
                                  WHEN d.status <> 'processed' OR d.order_id IS NULL THEN d.status
                                  WHEN v_key[d.n] = 'taken' THEN 'duplicate'
                                  WHEN d.n = ANY(v_applied) THEN 'processed'
                                  ELSE 'unapplied' END ORDER BY d.n),
                   array_agg(CASE WHEN NOT v_claimed[d.n] OR d.status = 'billing' THEN NULL
                                  WHEN d.status <> 'processed' OR d.order_id IS NULL THEN d.reason
                                  WHEN v_key[d.n] = 'taken' THEN v_detail[d.n] END ORDER BY d.n),
                   array_agg(r.id ORDER BY d.n)
            INTO v_outcome, v_out_detail, v_row_id
            FROM d LEFT JOIN recorded r ON r.source = d.source AND r.event_id = d.event_id;

            -- The attempt rows of dead letters and duplicates by business key, when there are any.
            IF 'taken' = ANY(v_key) OR 'dead_lettered' = ANY(v_outcome) THEN
                INSERT INTO inbox_attempts (inbox_id, attempt, at, outcome, detail)
                SELECT v_row_id[d.ordinality], 1, d.received_at, v_outcome[d.ordinality],
                       v_out_detail[d.ordinality]
                FROM unnest(p_deliveries) WITH ORDINALITY AS d
                WHERE v_row_id[d.ordinality] IS NOT NULL
                  AND (v_key[d.ordinality] = 'taken' OR v_outcome[d.ordinality] = 'dead_lettered')
                ORDER BY d.ordinality;
            END IF;

            RETURN QUERY
            SELECT o.outcome, o.detail, o.row_id, o.order_status, o.order_amount, o.order_currency
            FROM unnest(v_outcome, v_out_detail, v_row_id, v_status, v_amount, v_currency)
                 AS o(outcome, detail, row_id, order_status, order_amount, order_currency);
            RETURN;
        EXCEPTION
            WHEN deadlock_detected OR serialization_failure THEN
                RAISE;
            WHEN OTHERS THEN
                NULL;   -- nothing of the set stays: run the batch one delivery at a time
        END;
    END IF;

    RETURN QUERY SELECT * FROM payhook_ingest_each(p_deliveries, p_route_sinks);
END
$$;
