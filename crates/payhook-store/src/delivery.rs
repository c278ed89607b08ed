//! The delivery the store records, and why only a verification makes one.

use crate::model::{Parsed, ReceivedHeaders};
use payhook_core::event::SourceName;
use payhook_core::signature::Verified;

/// A delivery whose signature verified, ready to be recorded.
///
/// Holding one is the proof that verification happened: its fields are private, and its one constructor,
/// [`Delivery::verified`], takes the [`Verified`] that only `payhook_core`'s verifier makes. Tests and the contract
/// suite build one from parts with `Delivery::unverified_for_tests`, which exists only with this crate's
/// `contract` feature (enabled by dev-dependencies, never by a shipped build).
///
/// ```compile_fail
/// use payhook_core::event::{EventId, SourceName};
/// use payhook_store::{Delivery, Parsed, ReceivedHeaders};
/// // Fields are private: a delivery cannot be written by hand.
/// let d = Delivery {
///     source: SourceName::parse("shop").unwrap(),
///     received_at_ms: 0,
///     parsed: Parsed::Unparseable { event_id: EventId::parse("evt_1").unwrap(), reason: String::new() },
///     raw_body: Vec::new(),
///     headers: ReceivedHeaders::new(),
///     verification: String::new(),
/// };
/// ```
#[derive(Debug, Clone)]
pub struct Delivery {
    parts: DeliveryParts,
}

/// What a [`Delivery`] holds, taken apart by the backend that records it ([`Delivery::into_parts`]). There is no
/// way back outside tests: a `Delivery` is made only from a verification.
#[derive(Debug, Clone)]
pub struct DeliveryParts {
    /// The source it arrived on.
    pub source: SourceName,
    /// When payhook received it, unix milliseconds.
    pub received_at_ms: i64,
    /// What the payload format made of the body.
    pub parsed: Parsed,
    /// The exact bytes that were verified (for a confirmed source, the provider's answer that was read).
    pub raw_body: Vec<u8>,
    /// The request's headers (credentials left out), every value of a repeated one in arrival order.
    pub headers: ReceivedHeaders,
    /// How the delivery verified (scheme and which secret), for the audit trail.
    pub verification: String,
}

impl Delivery {
    /// A delivery whose signature `_verified` vouches for: the one way to make one outside tests. One
    /// verification may yield several deliveries (a batch's events, each recorded on its own).
    ///
    /// `verification` says how it verified for the audit trail (scheme and secret, and for a confirmed source
    /// what was asked of the provider's API).
    pub fn verified(
        _verified: &Verified,
        source: SourceName,
        received_at_ms: i64,
        parsed: Parsed,
        raw_body: Vec<u8>,
        headers: ReceivedHeaders,
        verification: String,
    ) -> Self {
        Self { parts: DeliveryParts { source, received_at_ms, parsed, raw_body, headers, verification } }
    }

    /// A delivery from parts, with no verification behind it: for the contract suite and backends' tests only.
    #[cfg(feature = "contract")]
    pub fn unverified_for_tests(parts: DeliveryParts) -> Self {
        Self { parts }
    }

    /// Its parts, to change for a test (another source, other bytes, a later arrival): for the contract suite and
    /// backends' tests only.
    #[cfg(feature = "contract")]
    pub fn parts_mut(&mut self) -> &mut DeliveryParts {
        &mut self.parts
    }

    /// The source it arrived on.
    pub fn source(&self) -> &SourceName {
        &self.parts.source
    }

    /// When payhook received it, unix milliseconds.
    pub fn received_at_ms(&self) -> i64 {
        self.parts.received_at_ms
    }

    /// What the payload format made of the body.
    pub fn parsed(&self) -> &Parsed {
        &self.parts.parsed
    }

    /// The exact bytes that were verified (for a confirmed source, the provider's answer that was read).
    pub fn raw_body(&self) -> &[u8] {
        &self.parts.raw_body
    }

    /// The request's headers (credentials left out), every value of a repeated one in arrival order.
    pub fn headers(&self) -> &ReceivedHeaders {
        &self.parts.headers
    }

    /// How the delivery verified (scheme and which secret), for the audit trail.
    pub fn verification(&self) -> &str {
        &self.parts.verification
    }

    /// Its parts, for a backend that reads them into its rows.
    pub fn parts(&self) -> &DeliveryParts {
        &self.parts
    }

    /// Its parts, for a backend that moves them into its rows.
    pub fn into_parts(self) -> DeliveryParts {
        self.parts
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The `contract` feature is what lets code build a [`super::Delivery`] without a verification: only a crate's
    /// dev-dependencies may turn it on, so that no shipped build (`cargo build`, `cargo install`) has it.
    #[test]
    fn only_dev_dependencies_enable_the_unverified_constructor() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crates directory");
        let mut seen = 0;
        for entry in std::fs::read_dir(crates).expect("the crates directory") {
            let manifest = entry.expect("a directory entry").path().join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
            let mut section = String::new();
            for line in text.lines().map(str::trim) {
                if line.starts_with('[') {
                    section = line.to_owned();
                } else if line.starts_with("payhook-store") && line.contains("contract") {
                    seen += 1;
                    assert_eq!(section, "[dev-dependencies]", "{}: {line}", manifest.display());
                }
            }
            assert!(!text.contains("\"payhook-store/contract\""), "{}: a feature turns it on", manifest.display());
        }
        // The backends' contract tests turn it on: a check that found none would be looking in the wrong place.
        assert!(seen >= 2, "found the contract feature in {seen} manifests");
    }
}
