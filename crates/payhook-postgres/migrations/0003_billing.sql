-- Subscriptions, entitlements, their audit, and signature nonces. Mirrors the SQLite backend's 0003_billing.sql.
--
-- Locking protocol, extended (see 0001 and 0002): a billing effect (subscription or invoice) is guarded by
-- transaction-scoped advisory locks on its objects (`subscription:ID`, `invoice:ID`, hashed by payhook), taken in
-- ascending order, all of a transaction's at once. A batch takes them after its deliveries took their order locks
-- and event keys (payhook_ingest_batch records a billing delivery and returns 'billing' without applying it), and
-- applies its billing deliveries after that, one at a time, each in a savepoint of its own; the worker and replay
-- take them first, then the inbox row. Nothing takes an order lock while holding a billing lock, and alert windows
-- still come last. The rules (which change applies) are payhook-core's, decided in Rust from the rows read under
-- the locks; the functions below claim the business key and apply the decision with guarded writes.

-- Subscriptions as the provider last described them: a change applies only when its event is newer than the one
-- that set the row (see payhook-core's billing rules).
CREATE TABLE subscriptions (
    id                 text   PRIMARY KEY,
    customer_id        text,
    status             text   NOT NULL,    -- the provider's status, lower-cased
    current_period_end bigint,             -- unix seconds
    occurred_at        bigint NOT NULL,    -- provider time of the event that set this row, unix seconds
    source             text   NOT NULL,
    event_id           text   NOT NULL,    -- the event that set this row
    created_at         bigint NOT NULL,    -- unix ms
    updated_at         bigint NOT NULL     -- unix ms
) WITH (fillfactor = 80);

-- One entitlement per invoice: the primary key is the invoice id, so two events for one invoice cannot grant twice.
CREATE TABLE entitlements (
    invoice_id      text   PRIMARY KEY,
    customer_id     text,
    subscription_id text,
    status          text   NOT NULL,       -- granted | revoked
    amount          bigint,
    currency        text,
    reason          text,                  -- why it was revoked or never granted
    granted_at      bigint,                -- unix ms
    revoked_at      bigint,                -- unix ms
    updated_at      bigint NOT NULL        -- unix ms
);
CREATE INDEX entitlements_customer ON entitlements (customer_id);
-- The entitlements of a subscription: revoked at its end (the granted ones), shown with it (all of them).
CREATE INDEX entitlements_subscription ON entitlements (subscription_id);

-- Every change of a subscription or an entitlement: which event moved it from what to what; `seq` orders it.
CREATE TABLE billing_audit (
    object      text   NOT NULL,           -- subscription | entitlement
    object_id   text   NOT NULL,
    source      text   NOT NULL,
    event_id    text   NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    event_type  text   NOT NULL,
    from_status text,                      -- NULL when the change created the row
    to_status   text   NOT NULL,
    at          bigint NOT NULL,           -- unix ms
    PRIMARY KEY (object, object_id, source, event_id)
);

-- HTTP Message Signatures nonces (RFC 9421) seen within their validity window, to refuse a replayed signature.
CREATE TABLE signature_nonces (
    keyid       text   NOT NULL,
    nonce       text   NOT NULL,
    body_sha256 text   NOT NULL,           -- a redelivery of the same request is not a replay
    expires_at  bigint NOT NULL,           -- unix seconds; the row may be pruned after it
    PRIMARY KEY (keyid, nonce)
);
CREATE INDEX signature_nonces_expiry ON signature_nonces (expires_at);

-- As in 0002, except that a delivery with status 'billing' (a subscription or invoice effect) is recorded as
-- 'processed' and answered with outcome 'billing', its business key not claimed: the caller applies it in the
-- same transaction, under its billing locks, and settles the row unless it was simply processed.
CREATE OR REPLACE FUNCTION payhook_ingest_batch(
    p_source text[], p_event_id text[], p_event_type text[], p_occurred_at bigint[], p_business_key text[],
    p_effect text[], p_status text[], p_reason text[], p_received_at bigint[], p_verification text[],
    p_headers text[], p_body bytea[], p_lock bigint[], p_order_id text[], p_from1 text[], p_from2 text[],
    p_to text[], p_amount bigint[], p_currency text[], p_outbox_kind text[], p_route_lo integer[],
    p_route_hi integer[], p_route_sinks text[])
RETURNS TABLE (outcome text, detail text, row_id bigint, order_status text, order_amount bigint,
               order_currency text)
LANGUAGE plpgsql AS $$
DECLARE
    d record;
    v_applied record;
BEGIN
    FOR d IN
        SELECT * FROM unnest(p_source, p_event_id, p_event_type, p_occurred_at, p_business_key, p_effect, p_status,
                             p_reason, p_received_at, p_verification, p_headers, p_body, p_lock, p_order_id,
                             p_from1, p_from2, p_to, p_amount, p_currency, p_outbox_kind, p_route_lo, p_route_hi)
            WITH ORDINALITY AS u(source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                                 received_at, verification, headers, body, lock, order_id, from1, from2, to_status,
                                 amount, currency, outbox_kind, route_lo, route_hi, n)
        ORDER BY n
    LOOP
        outcome := NULL; detail := NULL; row_id := NULL;
        order_status := NULL; order_amount := NULL; order_currency := NULL;
        BEGIN
            IF d.order_id IS NOT NULL THEN
                PERFORM pg_advisory_xact_lock(d.lock);
                SELECT o.status, o.amount, o.currency INTO order_status, order_amount, order_currency
                FROM orders o WHERE o.id = d.order_id;
            END IF;

            INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                               received_at, updated_at, verification, headers, body)
            VALUES (d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.effect,
                    CASE WHEN d.status = 'billing' THEN 'processed' ELSE d.status END, d.reason,
                    d.received_at, d.received_at, d.verification, d.headers, d.body)
            ON CONFLICT (source, event_id) DO NOTHING
            RETURNING id INTO row_id;
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
                -- An assignment is evaluated as a plain expression, without starting an executor for a SELECT.
                v_applied := payhook_apply(
                    d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.order_id, d.from1, d.from2,
                    d.to_status, d.amount, d.currency, d.outbox_kind, p_route_sinks[d.route_lo:d.route_hi],
                    d.received_at, order_status);
                outcome := v_applied.outcome;
                detail := v_applied.detail;
                IF outcome = 'duplicate' THEN
                    UPDATE inbox SET status = 'duplicate', reason = detail
                    WHERE source = d.source AND event_id = d.event_id;
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

-- Takes the given advisory locks in the order given (the caller sorts them ascending and removes repeats).
CREATE FUNCTION payhook_lock_all(p_locks bigint[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_lock bigint;
BEGIN
    FOREACH v_lock IN ARRAY coalesce(p_locks, '{}') LOOP
        PERFORM pg_advisory_xact_lock(v_lock);
    END LOOP;
END
$$;

-- The subscription `p_subscription` and the entitlement of invoice `p_invoice` as the rules need them, read by
-- the caller under their billing locks (either may be NULL; a missing row reads as NULLs).
CREATE FUNCTION payhook_billing_state(p_subscription text, p_invoice text,
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

-- Claims an event's business key: NULL when it was free, else why the event is a duplicate.
CREATE FUNCTION payhook_claim_key(p_source text, p_key text, p_event_id text, p_now bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
BEGIN
    INSERT INTO business_keys (source, key, event_id, created_at)
    VALUES (p_source, p_key, p_event_id, p_now)
    ON CONFLICT (source, key) DO NOTHING;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT event_id INTO v_holder FROM business_keys WHERE source = p_source AND key = p_key;
    RETURN format('business key %s was already applied by event %s', p_key, coalesce(v_holder, '?'));
END
$$;

-- One outbox row of a billing effect per sink in `p_sinks` (`{''}`: once, unrouted).
CREATE FUNCTION payhook_billing_outbox(
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

-- Applies a subscription event as payhook-core decided it from the row read under the subscription's lock
-- (`p_seen_status`, `p_seen_at`; NULL when there was none): 'insert', 'update', 'stale' or 'defer', with `p_why`
-- for the last two. Claims the business key first. Returns 'duplicate' (the key is another event's; the detail
-- names it), 'processed' (with the reason as detail when nothing changed: the key stays claimed) or 'deferred'
-- (the caller settles the row and releases the key). A change writes its audit row and `subscription.updated`
-- rows; an end (`p_revoke_reason` set) revokes the subscription's granted entitlements, each with its audit row
-- and `entitlement.revoked` rows (sinks `p_revoke_sinks`).
--
-- Invariant: the subscription changes only through the guarded INSERT or UPDATE (on the state it was decided
-- from); a miss changes nothing and is answered 'deferred'.
CREATE FUNCTION payhook_apply_subscription(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_now bigint,
    p_decision text, p_why text, p_id text, p_customer text, p_status text, p_period_end bigint,
    p_seen_status text, p_seen_at bigint, p_sinks text[], p_payload jsonb, p_revoke_reason text,
    p_revoke_sinks text[],
    OUT outcome text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    detail := payhook_claim_key(p_source, p_business_key, p_event_id, p_now);
    IF detail IS NOT NULL THEN
        outcome := 'duplicate';
        RETURN;
    END IF;
    IF p_decision = 'stale' THEN
        outcome := 'processed';
        detail := p_why;
        RETURN;
    ELSIF p_decision = 'defer' THEN
        outcome := 'deferred';
        detail := p_why;
        RETURN;
    ELSIF p_decision = 'insert' THEN
        INSERT INTO subscriptions (id, customer_id, status, current_period_end, occurred_at, source, event_id,
                                   created_at, updated_at)
        VALUES (p_id, p_customer, p_status, p_period_end, p_occurred_at, p_source, p_event_id, p_now, p_now)
        ON CONFLICT (id) DO NOTHING;
    ELSIF p_decision = 'update' THEN
        UPDATE subscriptions
        SET customer_id = coalesce(p_customer, customer_id), status = p_status,
            current_period_end = coalesce(p_period_end, current_period_end), occurred_at = p_occurred_at,
            source = p_source, event_id = p_event_id, updated_at = p_now
        WHERE id = p_id AND status = p_seen_status AND occurred_at = p_seen_at;
    ELSE
        RAISE 'unknown subscription decision %', p_decision;
    END IF;
    IF NOT FOUND THEN
        outcome := 'deferred';
        detail := format('subscription %s changed concurrently', p_id);
        RETURN;
    END IF;

    INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
    VALUES ('subscription', p_id, p_source, p_event_id, p_event_type, p_seen_status, p_status, p_now);
    PERFORM payhook_billing_outbox('subscription.updated', p_sinks, p_source, p_event_id, p_payload, p_now);
    IF p_revoke_reason IS NOT NULL THEN
        FOR r IN
            UPDATE entitlements
            SET status = 'revoked', reason = p_revoke_reason, revoked_at = p_now, updated_at = p_now
            WHERE subscription_id = p_id AND status = 'granted'
            RETURNING invoice_id, customer_id
        LOOP
            INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
            VALUES ('entitlement', r.invoice_id, p_source, p_event_id, p_event_type, 'granted', 'revoked', p_now);
            PERFORM payhook_billing_outbox(
                'entitlement.revoked', p_revoke_sinks, p_source, p_event_id,
                jsonb_build_object('kind', 'entitlement.revoked', 'invoice_id', r.invoice_id,
                                   'customer_id', r.customer_id, 'subscription_id', p_id, 'amount', NULL,
                                   'currency', NULL, 'reason', p_revoke_reason, 'source', p_source,
                                   'event_id', p_event_id, 'event_type', p_event_type, 'occurred_at', p_occurred_at),
                p_now);
        END LOOP;
    END IF;
    outcome := 'processed';
END
$$;

-- Applies an invoice event as payhook-core decided it from the entitlement (and the subscription) read under
-- their locks: 'grant', 'grant_ended', 'tombstone', 'revoke', 'report' or 'noop', with `p_why` the reason of a
-- revocation or of nothing to do. Claims the business key first; same outcomes as payhook_apply_subscription.
-- Writes `p_kind` rows with `p_payload` for a grant, a revocation (completed with the stored customer and
-- subscription when the event names none) and a report.
--
-- Invariant: an entitlement is created only by an INSERT on its invoice id (never twice) and revoked only from
-- 'granted'; a miss changes nothing and is answered 'deferred'.
CREATE FUNCTION payhook_apply_invoice(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_now bigint,
    p_decision text, p_why text, p_invoice text, p_customer text, p_subscription text, p_amount bigint,
    p_currency text, p_kind text, p_sinks text[], p_payload jsonb,
    OUT outcome text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_customer text;
    v_subscription text;
BEGIN
    detail := payhook_claim_key(p_source, p_business_key, p_event_id, p_now);
    IF detail IS NOT NULL THEN
        outcome := 'duplicate';
        RETURN;
    END IF;
    IF p_decision = 'noop' THEN
        outcome := 'processed';
        detail := p_why;
        RETURN;
    ELSIF p_decision IN ('grant', 'grant_ended', 'tombstone') THEN
        v_status := CASE WHEN p_decision = 'grant' THEN 'granted' ELSE 'revoked' END;
        INSERT INTO entitlements (invoice_id, customer_id, subscription_id, status, amount, currency, reason,
                                  granted_at, revoked_at, updated_at)
        VALUES (p_invoice, p_customer, p_subscription, v_status, p_amount, p_currency,
                CASE WHEN v_status = 'granted' THEN NULL ELSE p_why END,
                CASE WHEN v_status = 'granted' THEN p_now END, CASE WHEN v_status = 'revoked' THEN p_now END, p_now)
        ON CONFLICT (invoice_id) DO NOTHING;
        IF NOT FOUND THEN
            outcome := 'deferred';
            detail := format('entitlement of invoice %s changed concurrently', p_invoice);
            RETURN;
        END IF;
        INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
        VALUES ('entitlement', p_invoice, p_source, p_event_id, p_event_type, NULL, v_status, p_now);
        IF v_status = 'granted' THEN
            PERFORM payhook_billing_outbox(p_kind, p_sinks, p_source, p_event_id, p_payload, p_now);
            detail := NULL;
        ELSE
            detail := p_why;
        END IF;
    ELSIF p_decision = 'revoke' THEN
        UPDATE entitlements SET status = 'revoked', reason = p_why, revoked_at = p_now, updated_at = p_now
        WHERE invoice_id = p_invoice AND status = 'granted'
        RETURNING customer_id, subscription_id INTO v_customer, v_subscription;
        IF NOT FOUND THEN
            outcome := 'deferred';
            detail := format('entitlement of invoice %s changed concurrently', p_invoice);
            RETURN;
        END IF;
        INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
        VALUES ('entitlement', p_invoice, p_source, p_event_id, p_event_type, 'granted', 'revoked', p_now);
        PERFORM payhook_billing_outbox(
            p_kind, p_sinks, p_source, p_event_id,
            p_payload || jsonb_build_object('customer_id', coalesce(p_customer, v_customer),
                                            'subscription_id', coalesce(p_subscription, v_subscription)),
            p_now);
    ELSIF p_decision = 'report' THEN
        PERFORM payhook_billing_outbox(p_kind, p_sinks, p_source, p_event_id, p_payload, p_now);
    ELSE
        RAISE 'unknown invoice decision %', p_decision;
    END IF;
    outcome := 'processed';
END
$$;

-- Claims a signature nonce: prunes up to 64 expired nonces (rows another claim is pruning are skipped), then
-- records this one, replacing an expired row of the same nonce. Returns 'new', 'redelivery' (seen, same body) or
-- 'replayed' (seen, another body).
CREATE FUNCTION payhook_claim_nonce(
    p_keyid text, p_nonce text, p_body_sha256 text, p_expires_at bigint, p_now bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_body text;
BEGIN
    DELETE FROM signature_nonces
    WHERE (keyid, nonce) IN (SELECT n.keyid, n.nonce FROM signature_nonces n WHERE n.expires_at < p_now
                             ORDER BY n.expires_at LIMIT 64 FOR UPDATE SKIP LOCKED);
    INSERT INTO signature_nonces AS n (keyid, nonce, body_sha256, expires_at)
    VALUES (p_keyid, p_nonce, p_body_sha256, p_expires_at)
    ON CONFLICT (keyid, nonce) DO UPDATE SET body_sha256 = excluded.body_sha256, expires_at = excluded.expires_at
        WHERE n.expires_at < p_now;
    IF FOUND THEN
        RETURN 'new';
    END IF;
    SELECT n.body_sha256 INTO v_body FROM signature_nonces n WHERE n.keyid = p_keyid AND n.nonce = p_nonce;
    RETURN CASE WHEN v_body = p_body_sha256 THEN 'redelivery' ELSE 'replayed' END;
END
$$;
