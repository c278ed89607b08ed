-- Listings read newest first by row id down an index that matches their filter (see `listing`): one index per
-- filter an operator pages by. SQLite appends the row id to every index entry, so `(status)` is `(status, id)`:
-- new rows land at the end of their value's range, a page or two that every insert dirties anyway. An order's
-- outbox rows are listed by the order itself (`orders.outbox_ids`, migration 0006), a kind by a bounded scan.
-- `(status)` serves dead letters too, so their partial index of migration 0002 goes. The statements that must
-- keep their partial indexes (`inbox_due`, `outbox_due`, the oldest gauges) name them (`INDEXED BY`): to the
-- planner, without statistics, `status = 'deferred'` looks as well served by `(status)`.
CREATE INDEX IF NOT EXISTS inbox_by_status ON inbox (status);
CREATE INDEX IF NOT EXISTS inbox_by_source ON inbox (source);
CREATE INDEX IF NOT EXISTS inbox_by_type ON inbox (event_type);
CREATE INDEX IF NOT EXISTS outbox_by_status ON outbox (status);
CREATE INDEX IF NOT EXISTS outbox_by_sink ON outbox (sink);
DROP INDEX IF EXISTS inbox_dead;
