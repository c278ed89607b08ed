-- Listings read newest first by row id down an index that matches their filter (see `listing`): one `(value, id)`
-- index per filter an operator pages by. New rows land at the end of their value's range, a page or two that
-- every insert dirties anyway. Plain `IF NOT EXISTS` (no `CONCURRENTLY`: migrations run in a transaction) and no
-- unique index, so that a partitioned inbox takes them as they are. An order's outbox rows are listed through
-- `UNIQUE (order_id, kind, sink)`, a kind by a bounded scan. `(status, id)` serves dead letters too, so their
-- partial index of migration 0002 goes.
CREATE INDEX IF NOT EXISTS inbox_by_status ON inbox (status, id);
CREATE INDEX IF NOT EXISTS inbox_by_source ON inbox (source, id);
CREATE INDEX IF NOT EXISTS inbox_by_type ON inbox (event_type, id);
CREATE INDEX IF NOT EXISTS outbox_by_status ON outbox (status, id);
CREATE INDEX IF NOT EXISTS outbox_by_sink ON outbox (sink, id);
DROP INDEX IF EXISTS inbox_dead;
