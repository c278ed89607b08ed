-- Creates the partitions of the day of `p_now` and of the next day, if missing. Rows of such a day that landed in
-- the default partition meanwhile are moved to the held one first (the new partition could not be attached over
-- them). Waits at most `p_lock_timeout_ms` for its lock on `inbox`; returns how many it created, or -1 when the
-- lock was not had in time (the next step tries again; inserts go to the default partition meanwhile).
CREATE OR REPLACE FUNCTION payhook_ensure_partitions(p_now bigint, p_lock_timeout_ms integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_day integer;
    v_name text;
    v_created integer := 0;
BEGIN
    FOR v_day IN SELECT d FROM generate_series((p_now / 86400000)::integer, (p_now / 86400000)::integer + 1) d LOOP
        v_name := payhook_day_partition(v_day);
        CONTINUE WHEN to_regclass(v_name) IS NOT NULL;
        PERFORM pg_advisory_xact_lock(hashtext('payhook-partitions:' || current_schema()));
        BEGIN
            PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
            -- Taking the lock also brings this session's catalog caches up to date: another instance may have
            -- created the partition since the look above.
            LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE;
            CONTINUE WHEN to_regclass(v_name) IS NOT NULL;
            UPDATE inbox SET bucket = 0 WHERE bucket = v_day;
            EXECUTE format('CREATE TABLE %I PARTITION OF inbox FOR VALUES FROM (%s) TO (%s)', v_name, v_day, v_day + 1);
            -- Named by PostgreSQL: a detached day's table keeps its index names until it is dropped.
            EXECUTE format('CREATE INDEX ON %I (source, event_id)', v_name);
            v_created := v_created + 1;
        EXCEPTION WHEN lock_not_available THEN
            RETURN -1;
        END;
    END LOOP;
    RETURN v_created;
END $$;
