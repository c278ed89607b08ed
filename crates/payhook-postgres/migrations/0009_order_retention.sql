-- Order retention resumes where it stopped: a position (created_at, id) in the outbox, whose rows are appended in
-- id order and record every transition into a final state (order.refunded, order.disputed) as it happens. One row;
-- a pruning step locks it (SKIP LOCKED), so one instance at a time walks the outbox and the others skip the step.
CREATE TABLE order_retention_cursor (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    created_at bigint  NOT NULL,   -- unix ms of the last outbox row passed
    id         bigint  NOT NULL    -- its id
);
INSERT INTO order_retention_cursor (created_at, id) VALUES (0, 0);
