-- The partition of day `p_day` (days since 1970-01-01).
CREATE OR REPLACE FUNCTION payhook_day_partition(p_day integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT 'inbox_' || to_char(date '1970-01-01' + p_day, 'YYYYMMDD')
$$;
