//! `payhook events|dlq|replay|outbox|stats`: the admin API's actions on the configured database directly, so they
//! work while the server is down. Every command calls the same `payhook_server::admin` function as its HTTP
//! endpoint; `--json` prints exactly what the endpoint answers, and the default is a table for people.
//!
//! Anything that touches more than one row asks for confirmation on a terminal; `--yes` skips the question, and
//! without a terminal and without `--yes` the command refuses rather than guess.

use crate::config::Config;
use crate::table::{Table, clip, or_dash, utc};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use payhook_server::admin::{self, EventPage, EventQuery, OutboxQuery, ReplayFilter};
use payhook_server::{Actor, audit, now_ms};
use payhook_store::AuditAction;
use payhook_store::{EventSummary, OutboxView, Store};
use serde::Serialize;
use std::io::{BufRead, IsTerminal, Write};

/// The admin commands, flattened into the binary's top-level commands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Recorded events: list them, show one.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Dead letters: list them, replay them in bulk.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Replay one dead letter: re-parse its stored body with the source's current format and apply it.
    Replay(ReplayArgs),
    /// Outbox rows: list them, re-queue a dead one.
    Outbox {
        #[command(subcommand)]
        command: OutboxCommand,
    },
    /// Events, orders and outbox rows by status, and the age of the oldest waiting work.
    Stats(StatsArgs),
    /// Apply the retention policy now (what the server's pruning task does every `retention.interval_secs`):
    /// settled events lose their payloads after `retention.payloads_days` and their dedup keys after
    /// `retention.keys_days`; refunded and disputed orders go with their outbox rows after
    /// `retention.orders_days`. Dead letters, deferred events and orders with undelivered outbox rows are never
    /// pruned.
    Prune(JsonFlag),
    /// The operator audit trail, newest first: who replayed, re-queued, registered, imported, reloaded, pruned,
    /// logged in or out, or was refused for want of a scope; from where, when, on what, with which outcome.
    Audit(AuditArgs),
}

/// `payhook audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this actor's entries (a token's name, an identity, `cli:USER`, `signal:SIGHUP`).
    #[arg(long)]
    actor: Option<String>,
    /// Only this action (replay, bulk_replay, outbox_retry, order_register, order_import, reload, prune, login,
    /// logout, refused).
    #[arg(long)]
    action: Option<String>,
    /// Only entries on this target (`stripe/evt_1`, `outbox/42`, `order/ord_1`).
    #[arg(long)]
    target: Option<String>,
    #[command(flatten)]
    paging: Paging,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Recorded events, newest first.
    List(EventListArgs),
    /// Everything recorded about one event: body, headers, attempts, changes, outbox rows.
    Show(ShowArgs),
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Dead letters, newest first.
    List(DlqListArgs),
    /// Replay the dead letters matching the filters (oldest first, paced to `replay.per_second`).
    Replay(DlqReplayArgs),
}

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Outbox rows, newest first.
    List(OutboxListArgs),
    /// Re-queue a dead outbox row with a fresh retry budget.
    Retry(RetryArgs),
}

/// Print JSON (what the HTTP API answers) instead of a table.
#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON, as the HTTP API answers, instead of a table.
    #[arg(long)]
    json: bool,
}

/// `payhook stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// First recount every row and correct the counters the stats are read from, reporting any drift found.
    /// Runs in short steps (a table, or one source's events, at a time), so it never holds the writer for long.
    #[arg(long)]
    recount: bool,
    #[command(flatten)]
    out: JsonFlag,
}

/// Filters shared by event listings and bulk replay.
#[derive(Debug, Args)]
pub struct EventFilters {
    /// Only this source.
    #[arg(long)]
    source: Option<String>,
    /// Only this provider event type.
    #[arg(long = "type", value_name = "TYPE")]
    event_type: Option<String>,
    /// Only events whose reason contains this text.
    #[arg(long)]
    reason: Option<String>,
    /// Received at or after: unix milliseconds, or an age such as 30m, 12h, 7d.
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    since: Option<i64>,
    /// Received before: unix milliseconds, or an age such as 30m, 12h, 7d.
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    until: Option<i64>,
}

/// Paging of a listing.
#[derive(Debug, Args)]
pub struct Paging {
    /// Rows to show (default 50, at most 500).
    #[arg(long)]
    limit: Option<u32>,
    /// Show rows older than this cursor (the `next page` hint of the previous listing).
    #[arg(long)]
    before: Option<i64>,
}

#[derive(Debug, Args)]
pub struct EventListArgs {
    #[command(flatten)]
    filters: EventFilters,
    /// Only this status: processed, duplicate, deferred, ignored, dead_lettered.
    #[arg(long)]
    status: Option<String>,
    #[command(flatten)]
    paging: Paging,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Args)]
pub struct DlqListArgs {
    #[command(flatten)]
    filters: EventFilters,
    #[command(flatten)]
    paging: Paging,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Args)]
pub struct DlqReplayArgs {
    #[command(flatten)]
    filters: EventFilters,
    /// Replay at most this many (lowered to `replay.max_per_call`).
    #[arg(long)]
    max: Option<u32>,
    /// Only show what would be replayed; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The event's source.
    source: String,
    /// The event's id.
    event_id: String,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The event's source.
    source: String,
    /// The event's id.
    event_id: String,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Args)]
pub struct OutboxListArgs {
    /// Only this status: pending, delivered, dead, unrouted.
    #[arg(long)]
    status: Option<String>,
    /// Only this kind (order.paid, alert, event.received, …).
    #[arg(long)]
    kind: Option<String>,
    /// Only this sink.
    #[arg(long)]
    sink: Option<String>,
    /// Only this order's rows.
    #[arg(long = "order", value_name = "ORDER_ID")]
    order_id: Option<String>,
    #[command(flatten)]
    paging: Paging,
    #[command(flatten)]
    out: JsonFlag,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The outbox row's id.
    id: i64,
    #[command(flatten)]
    out: JsonFlag,
}

/// Runs an admin command against the configured database, whichever backend it is.
pub async fn run(cfg: Config, command: AdminCommand) -> Result<()> {
    payhook::store::with_store(&cfg, command).await
}

impl payhook::store::StoreTask for AdminCommand {
    type Output = ();

    async fn run<S: Store>(self, store: &S, cfg: &Config) -> Result<()> {
        dispatch(store, cfg, self).await
    }
}

async fn dispatch<S: Store>(store: &S, cfg: &Config, command: AdminCommand) -> Result<()> {
    let settings = &cfg.settings;
    match command {
        AdminCommand::Events { command: EventsCommand::List(a) } => {
            let query = event_query(a.filters, a.status, a.paging);
            let page = admin::list_events(store, &query).await?;
            print_or(a.out.json, &page, || print_events(&page, "no events match"))
        }
        AdminCommand::Events { command: EventsCommand::Show(a) } => {
            let detail = admin::event_detail(store, &a.source, &a.event_id).await?;
            print_or(a.out.json, &detail, || print_detail(&detail))
        }
        AdminCommand::Dlq { command: DlqCommand::List(a) } => {
            let query = event_query(a.filters, None, a.paging);
            let page = admin::list_dead_letters(store, &query).await?;
            print_or(a.out.json, &page, || print_events(&page, "no dead letters match"))
        }
        AdminCommand::Dlq { command: DlqCommand::Replay(a) } => dlq_replay(store, cfg, a).await,
        AdminCommand::Replay(a) => {
            let report = admin::replay_event(store, settings, &a.source, &a.event_id, now_ms(), &Actor::cli()).await?;
            print_or(a.out.json, &report, || {
                let detail = report.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
                let event_id = match &report.replayed_as {
                    Some(id) => format!("{} (replayed as {id})", report.event_id),
                    None => report.event_id.clone(),
                };
                println!("{}/{event_id}: {}{detail}", report.source, report.status.as_str());
            })
        }
        AdminCommand::Outbox { command: OutboxCommand::List(a) } => {
            let query = OutboxQuery {
                status: a.status,
                kind: a.kind,
                sink: a.sink,
                order_id: a.order_id,
                limit: a.paging.limit,
                before: a.paging.before,
            };
            let page = admin::list_outbox(store, &query).await?;
            print_or(a.out.json, &page, || {
                if page.outbox.is_empty() && !page.partial {
                    println!("no outbox rows match");
                    return;
                }
                if !page.outbox.is_empty() {
                    print!("{}", outbox_table(&page.outbox).render());
                }
                print_cursor(page.next_cursor, page.partial);
            })
        }
        AdminCommand::Outbox { command: OutboxCommand::Retry(a) } => {
            let row = admin::retry_outbox(store, a.id, now_ms(), &Actor::cli()).await?;
            print_or(a.out.json, &row, || {
                let sink = row.sink.as_deref().unwrap_or("no sink");
                println!("outbox row {} ({}, to {sink}) re-queued: {}", row.id, row.kind, row.status);
            })
        }
        AdminCommand::Audit(a) => {
            let query = admin::AuditQuery {
                actor: a.actor,
                action: a.action,
                target: a.target,
                limit: a.paging.limit,
                before: a.paging.before,
                ..admin::AuditQuery::default()
            };
            let page = admin::list_audit(store, &query).await?;
            print_or(a.out.json, &page, || {
                if page.entries.is_empty() && !page.partial {
                    println!("no audit entries match");
                    return;
                }
                let mut t = Table::new(&["WHEN", "ACTOR", "ADDRESS", "ACTION", "TARGET", "OUTCOME"]);
                for r in &page.entries {
                    let e = &r.entry;
                    t.row(vec![
                        utc(e.at_ms),
                        e.actor.clone(),
                        or_dash(e.address.as_deref()),
                        e.action.as_str().to_owned(),
                        or_dash(e.target.as_deref()),
                        e.outcome.clone(),
                    ]);
                }
                print!("{}", t.render());
                print_cursor(page.next_cursor, page.partial);
            })
        }
        AdminCommand::Stats(StatsArgs { recount: false, out }) => {
            let stats = admin::stats(store, now_ms()).await?;
            print_or(out.json, &stats, || print_stats(&stats))
        }
        AdminCommand::Stats(StatsArgs { recount: true, out }) => {
            let recounted = admin::recount(store).await?;
            let stats = admin::stats(store, now_ms()).await?;
            let report = serde_json::json!({ "drift": recounted.drift, "stats": stats });
            print_or(out.json, &report, || {
                print_drift(&recounted);
                print_stats(&stats);
            })
        }
        AdminCommand::Prune(out) => {
            let min_pause = std::time::Duration::from_millis(settings.retention.cli_min_pause_ms);
            let pruned =
                payhook_server::retention::prune_all(store, &settings.retention, now_ms(), 0, min_pause).await?;
            let audit_deleted =
                payhook_server::retention::prune_audit(store, &settings.retention, now_ms(), min_pause).await?;
            let mut detail = serde_json::to_value(pruned).unwrap_or_default();
            detail["audit_deleted"] = audit_deleted.into();
            audit::record(store, Actor::cli().entry(AuditAction::Prune, None, "ok", detail, now_ms())).await?;
            print_or(out.json, &pruned, || {
                println!(
                    "pruned: {} events deleted with {} business keys; {} payloads cleared; {} orders deleted with \
                     {} outbox rows; {} free pages released",
                    pruned.events_deleted,
                    pruned.business_keys_deleted,
                    pruned.payloads_cleared,
                    pruned.orders_deleted,
                    pruned.outbox_deleted,
                    pruned.pages_released
                );
            })
        }
    }
}

/// `dlq replay`: a preview, the confirmation, then the paced replay with a progress line.
async fn dlq_replay<S: Store>(store: &S, cfg: &Config, a: DlqReplayArgs) -> Result<()> {
    let settings = &cfg.settings;
    let filter = ReplayFilter {
        source: a.filters.source,
        event_type: a.filters.event_type,
        reason: a.filters.reason,
        since: a.filters.since,
        until: a.filters.until,
    };
    let preview = admin::preview_replay(store, settings, &filter, a.max).await?;
    if preview.matched == 0 && !a.dry_run {
        return print_or(a.out.json, &admin::BulkReport::empty(preview.max), || {
            println!("no dead letters match: nothing was replayed");
        });
    }
    if a.dry_run {
        return print_or(a.out.json, &preview, || {
            let more =
                if preview.more { format!(" (more match beyond the cap of {})", preview.max) } else { String::new() };
            println!("{} dead letters would be replayed{more}", preview.matched);
            if !preview.sample.is_empty() {
                println!("first {}:", preview.sample.len());
                print!("{}", events_table(&preview.sample).render());
            }
        });
    }
    if preview.matched > 1 && !a.yes {
        confirm(&format!(
            "replay {} dead letters{} at {} per second",
            preview.matched,
            if preview.more { " (more match beyond the cap)" } else { "" },
            settings.replay.per_second
        ))?;
    }
    let on_terminal = std::io::stderr().is_terminal();
    let progress = |done: usize, total: usize| {
        if on_terminal {
            eprint!("\r  {done}/{total} replayed");
            let _ = std::io::stderr().flush();
        }
    };
    // Never more than was confirmed, even if new dead letters arrived since the preview.
    let max = u32::try_from(preview.matched).ok();
    let report = admin::bulk_replay(store, settings, &filter, max, now_ms, progress, &Actor::cli()).await;
    if on_terminal {
        eprintln!();
    }
    let report = report?;
    if !on_terminal {
        eprintln!("  {}/{} replayed", report.matched, report.matched);
    }
    print_or(a.out.json, &report, || {
        let mut t = Table::new(&["OUTCOME", "EVENTS"]).right(&["EVENTS"]);
        for (outcome, n) in &report.outcomes {
            t.row(vec![(*outcome).to_owned(), n.to_string()]);
        }
        print!("{}", t.render());
        if report.more {
            println!("more dead letters match beyond the cap of {}: run again to continue", report.max);
        }
    })
}

/// Asks on the terminal whether to `action`; anything but yes is a refusal. Without a terminal there is nobody to
/// ask, so it refuses and names `--yes`.
fn confirm(action: &str) -> Result<()> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!("refusing to {action} without confirmation: stdin is not a terminal (pass --yes to confirm)");
    }
    eprint!("About to {action}. Continue? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        bail!("not confirmed: nothing was replayed")
    }
}

fn event_query(f: EventFilters, status: Option<String>, paging: Paging) -> EventQuery {
    EventQuery {
        source: f.source,
        status,
        event_type: f.event_type,
        reason: f.reason,
        since: f.since,
        until: f.until,
        limit: paging.limit,
        before: paging.before,
    }
}

fn print_or<T: Serialize>(json: bool, value: &T, table: impl FnOnce()) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        table();
    }
    Ok(())
}

/// Where the next page begins. A page the scan bound stopped short says so: few rows, or none, are then not the end.
fn print_cursor(cursor: Option<i64>, partial: bool) {
    if let Some(c) = cursor {
        if partial {
            println!("(this page stopped after storage.list_scan_rows examined rows; older rows may match)");
        }
        println!("more: --before {c}");
    }
}

fn print_events(page: &EventPage, empty: &str) {
    if page.events.is_empty() && !page.partial {
        println!("{empty}");
        return;
    }
    if !page.events.is_empty() {
        print!("{}", events_table(&page.events).render());
    }
    print_cursor(page.next_cursor, page.partial);
}

fn events_table(events: &[EventSummary]) -> Table {
    let mut t = Table::new(&["ROW", "RECEIVED (UTC)", "SOURCE", "EVENT ID", "TYPE", "STATUS", "ATTEMPTS", "REASON"])
        .right(&["ROW", "ATTEMPTS"]);
    for e in events {
        t.row(vec![
            e.row_id.to_string(),
            utc(e.received_at_ms),
            e.source.clone(),
            e.event_id.clone(),
            or_dash(e.event_type.as_deref()),
            e.status.as_str().to_owned(),
            e.attempts.to_string(),
            clip(e.reason.as_deref().unwrap_or("-"), 60),
        ]);
    }
    t
}

fn outbox_table(rows: &[OutboxView]) -> Table {
    let mut t = Table::new(&["ID", "CREATED (UTC)", "KIND", "SINK", "STATUS", "ATTEMPTS", "ORDER", "LAST ERROR"])
        .right(&["ID", "ATTEMPTS"]);
    for r in rows {
        t.row(vec![
            r.id.to_string(),
            utc(r.created_at_ms),
            r.kind.to_string(),
            or_dash(r.sink.as_deref()),
            r.status.to_string(),
            r.attempts.to_string(),
            or_dash(r.order_id.as_deref()),
            clip(r.last_error.as_deref().unwrap_or("-"), 50),
        ]);
    }
    t
}

fn print_detail(d: &admin::EventDetail) {
    let mut t = Table::new(&["FIELD", "VALUE"]);
    let fields = [
        ("source", d.source.clone()),
        ("event id", d.event_id.clone()),
        ("type", or_dash(d.event_type.as_deref())),
        ("status", d.status.as_str().to_owned()),
        ("reason", or_dash(d.reason.as_deref())),
        ("attempts", d.attempts.to_string()),
        ("next attempt", or_dash(d.next_attempt_at_ms.map(utc))),
        ("received", utc(d.received_at_ms)),
        ("verification", d.verification.clone()),
        ("business key", or_dash(d.business_key.as_deref())),
        ("effect", or_dash(d.effect.as_ref().and_then(|e| serde_json::to_string(e).ok()))),
        ("headers", d.headers.to_json()),
    ];
    for (k, v) in fields {
        t.row(vec![k.to_owned(), v]);
    }
    print!("{}", t.render());
    match (&d.body, &d.body_base64) {
        (Some(text), _) => println!("\nbody (utf-8, as received):\n{text}"),
        (None, encoded) => println!("\nbody (not utf-8, shown in base64):\n{}", encoded.as_deref().unwrap_or("")),
    }
    if !d.attempt_log.is_empty() {
        let mut t = Table::new(&["ATTEMPT", "AT (UTC)", "OUTCOME", "DETAIL"]).right(&["ATTEMPT"]);
        for a in &d.attempt_log {
            t.row(vec![
                a.attempt.to_string(),
                utc(a.at_ms),
                a.outcome.as_str().to_owned(),
                or_dash(a.detail.as_deref()),
            ]);
        }
        print!("\nattempts:\n{}", t.render());
    }
    if !d.changes.is_empty() {
        let mut t = Table::new(&["AT (UTC)", "FROM", "TO"]);
        for c in &d.changes {
            t.row(vec![utc(c.at_ms), c.from.as_str().to_owned(), c.to.as_str().to_owned()]);
        }
        print!("\norder changes:\n{}", t.render());
    }
    if !d.outbox.is_empty() {
        print!("\noutbox:\n{}", outbox_table(&d.outbox).render());
    }
}

fn print_drift(r: &payhook_store::Recounted) {
    if r.drift.is_empty() {
        println!("recount: the counters of {} keys equal a full count; nothing corrected\n", r.counted.len());
        return;
    }
    println!("recount: {} counters differed from a full count and were corrected:", r.drift.len());
    let mut t = Table::new(&["TABLE", "GROUP", "KIND", "STATUS", "COUNTER", "COUNTED"]).right(&["COUNTER", "COUNTED"]);
    for d in &r.drift {
        let k = &d.key;
        t.row(vec![
            k.table().as_str().to_owned(),
            k.group().to_owned(),
            k.kind().to_owned(),
            k.status().to_owned(),
            d.kept.to_string(),
            d.counted.to_string(),
        ]);
    }
    println!("{}", t.render());
}

fn print_stats(s: &admin::StatsReport) {
    let sections = [
        ("events", &s.events),
        ("orders", &s.orders),
        ("outbox", &s.outbox.by_status),
        ("outbox kinds", &s.outbox.by_kind),
    ];
    let mut t = Table::new(&["", "STATUS", "COUNT"]).right(&["COUNT"]);
    for (name, counts) in sections {
        for (i, (status, n)) in counts.iter().enumerate() {
            t.row(vec![if i == 0 { name.to_owned() } else { String::new() }, status.clone(), n.to_string()]);
        }
    }
    print!("{}", t.render());
    let age = |secs: Option<i64>| secs.map_or_else(|| "-".to_owned(), |s| format!("{s} s"));
    println!("oldest pending outbox row: {}", age(s.oldest_pending_outbox_age_secs));
    println!("oldest deferred event:     {}", age(s.oldest_deferred_event_age_secs));
}

/// `--since`/`--until`: unix milliseconds, or an age before now (`90s`, `30m`, `12h`, `7d`).
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?} is neither unix milliseconds nor an age such as 30m, 12h or 7d")),
    };
    let n: i64 = n.parse().map_err(|_| format!("{s:?}: expected a number before {unit:?}"))?;
    Ok(now_ms() - n.saturating_mul(unit_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_unix_milliseconds_or_ages_before_now() {
        assert_eq!(parse_time("1700000000000"), Ok(1_700_000_000_000));
        let before = now_ms();
        let two_hours_ago = parse_time("2h").unwrap();
        assert!((before - 7_200_000 - 1_000..=now_ms() - 7_200_000).contains(&two_hours_ago), "{two_hours_ago}");
        assert!(parse_time("2w").is_err());
        assert!(parse_time("h").is_err());
    }
}
