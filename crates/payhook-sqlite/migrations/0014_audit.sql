-- The operator audit trail (`payhook_store::audit`): one row per action an operator took through the API, the
-- dashboard or the CLI, appended in the action's own transaction where the action is one.
--
-- Every order registration is an entry, so entries come at the rate of orders: no AUTOINCREMENT (its
-- `sqlite_sequence` row is one more write per entry) and no JSON check on `detail` (only the store writes it, from
-- a `serde_json::Value`). Pruning deletes the oldest entries, so an id is given again only after every entry before
-- it is gone.
CREATE TABLE audit (
    id      INTEGER PRIMARY KEY,
    at_ms   INTEGER NOT NULL,
    actor   TEXT    NOT NULL,
    address TEXT,
    action  TEXT    NOT NULL,
    target  TEXT,
    outcome TEXT    NOT NULL,
    detail  TEXT
);

-- Pruning walks it oldest first; a listing's time range becomes a range of ids through it.
CREATE INDEX audit_at ON audit (at_ms);
-- The listings' paths: an actor's, an action's, a target's entries, each in id order within its value (SQLite
-- appends the row id to every index entry).
CREATE INDEX audit_by_actor ON audit (actor);
CREATE INDEX audit_by_action ON audit (action);
CREATE INDEX audit_by_target ON audit (target);
