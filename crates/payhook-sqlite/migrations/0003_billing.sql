-- Subscriptions as the provider last described them: a change applies only when its event is newer than the one
-- that set the row (see payhook-core's billing rules).
CREATE TABLE subscriptions (
    id                 TEXT    PRIMARY KEY,
    customer_id        TEXT,
    status             TEXT    NOT NULL,   -- the provider's status, lower-cased
    current_period_end INTEGER,            -- unix seconds
    occurred_at        INTEGER NOT NULL,   -- provider time of the event that set this row, unix seconds
    source             TEXT    NOT NULL,
    event_id           TEXT    NOT NULL,   -- the event that set this row
    created_at         INTEGER NOT NULL,   -- unix ms
    updated_at         INTEGER NOT NULL    -- unix ms
) WITHOUT ROWID;

-- One entitlement per invoice: the primary key is the invoice id, so two events for one invoice cannot grant twice.
CREATE TABLE entitlements (
    invoice_id      TEXT    PRIMARY KEY,
    customer_id     TEXT,
    subscription_id TEXT,
    status          TEXT    NOT NULL,      -- granted | revoked
    amount          INTEGER,
    currency        TEXT,
    reason          TEXT,                  -- why it was revoked or never granted
    granted_at      INTEGER,               -- unix ms
    revoked_at      INTEGER,               -- unix ms
    updated_at      INTEGER NOT NULL       -- unix ms
) WITHOUT ROWID;
CREATE INDEX entitlements_customer ON entitlements (customer_id);
CREATE INDEX entitlements_live_by_subscription ON entitlements (subscription_id) WHERE status = 'granted';

-- Every change of a subscription or an entitlement: which event moved it from what to what.
CREATE TABLE billing_audit (
    object      TEXT    NOT NULL,          -- subscription | entitlement
    object_id   TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    event_type  TEXT    NOT NULL,
    from_status TEXT,                      -- NULL when the change created the row
    to_status   TEXT    NOT NULL,
    at          INTEGER NOT NULL,          -- unix ms
    PRIMARY KEY (object, object_id, source, event_id)
) WITHOUT ROWID;

-- HTTP Message Signatures nonces (RFC 9421) seen within their validity window, to refuse a replayed signature.
CREATE TABLE signature_nonces (
    keyid       TEXT    NOT NULL,
    nonce       TEXT    NOT NULL,
    body_sha256 TEXT    NOT NULL,          -- a redelivery of the same request is not a replay
    expires_at  INTEGER NOT NULL,          -- unix seconds; the row may be pruned after it
    PRIMARY KEY (keyid, nonce)
) WITHOUT ROWID;
CREATE INDEX signature_nonces_expiry ON signature_nonces (expires_at);
