-- The triggers of the version 11 baseline (`0011_baseline.sql`), applied after `sql/functions/`, which defines the
-- functions they call.

-- Counters (see counter_totals): inserts and deletes fire one statement-level trigger each, appending one delta
-- per key per statement from its transition table (a batch's multi-row statements cost one delta per key, not one
-- per row); an update that moves a row from one key to another fires once per such row.
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

-- A deleted inbox row's event-id key goes with it (inbox_keys); a detached day's keys are deleted in steps by
-- payhook_forget_gone instead.
CREATE TRIGGER inbox_keys_forgotten AFTER DELETE ON inbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION payhook_forget_keys();
