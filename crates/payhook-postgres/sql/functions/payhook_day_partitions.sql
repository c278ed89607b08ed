-- The day partitions that exist, oldest first.
CREATE OR REPLACE FUNCTION payhook_day_partitions(OUT name text, OUT day integer) RETURNS SETOF record LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, to_date(substr(c.relname, 7), 'YYYYMMDD') - date '1970-01-01'
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'inbox'::regclass AND c.relname ~ '^inbox_[0-9]{8}$'
    ORDER BY 2
$$;
