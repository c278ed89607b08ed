-- Moves the deltas into the totals, in one short transaction. Only one caller folds at a time (the others return
-- at once: the deltas they would fold are being folded); deltas committed meanwhile wait for the next fold.
-- Returns how many deltas it folded.
CREATE OR REPLACE FUNCTION payhook_fold_counters() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('payhook-counters:' || current_schema())) THEN
        RETURN 0;
    END IF;
    WITH moved AS (
        DELETE FROM counter_deltas RETURNING tbl, grp, kind, status, n
    ), summed AS (
        SELECT tbl, grp, kind, status, sum(n)::bigint AS n, count(*) AS rows FROM moved GROUP BY 1, 2, 3, 4
    ), added AS (
        INSERT INTO counter_totals AS t (tbl, grp, kind, status, n)
        SELECT tbl, grp, kind, status, n FROM summed
        ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = t.n + excluded.n
        RETURNING 1
    )
    SELECT coalesce(sum(rows), 0)::bigint INTO v_folded FROM summed;
    RETURN v_folded;
END $$;
