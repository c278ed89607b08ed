-- Row counts by status, kept by triggers in the transaction of every change, so that stats read a few counters
-- instead of counting every row. Triggers keep them right whoever writes: this process, an older one, the CLI,
-- retention. With group commit the counter pages are written once per batch.
--
-- Invariant: after every commit, each counter equals a full count of the rows it counts (`payhook stats
-- --recount` checks it and corrects any drift).
CREATE TABLE counters (
    tbl    TEXT    NOT NULL,   -- inbox | orders | outbox
    grp    TEXT    NOT NULL,   -- the inbox row's source, the outbox row's sink; '' for orders
    kind   TEXT    NOT NULL,   -- the outbox row's kind; '' for the other tables
    status TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (tbl, grp, kind, status)
) WITHOUT ROWID;

INSERT INTO counters (tbl, grp, kind, status, n)
    SELECT 'inbox', source, '', status, count(*) FROM inbox GROUP BY source, status;
INSERT INTO counters (tbl, grp, kind, status, n)
    SELECT 'orders', '', '', status, count(*) FROM orders GROUP BY status;
INSERT INTO counters (tbl, grp, kind, status, n)
    SELECT 'outbox', sink, kind, status, count(*) FROM outbox GROUP BY sink, kind, status;

CREATE TRIGGER inbox_counted_insert AFTER INSERT ON inbox BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('inbox', NEW.source, '', NEW.status, 1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER inbox_counted_delete AFTER DELETE ON inbox BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('inbox', OLD.source, '', OLD.status, -1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n - 1;
END;
CREATE TRIGGER inbox_counted_update AFTER UPDATE OF status, source ON inbox
WHEN OLD.status IS NOT NEW.status OR OLD.source IS NOT NEW.source BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('inbox', OLD.source, '', OLD.status, -1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n - 1;
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('inbox', NEW.source, '', NEW.status, 1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER orders_counted_insert AFTER INSERT ON orders BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('orders', '', '', NEW.status, 1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER orders_counted_delete AFTER DELETE ON orders BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('orders', '', '', OLD.status, -1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n - 1;
END;
CREATE TRIGGER orders_counted_update AFTER UPDATE OF status ON orders WHEN OLD.status IS NOT NEW.status BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('orders', '', '', OLD.status, -1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n - 1;
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('orders', '', '', NEW.status, 1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER outbox_counted_insert AFTER INSERT ON outbox BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('outbox', NEW.sink, NEW.kind, NEW.status, 1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER outbox_counted_delete AFTER DELETE ON outbox BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('outbox', OLD.sink, OLD.kind, OLD.status, -1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n - 1;
END;
CREATE TRIGGER outbox_counted_update AFTER UPDATE OF status, sink, kind ON outbox
WHEN OLD.status IS NOT NEW.status OR OLD.sink IS NOT NEW.sink OR OLD.kind IS NOT NEW.kind BEGIN
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('outbox', OLD.sink, OLD.kind, OLD.status, -1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n - 1;
    INSERT INTO counters (tbl, grp, kind, status, n) VALUES ('outbox', NEW.sink, NEW.kind, NEW.status, 1)
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + 1;
END;

-- The "oldest waiting work" gauges: a partial index answers min() in O(log n), and costs nothing for the rows
-- that are not waiting (most of them).
CREATE INDEX inbox_deferred_received ON inbox (received_at) WHERE status = 'deferred';
CREATE INDEX outbox_pending_created ON outbox (created_at) WHERE status = 'pending';
