//! The `payhook-bench` binary, payhook's load generator, kept out of the binary that ships: `bench` drives a running
//! payhook with signed deliveries and measures it; `prefill` grows the configured database by N stored deliveries
//! for scale benchmarks; `sink` stands in for a merchant's HTTP sink in the dispatch benchmark. `bench` and
//! `prefill` read the same configuration file as the server under test (`--config`), through `payhook`'s own
//! loader: its sources sign the deliveries, its API token registers the orders.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod prefill;
mod sink;

use anyhow::Result;
use clap::{Parser, Subcommand};
use payhook::config::ConfigFlag;

#[derive(Debug, Parser)]
#[command(name = "payhook-bench", version, about = "Load-test payhook; grow its database for scale benchmarks.")]
struct Cli {
    // The configuration of the server under test: its sources sign, its API token registers orders.
    #[command(flatten)]
    config: ConfigFlag,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load-test a running payhook with signed deliveries (duplicates, refunds, shuffling).
    Bench(bench::BenchArgs),
    /// Grow the database by N stored deliveries (paid orders) through the store's own operations, for scale
    /// benchmarks. Stop every server on the database first.
    Prefill(prefill::PrefillArgs),
    /// Stand in for a merchant's HTTP sink for the dispatch benchmark: acknowledge rows and say how fast they came
    /// (needs no configuration).
    Sink(sink::SinkArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("PAYHOOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))
        .and_then(|runtime| runtime.block_on(run(cli)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payhook-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Bench(args) => bench::run(cli.config.load()?, args).await,
        Command::Prefill(args) => payhook::store::with_store(&cli.config.load()?, args).await,
        Command::Sink(args) => sink::run(args).await,
    }
}
