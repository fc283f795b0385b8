//! Arbitrary bytes as a connection's input, served three ways: all at once, one byte at a time,
//! and in pieces a seed chooses. The same events and the same output (but for `100 Continue`,
//! which depends on whether the body had arrived) every time, and never a panic.
//!
//! Input layout: byte 0 picks the limits (bit 0: small ones, so the limit paths are reached)
//! and the application (bit 1: one that answers on the head without reading the body, so the
//! drain and close paths are reached), bytes 1..9 seed the splits, the rest is what the peer
//! sends.

#![no_main]

use libfuzzer_sys::fuzz_target;

// Both cores come in with proto/; this target uses one of them.
#[allow(dead_code, unused_imports)]
#[path = "../../src/http/proto/mod.rs"]
mod proto;

use proto::h1;

use h1::testing::{serve_app, without_continues, Splits};
use h1::Limits;

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let limits = if data[0] & 1 == 1 {
        Limits {
            max_request_line: 64,
            max_header_bytes: 128,
            max_headers: 4,
            max_body: Some(64),
            max_buffered: 32,
            max_drain: 16,
        }
    } else {
        Limits::default()
    };
    let eager = data[0] & 2 == 2;
    let seed = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let input = &data[9..];

    let whole = serve_app(input, || usize::MAX, limits.clone(), eager);
    let bytewise = serve_app(input, || 1, limits.clone(), eager);
    let mut splits = Splits::new(seed);
    let random = serve_app(input, || splits.next(input.len()), limits, eager);

    assert_eq!(bytewise.0, whole.0, "byte by byte");
    assert_eq!(random.0, whole.0, "random splits");
    let out = without_continues(&whole.1);
    assert_eq!(without_continues(&bytewise.1), out, "byte by byte output");
    assert_eq!(without_continues(&random.1), out, "random splits output");
});
