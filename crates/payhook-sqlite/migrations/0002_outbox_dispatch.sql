-- Outbox rows per (effect, sink) with their delivery state; an attempt log; alert storm windows.

CREATE TABLE outbox_v2 (
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
    created_at      INTEGER NOT NULL,
    UNIQUE (order_id, kind, sink)
);
INSERT INTO outbox_v2 (id, kind, sink, order_id, source, event_id, payload, status, attempts, created_at)
    SELECT id, kind, '', order_id, source, event_id, payload, 'unrouted', attempts, created_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v2 RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (sink, next_attempt_at) WHERE status = 'pending';
-- Rows without an order (forwarded events, alerts) are found by their event.
CREATE INDEX outbox_orderless ON outbox (source, event_id) WHERE order_id IS NULL;

-- Every attempt that did not simply succeed on arrival: deferrals, retries, dead letters, replays.
CREATE TABLE inbox_attempts (
    inbox_id INTEGER NOT NULL,
    attempt  INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    outcome  TEXT    NOT NULL,
    detail   TEXT,
    PRIMARY KEY (inbox_id, attempt)
) WITHOUT ROWID;

-- Dead letters are listed and replayed by operators: only they pay for this index.
CREATE INDEX inbox_dead ON inbox (id) WHERE status = 'dead_lettered';

-- One alert per key and window; repeats are counted into it.
CREATE TABLE alert_windows (
    key          TEXT    PRIMARY KEY,
    window_start INTEGER NOT NULL,
    outbox_id    INTEGER NOT NULL,
    count        INTEGER NOT NULL,
    suppressed   INTEGER NOT NULL DEFAULT 0   -- repeats after the window's alert was sent, carried to the next
) WITHOUT ROWID;
