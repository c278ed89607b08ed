-- The inbox is partitioned by day, so that retention drops a day's partition instead of deleting its rows.
--
-- `bucket` is the UTC day of `received_at` (days since 1970-01-01), or 0 for the held partition. Each day has a
-- partition of its own (`inbox_YYYYMMDD`), created ahead of time by `payhook_ensure_partitions` (when a store opens
-- and at every pruning step: the current day and the next). `inbox_held` (bucket 0) keeps what must outlive its
-- day: dead letters and deferred events of a day that is pruned are moved there first (an UPDATE of `bucket`,
-- i.e. row movement), and rows written by earlier versions stay there; its settled rows are pruned row by row, as
-- before. `inbox_default` catches a delivery whose day has no partition, so an insert never fails; it is pruned
-- row by row too.
--
-- Dedup: a unique key on a partitioned table must contain the partition column, so `(source, event_id)` is unique
-- in `inbox_keys`, a narrow table of its own, which ingest claims with `INSERT … ON CONFLICT DO NOTHING` before
-- writing the row. Every partition has a plain index on `(source, event_id)`: a lookup by event probes each live
-- partition once (their number is bounded by the key retention), and the hot path carries the bucket instead.
--
-- Pruning a day (see payhook_detach_day): with its unsettled rows moved away, under a short ACCESS EXCLUSIVE lock
-- on `inbox` (bounded by the caller's lock timeout), its rows are subtracted from the counters (a DETACH fires no
-- DELETE trigger), the partition is detached and renamed `inbox_gone_YYYYMMDD`: from that commit on its rows are
-- gone. Its event-id keys, the business keys its events hold and their attempt log are then deleted in bounded
-- steps (payhook_forget_gone), reading the detached table in id order, and the table is dropped when none is left.
-- Until then a redelivery of one of its events is still answered as a duplicate, as it was before the cut.
--
-- An existing inbox is not copied: it is renamed `inbox_held`, given the column with a constant default (no
-- rewrite), checked once against the held range (a read) and attached; its keys are copied into `inbox_keys`.

ALTER TABLE inbox RENAME TO inbox_held;
ALTER INDEX inbox_pkey RENAME TO inbox_held_pkey;
ALTER INDEX inbox_due RENAME TO inbox_held_due;
ALTER INDEX inbox_waiting_order RENAME TO inbox_held_waiting_order;
ALTER INDEX inbox_newest RENAME TO inbox_held_newest;
ALTER INDEX inbox_dead RENAME TO inbox_held_dead;
ALTER INDEX inbox_received RENAME TO inbox_held_received;
ALTER INDEX inbox_deferred_received RENAME TO inbox_held_deferred_received;
DROP TRIGGER inbox_counted_insert ON inbox_held;
DROP TRIGGER inbox_counted_delete ON inbox_held;
DROP TRIGGER inbox_counted_update ON inbox_held;
ALTER TABLE inbox_held ADD COLUMN bucket integer NOT NULL DEFAULT 0 CONSTRAINT inbox_held_bucket CHECK (bucket < 1);

CREATE TABLE inbox_keys (
    source   text NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (source, event_id)
);
INSERT INTO inbox_keys (source, event_id) SELECT source, event_id FROM inbox_held;

-- The new parent takes over the row ids where the old table's identity stopped.
DO $$
DECLARE
    v_next bigint := nextval(pg_get_serial_sequence('inbox_held', 'id'));
BEGIN
    ALTER TABLE inbox_held ALTER COLUMN id DROP IDENTITY;
    CREATE TABLE inbox (LIKE inbox_held INCLUDING DEFAULTS) PARTITION BY RANGE (bucket);
    EXECUTE format('ALTER TABLE inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', v_next);
END $$;
ALTER TABLE inbox ATTACH PARTITION inbox_held FOR VALUES FROM (MINVALUE) TO (1);
ALTER TABLE inbox_held DROP CONSTRAINT inbox_held_bucket;
CREATE TABLE inbox_default PARTITION OF inbox DEFAULT;
CREATE INDEX inbox_default_event ON inbox_default (source, event_id);

-- The same indexes as before, on every partition (the held partition's existing ones are attached, not rebuilt).
CREATE INDEX inbox_due ON inbox (next_attempt_at) WHERE status = 'deferred';
CREATE INDEX inbox_waiting_order ON inbox (order_id) WHERE status = 'deferred';
CREATE INDEX inbox_newest ON inbox (id);
CREATE INDEX inbox_dead ON inbox (id) WHERE status = 'dead_lettered';
CREATE INDEX inbox_received ON inbox (received_at);
CREATE INDEX inbox_deferred_received ON inbox (received_at) WHERE status = 'deferred';

-- Counters (0006) on the parent: a statement on `inbox` fires them whichever partitions it touches. Row movement
-- (a held row changing bucket) fires none of them, and changes no count. A row trigger runs on the partition,
-- under the partition's name: the status trigger tells the tables apart by the other two names.
CREATE OR REPLACE FUNCTION payhook_count_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'orders' THEN
        INSERT INTO counter_deltas VALUES ('orders', '', '', OLD.status, -1), ('orders', '', '', NEW.status, 1);
    ELSIF TG_TABLE_NAME = 'outbox' THEN
        INSERT INTO counter_deltas
        VALUES ('outbox', OLD.sink, OLD.kind, OLD.status, -1), ('outbox', NEW.sink, NEW.kind, NEW.status, 1);
    ELSE
        INSERT INTO counter_deltas VALUES ('inbox', OLD.source, '', OLD.status, -1), ('inbox', NEW.source, '', NEW.status, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER inbox_counted_insert AFTER INSERT ON inbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_count_rows();
CREATE TRIGGER inbox_counted_delete AFTER DELETE ON inbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_count_rows();
CREATE TRIGGER inbox_counted_update AFTER UPDATE OF status, source ON inbox FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.source IS DISTINCT FROM NEW.source)
    EXECUTE FUNCTION payhook_count_status_change();

-- A deleted row takes its event-id key with it, whoever deletes it (row pruning, a failed billing delivery, an
-- operator's SQL), as the old primary key did.
CREATE FUNCTION payhook_forget_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM inbox_keys k USING old_rows o WHERE k.source = o.source AND k.event_id = o.event_id;
    RETURN NULL;
END $$;
CREATE TRIGGER inbox_keys_forgotten AFTER DELETE ON inbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_forget_keys();

-- Detached days whose keys are still being deleted: how far (row id) the deletion got.
CREATE TABLE inbox_gone (
    name     text   PRIMARY KEY,   -- inbox_gone_YYYYMMDD
    after_id bigint NOT NULL
);

-- The partition of day `p_day` (days since 1970-01-01).
CREATE FUNCTION payhook_day_partition(p_day integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT 'inbox_' || to_char(date '1970-01-01' + p_day, 'YYYYMMDD')
$$;

-- The day partitions that exist, oldest first.
CREATE FUNCTION payhook_day_partitions(OUT name text, OUT day integer) RETURNS SETOF record LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, to_date(substr(c.relname, 7), 'YYYYMMDD') - date '1970-01-01'
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'inbox'::regclass AND c.relname ~ '^inbox_[0-9]{8}$'
    ORDER BY 2
$$;

-- Creates the partitions of the day of `p_now` and of the next day, if missing. Rows of such a day that landed in
-- the default partition meanwhile are moved to the held one first (the new partition could not be attached over
-- them). Waits at most `p_lock_timeout_ms` for its lock on `inbox`; returns how many it created, or -1 when the
-- lock was not had in time (the next step tries again; inserts go to the default partition meanwhile).
CREATE FUNCTION payhook_ensure_partitions(p_now bigint, p_lock_timeout_ms integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_day integer;
    v_name text;
    v_created integer := 0;
BEGIN
    FOR v_day IN SELECT d FROM generate_series((p_now / 86400000)::integer, (p_now / 86400000)::integer + 1) d LOOP
        v_name := payhook_day_partition(v_day);
        CONTINUE WHEN to_regclass(v_name) IS NOT NULL;
        PERFORM pg_advisory_xact_lock(hashtext('payhook-partitions:' || current_schema()));
        BEGIN
            PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
            -- Taking the lock also brings this session's catalog caches up to date: another instance may have
            -- created the partition since the look above.
            LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE;
            CONTINUE WHEN to_regclass(v_name) IS NOT NULL;
            UPDATE inbox SET bucket = 0 WHERE bucket = v_day;
            EXECUTE format('CREATE TABLE %I PARTITION OF inbox FOR VALUES FROM (%s) TO (%s)', v_name, v_day, v_day + 1);
            -- Named by PostgreSQL: a detached day's table keeps its index names until it is dropped.
            EXECUTE format('CREATE INDEX ON %I (source, event_id)', v_name);
            v_created := v_created + 1;
        EXCEPTION WHEN lock_not_available THEN
            RETURN -1;
        END;
    END LOOP;
    RETURN v_created;
END $$;

-- Moves up to `p_limit` dead letters and deferred events of days older than the key retention (received before
-- `p_keys_before`) to the held partition, so that their day can be dropped. Rows locked right now (a retry, a
-- replay) are skipped and moved by a later step. Each status is looked up down its partial index. Returns how
-- many it moved.
CREATE FUNCTION payhook_hold_unsettled(p_keys_before bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_last integer := (p_keys_before / 86400000)::integer;
    r record;
    v_moved integer := 0;
BEGIN
    FOR r IN
        SELECT bucket, id FROM inbox WHERE bucket >= 1 AND bucket < v_last AND status = 'dead_lettered'
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox SET bucket = 0 WHERE bucket = r.bucket AND id = r.id;
        v_moved := v_moved + 1;
    END LOOP;
    FOR r IN
        SELECT bucket, id FROM inbox WHERE bucket >= 1 AND bucket < v_last AND status = 'deferred'
        LIMIT p_limit - v_moved FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox SET bucket = 0 WHERE bucket = r.bucket AND id = r.id;
        v_moved := v_moved + 1;
    END LOOP;
    RETURN v_moved;
END $$;

-- Detaches the oldest day partition wholly older than the key retention (`p_keys_before`), if it holds no
-- unsettled row: subtracts its rows from the counters, detaches it and renames it `inbox_gone_YYYYMMDD` for
-- payhook_forget_gone. Waits at most `p_lock_timeout_ms` for the ACCESS EXCLUSIVE lock on `inbox` a DETACH needs
-- (`lock_timed_out` when it did not get it: the next step tries again). Returns the events it removed.
CREATE FUNCTION payhook_detach_day(p_keys_before bigint, p_lock_timeout_ms integer,
    OUT detached text, OUT events bigint, OUT lock_timed_out boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_unsettled boolean;
BEGIN
    events := 0;
    lock_timed_out := false;
    PERFORM pg_advisory_xact_lock(hashtext('payhook-partitions:' || current_schema()));
    SELECT p.name INTO v_name FROM payhook_day_partitions() p
    WHERE p.day < (p_keys_before / 86400000)::integer ORDER BY p.day LIMIT 1;
    IF v_name IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
        LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        lock_timed_out := true;
        RETURN;
    END;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = ''dead_lettered'')
                        OR EXISTS (SELECT 1 FROM %I WHERE status = ''deferred'')', v_name, v_name)
        INTO v_unsettled;
    IF v_unsettled THEN
        RETURN;
    END IF;
    EXECUTE format('WITH c AS (SELECT source, status, count(*) AS n FROM %I GROUP BY source, status),
                         d AS (INSERT INTO counter_deltas SELECT ''inbox'', source, '''', status, -n FROM c)
                    SELECT coalesce(sum(n), 0)::bigint FROM c', v_name)
        INTO events;
    EXECUTE format('ALTER TABLE inbox DETACH PARTITION %I', v_name);
    detached := 'inbox_gone_' || substr(v_name, 7);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', v_name, detached);
    INSERT INTO inbox_gone (name, after_id) VALUES (detached, 0);
END $$;

-- Deletes the event-id keys, the business keys and the attempt log of up to `p_limit` events of the oldest
-- detached day, in row id order from where the previous step stopped; drops the detached table with the step
-- that reaches its end. Returns what it deleted, and the table it dropped.
CREATE FUNCTION payhook_forget_gone(p_limit integer,
    OUT events bigint, OUT business_keys bigint, OUT dropped text)
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    v_last bigint;
BEGIN
    events := 0;
    business_keys := 0;
    PERFORM pg_advisory_xact_lock(hashtext('payhook-partitions:' || current_schema()));
    SELECT name, after_id INTO g FROM inbox_gone ORDER BY name LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    EXECUTE format(
        'WITH b AS (SELECT id, source, event_id, business_key FROM %I WHERE id > $1 ORDER BY id LIMIT $2),
              k AS (DELETE FROM inbox_keys x USING b WHERE x.source = b.source AND x.event_id = b.event_id),
              bk AS (DELETE FROM business_keys x USING b
                     WHERE x.source = b.source AND x.key = b.business_key AND x.event_id = b.event_id RETURNING 1),
              a AS (DELETE FROM inbox_attempts x USING b WHERE x.inbox_id = b.id)
         SELECT (SELECT max(id) FROM b), (SELECT count(*) FROM b), (SELECT count(*) FROM bk)', g.name)
        INTO v_last, events, business_keys USING g.after_id, p_limit;
    IF events < p_limit THEN
        EXECUTE format('DROP TABLE %I', g.name);
        DELETE FROM inbox_gone WHERE name = g.name;
        dropped := g.name;
    ELSE
        UPDATE inbox_gone SET after_id = v_last WHERE name = g.name;
    END IF;
END $$;

-- Clears the raw body and headers of up to `p_limit` settled events received in `[p_from, p_before)`, oldest
-- first, skipping rows locked right now. Each row is updated by its bucket and id: one partition, one probe of its
-- id index (a join of the inbox with the rows chosen would be planned over every partition). Returns how many.
CREATE FUNCTION payhook_clear_payloads(p_from bigint, p_before bigint, p_limit integer, p_now bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_cleared integer := 0;
BEGIN
    FOR r IN
        SELECT bucket, id FROM inbox
        WHERE received_at >= p_from AND received_at < p_before AND status IN ('processed', 'duplicate', 'ignored')
          AND pruned_at IS NULL
        ORDER BY received_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox SET body = '\x'::bytea, headers = '{}', pruned_at = p_now WHERE bucket = r.bucket AND id = r.id;
        v_cleared := v_cleared + 1;
    END LOOP;
    RETURN v_cleared;
END $$;

-- Leases up to `p_limit` due deferred events to `p_owner` until `p_now + p_lease_ms`, earliest due first,
-- skipping rows another instance is claiming right now; each row is updated by its bucket and id (one partition).
CREATE FUNCTION payhook_claim_due(p_owner text, p_now bigint, p_lease_ms bigint, p_limit bigint)
RETURNS TABLE (id bigint, source text, event_id text, attempts integer, next_attempt_at bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT i.bucket, i.id FROM inbox i
        WHERE i.status = 'deferred' AND i.next_attempt_at <= p_now
          AND (i.lease_until IS NULL OR i.lease_until <= p_now)
        ORDER BY i.next_attempt_at, i.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE inbox i SET lease_owner = p_owner, lease_until = p_now + p_lease_ms
        WHERE i.bucket = r.bucket AND i.id = r.id
        RETURNING i.id, i.source, i.event_id, i.attempts, i.next_attempt_at
        INTO id, source, event_id, attempts, next_attempt_at;
        RETURN NEXT;
    END LOOP;
END $$;

-- As in 0003, except that the event-id key is claimed in `inbox_keys` before the row is written to the partition
-- of its day, and a duplicate by business key is found by its bucket and id.
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
    v_bucket integer;
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
                -- An assignment is evaluated as a plain expression, without starting an executor for a SELECT.
                v_applied := payhook_apply(
                    d.source, d.event_id, d.event_type, d.occurred_at, d.business_key, d.order_id, d.from1, d.from2,
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
