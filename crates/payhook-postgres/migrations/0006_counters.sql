-- Row counts by status, so that stats read a few rows instead of counting every row.
--
-- Writers never update a shared counter row: concurrent batch transactions would queue on its row lock. They
-- append deltas instead (`counter_deltas`, insert-only, no index: one heap insert per counted statement), from
-- triggers, so they are right whoever writes: this version, an older one, an operator's SQL, retention. A periodic
-- short step (`payhook_fold_counters`, run by stats) moves the deltas into `counter_totals`; stats read the totals
-- plus the few deltas not folded yet, in one snapshot.
--
-- Invariant: after every commit, for each key, the total plus the sum of its deltas equals a full count of the
-- rows it counts (`payhook stats --recount` checks it and corrects any drift).
CREATE TABLE counter_totals (
    tbl    text   NOT NULL,   -- inbox | orders | outbox
    grp    text   NOT NULL,   -- the inbox row's source, the outbox row's sink; '' for orders
    kind   text   NOT NULL,   -- the outbox row's kind; '' for the other tables
    status text   NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (tbl, grp, kind, status)
);
CREATE TABLE counter_deltas (
    tbl    text   NOT NULL,
    grp    text   NOT NULL,
    kind   text   NOT NULL,
    status text   NOT NULL,
    n      bigint NOT NULL
);

INSERT INTO counter_totals (tbl, grp, kind, status, n)
    SELECT 'inbox', source, '', status, count(*) FROM inbox GROUP BY source, status;
INSERT INTO counter_totals (tbl, grp, kind, status, n)
    SELECT 'orders', '', '', status, count(*) FROM orders GROUP BY status;
INSERT INTO counter_totals (tbl, grp, kind, status, n)
    SELECT 'outbox', sink, kind, status, count(*) FROM outbox GROUP BY sink, kind, status;

-- Inserts and deletes: one statement-level trigger each, appending one delta per key per statement from its
-- transition table (a batch's multi-row statements cost one delta per key, not one per row).
CREATE FUNCTION payhook_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'inbox' AND TG_OP = 'INSERT' THEN
        INSERT INTO counter_deltas SELECT 'inbox', source, '', status, count(*) FROM new_rows GROUP BY 2, 4;
    ELSIF TG_TABLE_NAME = 'inbox' THEN
        INSERT INTO counter_deltas SELECT 'inbox', source, '', status, -count(*) FROM old_rows GROUP BY 2, 4;
    ELSIF TG_TABLE_NAME = 'orders' AND TG_OP = 'INSERT' THEN
        INSERT INTO counter_deltas SELECT 'orders', '', '', status, count(*) FROM new_rows GROUP BY 4;
    ELSIF TG_TABLE_NAME = 'orders' THEN
        INSERT INTO counter_deltas SELECT 'orders', '', '', status, -count(*) FROM old_rows GROUP BY 4;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO counter_deltas SELECT 'outbox', sink, kind, status, count(*) FROM new_rows GROUP BY 2, 3, 4;
    ELSE
        INSERT INTO counter_deltas SELECT 'outbox', sink, kind, status, -count(*) FROM old_rows GROUP BY 2, 3, 4;
    END IF;
    RETURN NULL;
END $$;

-- Status changes: a row-level trigger whose WHEN clause is checked without calling the function, so the frequent
-- updates that leave the status alone (leases, attempts, payload pruning) cost nothing; a statement-level one
-- would copy every updated row, body included, into its transition tables.
CREATE FUNCTION payhook_count_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'inbox' THEN
        INSERT INTO counter_deltas VALUES ('inbox', OLD.source, '', OLD.status, -1), ('inbox', NEW.source, '', NEW.status, 1);
    ELSIF TG_TABLE_NAME = 'orders' THEN
        INSERT INTO counter_deltas VALUES ('orders', '', '', OLD.status, -1), ('orders', '', '', NEW.status, 1);
    ELSE
        INSERT INTO counter_deltas
        VALUES ('outbox', OLD.sink, OLD.kind, OLD.status, -1), ('outbox', NEW.sink, NEW.kind, NEW.status, 1);
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

CREATE TRIGGER orders_counted_insert AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_count_rows();
CREATE TRIGGER orders_counted_delete AFTER DELETE ON orders
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_count_rows();
CREATE TRIGGER orders_counted_update AFTER UPDATE OF status ON orders FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION payhook_count_status_change();

CREATE TRIGGER outbox_counted_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_count_rows();
CREATE TRIGGER outbox_counted_delete AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_count_rows();
CREATE TRIGGER outbox_counted_update AFTER UPDATE OF status, sink, kind ON outbox FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.sink IS DISTINCT FROM NEW.sink OR OLD.kind IS DISTINCT FROM NEW.kind)
    EXECUTE FUNCTION payhook_count_status_change();

-- Moves the deltas into the totals, in one short transaction. Only one caller folds at a time (the others return
-- at once: the deltas they would fold are being folded); deltas committed meanwhile wait for the next fold.
-- Returns how many deltas it folded.
CREATE FUNCTION payhook_fold_counters() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('payhook-counters:' || current_schema())) THEN
        RETURN 0;
    END IF;
    WITH moved AS (
        DELETE FROM counter_deltas RETURNING tbl, grp, kind, status, n
    ), summed AS (
        SELECT tbl, grp, kind, status, sum(n)::bigint AS n, count(*) AS rows FROM moved GROUP BY 1, 2, 3, 4
    ), added AS (
        INSERT INTO counter_totals AS t (tbl, grp, kind, status, n)
        SELECT tbl, grp, kind, status, n FROM summed
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = t.n + excluded.n
        RETURNING 1
    )
    SELECT coalesce(sum(rows), 0)::bigint INTO v_folded FROM summed;
    RETURN v_folded;
END $$;

-- The "oldest waiting work" gauges: a partial index answers min() in one step and holds only waiting rows.
CREATE INDEX inbox_deferred_received ON inbox (received_at) WHERE status = 'deferred';
CREATE INDEX outbox_pending_created ON outbox (created_at) WHERE status = 'pending';
