//! The tokens' refusals, by the surface they were tried on, refusals of a scope, and ignored identity headers.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where the API token was tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Surface {
    /// A `/v1` request's `Authorization: Bearer` header.
    Api,
    /// The dashboard's login form.
    Ui,
}

/// Every surface, in the order the metrics render them.
pub(crate) const SURFACES: [Surface; 2] = [Surface::Api, Surface::Ui];

impl Surface {
    /// The `surface` label and log field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Surface::Api => "api",
            Surface::Ui => "ui",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Surface::Api => 0,
            Surface::Ui => 1,
        }
    }
}

/// Refusals of the API token, by surface ([`SURFACES`]): failed attempts, and attempts refused unread because
/// their address failed too often.
#[derive(Debug, Default)]
pub(crate) struct AuthMetrics {
    failures: [AtomicU64; SURFACES.len()],
    throttled: [AtomicU64; SURFACES.len()],
    forbidden: AtomicU64,
    identity_ignored: AtomicU64,
}

impl AuthMetrics {
    /// Counts an attempt with a missing or wrong token.
    pub(crate) fn failed(&self, surface: Surface) {
        self.failures[surface.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an attempt refused because its address is throttled.
    pub(crate) fn throttled(&self, surface: Surface) {
        self.throttled[surface.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a caller refused for want of a scope.
    pub(crate) fn forbidden(&self) {
        self.forbidden.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an identity header from a peer that is not a trusted proxy.
    pub(crate) fn identity_ignored(&self) {
        self.identity_ignored.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters, with the number of addresses the throttle holds.
    pub(crate) fn snapshot(&self, addresses: usize) -> AuthSnapshot {
        let load = |c: &[AtomicU64; SURFACES.len()]| std::array::from_fn(|i| c[i].load(Ordering::Relaxed));
        AuthSnapshot {
            failures: load(&self.failures),
            throttled: load(&self.throttled),
            forbidden: self.forbidden.load(Ordering::Relaxed),
            identity_ignored: self.identity_ignored.load(Ordering::Relaxed),
            addresses: addresses as u64,
        }
    }
}

/// The authentication counters at one scrape.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AuthSnapshot {
    pub(super) failures: [u64; SURFACES.len()],
    pub(super) throttled: [u64; SURFACES.len()],
    pub(super) forbidden: u64,
    pub(super) identity_ignored: u64,
    pub(super) addresses: u64,
}
