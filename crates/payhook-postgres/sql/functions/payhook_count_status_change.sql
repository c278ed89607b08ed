-- Counts a status change of an inbox or outbox row: a row-level trigger whose WHEN clause is checked without
-- calling the function, so the frequent updates that keep their status cost nothing. A row trigger runs on the
-- partition, under the partition's name: it tells the tables apart by the other two names.
CREATE OR REPLACE FUNCTION payhook_count_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'orders' THEN
        INSERT INTO counter_deltas VALUES ('orders', '', '', OLD.status, -1), ('orders', '', '', NEW.status, 1);
    ELSIF TG_TABLE_NAME = 'outbox' THEN
        INSERT INTO counter_deltas
        VALUES ('outbox', OLD.sink, OLD.kind, OLD.status, -1), ('outbox', NEW.sink, NEW.kind, NEW.status, 1);
    ELSE
        INSERT INTO counter_deltas VALUES ('inbox', OLD.source, '', OLD.status, -1), ('inbox', NEW.source, '', NEW.status, 1);
    END IF;
    RETURN NULL;
END $$;
