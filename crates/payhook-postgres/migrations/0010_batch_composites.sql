-- The batch functions take one array of rows instead of one array per column: the element types below. The
-- functions themselves live in sql/functions/ (one file each, applied after the migrations on every migrate);
-- their positional-array versions are dropped here, since CREATE OR REPLACE cannot change a signature, and so
-- are payhook_apply and payhook_reapply, which now take the outbox documents payhook rendered instead of
-- building them.
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

CREATE TYPE payhook_forward AS (
    sink     text,
    source   text,
    event_id text,
    payload  text,
    now      bigint
);

CREATE TYPE payhook_alert AS (
    key  text,
    text text,
    now  bigint
);

DROP FUNCTION payhook_ingest_batch(text[], text[], text[], bigint[], text[], text[], text[], text[], bigint[],
                                   text[], text[], bytea[], bigint[], text[], text[], text[], text[], bigint[],
                                   text[], text[], integer[], integer[], text[]);
DROP FUNCTION payhook_settle_batch(text[], text[], bigint[], text[], text[], integer[], bigint[], text[], bigint[],
                                   boolean[], text, text[], text[], text[], text[], bigint[], text, text, bigint,
                                   bigint, text[], text[], bigint[]);
DROP FUNCTION payhook_reapply(text, text, text, bigint, text, text, text, text, text, bigint, text, text, text[],
                              bigint);
DROP FUNCTION payhook_apply(text, text, text, bigint, text, text, text, text, text, bigint, text, text, text[],
                            bigint, text);
