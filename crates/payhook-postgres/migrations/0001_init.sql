-- payhook's PostgreSQL schema. Times are unix milliseconds (bigint), as in the store's model and the SQLite schema.
-- Everything is created in the first schema of the connection's search_path.
--
-- Locking protocol (see src/writer.rs): every transaction that reads or changes an order's state first takes the
-- transaction-scoped advisory lock `p_lock` of that order (a stable 64-bit hash of its id, computed by payhook),
-- and only then the keys that belong to the order (its row, its events' inbox and business keys, its outbox rows).
-- Batches take their orders in ascending lock order, so concurrent batches, in one process or several, never wait
-- for each other in a cycle. The advisory lock also makes the status an event reads the status it changes: nobody
-- else can change that order until the transaction ends. It costs no WAL, unlike `SELECT … FOR UPDATE`.

-- Every verified delivery, exactly once per (source, event_id).
CREATE TABLE inbox (
    source          text    NOT NULL,
    event_id        text    NOT NULL,
    id              bigint  GENERATED ALWAYS AS IDENTITY,  -- unique by construction; the store's row id
    event_type      text,
    occurred_at     bigint,             -- provider time, unix seconds
    business_key    text,
    order_id        text,               -- set while deferred, so registering the order can wake it
    effect          text,               -- normalized effect as JSON, re-applied by the worker
    status          text    NOT NULL,   -- processed | duplicate | deferred | ignored | dead_lettered
    reason          text,
    attempts        integer NOT NULL DEFAULT 1,
    next_attempt_at bigint,             -- deferred rows only
    lease_owner     text,
    lease_until     bigint,
    received_at     bigint  NOT NULL,
    updated_at      bigint  NOT NULL,
    verification    text    NOT NULL,
    headers         text    NOT NULL,
    body            bytea   NOT NULL,
    PRIMARY KEY (source, event_id)
);
CREATE INDEX inbox_due ON inbox (next_attempt_at) WHERE status = 'deferred';
CREATE INDEX inbox_waiting_order ON inbox (order_id) WHERE status = 'deferred';

-- One effect per business fact, whatever the event id.
CREATE TABLE business_keys (
    source     text   NOT NULL,
    key        text   NOT NULL,
    event_id   text   NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (source, key)
);

-- Updated in place on every transition: room on each page keeps those updates HOT (no index write).
CREATE TABLE orders (
    id         text   PRIMARY KEY,
    amount     bigint NOT NULL,
    currency   text   NOT NULL,
    status     text   NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
) WITH (fillfactor = 80);

-- An event changes an order at most once, so (order_id, source, event_id) identifies a change and keeps an
-- order's history together in one index; `seq` orders it.
CREATE TABLE order_audit (
    order_id    text   NOT NULL,
    source      text   NOT NULL,
    event_id    text   NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    event_type  text   NOT NULL,
    from_status text   NOT NULL,
    to_status   text   NOT NULL,
    at          bigint NOT NULL,
    PRIMARY KEY (order_id, source, event_id)
);

-- Side effects, written in the transaction of the change that causes them; at most one per order and kind.
CREATE TABLE outbox (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text    NOT NULL,
    order_id        text,
    source          text    NOT NULL,
    event_id        text    NOT NULL,
    payload         jsonb   NOT NULL,
    status          text    NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at bigint,
    created_at      bigint  NOT NULL,
    UNIQUE (order_id, kind)
);

-- Applies a planned order transition for one event: business-key claim, guarded update, audit row, outbox row.
--
-- The caller holds the order's advisory lock and passes the status it read under it (`p_status`, NULL when the
-- order does not exist): it is the previous status of the transition. Returns 'processed', 'duplicate' (the
-- business key is held by another event; the detail names it) or 'unapplied' (the guard matched nothing: the
-- business key stays claimed, and the caller decides with payhook-core's ledger rules whether to keep it (no-op)
-- or release it (deferred, dead letter)).
--
-- Invariant: the order changes only through the guarded UPDATE, and an audit row and exactly one outbox row are
-- written with it.
CREATE FUNCTION payhook_apply(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_order_id text,
    p_from1 text, p_from2 text, p_to text, p_amount bigint, p_currency text, p_outbox_kind text, p_now bigint,
    p_status text,
    OUT outcome text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
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
    INSERT INTO outbox (kind, order_id, source, event_id, payload, created_at)
    VALUES (p_outbox_kind, p_order_id, p_source, p_event_id,
            jsonb_build_object('kind', p_outbox_kind, 'order_id', p_order_id, 'status', p_to,
                               'previous_status', p_status, 'source', p_source, 'event_id', p_event_id,
                               'event_type', p_event_type, 'occurred_at', p_occurred_at),
            p_now);
    outcome := 'processed';
END
$$;

-- Records a batch of verified deliveries and applies their effects, in the order given (the caller sorts them by
-- lock): one call, so a batch of any size is one round trip and one statement.
--
-- Each delivery runs in its own BEGIN … EXCEPTION block, a subtransaction, i.e. a savepoint: an error rolls back
-- that delivery's writes only and is returned as outcome 'failed', so that its batch-mates still commit.
-- Deadlocks and serialization failures are re-raised instead: they abort the batch, which the caller runs again.
--
-- One row per delivery, in order. Outcomes: 'duplicate' without a detail (event id seen before: nothing written),
-- 'ignored' and 'dead_lettered' (recorded as given), 'processed', 'duplicate' with a detail (business key),
-- 'unapplied' (the caller explains it and settles the row in the same transaction with payhook_settle_batch;
-- order_* is the order as read under its lock), 'failed' (nothing of this delivery was written).
CREATE FUNCTION payhook_ingest_batch(
    p_source text[], p_event_id text[], p_event_type text[], p_occurred_at bigint[], p_business_key text[],
    p_effect text[], p_status text[], p_reason text[], p_received_at bigint[], p_verification text[],
    p_headers text[], p_body bytea[], p_lock bigint[], p_order_id text[], p_from1 text[], p_from2 text[],
    p_to text[], p_amount bigint[], p_currency text[], p_outbox_kind text[])
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
                             p_from1, p_from2, p_to, p_amount, p_currency, p_outbox_kind)
            WITH ORDINALITY AS u(source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                                 received_at, verification, headers, body, lock, order_id, from1, from2, to_status,
                                 amount, currency, outbox_kind, n)
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
            VALUES (d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.effect, d.status, d.reason,
                    d.received_at, d.received_at, d.verification, d.headers, d.body)
            ON CONFLICT (source, event_id) DO NOTHING
            RETURNING id INTO row_id;
            IF row_id IS NULL THEN
                outcome := 'duplicate';
            ELSIF d.status <> 'processed' OR d.order_id IS NULL THEN
                outcome := d.status;
                detail := d.reason;
            ELSE
                -- An assignment is evaluated as a plain expression, without starting an executor for a SELECT.
                v_applied := payhook_apply(
                    d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.order_id, d.from1, d.from2,
                    d.to_status, d.amount, d.currency, d.outbox_kind, d.received_at, order_status);
                outcome := v_applied.outcome;
                detail := v_applied.detail;
                IF outcome = 'duplicate' THEN
                    UPDATE inbox SET status = 'duplicate', reason = detail
                    WHERE source = d.source AND event_id = d.event_id;
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

-- Re-applies a deferred event for the retry worker. The caller holds the order's advisory lock and then the inbox
-- row (leased to it), and settles the row afterwards. Same outcomes as payhook_apply, plus the order as read.
CREATE FUNCTION payhook_reapply(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_order_id text,
    p_from1 text, p_from2 text, p_to text, p_amount bigint, p_currency text, p_outbox_kind text,
    p_now bigint,
    OUT outcome text, OUT detail text, OUT order_status text, OUT order_amount bigint, OUT order_currency text)
LANGUAGE plpgsql AS $$
DECLARE
    v_applied record;
BEGIN
    SELECT o.status, o.amount, o.currency INTO order_status, order_amount, order_currency
    FROM orders o WHERE o.id = p_order_id;
    v_applied := payhook_apply(
        p_source, p_event_id, p_event_type, p_occurred_at, p_business_key, p_order_id, p_from1, p_from2, p_to,
        p_amount, p_currency, p_outbox_kind, p_now, order_status);
    outcome := v_applied.outcome;
    detail := v_applied.detail;
END
$$;

-- Writes the final state of attempts that were not simply applied (deferred, dead letter, no-op, duplicate), and
-- releases the business key of those whose effect was not applied, so that it stays free for an event that can
-- use it. The rows are identified by (source, event_id) and checked against their row id.
CREATE FUNCTION payhook_settle_batch(
    p_source text[], p_event_id text[], p_row_id bigint[], p_status text[], p_reason text[], p_attempts integer[],
    p_next_attempt_at bigint[], p_waiting_order text[], p_now bigint[], p_release_key boolean[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d record;
    v_key text;
    v_settled integer := 0;
BEGIN
    FOR d IN
        SELECT * FROM unnest(p_source, p_event_id, p_row_id, p_status, p_reason, p_attempts, p_next_attempt_at,
                             p_waiting_order, p_now, p_release_key)
            AS u(source, event_id, row_id, status, reason, attempts, next_attempt_at, waiting_order, now,
                 release_key)
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
        v_settled := v_settled + 1;
    END LOOP;
    RETURN v_settled;
END
$$;

-- Registers a batch of orders, in the order given (the caller sorts them by lock), each under its advisory lock
-- and in its own savepoint; an order's deferred events become due at once. One row per order: 'created',
-- 'exists' (with the stored money) or 'failed'.
CREATE FUNCTION payhook_register_batch(
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
