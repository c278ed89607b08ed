//! What a schema holds, read from `pg_catalog`, as sorted lines of text that two schemas can be compared by: its
//! relations (tables, partitions and their bounds, indexes, sequences, composite types; storage options), their
//! columns in order (type, NOT NULL, default, identity), constraints, index definitions, triggers, sequences,
//! functions (their whole definitions), and the rows of every table but `payhook_schema_version` (which records
//! how the schema got where it is, not what it is). The schema's own name is written `S`.

/// One query per kind of object; each returns one text column, one line per object.
const QUERIES: &[&str] = &[
    "SELECT format('relation %s kind=%s persistence=%s options=%s bound=%s parent=%s', c.relname, c.relkind,
            c.relpersistence, coalesce(array_to_string(c.reloptions, ','), ''),
            coalesce(pg_get_expr(c.relpartbound, c.oid), ''),
            coalesce((SELECT p.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                      WHERE i.inhrelid = c.oid), ''))
     FROM pg_class c WHERE c.relnamespace = $1::text::regnamespace",
    "SELECT format('column %s.%s #%s %s notnull=%s default=%s identity=%s generated=%s', c.relname, a.attname,
            row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), format_type(a.atttypid, a.atttypmod),
            a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity, a.attgenerated)
     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = $1::text::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
       AND c.relkind IN ('r', 'p', 'c', 'v', 'm', 'f')",
    "SELECT format('constraint %s.%s %s %s', coalesce(r.relname, t.typname), con.conname, con.contype,
            pg_get_constraintdef(con.oid))
     FROM pg_constraint con LEFT JOIN pg_class r ON r.oid = con.conrelid LEFT JOIN pg_type t ON t.oid = con.contypid
     WHERE con.connamespace = $1::text::regnamespace",
    "SELECT format('index %s valid=%s %s', c.relname, i.indisvalid, pg_get_indexdef(c.oid))
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = $1::text::regnamespace",
    "SELECT format('trigger %s.%s enabled=%s %s', r.relname, t.tgname, t.tgenabled, pg_get_triggerdef(t.oid))
     FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid
     WHERE r.relnamespace = $1::text::regnamespace AND NOT t.tgisinternal",
    "SELECT format('sequence %s %s start=%s increment=%s min=%s max=%s cache=%s cycle=%s', c.relname,
            format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle)
     FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = $1::text::regnamespace",
    "SELECT format('type %s kind=%s', t.typname, t.typtype) FROM pg_type t
     WHERE t.typnamespace = $1::text::regnamespace AND t.typtype <> 'b'",
    "SELECT format('function %s(%s) %s', p.proname, pg_get_function_identity_arguments(p.oid),
            pg_get_functiondef(p.oid))
     FROM pg_proc p WHERE p.pronamespace = $1::text::regnamespace",
];

/// The catalog of `schema` as seen through `side`, sorted.
pub async fn dump(side: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for query in QUERIES {
        for row in side.query(*query, &[&schema]).await.unwrap_or_else(|e| panic!("{query}: {e}")) {
            lines.push(row.get::<_, String>(0));
        }
    }
    let tables = side
        .query(
            "SELECT relname::text FROM pg_class WHERE relnamespace = $1::text::regnamespace AND relkind = 'r'
               AND relname <> 'payhook_schema_version'",
            &[&schema],
        )
        .await
        .expect("tables");
    for table in tables {
        let name: String = table.get(0);
        let rows: String = side
            .query_one(
                &format!("SELECT coalesce(string_agg(t::text, ';' ORDER BY t::text), '') FROM {schema}.{name} t"),
                &[],
            )
            .await
            .expect("rows")
            .get(0);
        lines.push(format!("rows {name}: {rows}"));
    }
    let mut lines: Vec<String> = lines.into_iter().map(|l| l.replace(schema, "S")).collect();
    lines.sort();
    lines
}

/// The lines only `a` has and the lines only `b` has.
pub fn difference(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    let only = |x: &[String], y: &[String]| x.iter().filter(|l| !y.contains(l)).cloned().collect::<Vec<_>>();
    (only(a, b), only(b, a))
}
