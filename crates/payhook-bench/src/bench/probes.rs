//! What an operator's tools do to a server while it takes deliveries: a Prometheus scraper on `/metrics`, a
//! dashboard reading `/v1/stats` and pages of `/v1/events` (newest, and a selective filter), an orchestrator probing
//! `/readyz`. Each probe runs in its own loop at a fixed interval for as long as the deliveries run, and the report
//! gives each one's latency percentiles: the figures that show whether reads cost more as history grows.

use super::percentiles;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One probe: a path read at an interval, with the API token.
struct Probe {
    name: &'static str,
    path: &'static str,
    interval: Duration,
}

/// Latencies (µs) and failures of one probe.
#[derive(Default)]
struct Samples {
    micros: Vec<u32>,
    failures: u64,
    first_failure: Option<String>,
}

/// A running probe: its name, its loop and what the loop has measured.
struct Running {
    name: &'static str,
    task: tokio::task::JoinHandle<()>,
    samples: Arc<Mutex<Samples>>,
}

/// The probes, running until [`Probes::finish`].
pub(super) struct Probes {
    tasks: Vec<Running>,
}

impl Probes {
    /// Starts the scraper every `scrape_ms` and the readers every `read_ms` (0 turns a group off).
    pub(super) fn start(client: &reqwest::Client, base: &str, token: &str, scrape_ms: u64, read_ms: u64) -> Probes {
        let ms = Duration::from_millis;
        let mut probes = Vec::new();
        if scrape_ms > 0 {
            probes.push(Probe { name: "metrics", path: "/metrics", interval: ms(scrape_ms) });
        }
        if read_ms > 0 {
            probes.extend([
                Probe { name: "stats", path: "/v1/stats", interval: ms(read_ms) },
                Probe { name: "events_newest", path: "/v1/events?limit=50", interval: ms(read_ms) },
                Probe { name: "events_deferred", path: "/v1/events?status=deferred&limit=50", interval: ms(read_ms) },
                Probe { name: "outbox_dead", path: "/v1/outbox?status=dead&limit=50", interval: ms(read_ms) },
                Probe { name: "readyz", path: "/readyz", interval: ms(read_ms.min(500)) },
            ]);
        }
        let tasks = probes
            .into_iter()
            .map(|p| {
                let samples = Arc::new(Mutex::new(Samples::default()));
                let task = tokio::spawn(run(
                    client.clone(),
                    format!("{base}{}", p.path),
                    token.to_owned(),
                    p.interval,
                    Arc::clone(&samples),
                ));
                Running { name: p.name, task, samples }
            })
            .collect();
        Probes { tasks }
    }

    /// Stops the probes and reports each one: `{name: {count, failures, p50, p90, p99, max}}` in milliseconds.
    pub(super) fn finish(self) -> Value {
        let mut report = serde_json::Map::new();
        for Running { name, task, samples } in self.tasks {
            task.abort();
            let mut s = samples.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default();
            let mut row = percentiles(&mut s.micros);
            row["count"] = json!(s.micros.len());
            row["failures"] = json!(s.failures);
            if let Some(f) = s.first_failure {
                row["first_failure"] = json!(f);
            }
            report.insert(name.to_owned(), row);
        }
        Value::Object(report)
    }
}

async fn run(client: reqwest::Client, url: String, token: String, interval: Duration, samples: Arc<Mutex<Samples>>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let started = Instant::now();
        let answer = client.get(&url).bearer_auth(&token).timeout(Duration::from_secs(60)).send().await;
        let failure = match answer {
            Ok(r) if r.status().is_success() => match r.bytes().await {
                Ok(_) => None,
                Err(e) => Some(format!("reading the answer: {}", e.without_url())),
            },
            Ok(r) => Some(format!("status {}", r.status())),
            Err(e) => Some(e.without_url().to_string()),
        };
        let micros = u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX);
        if let Ok(mut s) = samples.lock() {
            match failure {
                None => s.micros.push(micros),
                Some(f) => {
                    s.failures += 1;
                    s.first_failure.get_or_insert(f);
                }
            }
        }
    }
}
