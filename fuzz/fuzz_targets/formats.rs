//! Every payload format (the declared presets' too) on arbitrary bodies (with Shopify's headers, which its format reads): events or an error,
//! never a panic, and a delivery that parses yields at least one event, each with an id.

#![no_main]

use libfuzzer_sys::fuzz_target;
use payhook_core::format::Format;
use payhook_core::preset::Preset;
use std::sync::OnceLock;

/// The formats written in code and every preset's declared format.
fn formats() -> &'static [Format] {
    static F: OnceLock<Vec<Format>> = OnceLock::new();
    F.get_or_init(|| {
        let presets = Preset::names().filter_map(|name| Preset::get(name)?.ok()?.format().ok()?);
        Format::ALL.into_iter().chain(presets).collect()
    })
}

fuzz_target!(|body: &[u8]| {
    let headers = vec![
        ("x-shopify-topic".to_owned(), "orders/paid".to_owned()),
        ("x-shopify-webhook-id".to_owned(), "fuzz-webhook".to_owned()),
        ("x-shopify-event-id".to_owned(), "fuzz-event".to_owned()),
        ("x-shopify-triggered-at".to_owned(), "2026-01-01T00:00:00Z".to_owned()),
    ];
    for format in formats() {
        let _ = format.parse(body);
        if let Ok(events) = format.parse_delivery(&headers, body) {
            assert!(!events.is_empty(), "{format:?} parsed no events from a delivery it accepted");
            for e in events {
                assert!(!e.event_id.as_str().is_empty(), "{format:?} parsed an event without an id");
            }
        }
    }
});
