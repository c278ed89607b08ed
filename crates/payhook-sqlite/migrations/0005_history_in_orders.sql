-- An order's history moves into the order's own row: a transition then dirties only the page the guarded UPDATE
-- already writes, instead of one more random page of a separate audit table (each dirty page is a 4 KiB WAL frame
-- per commit, written again by the checkpoint). An order has a handful of transitions, so the array stays small.
-- Each entry: [source, event_id, event_type, from_status, to_status, at (unix ms)].
ALTER TABLE orders ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
UPDATE orders SET history = (
    SELECT json_group_array(json_array(source, event_id, event_type, from_status, to_status, at))
    FROM (SELECT * FROM order_audit a WHERE a.order_id = orders.id ORDER BY at, event_id)
) WHERE id IN (SELECT order_id FROM order_audit);
DROP TABLE order_audit;
