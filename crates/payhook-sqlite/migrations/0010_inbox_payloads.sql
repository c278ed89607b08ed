-- A delivery's raw headers and body move out of its inbox row into a table of their own, keyed by the inbox row's
-- id. Payloads are most of the bytes and the first thing retention drops: in the inbox row, clearing one left a
-- hole inside a page that also holds live rows, a hole new rows (appended at the table's right edge) never fill.
-- Here a step of the payload retention deletes a run of consecutive rows, whose pages (and overflow pages) empty
-- out and go back to the file system through the incremental vacuum.
--
-- New deliveries write their inbox row with the cleared form (headers '{}', body x'') and the payload here, in
-- the same transaction. Rows stored before this migration keep their payload in the inbox row: nothing is moved
-- (a rewrite of a possibly multi-GB inbox inside this migration's transaction would hold the write lock for
-- minutes), readers take the payload from here when there is one and from the inbox row otherwise, and the payload
-- retention clears both, so the older rows age out on their own.
CREATE TABLE inbox_payloads (
    inbox_id INTEGER PRIMARY KEY,   -- inbox.id
    headers  TEXT    NOT NULL,      -- as inbox.headers: every value of a repeated header, as sent
    body     BLOB    NOT NULL       -- the raw bytes the signature was verified on
);
-- A deleted inbox row takes its payload with it, whoever deletes it: this version's retention, an older process's
-- on the same file (which knows nothing of this table), an operator's SQL.
CREATE TRIGGER inbox_payload_deleted AFTER DELETE ON inbox BEGIN
    DELETE FROM inbox_payloads WHERE inbox_id = OLD.id;
END;

-- Order retention resumes where it stopped: a position (created_at, id) in the outbox, whose rows are appended in
-- id order and record every final transition (order.refunded, order.disputed) as it happens.
INSERT INTO retention_cursor (phase, received_at, id) VALUES ('orders', 0, 0);
