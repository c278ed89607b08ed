//! RFC 9530 `Content-Digest`: any header against any body is a verdict, never a panic; payhook's own digest of a
//! body always checks, and never checks against another body. Input: the header, a newline, the body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use payhook_core::signature::{check_content_digest, content_digest};

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let Ok(header) = std::str::from_utf8(&data[..split]) else { return };
    let body = data.get(split + 1..).unwrap_or_default();
    let _ = check_content_digest(header, body);
    let own = content_digest(body);
    assert!(check_content_digest(&own, body).is_ok(), "own digest {own} refused");
    let mut other = body.to_vec();
    other.push(0);
    assert!(check_content_digest(&own, &other).is_err(), "digest {own} accepted another body");
});
