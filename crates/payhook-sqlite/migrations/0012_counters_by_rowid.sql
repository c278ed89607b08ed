-- The row counters of migration 0008 move from a WITHOUT ROWID table, keyed by its four text columns, to a rowid
-- table with a unique index on the same columns. Every counted change runs an upsert on this table (about four per
-- payment): in a WITHOUT ROWID table the `DO UPDATE` rewrites the entry of the key itself, while here it rewrites
-- only the table row and leaves the index alone, since `n` is not in it. Same columns, same conflict target: the
-- triggers, `stats` and `stats --recount` read and write it unchanged.
CREATE TEMP TABLE counters_before AS SELECT tbl, grp, kind, status, n FROM counters;
DROP TABLE counters;
CREATE TABLE counters (
    id     INTEGER PRIMARY KEY,
    tbl    TEXT    NOT NULL,   -- inbox | orders | outbox
    grp    TEXT    NOT NULL,   -- the inbox row's source, the outbox row's sink; '' for orders
    kind   TEXT    NOT NULL,   -- the outbox row's kind; '' for the other tables
    status TEXT    NOT NULL,
    n      INTEGER NOT NULL
);
CREATE UNIQUE INDEX counters_key ON counters (tbl, grp, kind, status);
INSERT INTO counters (tbl, grp, kind, status, n) SELECT tbl, grp, kind, status, n FROM counters_before;
DROP TABLE counters_before;
