//! Arbitrary bytes as a chunked body, decoded all at once, one byte at a time, and in pieces a
//! seed chooses: the same body, the same count of bytes after it, the same verdict, and never a
//! panic (the driver also checks that data ranges are non-empty and inside what was given).
//!
//! Input layout: byte 0 picks the limits (bit 0: a small body and trailer limit), bytes 1..9
//! seed the splits, the rest is the body as sent.

#![no_main]

use libfuzzer_sys::fuzz_target;

// Both cores come in with proto/; this target uses one of them.
#[allow(dead_code, unused_imports)]
#[path = "../../src/http/proto/mod.rs"]
mod proto;

use proto::h1;

use h1::testing::{decode_chunked, Splits};
use h1::Limits;

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let limits = if data[0] & 1 == 1 {
        Limits { max_header_bytes: 64, max_headers: 2, max_body: Some(256), ..Limits::default() }
    } else {
        Limits::default()
    };
    let seed = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let input = &data[9..];

    let whole = decode_chunked(input, || usize::MAX, &limits);
    let bytewise = decode_chunked(input, || 1, &limits);
    let mut splits = Splits::new(seed);
    let random = decode_chunked(input, || splits.next(input.len()), &limits);

    assert_eq!(bytewise, whole, "byte by byte");
    assert_eq!(random, whole, "random splits");
    if let Ok((body, rest)) = &whole {
        assert!(body.len() + rest <= input.len());
    }
});
