-- The status indexes hold only the statuses operators page through. Nearly every delivery ends `processed` and
-- nearly every outbox row `delivered` (or `unrouted`, where no sink takes its kind), and each used to add an entry
-- here that no listing needed: a listing of one of those statuses alone now walks the newest rows and checks the
-- status on each, and finds its page among the first rows when the status is the bulk, a bounded scan when it is
-- not (`payhook_store::listing`). Statements walking these indexes repeat their predicates, which a parameter
-- cannot imply. On upgrade this rebuilds both indexes, one pass over each table, holding their locks meanwhile.
DROP INDEX IF EXISTS inbox_by_status;
CREATE INDEX inbox_by_status ON inbox (status, id) WHERE status <> 'processed';
DROP INDEX IF EXISTS outbox_by_status;
CREATE INDEX outbox_by_status ON outbox (status, id) WHERE status IN ('pending', 'dead');
