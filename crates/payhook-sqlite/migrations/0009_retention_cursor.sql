-- Retention: where each pruning phase stopped, as a position in the inbox_received index (received_at, then id).
-- A step resumes after it, so pruning costs what it prunes, never what earlier steps already did.
CREATE TABLE retention_cursor (
    phase       TEXT    PRIMARY KEY,   -- payloads | keys
    received_at INTEGER NOT NULL,      -- unix ms of the last row passed
    id          INTEGER NOT NULL       -- its inbox id (ties on received_at are ordered by id)
) WITHOUT ROWID;
INSERT INTO retention_cursor (phase, received_at, id) VALUES ('payloads', 0, 0), ('keys', 0, 0);
