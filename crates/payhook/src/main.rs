//! The `payhook` binary: `serve`, `init`, `healthcheck`, `reload`, `demo`, `send`, `trigger`, `orders import`,
//! `config check|print-default`, and the admin commands `events`, `dlq`, `replay`, `outbox`, `stats`, `prune`, and
//! `compact`.
//!
//! Boundary: the only crate that knows clap, TOML and anyhow (with the load generator, `payhook-bench`, which uses
//! its library); it resolves configuration and hands typed settings to the server and the store.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin_cli;
use payhook::config;
mod demo;
mod healthcheck;
mod init;
mod orders;
mod reload;
mod send;
mod table;
mod telemetry;
mod trigger;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use config::{Config, ConfigFlag, LogFormat, StorageConfig, TokenOrigin};
use payhook_postgres::PgStore;
use payhook_server::{BuildInfo, Settings, SinkTransport};
use payhook_sqlite::SqliteStore;
use payhook_store::Store;
use std::net::SocketAddr;
use std::sync::Arc;

/// What `--version` prints after the name: the release and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("PAYHOOK_COMMIT"), ")");

/// This build, for the `payhook_build_info` metric.
fn build_info() -> BuildInfo {
    BuildInfo { version: env!("CARGO_PKG_VERSION").to_owned(), commit: env!("PAYHOOK_COMMIT").to_owned() }
}

/// A command used wrongly (an unknown provider, a file it will not overwrite): exit status 2, as for clap's own
/// usage errors, so that a script can tell it from a failure of the work.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[derive(Debug, Parser)]
#[command(name = "payhook", version = VERSION, about = "Payment webhooks, applied exactly once.")]
struct Cli {
    #[command(flatten)]
    config: ConfigFlag,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Receive webhooks: verify, record, deduplicate, apply, answer.
    Serve,
    /// Write a starter configuration for PROVIDER… (payhook.toml) and an environment file beside it (payhook.env,
    /// mode 0600) with a new API token and a line for each provider's secret. Never overwrites a file.
    Init(init::InitArgs),
    /// Exit 0 when the payhook of this configuration answers GET /healthz, 1 otherwise (a container's health check).
    Healthcheck(healthcheck::HealthcheckArgs),
    /// Make the running server read its configuration file again (POST /v1/reload, with the API token): sources,
    /// secrets, sinks and alerts change without a restart; a file that does not pass `config check`, or that
    /// changes a setting needing a restart, is refused and the configuration in force stays. SIGHUP does the same.
    Reload(reload::ReloadArgs),
    /// Start payhook on a temporary database and play the failure modes it exists for, explaining each.
    Demo(demo::DemoArgs),
    /// Sign and POST a test event for a configured source, the way its provider would.
    Send(send::SendArgs),
    /// Send a realistic, correctly signed delivery shaped like PROVIDER's own (a preset's example) to its source.
    Trigger(trigger::TriggerArgs),
    /// Manage orders directly in the configured database.
    Orders {
        #[command(subcommand)]
        command: orders::OrdersCommand,
    },
    #[command(flatten)]
    Admin(admin_cli::AdminCommand),
    /// SQLite only, offline (stop every payhook using the file first): rewrite the database file so that pruning
    /// gives its free pages back to the file system. Needs about the file's size of free disk.
    Compact,
    /// Check or print the configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Load and validate the configuration; name the file, line and key of each problem.
    Check,
    /// Print the documented defaults.
    PrintDefault,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("payhook: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            eprintln!("payhook: {e:#}");
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("payhook: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs to stderr in `format`, at `PAYHOOK_LOG`'s levels (else `default_level`). Every line written while a request
/// is served names its `request_id` (read from the task by [`WithRequestId`]: no span is made for it), and with
/// traces exported a recorded request's lines carry its span's `trace_id` and `span_id` (from the task too).
/// With a `tracer`, payhook's spans also go to OpenTelemetry, whatever the log level.
fn init_tracing(format: LogFormat, default_level: &str, tracer: Option<opentelemetry_sdk::trace::SdkTracer>) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PAYHOOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let json =
        || tracing_subscriber::fmt::format().json().flatten_event(true).with_current_span(false).with_span_list(true);
    let Some(tracer) = tracer else {
        // Export off: one subscriber with one global filter, nothing else in the way of a log line.
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        match format {
            LogFormat::Text => {
                builder.event_format(WithRequestId { inner: tracing_subscriber::fmt::format(), json: false }).init()
            }
            LogFormat::Json => {
                builder.json().with_ansi(false).event_format(WithRequestId { inner: json(), json: true }).init()
            }
        }
        return;
    };
    // Export on: the log lines keep their own filter, and no span of payhook's (the request names itself by the ids
    // its task holds: `WithRequestId`); OpenTelemetry gets payhook's spans (and only spans, so no HTTP client's or
    // gRPC library's span can come back through the exporter). A span's fields are then recorded once, as attributes.
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => {
            fmt.event_format(WithRequestId { inner: tracing_subscriber::fmt::format(), json: false }).boxed()
        }
        LogFormat::Json => {
            fmt.json().with_ansi(false).event_format(WithRequestId { inner: json(), json: true }).boxed()
        }
    };
    let spans = PayhookSpans;
    // No timing of each poll (`busy_ns`/`idle_ns`) and no OpenTelemetry context switched at each poll: payhook reads a
    // span's context explicitly where it needs it, and a request's span is entered at every poll of its future.
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_target(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false);
    let logged = tracing_subscriber::filter::FilterExt::and(
        filter,
        tracing_subscriber::filter::filter_fn(|meta| !PayhookSpans::takes(meta)),
    );
    tracing_subscriber::registry().with(fmt.with_filter(logged)).with(otel.with_filter(spans)).init();
}

/// A log line's format with the id of the request being served, when there is one
/// (`payhook_server::trace::current_request`): `request_id=…` first in a text line, a `request_id` field in a
/// JSON object, and after it `trace_id` and `span_id` when the request's trace is recorded. They are read only when
/// a line is written, so a request that logs nothing pays nothing for them.
struct WithRequestId<F> {
    inner: F,
    /// Whether `inner` writes JSON objects.
    json: bool,
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for WithRequestId<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some(served) = payhook_server::trace::current_request() else {
            return self.inner.format_event(ctx, writer, event);
        };
        if !self.json {
            write!(writer, "request_id={}", served.id)?;
            if let Some((trace_id, span_id)) = &served.trace_ids() {
                write!(writer, " trace_id={trace_id} span_id={span_id}")?;
            }
            write!(writer, " ")?;
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner.format_event(ctx, tracing_subscriber::fmt::format::Writer::new(&mut line), event)?;
        // The id as the object's first field (escaped as JSON: a proxy's id may hold a quote); the trace's ids are hex.
        let id = serde_json::to_string(&served.id).unwrap_or_default();
        let trace = served
            .trace_ids()
            .map(|(trace_id, span_id)| format!("\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\","))
            .unwrap_or_default();
        match line.strip_prefix('{') {
            Some(rest) => write!(writer, "{{\"request_id\":{id},{trace}{rest}"),
            None => write!(writer, "{line}"),
        }
    }
}

/// What the OpenTelemetry layer is given: payhook's spans, nothing else. Decided once per callsite, so that the
/// events and spans of every other crate (hyper's, h2's, rustls's) cost nothing more than without the layer, as a
/// filter asked at each event would.
struct PayhookSpans;

impl PayhookSpans {
    fn takes(meta: &tracing::Metadata<'_>) -> bool {
        meta.is_span() && meta.target().starts_with("payhook")
    }
}

impl<S> tracing_subscriber::layer::Filter<S> for PayhookSpans {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        Self::takes(meta)
    }

    fn callsite_enabled(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if Self::takes(meta) { tracing::subscriber::Interest::always() } else { tracing::subscriber::Interest::never() }
    }
}

async fn run(cli: Cli) -> Result<()> {
    // `serve` logs in the configured format, once it is read; every other command logs text for a terminal.
    // The demo narrates what happens itself; its logs would only interleave with the story.
    match cli.command {
        Command::Serve => {}
        Command::Demo(_) => init_tracing(LogFormat::Text, "error", None),
        // A health check runs every few seconds and says what it found in its exit status: no log lines.
        Command::Healthcheck(_) => init_tracing(LogFormat::Text, "error", None),
        _ => init_tracing(LogFormat::Text, "info", None),
    }
    match cli.command {
        Command::Config { command: ConfigCommand::PrintDefault } => {
            print!("{}", config::DEFAULT_TOML);
            Ok(())
        }
        Command::Config { command: ConfigCommand::Check } => {
            let cfg = cli.config.load()?;
            let file = cfg.file.as_ref().map_or_else(|| "<defaults>".into(), |p| p.display().to_string());
            println!("{file}: ok");
            println!("  listen   {}", cfg.listen);
            println!("  storage  {}", cfg.storage.describe());
            println!("  api      {}", describe_token(&cfg));
            match &cfg.telemetry.export {
                None => println!("  traces   off"),
                Some(e) => println!(
                    "  traces   {} over {} (service {}, sampler {:?}, queue {})",
                    e.endpoint,
                    match e.protocol {
                        config::Protocol::HttpProtobuf => "http/protobuf",
                        config::Protocol::Grpc => "grpc",
                    },
                    e.service_name,
                    e.sampler,
                    e.export_queue
                ),
            }
            for s in &cfg.settings.sources {
                println!(
                    "  source   {:<16} POST /webhooks/{} (scheme {}, format {}, orders {:?})",
                    s.name,
                    s.name,
                    s.verifier.scheme().name(),
                    s.format.name(),
                    s.orders
                );
            }
            // Sink and alert URLs are shown redacted: their paths and queries often hold a token.
            for s in &cfg.settings.sinks {
                let via = match &s.transport {
                    SinkTransport::Http => String::new(),
                    SinkTransport::Nats { subject } => format!(" subject {subject}"),
                    SinkTransport::Redis { stream, .. } => format!(" stream {stream}"),
                    SinkTransport::Amqp { exchange, routing_key } => {
                        format!(" exchange {exchange:?} routing key {routing_key}")
                    }
                };
                let when = if s.filter.conditions.is_empty() { String::new() } else { format!(" when {}", s.filter) };
                println!("  sink     {:<16} {}{via} ({}){when}", s.name, s.url, s.kinds.join(", "));
            }
            if let Some(a) = &cfg.settings.alerts {
                println!("  alerts   {}", a.url);
            }
            Ok(())
        }
        Command::Serve => {
            let config = cli.config.load()?;
            let pipeline = match &config.telemetry.export {
                Some(export) => Some(telemetry::Pipeline::start(export)?),
                None => None,
            };
            let (pipeline, tracer) = pipeline.map_or((None, None), |(p, t)| (Some(p), Some(t)));
            init_tracing(config.log_format, "info", tracer);
            if let Some(export) = &config.telemetry.export {
                tracing::info!(endpoint = %export.endpoint, protocol = ?export.protocol, "exporting traces over OTLP");
            }
            let served = serve(config).await;
            // After the last answer: what is queued is exported before the process ends.
            if let Some(pipeline) = pipeline {
                pipeline.shutdown().await;
            }
            served
        }
        Command::Init(args) => init::run(cli.config.path(), args),
        Command::Healthcheck(args) => healthcheck::run(&cli.config.load()?, args).await,
        Command::Reload(args) => reload::run(&cli.config.load()?, args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Send(args) => send::run(cli.config.load()?, args).await,
        Command::Trigger(args) => trigger::run(cli.config.load()?, args).await,
        Command::Orders { command } => orders::run(cli.config.load()?, command).await,
        Command::Admin(command) => admin_cli::run(cli.config.load()?, command).await,
        Command::Compact => compact(&cli.config.load()?),
    }
}

/// `compact`: converts the SQLite file to `auto_vacuum = INCREMENTAL` with one `VACUUM`.
fn compact(cfg: &Config) -> Result<()> {
    let StorageConfig::Sqlite(options) = &cfg.storage else {
        anyhow::bail!("compact is for SQLite files; PostgreSQL gives space back with its own VACUUM");
    };
    let path = options.path.display().to_string();
    let done = payhook_sqlite::compact(&options.path, options.busy_timeout_ms)
        .with_context(|| format!("cannot compact {path}"))?;
    println!(
        "{path}: {} bytes before, {} after; auto_vacuum was {}, is now incremental",
        done.bytes_before,
        done.bytes_after,
        ["none", "full", "incremental"].get(usize::from(done.auto_vacuum_before)).unwrap_or(&"unknown")
    );
    Ok(())
}

/// Where the API token comes from and how long it is, never the token, then the named tokens with their scopes and
/// expiry: `config check`'s `api` line.
fn describe_token(cfg: &Config) -> String {
    let chars = cfg.settings.api_token.as_ref().map_or(0, |t| t.expose().chars().count());
    let named = &cfg.settings.access.tokens;
    let api = match &cfg.api_token_origin {
        TokenOrigin::Inline => format!("token set (from server.api_token, {chars} characters)"),
        TokenOrigin::Env(var) => format!("token set (from {var}, {chars} characters)"),
        TokenOrigin::Unset(_) if !named.is_empty() => "no api_token".to_owned(),
        TokenOrigin::Unset(Some(var)) => format!("no token: /v1 and the dashboard are closed ({var} is not set)"),
        TokenOrigin::Unset(None) => "no token: /v1 and the dashboard are closed (server.api_token_env is empty)".into(),
    };
    if named.is_empty() {
        return api;
    }
    let tokens: Vec<String> = named
        .iter()
        .map(|t| match t.not_after_ms {
            Some(at) => format!("{} ({}, until {})", t.name, t.scope, payhook_core::time::display_ms(at)),
            None => format!("{} ({})", t.name, t.scope),
        })
        .collect();
    format!("{api}; named tokens: {}", tokens.join(", "))
}

async fn serve(cfg: Config) -> Result<()> {
    if cfg.settings.sources.is_empty() {
        tracing::warn!("no sources are configured: every webhook will be answered 404");
    }
    if let TokenOrigin::Unset(var) = &cfg.api_token_origin
        && cfg.settings.access.tokens.is_empty()
    {
        let set = var.as_deref().unwrap_or("server.api_token_env or server.api_token");
        tracing::warn!("no API token is configured: /v1 and the dashboard answer 401 to everyone (set {set})");
    }
    warn_if_fd_limit_below(cfg.settings.listener.max_connections);
    let db = cfg.storage.describe();
    let loader = loader(cfg.clone());
    match cfg.storage {
        StorageConfig::Sqlite(options) => {
            let path = options.path.display().to_string();
            let store = Arc::new(SqliteStore::open(options).with_context(|| format!("cannot open {path}"))?);
            serve_with(cfg.listen, cfg.settings, Arc::clone(&store), &db, loader).await?;
            // Every answered request has committed; let the writer finish and close the file.
            store.shutdown().await;
        }
        StorageConfig::Postgres(options) => {
            let target = options.target();
            let store = Arc::new(PgStore::open(options).await.with_context(|| format!("cannot open {target}"))?);
            serve_with(cfg.listen, cfg.settings, Arc::clone(&store), &db, loader).await?;
            // Every answered request has committed; commit and answer what is still queued, close the pool.
            store.shutdown().await;
            let b = store.batch_stats();
            tracing::info!(
                batches = b.committed_batches,
                jobs = b.committed_jobs,
                reruns = b.reruns,
                failed_batches = b.failed_batches,
                "postgres group commit"
            );
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// How the running server reads its configuration again: the file it started from, checked as `config check`
/// checks it and compared with the configuration in force (which it becomes once applied).
fn loader(started: Config) -> Box<payhook_server::Loader> {
    let in_force = std::sync::Mutex::new(started);
    Box::new(move || {
        let mut in_force = in_force.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (new, reloaded) = in_force.reread()?;
        // The server applies whatever the loader returns: from here on, `new` is the configuration in force.
        *in_force = new;
        Ok(reloaded)
    })
}

/// Serves on `listen` with `store` until SIGTERM or Ctrl-C, then drains: whichever backend, the same runtime.
/// SIGHUP reads the TLS certificate and the configuration file again.
async fn serve_with<S: Store>(
    listen: SocketAddr,
    settings: Settings,
    store: Arc<S>,
    db: &str,
    loader: Box<payhook_server::Loader>,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let https = settings.listener.tls.is_some();
    let mut settings = settings;
    settings.build = build_info();
    let running = payhook_server::start(listener, settings, store)?;
    running.state.set_loader(loader);
    tracing::info!(
        addr = %running.addr,
        scheme = if https { "https" } else { "http" },
        metrics = ?running.metrics_addr,
        db,
        "payhook is listening"
    );
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let mut reload = reload_signal();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(()) = reload.recv() => {
                match running.reload_tls() {
                    Ok(true) => tracing::info!("SIGHUP: the TLS certificate and key were read again"),
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "SIGHUP: the TLS certificate and key could not be read; the previous ones stay in use"),
                }
                // Applied or refused, the outcome is logged (at error level when refused) and counted.
                let by = payhook_server::Actor { name: "signal:SIGHUP".to_owned(), address: None };
                let _ = running.state.reload("SIGHUP", &by).await;
            }
        }
    }
    tracing::info!("shutting down: finishing in-flight requests");
    running.shutdown().await?;
    Ok(())
}

/// Descriptors payhook needs beside its connections: the database and its WAL, the listeners, sinks, logs.
const FD_HEADROOM: u64 = 64;

/// Warns when the process's soft limit of open files is below `server.max_connections` plus headroom: the cap would
/// never be reached, and accepts would fail with "too many open files" instead (logged by the listener).
fn warn_if_fd_limit_below(max_connections: usize) {
    let Some(soft) = std::fs::read_to_string("/proc/self/limits").ok().and_then(|limits| soft_nofile(&limits)) else {
        return;
    };
    let needed = max_connections as u64 + FD_HEADROOM;
    if soft < needed {
        tracing::warn!(
            open_files_limit = soft,
            max_connections,
            "the open-file limit is below server.max_connections + {FD_HEADROOM}: raise it (ulimit -n, systemd \
             LimitNOFILE) to at least {needed}, or lower server.max_connections"
        );
    }
}

/// The soft limit of `Max open files` in the text of `/proc/self/limits`.
fn soft_nofile(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

/// SIGHUP, as a stream of reload requests (none where there are no Unix signals).
fn reload_signal() -> tokio::sync::mpsc::Receiver<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                if tx.send(()).await.is_err() {
                    break;
                }
            }
        });
    }
    #[cfg(not(unix))]
    drop(tx);
    rx
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::soft_nofile;

    #[test]
    fn the_soft_open_file_limit_is_read_from_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(soft_nofile(limits), Some(1024));
        assert_eq!(soft_nofile("Max open files  unlimited  unlimited  files"), None);
        assert_eq!(soft_nofile(""), None);
    }
}
