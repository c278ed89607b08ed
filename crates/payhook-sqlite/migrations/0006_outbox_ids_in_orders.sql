-- An order's outbox rows are listed in the order's own row instead of being found through an index on
-- outbox (order_id, kind, sink). Outbox rows are appended in id order, so the table grows at its right edge; an index
-- keyed by order id is written at a random place for every transition, one more dirty page (a WAL frame, written again
-- by the checkpoint) per event. The order's row is already written by the guarded UPDATE of the same transition.
-- The index also enforced one row per (order, kind, sink): the ledger's transitions form no cycle (a test in
-- payhook-core's ledger proves it), so an order takes each transition, and writes each kind, at most once.
-- A trigger keeps the list: every outbox row with an order is listed by the statement that inserts it, whoever runs
-- it (an older payhook process on the same file included).
ALTER TABLE orders ADD COLUMN outbox_ids TEXT NOT NULL DEFAULT '[]';
UPDATE orders SET outbox_ids = (
    SELECT json_group_array(id) FROM (SELECT id FROM outbox o WHERE o.order_id = orders.id ORDER BY id)
) WHERE id IN (SELECT order_id FROM outbox WHERE order_id IS NOT NULL);

CREATE TABLE outbox_v3 (
    id              INTEGER PRIMARY KEY,
    kind            TEXT    NOT NULL,
    sink            TEXT    NOT NULL,   -- '' when no configured sink takes this kind: recorded, not sent
    order_id        TEXT,
    source          TEXT,
    event_id        TEXT,
    payload         TEXT    NOT NULL,
    status          TEXT    NOT NULL,   -- pending | delivered | dead | unrouted
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,            -- unix ms, pending rows only
    lease_owner     TEXT,
    lease_until     INTEGER,
    last_error      TEXT,
    last_status     INTEGER,
    delivered_at    INTEGER,
    created_at      INTEGER NOT NULL
);
INSERT INTO outbox_v3 (id, kind, sink, order_id, source, event_id, payload, status, attempts, next_attempt_at,
                       lease_owner, lease_until, last_error, last_status, delivered_at, created_at)
    SELECT id, kind, sink, order_id, source, event_id, payload, status, attempts, next_attempt_at,
           lease_owner, lease_until, last_error, last_status, delivered_at, created_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v3 RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (sink, next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_orderless ON outbox (source, event_id) WHERE order_id IS NULL;
-- A later migration that rebuilds the outbox must create this trigger again (dropping a table drops its triggers).
CREATE TRIGGER outbox_listed_by_order AFTER INSERT ON outbox WHEN NEW.order_id IS NOT NULL
BEGIN
    UPDATE orders SET outbox_ids = json_insert(outbox_ids, '$[#]', NEW.id) WHERE id = NEW.order_id;
END;
