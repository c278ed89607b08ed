-- The operator audit trail (`payhook_store::audit`): one row per action an operator took through the API, the
-- dashboard or the CLI, appended in the action's own transaction where the action is one. Every instance on the
-- database appends to this one table, and each lists and prunes all of it.
CREATE TABLE audit (
    id      bigserial PRIMARY KEY,
    at_ms   bigint    NOT NULL,
    actor   text      NOT NULL,
    address text,
    action  text      NOT NULL,
    target  text,
    outcome text      NOT NULL,
    detail  jsonb
);

-- Pruning walks it oldest first; a listing's time range becomes a range of ids through it.
CREATE INDEX audit_at ON audit (at_ms, id);
-- The listings' paths: an actor's, an action's, a target's entries, each in id order within its value.
CREATE INDEX audit_by_actor ON audit (actor, id);
CREATE INDEX audit_by_action ON audit (action, id);
CREATE INDEX audit_by_target ON audit (target, id);
