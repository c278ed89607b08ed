-- payhook's PostgreSQL schema at version 11: the tables, types and indexes that migrations 1 to 11 built, in one
-- step. A database created by this build starts here; one that applied those eleven migrations is already here
-- (src/migrate.rs). The functions are not here: `sql/functions/` holds the one definition of each, applied after
-- this file, and the triggers that call them are in `0011_baseline_triggers.sql`, applied after the functions.
--
-- Times are unix milliseconds (bigint), as in the store's model and the SQLite schema, unless a column says
-- otherwise. Everything is created in the first schema of the connection's search_path.
--
-- Locking protocol (see src/writer.rs): every transaction that reads or changes an order's state first takes the
-- transaction-scoped advisory lock of that order (a stable 64-bit hash of its id, computed by payhook), and only
-- then the keys that belong to the order (its row, its events' inbox and business keys, its outbox rows). Batches
-- take their orders in ascending lock order, so concurrent batches, in one process or several, never wait for each
-- other in a cycle. The advisory lock also makes the status an event reads the status it changes: nobody else can
-- change that order until the transaction ends. It costs no WAL, unlike `SELECT … FOR UPDATE`.
--
-- A billing effect (subscription or invoice) is guarded by advisory locks on its objects (`subscription:ID`,
-- `invoice:ID`), taken in ascending order after the batch's order locks and event keys; nothing takes an order
-- lock while holding a billing lock. Alert windows come last, in ascending key order, each before the pending
-- alert row it gathers into.

-- The arguments of the batch functions, one value per delivery, settlement, forwarded event or alert.
CREATE TYPE payhook_alert AS (
    key  text,
    text text,
    now  bigint
);
CREATE TYPE payhook_delivery AS (
    source       text,
    event_id     text,
    event_type   text,
    occurred_at  bigint,
    business_key text,
    effect       text,
    status       text,
    reason       text,
    received_at  bigint,
    verification text,
    headers      text,
    body         bytea,
    lock         bigint,
    order_id     text,
    from1        text,
    from2        text,
    to_status    text,
    amount       bigint,
    currency     text,
    outbox_kind  text,
    payloads     text[],
    create_order boolean,
    route_lo     integer,
    route_hi     integer
);
CREATE TYPE payhook_forward AS (
    sink     text,
    source   text,
    event_id text,
    payload  text,
    now      bigint
);
CREATE TYPE payhook_settlement AS (
    source          text,
    event_id        text,
    row_id          bigint,
    status          text,
    reason          text,
    attempts        integer,
    next_attempt_at bigint,
    waiting_order   text,
    now             bigint,
    release_key     boolean
);

-- Every verified delivery, exactly once per (source, event_id), partitioned by day so that retention drops a
-- day's partition instead of deleting its rows.
--
-- `bucket` is the UTC day of `received_at` (days since 1970-01-01), or 0 for the held partition. Each day has a
-- partition of its own (`inbox_YYYYMMDD`), created ahead of time by `payhook_ensure_partitions` (when a store opens
-- and at every pruning step: the current day and the next). `inbox_held` (bucket 0) keeps what must outlive its
-- day: dead letters and deferred events of a day that is pruned are moved there first (an UPDATE of `bucket`, i.e.
-- row movement); its settled rows are pruned row by row. `inbox_default` catches a delivery whose day has no
-- partition, so an insert never fails; it is pruned row by row too.
--
-- Dedup: a unique key on a partitioned table must contain the partition column, so `(source, event_id)` is unique
-- in `inbox_keys`, which ingest claims with `INSERT … ON CONFLICT DO NOTHING` before writing the row. Every
-- partition has an index on `(source, event_id)`: a lookup by event probes each live partition once (their number
-- is bounded by the key retention), and the hot path carries the bucket instead.
--
-- Pruning a day (payhook_detach_day): with its unsettled rows moved away, under a short ACCESS EXCLUSIVE lock on
-- `inbox` (bounded by the caller's lock timeout), its rows are subtracted from the counters (a DETACH fires no
-- DELETE trigger), the partition is detached and renamed `inbox_gone_YYYYMMDD`: from that commit on its rows are
-- gone. Its event-id keys, the business keys its events hold and their attempt log are then deleted in bounded
-- steps (payhook_forget_gone), and the table is dropped when none is left. Until then a redelivery of one of its
-- events is still answered as a duplicate.
CREATE TABLE inbox (
    source          text    NOT NULL,
    event_id        text    NOT NULL,
    id              bigint  GENERATED ALWAYS AS IDENTITY,  -- unique by construction; the store's row id
    event_type      text,
    occurred_at     bigint,             -- provider time, unix seconds
    business_key    text,
    order_id        text,               -- set while deferred, so registering the order can wake it
    effect          text,               -- normalized effect as JSON, re-applied by the worker
    status          text    NOT NULL,   -- processed | duplicate | deferred | ignored | dead_lettered
    reason          text,
    attempts        integer NOT NULL DEFAULT 1,
    next_attempt_at bigint,             -- deferred rows only
    lease_owner     text,
    lease_until     bigint,
    received_at     bigint  NOT NULL,
    updated_at      bigint  NOT NULL,
    verification    text    NOT NULL,
    headers         text    NOT NULL,
    body            bytea   NOT NULL,
    pruned_at       bigint,             -- when the body and headers were cleared
    bucket          integer NOT NULL DEFAULT 0
) PARTITION BY RANGE (bucket);
CREATE TABLE inbox_held PARTITION OF inbox (PRIMARY KEY (source, event_id)) FOR VALUES FROM (MINVALUE) TO (1);
CREATE TABLE inbox_default PARTITION OF inbox DEFAULT;
CREATE INDEX inbox_default_event ON inbox_default (source, event_id);
-- The held partition's own names for the indexes every partition gets from the parent's below.
CREATE INDEX inbox_held_due ON inbox_held (next_attempt_at) WHERE status = 'deferred';
CREATE INDEX inbox_held_waiting_order ON inbox_held (order_id) WHERE status = 'deferred';
CREATE INDEX inbox_held_newest ON inbox_held (id);
CREATE INDEX inbox_held_received ON inbox_held (received_at);
CREATE INDEX inbox_held_deferred_received ON inbox_held (received_at) WHERE status = 'deferred';
-- What the retry worker claims, and the deferred events an order's registration wakes.
CREATE INDEX inbox_due ON inbox (next_attempt_at) WHERE status = 'deferred';
CREATE INDEX inbox_waiting_order ON inbox (order_id) WHERE status = 'deferred';
-- Listings are newest first by row id, paged by row id: the identity column has no index of its own, and without
-- one a page of `events list` sorts the whole inbox. Ids only grow, so each insert lands on the rightmost leaf.
CREATE INDEX inbox_newest ON inbox (id);
-- Retention prunes settled events by age; rows are appended in time order, so this grows at its right edge.
CREATE INDEX inbox_received ON inbox (received_at);
-- The "oldest waiting work" gauges: a partial index answers min() in one step and holds only waiting rows.
CREATE INDEX inbox_deferred_received ON inbox (received_at) WHERE status = 'deferred';
-- Filtered listings, each in id order. By status, without the processed rows: nearly all of them, and a listing
-- of those reads `inbox_newest` instead.
CREATE INDEX inbox_by_status ON inbox (status, id) WHERE status <> 'processed';
CREATE INDEX inbox_by_source ON inbox (source, id);
CREATE INDEX inbox_by_type ON inbox (event_type, id);

-- The event-id keys of the inbox (see above).
CREATE TABLE inbox_keys (
    source   text NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (source, event_id)
);

-- Detached days whose keys are still being deleted: how far (row id) the deletion got.
CREATE TABLE inbox_gone (
    name     text   PRIMARY KEY,
    after_id bigint NOT NULL
);

-- Every attempt that did not simply succeed on arrival: deferrals, retries, dead letters, replays.
CREATE TABLE inbox_attempts (
    inbox_id bigint  NOT NULL,
    attempt  integer NOT NULL,
    at       bigint  NOT NULL,
    outcome  text    NOT NULL,
    detail   text,
    PRIMARY KEY (inbox_id, attempt)
);

-- One effect per business fact, whatever the event id.
CREATE TABLE business_keys (
    source     text   NOT NULL,
    key        text   NOT NULL,
    event_id   text   NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (source, key)
);

-- Updated in place on every transition: room on each page keeps those updates HOT (no index write).
CREATE TABLE orders (
    id         text   PRIMARY KEY,
    amount     bigint NOT NULL,
    currency   text   NOT NULL,
    status     text   NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
) WITH (fillfactor = 80);

-- An event changes an order at most once, so (order_id, source, event_id) identifies a change and keeps an
-- order's history together in one index; `seq` orders it.
CREATE TABLE order_audit (
    order_id    text   NOT NULL,
    source      text   NOT NULL,
    event_id    text   NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    event_type  text   NOT NULL,
    from_status text   NOT NULL,
    to_status   text   NOT NULL,
    at          bigint NOT NULL,
    PRIMARY KEY (order_id, source, event_id)
);

-- Side effects, written in the transaction of the change that causes them: one row per effect and sink, with its
-- delivery state; at most one per order, kind and sink.
CREATE TABLE outbox (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text    NOT NULL,
    order_id        text,
    source          text,               -- NULL for alerts, which have no event
    event_id        text,
    payload         jsonb   NOT NULL,
    status          text    NOT NULL,   -- pending | delivered | dead | unrouted, always explicit
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at bigint,
    created_at      bigint  NOT NULL,
    sink            text    NOT NULL,   -- '' when no configured sink takes this kind
    lease_owner     text,
    lease_until     bigint,
    last_error      text,
    last_status     integer,
    delivered_at    bigint,
    UNIQUE (order_id, kind, sink)
);
-- What each sink's dispatcher claims; only pending rows pay for it.
CREATE INDEX outbox_due ON outbox (sink, next_attempt_at) WHERE status = 'pending';
-- Rows without an order (forwarded events, alerts) are found by their event.
CREATE INDEX outbox_orderless ON outbox (source, event_id) WHERE order_id IS NULL;
-- The "oldest waiting work" gauges: a partial index answers min() in one step and holds only waiting rows.
CREATE INDEX outbox_pending_created ON outbox (created_at) WHERE status = 'pending';
-- Filtered listings, in id order; by status only the statuses an operator lists (not the delivered bulk).
CREATE INDEX outbox_by_status ON outbox (status, id) WHERE status IN ('pending', 'dead');
CREATE INDEX outbox_by_sink ON outbox (sink, id);

-- Where order retention resumes: the last outbox row it passed. One row, always.
CREATE TABLE order_retention_cursor (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    created_at bigint  NOT NULL,
    id         bigint  NOT NULL
);
INSERT INTO order_retention_cursor (created_at, id) VALUES (0, 0);

-- One alert per key and window; repeats are counted into it. `outbox_id` is NULL only in the placeholder row a
-- first alert inserts to have something to lock (see payhook_raise_alert).
CREATE TABLE alert_windows (
    key          text    PRIMARY KEY,
    window_start bigint  NOT NULL,
    outbox_id    bigint,
    count        integer NOT NULL,
    suppressed   integer NOT NULL DEFAULT 0   -- repeats after the window's alert was sent, carried to the next
);

-- Subscriptions as the provider last described them: a change applies only when its event is newer than the one
-- that set the row (see payhook-core's billing rules).
CREATE TABLE subscriptions (
    id                 text   PRIMARY KEY,
    customer_id        text,
    status             text   NOT NULL,    -- the provider's status, lower-cased
    current_period_end bigint,             -- unix seconds
    occurred_at        bigint NOT NULL,    -- provider time of the event that set this row, unix seconds
    source             text   NOT NULL,
    event_id           text   NOT NULL,    -- the event that set this row
    created_at         bigint NOT NULL,
    updated_at         bigint NOT NULL
) WITH (fillfactor = 80);

-- One entitlement per invoice: the primary key is the invoice id, so two events for one invoice cannot grant twice.
CREATE TABLE entitlements (
    invoice_id      text   PRIMARY KEY,
    customer_id     text,
    subscription_id text,
    status          text   NOT NULL,       -- granted | revoked
    amount          bigint,
    currency        text,
    reason          text,                  -- why it was revoked or never granted
    granted_at      bigint,
    revoked_at      bigint,
    updated_at      bigint NOT NULL
);
CREATE INDEX entitlements_customer ON entitlements (customer_id);
-- The entitlements of a subscription: revoked at its end (the granted ones), shown with it (all of them).
CREATE INDEX entitlements_subscription ON entitlements (subscription_id);

-- Every change of a subscription or an entitlement: which event moved it from what to what; `seq` orders it.
CREATE TABLE billing_audit (
    object      text   NOT NULL,           -- subscription | entitlement
    object_id   text   NOT NULL,
    source      text   NOT NULL,
    event_id    text   NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    event_type  text   NOT NULL,
    from_status text,                      -- NULL when the change created the row
    to_status   text   NOT NULL,
    at          bigint NOT NULL,
    PRIMARY KEY (object, object_id, source, event_id)
);
-- An event's detail lists the billing changes it made.
CREATE INDEX billing_audit_event ON billing_audit (source, event_id);

-- HTTP Message Signatures nonces (RFC 9421) seen within their validity window, to refuse a replayed signature.
CREATE TABLE signature_nonces (
    keyid       text   NOT NULL,
    nonce       text   NOT NULL,
    body_sha256 text   NOT NULL,           -- a redelivery of the same request is not a replay
    expires_at  bigint NOT NULL,           -- unix seconds; the row may be pruned after it
    PRIMARY KEY (keyid, nonce)
);
CREATE INDEX signature_nonces_expiry ON signature_nonces (expires_at);

-- Row counts by status, so that stats read a few rows instead of counting every row.
--
-- Writers never update a shared counter row: concurrent batch transactions would queue on its row lock. They
-- append deltas instead (`counter_deltas`, insert-only, no index), from triggers, so they are right whoever writes:
-- this version, an older one, an operator's SQL, retention. A periodic short step (`payhook_fold_counters`, run by
-- stats) moves the deltas into `counter_totals`; stats read the totals plus the few deltas not folded yet.
--
-- Invariant: after every commit, for each key, the total plus the sum of its deltas equals a full count of the
-- rows it counts (`payhook stats --recount` checks it and corrects any drift).
CREATE TABLE counter_totals (
    tbl    text   NOT NULL,   -- inbox | orders | outbox
    grp    text   NOT NULL,   -- the inbox row's source, the outbox row's sink; '' for orders
    kind   text   NOT NULL,   -- the outbox row's kind; '' for the other tables
    status text   NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (tbl, grp, kind, status)
);
CREATE TABLE counter_deltas (
    tbl    text   NOT NULL,
    grp    text   NOT NULL,
    kind   text   NOT NULL,
    status text   NOT NULL,
    n      bigint NOT NULL
);
