-- Inserts and deletes: one statement-level trigger each, appending one delta per key per statement from its
-- transition table (a batch's multi-row statements cost one delta per key, not one per row).
CREATE OR REPLACE FUNCTION payhook_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'inbox' AND TG_OP = 'INSERT' THEN
        INSERT INTO counter_deltas SELECT 'inbox', source, '', status, count(*) FROM new_rows GROUP BY 2, 4;
    ELSIF TG_TABLE_NAME = 'inbox' THEN
        INSERT INTO counter_deltas SELECT 'inbox', source, '', status, -count(*) FROM old_rows GROUP BY 2, 4;
    ELSIF TG_TABLE_NAME = 'orders' AND TG_OP = 'INSERT' THEN
        INSERT INTO counter_deltas SELECT 'orders', '', '', status, count(*) FROM new_rows GROUP BY 4;
    ELSIF TG_TABLE_NAME = 'orders' THEN
        INSERT INTO counter_deltas SELECT 'orders', '', '', status, -count(*) FROM old_rows GROUP BY 4;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO counter_deltas SELECT 'outbox', sink, kind, status, count(*) FROM new_rows GROUP BY 2, 3, 4;
    ELSE
        INSERT INTO counter_deltas SELECT 'outbox', sink, kind, status, -count(*) FROM old_rows GROUP BY 2, 3, 4;
    END IF;
    RETURN NULL;
END $$;
