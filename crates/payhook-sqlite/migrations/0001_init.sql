-- Every verified delivery, exactly once per (source, event_id).
CREATE TABLE inbox (
    id              INTEGER PRIMARY KEY,
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    event_type      TEXT,
    occurred_at     INTEGER,            -- provider time, unix seconds
    business_key    TEXT,
    order_id        TEXT,               -- set while deferred, so registering the order can wake it
    effect          TEXT,               -- normalized effect as JSON, re-applied by the worker
    status          TEXT    NOT NULL,   -- processed | duplicate | deferred | ignored | dead_lettered
    reason          TEXT,
    attempts        INTEGER NOT NULL DEFAULT 1,
    next_attempt_at INTEGER,            -- unix ms, deferred rows only
    lease_owner     TEXT,
    lease_until     INTEGER,            -- unix ms
    received_at     INTEGER NOT NULL,   -- unix ms
    updated_at      INTEGER NOT NULL,   -- unix ms
    verification    TEXT    NOT NULL,
    headers         TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    UNIQUE (source, event_id)
);
CREATE INDEX inbox_due ON inbox (next_attempt_at) WHERE status = 'deferred';
CREATE INDEX inbox_waiting_order ON inbox (order_id) WHERE status = 'deferred';

-- One effect per business fact, whatever the event id.
CREATE TABLE business_keys (
    source     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    event_id   TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (source, key)
) WITHOUT ROWID;

CREATE TABLE orders (
    id          TEXT    PRIMARY KEY,
    amount      INTEGER NOT NULL,
    currency    TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    prev_status TEXT,                   -- the status before the last transition, read back by RETURNING
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- An event changes an order at most once, so (order_id, source, event_id) identifies a change; clustering the
-- table on it keeps an order's history together and costs one B-tree insert per change.
CREATE TABLE order_audit (
    order_id    TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    event_type  TEXT    NOT NULL,
    from_status TEXT    NOT NULL,
    to_status   TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    PRIMARY KEY (order_id, source, event_id)
) WITHOUT ROWID;

-- Side effects, written in the transaction of the change that causes them; at most one per order and kind.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,
    kind            TEXT    NOT NULL,
    order_id        TEXT,
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    created_at      INTEGER NOT NULL,
    UNIQUE (order_id, kind)
);
