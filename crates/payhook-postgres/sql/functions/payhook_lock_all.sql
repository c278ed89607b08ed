-- Takes the given advisory locks in the order given (the caller sorts them ascending and removes repeats).
CREATE OR REPLACE FUNCTION payhook_lock_all(p_locks bigint[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_lock bigint;
BEGIN
    FOREACH v_lock IN ARRAY coalesce(p_locks, '{}') LOOP
        PERFORM pg_advisory_xact_lock(v_lock);
    END LOOP;
END
$$;
