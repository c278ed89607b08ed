//! `payhook_ingest_batch` runs a batch of distinct deliveries as a set of multi-row statements, and any other batch
//! one delivery at a time (`payhook_ingest_each`). The two must not be told apart: the same random batches, given
//! to each in a schema of its own, must return the same rows and leave the same tables and counters behind.
//!
//! The batches draw from small pools (two sources, event ids and business keys from a moving window, eight orders
//! of which two do not exist), so that they meet every case: duplicates by event id and by business key, within a
//! batch and across batches; guard hits and misses; money that does not match; missing orders, created or not;
//! ignored events, dead letters, billing rows; one sink, several, none; and a document that is not JSON, which
//! fails its delivery (the set gives way to one delivery at a time).

use crate::{TempStore, test_url};
use payhook_store::contract::test_policy;
use std::fmt::Write as _;

const STATUSES: [&str; 5] = ["pending", "paid", "failed", "refunded", "disputed"];
const ROUTES: &str = "ARRAY['', 'alpha', 'beta', 'alpha']";
/// Slices of `ROUTES`: unrouted, one sink, two sinks, an empty slice.
const SLICES: [(i32, i32); 4] = [(1, 1), (2, 2), (2, 3), (5, 4)];

fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn opt(s: Option<&str>) -> String {
    s.map_or_else(|| "NULL".to_owned(), lit)
}

/// One random delivery, as a `payhook_delivery` row literal.
fn delivery(rng: &mut fastrand::Rng, event: usize, order: usize, key: usize, at: i64) -> String {
    let source = if rng.u8(..4) == 0 { "other" } else { "payments" };
    let event_id = format!("evt_{event}");
    let business_key = format!("key_{key}");
    let kind = rng.u8(..20);
    let status = match kind {
        0..=1 => "ignored",
        2..=3 => "dead_lettered",
        4 => "billing",
        _ => "processed",
    };
    let reason = (status == "dead_lettered").then_some("an unreadable body");
    let with_order = status == "processed" && rng.u8(..8) != 0;
    let mut row = format!(
        "ROW({}, {}, 'payment.succeeded', {at}, {}, '{{}}', {}, {}, {at}, 'hmac', '{{}}', '\\x00ff'::bytea, ",
        lit(source),
        lit(&event_id),
        if status == "dead_lettered" { "NULL".to_owned() } else { lit(&business_key) },
        lit(status),
        opt(reason),
    );
    if with_order {
        let order_id = format!("ord_{order}");
        let from1 = STATUSES[rng.usize(..STATUSES.len())];
        let from2 = if rng.bool() { from1 } else { STATUSES[rng.usize(..STATUSES.len())] };
        let to = STATUSES[rng.usize(..STATUSES.len())];
        let amount = match rng.u8(..4) {
            0 => "NULL, NULL".to_owned(),
            1 => "999, 'EUR'".to_owned(),
            _ => "100, 'USD'".to_owned(),
        };
        let mut payload = |previous: &str| {
            if rng.u8(..40) == 0 {
                lit("not json")
            } else {
                lit(&format!("{{\"from\":\"{previous}\",\"to\":\"{to}\"}}"))
            }
        };
        let payloads = if from2 == from1 {
            format!("ARRAY[{}]", payload(from1))
        } else {
            format!("ARRAY[{}, {}]", payload(from1), payload(from2))
        };
        let (lo, hi) = SLICES[rng.usize(..SLICES.len())];
        let _ = write!(
            row,
            "hashtext({})::bigint, {}, {}, {}, {}, {amount}, 'order.{to}', {payloads}, {}, {lo}, {hi})",
            lit(&order_id),
            lit(&order_id),
            lit(from1),
            lit(from2),
            lit(to),
            rng.bool(),
        );
    } else {
        row.push_str("NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false, NULL, NULL)");
    }
    row.push_str("::payhook_delivery");
    row
}

/// Batch `i`: 1 to 8 deliveries. About half of the batches share nothing within themselves (the set runs them),
/// the rest may share anything (one at a time). Event ids and business keys come from windows that move on with
/// `i`, so that most are new and some were seen in the batches before.
fn batch(rng: &mut fastrand::Rng, i: usize) -> (String, bool) {
    let n = rng.usize(1..=8);
    let distinct = rng.bool();
    let mut picks = |start: usize, window: usize| -> Vec<usize> {
        if distinct {
            let mut all: Vec<usize> = (start..start + window).collect();
            rng.shuffle(&mut all);
            all.truncate(n);
            all
        } else {
            (0..n).map(|_| start + rng.usize(..window)).collect()
        }
    };
    let (events, orders, keys) = (picks(6 * i, 40), picks(0, 8), picks(3 * i, 24));
    let at = 1_000 + 10 * i as i64;
    let rows: Vec<String> = (0..n).map(|j| delivery(rng, events[j], orders[j], keys[j], at + j as i64)).collect();
    (format!("ARRAY[{}]", rows.join(", ")), distinct)
}

/// What a schema holds after the batches, surrogate ids left out (their order kept: rows are listed by id).
async fn contents(side: &tokio_postgres::Client) -> Vec<String> {
    let queries = [
        "SELECT source, event_id, event_type, occurred_at, business_key, effect, status, reason, received_at, \
         updated_at, next_attempt_at, attempts, order_id, verification, headers, body, bucket FROM inbox ORDER BY id",
        "SELECT i.source, i.event_id, a.attempt, a.at, a.outcome, a.detail FROM inbox_attempts a \
         JOIN inbox i ON i.id = a.inbox_id ORDER BY i.id, a.attempt",
        "SELECT source, event_id FROM inbox_keys ORDER BY 1, 2",
        "SELECT source, key, event_id, created_at FROM business_keys ORDER BY 1, 2",
        "SELECT id, amount, currency, status, created_at, updated_at FROM orders ORDER BY id",
        "SELECT order_id, source, event_id, event_type, from_status, to_status, at FROM order_audit ORDER BY seq",
        "SELECT kind, sink, order_id, source, event_id, payload, status, next_attempt_at, created_at FROM outbox \
         ORDER BY id",
        "SELECT tbl, grp, kind, status, sum(n) FROM (SELECT tbl, grp, kind, status, n FROM counter_totals \
         UNION ALL SELECT tbl, grp, kind, status, n FROM counter_deltas) c GROUP BY 1, 2, 3, 4 \
         HAVING sum(n) <> 0 ORDER BY 1, 2, 3, 4",
    ];
    let mut out = Vec::new();
    for q in queries {
        let rows = side.simple_query(&format!("SELECT t::text FROM ({q}) t")).await.expect(q);
        for row in rows {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = row {
                out.push(row.get(0).unwrap_or("NULL").to_owned());
            }
        }
        out.push(format!("-- end of {q}"));
    }
    out
}

async fn call(side: &tokio_postgres::Client, function: &str, deliveries: &str) -> Vec<String> {
    let rows = side
        .simple_query(&format!(
            // Row ids are surrogates (a set that gave way to one at a time used up some): whether there is one.
            "SELECT ROW(t.outcome, t.detail, t.row_id IS NOT NULL, t.order_status, t.order_amount, t.order_currency)::text \
             FROM {function}({deliveries}, {ROUTES}) t"
        ))
        .await
        .unwrap_or_else(|e| panic!("{function}: {e}"));
    rows.into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("NULL").to_owned()),
            _ => None,
        })
        .collect()
}

async fn inbox_deltas(side: &tokio_postgres::Client) -> i64 {
    let row = side.query_one("SELECT count(*) FROM counter_deltas WHERE tbl = 'inbox'", &[]).await.expect("deltas");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_run_as_a_set_does_what_one_delivery_at_a_time_does() {
    let Some(url) = test_url() else { return };
    let seed =
        std::env::var("PAYHOOK_BATCH_SET_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    let batches: usize = std::env::var("PAYHOOK_BATCH_SET_BATCHES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    eprintln!("seed {seed} (PAYHOOK_BATCH_SET_SEED), {batches} batches (PAYHOOK_BATCH_SET_BATCHES)");
    let (set, each) = (TempStore::open(&url, test_policy()).await, TempStore::open(&url, test_policy()).await);
    let (set_side, each_side) = (set.schema().side().await, each.schema().side().await);
    // Six of the eight orders exist, in every status; stats fold the setup's deltas away so that only the
    // batches' deltas remain to be counted.
    let setup = "INSERT INTO orders (id, amount, currency, status, created_at, updated_at) \
                 SELECT 'ord_' || i, 100, 'USD', (ARRAY['pending','paid','failed','refunded','disputed','pending'])[i + 1], 0, 0 \
                 FROM generate_series(0, 5) i; \
                 SELECT payhook_fold_counters()";
    for side in [&set_side, &each_side] {
        side.batch_execute(setup).await.expect("setup");
    }
    assert_eq!(inbox_deltas(&set_side).await, 0);

    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut set_runs, mut set_statements, mut each_statements) = (0, 0, 0);
    for i in 0..batches {
        let (deliveries, distinct) = batch(&mut rng, i);
        let (before_set, before_each) = (inbox_deltas(&set_side).await, inbox_deltas(&each_side).await);
        let got = call(&set_side, "payhook_ingest_batch", &deliveries).await;
        let want = call(&each_side, "payhook_ingest_each", &deliveries).await;
        assert_eq!(got, want, "seed {seed}, batch {i}: {deliveries}");
        let (set_deltas, each_deltas) =
            (inbox_deltas(&set_side).await - before_set, inbox_deltas(&each_side).await - before_each);
        let recorded = want.iter().filter(|r| !r.starts_with("(duplicate,,f,") && !r.starts_with("(failed,")).count();
        if distinct && recorded >= 2 && !want.iter().any(|r| r.starts_with("(failed,")) {
            // The inbox rows of a set are one statement: their deltas are one per source and status, fewer than
            // the rows when they share one (one at a time writes one per row).
            set_runs += 1;
            set_statements += set_deltas;
            each_statements += each_deltas;
        }
    }
    assert_eq!(contents(&set_side).await, contents(&each_side).await, "seed {seed}: the schemas differ");
    eprintln!("{set_runs} batches ran as a set: {set_statements} inbox deltas against {each_statements}");
    assert!(set_runs >= batches / 5, "seed {seed}: only {set_runs} batches could run as a set");
    assert!(
        set_statements < each_statements,
        "seed {seed}: the distinct batches wrote {set_statements} inbox deltas as a set against {each_statements} one \
         at a time: the set path did not run"
    );
}
