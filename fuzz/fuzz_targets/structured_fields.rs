//! The RFC 8941 structured-field parser behind RFC 9421's `Signature-Input` and `Signature`: any text is a value
//! or an error, never a panic, and a parsed `Signature-Input` rebuilds a signature base (or says which component
//! is missing) for any request.

#![no_main]

use libfuzzer_sys::fuzz_target;
use payhook_core::signature::{RequestParts, parse_signature, parse_signature_input, signature_base};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // The same text as both headers, and as the value of a header the signature may cover.
    let _ = parse_signature(text);
    if let Ok(inputs) = parse_signature_input(text) {
        let headers = [("content-type", text), ("content-digest", text), ("x-any", "1")];
        let request = RequestParts {
            method: "POST",
            scheme: "https",
            authority: "payhook.example",
            path: "/webhooks/fuzz",
            query: Some(text),
            headers: &headers,
        };
        for input in &inputs {
            // The serialized parameters re-parse: what payhook signs over is what it read.
            let again = parse_signature_input(&format!("{}={}", input.label(), input.signature_params()));
            assert!(again.is_ok(), "{:?} does not re-parse: {again:?}", input.signature_params());
            let _ = signature_base(input, &request);
        }
    }
});
