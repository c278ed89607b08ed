-- A deleted row takes its event-id key with it, whoever deletes it (row pruning, a failed billing delivery, an
-- operator's SQL), as the old primary key did.
CREATE OR REPLACE FUNCTION payhook_forget_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM inbox_keys k USING old_rows o WHERE k.source = o.source AND k.event_id = o.event_id;
    RETURN NULL;
END $$;
