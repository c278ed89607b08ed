-- Per-key order: every outbox row but an alert has an ordering key, and a sink delivers the rows of one key in
-- commit (id) order. The key is computed from the row itself, so no write path changes: the order for order
-- documents, the subscription (or, without one, the customer) for billing documents, the event for a forwarded
-- event. The rows of one key are written under the same advisory lock (the order's, the subscription's), so their
-- ids follow their commits.
ALTER TABLE outbox ADD COLUMN order_key text GENERATED ALWAYS AS (
    CASE
        WHEN kind = 'alert' THEN NULL
        WHEN order_id IS NOT NULL THEN 'order:' || order_id
        WHEN kind = 'event.received' THEN 'event:' || source || ':' || event_id
        WHEN payload ->> 'subscription_id' IS NOT NULL THEN 'subscription:' || (payload ->> 'subscription_id')
        WHEN payload ->> 'customer_id' IS NOT NULL THEN 'customer:' || (payload ->> 'customer_id')
    END) STORED;

-- "Is there an earlier pending or dead row of this sink and key?": the claim's condition on every candidate row.
-- Only rows still waiting (or dead) are in it, so it stays small while the sinks keep up.
CREATE INDEX outbox_key_open ON outbox (sink, order_key, id)
    WHERE status IN ('pending', 'dead') AND order_key IS NOT NULL;
