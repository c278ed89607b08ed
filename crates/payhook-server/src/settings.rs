//! Resolved settings: what the binary's configuration becomes once it has been read, merged and validated.

use payhook_core::event::SourceName;
use payhook_core::format::Format;
use payhook_core::signature::{Secret, Verifier};

/// Everything the HTTP runtime needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configured sources, each served at `POST /webhooks/{name}`.
    pub sources: Vec<SourceSettings>,
    /// Largest accepted webhook body, in bytes; larger ones are answered 413 while streaming.
    pub body_limit_bytes: usize,
    /// How long a client may take to send its body, in milliseconds; slower ones are answered 408.
    pub body_timeout_ms: u64,
    /// Bearer token for `/v1`; without one the API answers 401 to everyone.
    pub api_token: Option<Secret>,
    /// The retry worker.
    pub worker: WorkerSettings,
}

/// One source of webhooks.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Its name, the path segment of its endpoint.
    pub name: SourceName,
    /// Verifies its signatures (scheme, secrets, tolerance).
    pub verifier: Verifier,
    /// Turns its payloads into events.
    pub format: Format,
}

/// How the worker that retries deferred events runs.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Run the worker in this process. Tests turn it off and drive it step by step.
    pub enabled: bool,
    /// Longest sleep between two looks for due events, in milliseconds.
    pub poll_interval_ms: u64,
    /// How long a claimed event stays leased to this worker, in milliseconds.
    pub lease_ms: i64,
    /// At most this many events are claimed at once.
    pub claim_batch: u32,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self { enabled: true, poll_interval_ms: 1_000, lease_ms: 30_000, claim_batch: 128 }
    }
}

impl Settings {
    /// Settings with the documented defaults and the given sources.
    pub fn new(sources: Vec<SourceSettings>) -> Self {
        Self {
            sources,
            body_limit_bytes: 1024 * 1024,
            body_timeout_ms: 10_000,
            api_token: None,
            worker: WorkerSettings::default(),
        }
    }
}
