-- Outbox rows per (effect, sink) with their delivery state; the attempt log; alert storm windows. Mirrors the
-- SQLite backend's 0002_outbox_dispatch.sql, and replaces the batch functions of 0001 with ones that route.
--
-- Locking protocol, extended (see 0001): a transaction takes its orders' advisory locks first (ascending), then
-- their keys (inbox, business keys, outbox rows), and only after all of that the alert windows it raises, in
-- ascending key order, each before the pending alert row it gathers into. Batches raise their alerts in their
-- second statement (payhook_settle_batch), after every delivery of the batch took its locks; nothing takes an
-- order lock or an event's key while holding an alert window.

ALTER TABLE outbox
    ADD COLUMN sink         text NOT NULL DEFAULT '',  -- '' when no configured sink takes this kind
    ADD COLUMN lease_owner  text,
    ADD COLUMN lease_until  bigint,
    ADD COLUMN last_error   text,
    ADD COLUMN last_status  integer,
    ADD COLUMN delivered_at bigint,
    ALTER COLUMN source DROP NOT NULL,                  -- alerts have no event
    ALTER COLUMN event_id DROP NOT NULL,
    ALTER COLUMN status DROP DEFAULT;                   -- pending | delivered | dead | unrouted, always explicit
-- Rows written before sinks existed were never sent: they are the record of their effect, unrouted.
UPDATE outbox SET status = 'unrouted', next_attempt_at = NULL;
ALTER TABLE outbox
    ALTER COLUMN sink DROP DEFAULT,
    DROP CONSTRAINT outbox_order_id_kind_key,
    ADD CONSTRAINT outbox_order_id_kind_sink_key UNIQUE (order_id, kind, sink);
-- What each sink's dispatcher claims; only pending rows pay for it.
CREATE INDEX outbox_due ON outbox (sink, next_attempt_at) WHERE status = 'pending';
-- Rows without an order (forwarded events, alerts) are found by their event.
CREATE INDEX outbox_orderless ON outbox (source, event_id) WHERE order_id IS NULL;

-- Every attempt that did not simply succeed on arrival: deferrals, retries, dead letters, replays.
CREATE TABLE inbox_attempts (
    inbox_id bigint  NOT NULL,
    attempt  integer NOT NULL,
    at       bigint  NOT NULL,
    outcome  text    NOT NULL,
    detail   text,
    PRIMARY KEY (inbox_id, attempt)
);

-- Listings are newest first by row id, paged by row id. Unlike SQLite's rowid, the identity column has no index of
-- its own; without one a page of `events list` sorts the whole inbox (about 250 ms per million rows, so past tens of
-- millions it meets statement_timeout). Ids only grow, so each insert lands on the rightmost leaf: no measurable cost
-- on ingest (BENCHMARKS.md).
CREATE INDEX inbox_newest ON inbox (id);
-- Dead letters are listed and replayed by operators: only they pay for this index.
CREATE INDEX inbox_dead ON inbox (id) WHERE status = 'dead_lettered';

-- One alert per key and window; repeats are counted into it. `outbox_id` is NULL only in the placeholder row a
-- first alert inserts to have something to lock (see payhook_raise_alert).
CREATE TABLE alert_windows (
    key          text    PRIMARY KEY,
    window_start bigint  NOT NULL,
    outbox_id    bigint,
    count        integer NOT NULL,
    suppressed   integer NOT NULL DEFAULT 0   -- repeats after the window's alert was sent, carried to the next
);

DROP FUNCTION payhook_ingest_batch;
DROP FUNCTION payhook_reapply;
DROP FUNCTION payhook_settle_batch;
DROP FUNCTION payhook_apply;

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
-- Invariant: the order changes only through the guarded UPDATE, and an audit row and the effect's outbox rows are
-- written with it.
CREATE FUNCTION payhook_apply(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_order_id text,
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
    v_payload := jsonb_build_object('kind', p_outbox_kind, 'order_id', p_order_id, 'status', p_to,
                                    'previous_status', p_status, 'source', p_source, 'event_id', p_event_id,
                                    'event_type', p_event_type, 'occurred_at', p_occurred_at);
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

-- Records a batch of verified deliveries and applies their effects, in the order given (the caller sorts them by
-- lock): one call, so a batch of any size is one round trip and one statement.
--
-- Each delivery runs in its own BEGIN … EXCEPTION block, a subtransaction, i.e. a savepoint: an error rolls back
-- that delivery's writes only and is returned as outcome 'failed', so that its batch-mates still commit.
-- Deadlocks and serialization failures are re-raised instead: they abort the batch, which the caller runs again.
--
-- Routing: `p_route_sinks` holds, once per batch, the sinks of each outbox kind present in the batch, one slice
-- after another; delivery i's kind has the slice `p_route_sinks[p_route_lo[i]:p_route_hi[i]]`.
--
-- One row per delivery, in order. Outcomes: 'duplicate' without a row id (event id seen before: nothing written),
-- 'ignored' and 'dead_lettered' (recorded as given), 'processed', 'duplicate' with a detail (business key),
-- 'unapplied' (the caller explains it and settles the row in the same transaction with payhook_settle_batch;
-- order_* is the order as read under its lock), 'failed' (nothing of this delivery was written). A dead letter
-- and a duplicate by business key get their attempt logged here; the caller raises the dead letter's alert.
CREATE FUNCTION payhook_ingest_batch(
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
            VALUES (d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.effect, d.status, d.reason,
                    d.received_at, d.received_at, d.verification, d.headers, d.body)
            ON CONFLICT (source, event_id) DO NOTHING
            RETURNING id INTO row_id;
            IF row_id IS NULL THEN
                outcome := 'duplicate';
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

-- Re-applies an event for the retry worker or a replay. The caller holds the order's advisory lock and then the
-- inbox row, and settles the row afterwards. Same outcomes as payhook_apply, plus the order as read.
CREATE FUNCTION payhook_reapply(
    p_source text, p_event_id text, p_event_type text, p_occurred_at bigint, p_business_key text, p_order_id text,
    p_from1 text, p_from2 text, p_to text, p_amount bigint, p_currency text, p_outbox_kind text, p_sinks text[],
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
        p_amount, p_currency, p_outbox_kind, p_sinks, p_now, order_status);
    outcome := v_applied.outcome;
    detail := v_applied.detail;
END
$$;

-- Raises an alert: the first alert of a key opens a window and writes an outbox row for the alerts sink that waits
-- `p_gather` before it is due; repeats within the window are counted into that row while it waits (pending and not
-- leased), and counted as `suppressed` once a dispatcher has it, to be reported by the first alert of the next
-- window (`suppressed_before`).
--
-- Race-free across instances: the window row is made to exist (a placeholder with no alert, the first time) and
-- then locked before it is read, so concurrent raisers of one key queue up on it; a dispatcher's claim of the alert
-- row and a repeat's gathering into it meet on the row itself (the repeat re-checks `lease_owner IS NULL` on the
-- row version the claim committed).
CREATE FUNCTION payhook_raise_alert(
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

-- Writes the final state of attempts that were not simply applied (deferred, dead letter, no-op, duplicate,
-- retried, replayed), logs each attempt, and releases the business key of those whose effect was not applied, so
-- that it stays free for an event that can use it. The rows are identified by (source, event_id) and checked
-- against their row id. Then writes the forwarded events (`event.received` rows) and raises the alerts, in the
-- order given (the caller sorts them by key: see the locking protocol above); `p_alert_sink` is NULL when alerts
-- are off.
CREATE FUNCTION payhook_settle_batch(
    p_source text[], p_event_id text[], p_row_id bigint[], p_status text[], p_reason text[], p_attempts integer[],
    p_next_attempt_at bigint[], p_waiting_order text[], p_now bigint[], p_release_key boolean[],
    p_fwd_kind text, p_fwd_sink text[], p_fwd_source text[], p_fwd_event_id text[], p_fwd_payload text[],
    p_fwd_now bigint[],
    p_alert_kind text, p_alert_sink text, p_alert_window bigint, p_alert_gather bigint, p_alert_key text[],
    p_alert_text text[], p_alert_now bigint[])
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
            WITH ORDINALITY AS u(source, event_id, row_id, status, reason, attempts, next_attempt_at, waiting_order,
                                 now, release_key, n)
        ORDER BY n
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

    IF cardinality(p_fwd_sink) > 0 THEN
        INSERT INTO outbox (kind, sink, source, event_id, payload, status, next_attempt_at, created_at)
        SELECT p_fwd_kind, f.sink, f.source, f.event_id, f.payload::jsonb, 'pending', f.now, f.now
        FROM unnest(p_fwd_sink, p_fwd_source, p_fwd_event_id, p_fwd_payload, p_fwd_now)
            WITH ORDINALITY AS f(sink, source, event_id, payload, now, n)
        ORDER BY f.n;
    END IF;

    IF p_alert_sink IS NOT NULL THEN
        FOR d IN
            SELECT * FROM unnest(p_alert_key, p_alert_text, p_alert_now) WITH ORDINALITY AS a(key, text, now, n)
            ORDER BY n
        LOOP
            PERFORM payhook_raise_alert(d.key, d.text, d.now, p_alert_kind, p_alert_sink, p_alert_window,
                                        p_alert_gather);
        END LOOP;
    END IF;
    RETURN v_settled;
END
$$;

-- Records the outcome of a delivery attempt of a leased outbox row, only for the holder of its lease; a row that
-- died raises the alert the caller passes (none for the alerts sink's own rows: alerts never alert), in the same
-- transaction. Returns whether the row was the caller's.
CREATE FUNCTION payhook_finish_outbox(
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
